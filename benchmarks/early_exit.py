"""Patience-based early exit on a 12-layer all-shared ALBERT of albert-tiny's width: the task's
metrics, layers run and batch-1 latency for patience 1..6 against full depth.

The model is `get_preset("albert-tiny", num_hidden_layers=12)`: H=312, E=128, 12 heads, FFN 1248,
one layer shared by all 12 applications, so exactly albert-tiny's parameters run three times as
deep. No pretrained 12-layer model exists here, so every task starts from random weights with a
SentencePiece vocabulary trained on that task's training text (as experiments/finetune_real.py's
random-init baseline, `benchmarks.start_models`), fine-tuned with `early_exit=True` (a classifier after every layer,
depth-weighted loss) under a small CPU step budget. The data folder (--data) holds SST-2/, CoLA/,
STS-B/ and ChnSentiCorp/ in their usual layouts; by default a `shared/data` folder beside the
checkout. For STS-B (regression) an input stops once its output has moved less than
--regression-threshold for `patience` layers.

    python -m benchmarks.early_exit --threads 2 --out runs/bench-early-exit

For each task, on the first --dev-examples dev examples: `evaluate_dir` at every patience and at
full depth gives the metrics, the average layers run and the wall time of that call ("eval s": batch 64,
loading the model and featurizing the dev set included, so it understates the gain of early exit); then
each of the first --latency-examples examples runs alone (batch 1, no padding) through the plain
head at full depth and through `patience_forward` at every patience, the settings interleaved
example by example so that load from other processes falls on all of them alike. A task whose run
directory already holds a fine-tuned model is measured again without retraining.

Output: the results envelope (benchmarks/harness.py), with one target per task, on stdout, in
OUT/results.json and in --results.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import torch

from albertlm.exit_heads import EXIT_HEADS_NAME
from albertlm.heads import AlbertForSequenceClassification
from albertlm.inference.evaluate import evaluate_dir, task_inputs
from albertlm.inference.exit import DEFAULT_REGRESSION_THRESHOLD, patience_forward
from albertlm.tasks.registry import get_task
from albertlm.train.finetune import FinetuneRecipe, finetune
from benchmarks import start_models
from benchmarks.harness import RESULTS as RESULTS_DIR
from benchmarks.harness import Target, envelope, publish, read_result

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
RESULTS = RESULTS_DIR / "early-exit" / "early-exit.json"
# task -> (data folder, max_seq_length, tokenizer vocabulary, default steps)
TASKS = {"sst-2": ("SST-2", 64, 8000, 250), "cola": ("CoLA", 64, 8000, 150), "sts-b": ("STS-B", 64, 6000, 250),
         "chnsenticorp": ("ChnSentiCorp", 64, 6000, 120)}
PATIENCES = (1, 2, 3, 4, 5, 6)
METRIC_NAMES = {"accuracy": "accuracy", "mcc": "MCC", "pearson": "Pearson", "spearman": "Spearman"}


random_init_dir = functools.partial(start_models.random_init_dir, num_hidden_layers=12)
"""(task, data, out, vocab_size, seed) -> the 12-layer all-shared albert-tiny, randomly initialised,
with a vocabulary trained on the task's training text."""


def train(task: str, data: Path, out: Path, args: argparse.Namespace) -> dict:
    """Fine-tune with exit heads unless OUT/task already holds the result; returns finetune's results."""
    folder, max_len, vocab, default_steps = TASKS[task]
    done = out / task / "results.json"
    if done.exists() and (out / task / EXIT_HEADS_NAME).exists():
        return json.loads(done.read_text())
    steps = args.steps or default_steps
    model_dir = random_init_dir(task, data, out, vocab, args.seed)
    recipe = FinetuneRecipe(lr=args.lr, batch_size=args.batch_size, steps=steps, warmup_steps=steps // 10,
                            max_seq_length=max_len, dropout=0.0, classifier_dropout=0.1, eval_every=steps,
                            max_eval_examples=args.dev_examples, seed=args.seed, early_exit=True)
    return finetune(task, model_dir, data, out / task, recipe, progress=False)


