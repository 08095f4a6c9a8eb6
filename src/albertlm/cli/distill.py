"""`albertlm distill`: train a smaller student from a fine-tuned teacher (train/distill.py)."""

from __future__ import annotations

import argparse

from albertlm.cli.tasks import _one_line_warnings, task_from_args
from albertlm.options import add_dataclass_options, dataclass_from_args

QA_ONLY = ("doc_stride", "max_query_length", "max_answer_length")
"""Recipe fields that only question answering reads (distillation takes classifiers)."""


def distill_args(p: argparse.ArgumentParser) -> None:
    from albertlm.train.distill import DistillSettings
    from albertlm.train.finetune import FinetuneRecipe

    p.add_argument("--teacher", required=True, metavar="DIR", help="the teacher: a fine-tuned model directory")
    p.add_argument("--student", required=True, metavar="PRESET_OR_DIR", help="a preset (e.g. albert-mini, test: "
                   "random weights, the teacher's tokenizer) or a pretrained directory with the teacher's vocabulary")
    p.add_argument("--task", required=True, help="the task the teacher was fine-tuned on (sequence classification "
                   "or regression: sst-2, cola, sts-b, ..., or a generic classification / regression / multilabel)")
    p.add_argument("--data", required=True, metavar="DIR", help="the task's data directory (train and dev files)")
    p.add_argument("--out", metavar="DIR", default=None, help="output directory (default: runs/distill-<task>)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to train")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = p.add_argument_group("generic tasks")
    g.add_argument("--text-column", default=None, help="column of the text (default: text)")
    g.add_argument("--text-pair-column", default=None, help="column of the second text of a pair")
    g.add_argument("--label-column", default=None, help="column of the label (default: label)")
    add_dataclass_options(p, DistillSettings, "distillation")
    add_dataclass_options(p, FinetuneRecipe, "recipe (unset: the task's default, paper Table 14 where it has one)",
                          exclude=QA_ONLY)


def distill_run(args: argparse.Namespace) -> int:
    """Distil the teacher into the student, keep the best dev checkpoint, print the metrics table."""
    from albertlm.train.distill import DistillSettings, distill
    from albertlm.train.finetune import FinetuneRecipe, format_results

    _one_line_warnings()
    spec = task_from_args(args)
    results = distill(spec, args.teacher, args.student, args.data, args.out or f"runs/distill-{spec.name}",
                      dataclass_from_args(FinetuneRecipe, args, exclude=QA_ONLY), dataclass_from_args(DistillSettings, args),
                      device=args.device, progress=not args.no_progress)
    print(format_results(results))
    d = results["distillation"]
    print(f"distilled from {d['teacher']} (T={d['temperature']:g}, alpha={d['alpha']:g}"
          + (f", {d['unlabelled_features']:,} unlabelled examples" if d["unlabelled"] else "")
          + ("; teacher logits from the cache" if d["teacher_logits_cached"] else "") + ")")
    return 0
