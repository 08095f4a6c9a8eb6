"""`albertlm distill`: train a smaller student from a fine-tuned teacher (train/distill.py)."""

from __future__ import annotations

import argparse

from albertlm.cli.tasks import _one_line_warnings, task_from_args, training_run_args
from albertlm.options import add_dataclass_options, dataclass_from_args

NOT_HERE = ("doc_stride", "max_query_length", "max_answer_length", "early_exit", "pooler_reinit")
"""Recipe fields distillation has no use for: question answering's (it takes classifiers), early exit
(the student learns the teacher's final layer; fine-tune it with --early-exit afterwards) and the
pooler's re-initialisation (the student keeps the pooler it starts with)."""


def distill_args(p: argparse.ArgumentParser) -> None:
    from albertlm.train.distill import DistillSettings
    from albertlm.train.finetune import FinetuneRecipe

    p.add_argument("--teacher", required=True, metavar="DIR", action="append",
                   help="the teacher: a fine-tuned model directory; repeat it for an ensemble, which teaches the mean "
                   "of its members' distributions at --temperature (they must share one tokenizer and the classes)")
    p.add_argument("--student", required=True, metavar="PRESET_OR_DIR", help="a preset (e.g. albert-mini, test: "
                   "random weights, the teacher's tokenizer) or a pretrained directory with the teacher's vocabulary")
    p.add_argument("--task", required=True, help="the task the teacher was fine-tuned on (sequence classification, "
                   "regression or token classification: sst-2, cola, sts-b, conll2003, msra-ner, ..., or a generic "
                   "classification / regression / multilabel / ner-conll)")
    p.add_argument("--data", required=True, metavar="DIR", help="the task's data directory (train and dev files)")
    training_run_args(p, "runs/distill-<task>")
    add_dataclass_options(p, DistillSettings, "distillation")
    add_dataclass_options(p, FinetuneRecipe, "recipe (unset: the task's default, paper Table 14 where it has one)",
                          exclude=NOT_HERE)


def distill_run(args: argparse.Namespace) -> int:
    """Distil the teacher into the student, keep the best dev checkpoint, print the metrics table."""
    from albertlm.train.distill import DistillSettings, distill
    from albertlm.train.finetune import FinetuneRecipe, format_results

    _one_line_warnings()
    spec = task_from_args(args)
    results = distill(spec, args.teacher, args.student, args.data, args.out or f"runs/distill-{spec.name}",
                      dataclass_from_args(FinetuneRecipe, args, exclude=NOT_HERE), dataclass_from_args(DistillSettings, args),
                      device=args.device, progress=not args.no_progress)
    print(format_results(results))
    d = results["distillation"]
    teachers = d["teachers"]
    print(f"distilled from {teachers[0] if len(teachers) == 1 else 'the mean of ' + ', '.join(teachers)} "
          f"(T={d['temperature']:g}, alpha={d['alpha']:g}"
          + (f", {d['unlabelled_features']:,} unlabelled examples" if d["unlabelled"] else "")
          + ("; teacher logits from the cache" if d["teacher_logits_cached"] else "") + ")")
    return 0