def batch1_latency(task: str, model_dir: Path, data: Path, n: int, threshold: float) -> dict:
    """Milliseconds per example at batch 1: full depth through the plain head, and every patience."""
    t = task_inputs(model_dir, data, task, max_examples=n)
    model, features = t.loaded.model, t.features
    runs = {"full": lambda ids, tt: AlbertForSequenceClassification.forward(model, ids, token_type_ids=tt)}
    for p in PATIENCES:
        runs[f"patience_{p}"] = lambda ids, tt, p=p: patience_forward(model, ids, token_type_ids=tt, patience=p,
                                                                     regression_threshold=threshold)
    times: dict[str, list[float]] = {name: [] for name in runs}
    with torch.no_grad():
        for k, f in enumerate(features):
            ids = torch.from_numpy(f.inputs["input_ids"])[None]  # [1, S]
            tt = torch.from_numpy(f.inputs["token_type_ids"])[None]
            names = list(runs)
            names = names[k % len(names):] + names[:k % len(names)]  # rotate the order per example
            for name in names:
                start = time.perf_counter()
                runs[name](ids, tt)
                times[name].append(1000 * (time.perf_counter() - start))
    return {name: {"mean_ms": statistics.fmean(t[2:]), "median_ms": statistics.median(t[2:])}  # 2 warm-up
            for name, t in times.items()}


def measure(task: str, model_dir: Path, data: Path, args: argparse.Namespace) -> dict:
    """Every patience and full depth on the dev subset: metrics, layers run, times."""
    rows = {}
    for p in (None, *PATIENCES):
        start = time.perf_counter()
        result = evaluate_dir(model_dir, data, task, "dev", max_examples=args.dev_examples, patience=p,
                              regression_threshold=args.regression_threshold)
        row = {"metrics": result["metrics"], "eval_seconds_batch64": round(time.perf_counter() - start, 2),
               "examples": result["examples"]}
        if p is not None:
            row.update({k: result["early_exit"][k] for k in ("average_layers", "speedup", "exits_per_layer")})
            depth = result["early_exit"]["layers"]
        rows["full" if p is None else f"patience_{p}"] = row
    latency = batch1_latency(task, model_dir, data, args.latency_examples, args.regression_threshold)
    for name, t in latency.items():
        rows[name]["batch1_latency_ms"] = t
    spec = get_task(task)
    metric = spec.main_metric
    full = rows["full"]["metrics"]
    if spec.problem_type == "regression":
        # A model whose outputs do not follow the gold scores says nothing about the trade-off either.
        baseline, judgeable = None, full[metric] > 0.1
    else:
        golds = [e.label for e in spec.read(data, "dev")[:args.dev_examples]]
        baseline = max(Counter(golds).values()) / len(golds)
        # A model no better than always answering the commonest class says nothing about the trade-off:
        # every layer then predicts the same and any patience "keeps" its accuracy.
        judgeable = full["accuracy"] > baseline + 0.005
    met = [name for name, row in rows.items() if judgeable and name != "full" and row["speedup"] >= 1.5
           and row["metrics"][metric] >= full[metric] - 0.005]
    return {"main_metric": spec.main_metric, "layers": depth, "majority_class_accuracy": baseline, "settings": rows,
            "regression_threshold": args.regression_threshold if spec.problem_type == "regression" else None,
            "target": f"speed-up >= 1.5x in layers with {metric} within 0.5 point of full depth",
            "target_judgeable": judgeable, "target_met_by": met}


def targets(report: dict) -> list[Target]:
    """Per task: the most layers saved by a patience within 0.5 point of full depth (1.0 when none is;
    not measured when the model is no better than a constant answer)."""
    out = []
    for task, t in report["tasks"].items():
        met = [t["settings"][name]["speedup"] for name in t["target_met_by"]]
        measured = (max(met) if met else 1.0) if t["target_judgeable"] else None
        out.append(Target(f"early exit on {task}: fewer layers on average, within 0.5 point of full depth",
                          measured, 1.5))
    return out


