"""Distillation on real data: a fine-tuned teacher vs the same small student trained with and without it.

Both students are `albertlm distill` runs from the same preset, seed, data order and steps; the
"no teacher" one has alpha = 0, which is plain fine-tuning on the labels (tests/test_distill.py
checks that the two give equal losses), the distilled one mixes in the teacher's soft targets.
The training set is a fixed random subset of the task's (written once to OUT/data), so the
teacher's logits are computed once and every run reads them from its cache.

    python -m benchmarks.distill --threads 1 --teacher TEACHER_DIR --data DATA/SST-2 \\
        --student albert-mini --student-layers 2 --student-hidden 128 --steps 500 --seeds 0 1
    python -m benchmarks.distill --threads 1 --teacher TEACHER_DIR --data DATA/SST-2 --latency-only

Output: the results envelope (benchmarks/harness.py) on stdout and in
benchmarks/results/distill/<name>.json: the teacher's and every student's dev accuracy (best of the
evaluations, as fine-tuning keeps), agreement with the teacher on dev, parameters and batch-1
latency (`harness.best_of_median_ms`), with the thread count.
`--latency-only` measures the latency of the teacher and of the students already under --out again
(<name>-latency.json), e.g. when the machine is quieter. The numbers and the teacher's command are
in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

from albertlm.inference.evaluate import task_inputs
from albertlm.inference.post import score_outputs
from albertlm.inference.run import run_features
from albertlm.outputs import FINETUNE_FILES, OutputDir
from albertlm.train.distill import TEACHER_CACHE, DistillSettings, distill
from albertlm.train.finetune import FinetuneRecipe
from benchmarks.harness import RESULTS as RESULTS_DIR
from benchmarks.harness import best_of_median_ms, envelope, publish

RESULTS = RESULTS_DIR / "distill"


def subset_data(data: Path, out: Path, n: int, seed: int) -> Path:
    """OUT/data with a fixed random `n`-row subset of train.tsv (header kept) and the full dev.tsv."""
    target = out / "data"
    if (target / "train.tsv").is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    header, *rows = (data / "train.tsv").read_text(encoding="utf-8").splitlines()
    keep = np.sort(np.random.default_rng(seed).choice(len(rows), min(n, len(rows)), replace=False))
    (target / "train.tsv").write_text("\n".join([header, *(rows[i] for i in keep)]) + "\n", encoding="utf-8")
    shutil.copy(data / "dev.tsv", target / "dev.tsv")
    return target


def seed_cache(cache: Path | None, out: Path) -> None:
    """Copy an earlier run's teacher-logit cache into `out` (same features: same teacher logits; its
    key decides reuse), claimed for distill as distill claims it, so that distill takes it as its own
    earlier output rather than refusing a directory holding a file it did not write."""
    if cache is None or (out / TEACHER_CACHE).exists():
        return
    with OutputDir(out, "distill", FINETUNE_FILES).claim():
        shutil.copy(cache, out / TEACHER_CACHE)


@torch.no_grad()
def dev_outputs(model_dir: Path, data: Path, task: str, latency_examples: int) -> dict:
    """Dev predictions (argmax) and metrics, parameters and the median batch-1 forward time over some dev sentences."""
    t = task_inputs(model_dir, data, task)
    model, features = t.loaded.model, t.features
    outputs = run_features(model, t.spec, features, 64, torch.device("cpu"))
    metrics = score_outputs(t.spec, t.examples, features, outputs, t.labels, t.settings)[0]
    return {"predictions": np.stack(outputs["logits"]).argmax(-1), "metrics": metrics, "parameters": model.num_parameters(),
            "latency_ms_batch1_median": latency_ms(model, features[:latency_examples]),
            "mean_tokens": float(np.mean([len(f) for f in features[:latency_examples]]))}


@torch.no_grad()
def latency_ms(model: torch.nn.Module, features: list, repeats: int = 5) -> float:
    """Batch-1 forward time in ms of each feature alone (`best_of_median_ms`: the fastest of `repeats`
    per sentence, the median over the sentences)."""
    batches = [{k: torch.from_numpy(np.asarray(v))[None] for k, v in f.inputs.items()
                if k in ("input_ids", "token_type_ids")} for f in features]
    return best_of_median_ms(lambda batch: model(**batch), batches, repeats)


def latency_only(args: argparse.Namespace, argv: list[str] | None) -> int:
    """Measure batch-1 latency again for the teacher and every student under --out (no training)."""
    data = args.out / "data"
    dirs = {"teacher": args.teacher, **{d.name: d for d in sorted(args.out.glob("a*-s*"))
                                         if (d / "model.safetensors").is_file()}}
    started = time.perf_counter()
    result = {"torch_threads": args.threads, "repeats_per_sentence": 5, "sentences": args.latency_examples}
    for name, path in dirs.items():
        out = dev_outputs(path, data, args.task, args.latency_examples)
        result[name] = {"parameters": out["parameters"], "latency_ms_batch1_median": out["latency_ms_batch1_median"],
                        "mean_tokens": out["mean_tokens"]}
        print(name, json.dumps(result[name]), file=sys.stderr)
    publish(envelope("benchmarks.distill", argv, result, started=started), RESULTS / f"{args.name}-latency.json")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--teacher", required=True, type=Path, help="the fine-tuned teacher directory")
    p.add_argument("--data", required=True, type=Path, help="the task's data folder (train.tsv, dev.tsv)")
    p.add_argument("--task", default="sst-2")
    p.add_argument("--student", default="albert-mini", help="student preset")
    p.add_argument("--student-layers", type=int, default=2)
    p.add_argument("--student-hidden", type=int, default=128)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-seq-length", type=int, default=64)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--train-examples", type=int, default=10000, help="fixed training subset size")
    p.add_argument("--temperature", type=float, default=2.0)
    p.add_argument("--alphas", type=float, nargs="+", default=[0.0, 0.5], help="0 = the student without a teacher")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--latency-examples", type=int, default=100)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("runs/bench-distill"))
    p.add_argument("--name", default="sst2")
    p.add_argument("--latency-only", action="store_true", help="only measure latency again, of the teacher and "
                   "the students already under --out")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.latency_only:
        return latency_only(args, argv)
    start = time.perf_counter()
    data = subset_data(args.data, args.out, args.train_examples, seed=1234)
    teacher = dev_outputs(args.teacher, data, args.task, args.latency_examples)
    teacher["accuracy"] = teacher["metrics"]["accuracy"]
    runs = []
    cache = next(args.out.glob(f"*/{TEACHER_CACHE}"), None)  # an earlier invocation's: its key decides reuse
    for seed in args.seeds:
        for alpha in args.alphas:
            out = args.out / f"a{alpha:g}-s{seed}"
            seed_cache(cache, out)
            recipe = FinetuneRecipe(lr=args.lr, batch_size=args.batch_size, steps=args.steps, seed=seed,
                                    max_seq_length=args.max_seq_length, eval_every=args.eval_every)
            settings = DistillSettings(temperature=args.temperature, alpha=alpha, student_layers=args.student_layers,
                                       student_hidden=args.student_hidden)
            r = distill(args.task, args.teacher, args.student, data, out, recipe, settings, progress=False)
            cache = out / TEACHER_CACHE
            student = dev_outputs(out, data, args.task, args.latency_examples)
            runs.append({"alpha": alpha, "seed": seed, "accuracy": r["best"]["accuracy"], "best_step": r["best_step"],
                         "agreement_with_teacher": float(np.mean(student["predictions"] == teacher["predictions"])),
                         "parameters": student["parameters"], "latency_ms_batch1_median":
                         student["latency_ms_batch1_median"], "train_seconds": round(r["train_seconds"], 1),
                         "teacher_logits_cached": r["distillation"]["teacher_logits_cached"]})
            print(json.dumps(runs[-1]), file=sys.stderr)
    summary = {str(a): {"accuracy_mean": float(np.mean([x["accuracy"] for x in runs if x["alpha"] == a])),
                        "agreement_mean": float(np.mean([x["agreement_with_teacher"] for x in runs
                                                         if x["alpha"] == a]))} for a in args.alphas}
    result = {"torch_threads": args.threads,
              "teacher": {"dir": str(args.teacher), "accuracy": teacher["accuracy"],
                          "parameters": teacher["parameters"],
                          "latency_ms_batch1_median": teacher["latency_ms_batch1_median"]},
              "latency_mean_tokens": teacher["mean_tokens"], "dev_examples": len(teacher["predictions"]),
              "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "recipe": dataclasses.asdict(FinetuneRecipe(lr=args.lr, batch_size=args.batch_size, steps=args.steps,
                                                          max_seq_length=args.max_seq_length)),
              "runs": runs, "summary": summary}
    publish(envelope("benchmarks.distill", argv, result, started=start), RESULTS / f"{args.name}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