def markdown(result: dict) -> str:
    """The docs/benchmarks.md tables of a result (an envelope): one row per setting of every task."""
    lines = []
    for task, t in result["results"]["tasks"].items():
        full = t["settings"]["full"]
        majority, threshold = t.get("majority_class_accuracy"), t.get("regression_threshold")
        names = [n for n in METRIC_NAMES if n in full["metrics"]]
        lines += [f"{task} ({full['examples']} dev examples, {t['steps']} steps at lr {t['recipe']['lr']:g}, "
                  f"{t['train_seconds'] / 60:.1f} min of training"
                  + (f"; always answering the commonest class scores {100 * majority:.2f}" if majority else "")
                  + (f"; an output moving less than {threshold:g} counts as unchanged" if threshold else "")
                  + ")", "",
                  "| setting | " + " | ".join(METRIC_NAMES[n] for n in names) + " | avg layers | speed-up (layers) | batch-1 ms (median) | batch-1 speed-up | eval s (batch 64) |",
                  "|---|" + "---|" * len(names) + "---|---|---|---|---|"]
        base, depth = full["batch1_latency_ms"]["median_ms"], t.get("layers", 12)
        for name, row in t["settings"].items():
            layers = row.get("average_layers", float(depth))
            ms = row["batch1_latency_ms"]["median_ms"]
            values = " | ".join(f"{100 * row['metrics'][n]:.2f}" for n in names)
            lines.append(f"| {name.replace('_', ' ')} | {values} | {layers:.2f} | "
                         f"{depth / layers:.2f}x | {ms:.1f} | {base / ms:.2f}x | {row['eval_seconds_batch64']:.1f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated subset of {', '.join(TASKS)}")
    p.add_argument("--data", default=str(SHARED), help="the task data folder (default: shared/data beside the checkout)")
    p.add_argument("--out", default="runs/bench-early-exit", help="run directory")
    p.add_argument("--results", default=str(RESULTS), help="also write the JSON here")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per task (default: per task, "
                   + ", ".join(f"{t} {v[3]}" for t, v in TASKS.items()) + ")")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-4, help="peak learning rate (AdamW, 10%% warmup, linear decay)")
    p.add_argument("--dev-examples", type=int, default=None, help="use the first N dev examples (default: all)")
    p.add_argument("--latency-examples", type=int, default=100, help="examples timed at batch 1")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--regression-threshold", type=float, default=DEFAULT_REGRESSION_THRESHOLD,
                   help="regression: an output moving less than this counts as unchanged (default %(default)s)")
    p.add_argument("--render", nargs="+", metavar="JSON", help="print the markdown tables of earlier results and exit")
    args = p.parse_args(argv)
    if args.render:
        print("\n".join(markdown(read_result(f)) for f in args.render))
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    report = {"model": "get_preset('albert-tiny', num_hidden_layers=12), random init, vocabulary trained on each "
                       "task's training text; fine-tuned with early_exit=True",
              "torch_threads": torch.get_num_threads(), "tasks": {}}
    for task in args.tasks.split(","):
        data = Path(args.data) / TASKS[task][0]
        results = train(task, data, out, args)
        report["tasks"][task] = {"steps": results["steps"], "train_seconds": round(results["train_seconds"], 1),
                                 "train_examples": results["train_examples"], "recipe": results["recipe"],
                                 **measure(task, out / task, data, args)}
        metric = report["tasks"][task]["main_metric"]
        full = report["tasks"][task]["settings"]["full"]["metrics"][metric]
        print(f"{task}: full-depth {metric} {full:.4f}, {results['train_seconds']:.0f} s of training",
              file=sys.stderr, flush=True)
    publish(envelope("benchmarks.early_exit", argv, report, targets(report), started), args.results,
            also=[out / "results.json"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
