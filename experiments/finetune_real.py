"""Fine-tune albert-tiny on real data under a CPU budget: SST-2, ChnSentiCorp and CoNLL-2003.

The data folder (--data) holds SST-2/, ChnSentiCorp/ and CoNLL-2003 in their usual layouts; by
default a `shared/data` folder beside the repository checkout.

Without --model every task starts from a randomly initialised albert-tiny whose SentencePiece
vocabulary is trained on that task's training text (the no-pretraining baseline); with
--model DIR every task starts from that pretrained directory (e.g. the `model/` of an
`albertlm pretrain` run) and its tokenizer. The recipe is the same in both cases, so the two JSON
outputs make a side-by-side table (docs/results.md). The numbers are small-budget CPU runs, not the
paper's Table 14 recipe.

    python -m experiments.finetune_real --threads 1          # random init; 750 steps in all
    python -m experiments.finetune_real --model runs/albert-tiny-kjv/model --out runs/bench-finetune-pretrained
    python -m experiments.finetune_real --model runs/albert-tiny-kjv/model --reinit --out runs/bench-finetune-reinit

--reinit keeps the pretrained directory's configuration and tokenizer but draws fresh random
weights: the control that isolates what pretraining adds from what the vocabulary does.

Output: the results envelope (benchmarks/harness.py) on stdout and in OUT/results.json (and --results
when given): per task the best dev metrics, steps, wall time and training throughput, and the torch
thread count.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

from albertlm.train.finetune import FinetuneRecipe, finetune
from benchmarks.harness import envelope, publish
from benchmarks.start_models import random_init_dir, reinit_dir

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
# task -> (data folder, max_seq_length, tokenizer vocabulary for the random-init baseline, default steps)
TASKS = {"sst-2": ("SST-2", 64, 8000, 300), "chnsenticorp": ("ChnSentiCorp", 128, 6000, 150),
         "conll2003": ("CoNLL-2003", 64, 8000, 300)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="pretrained model directory (default: random-init albert-tiny per task)")
    p.add_argument("--reinit", action="store_true", help="with --model: same configuration and tokenizer, "
                   "random weights (the control for what pretraining adds)")
    p.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated subset of {', '.join(TASKS)}")
    p.add_argument("--data", default=str(SHARED), help="the task data folder (default: shared/data beside the checkout)")
    p.add_argument("--out", default="runs/bench-finetune", help="run directory")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per task (default: 300, 150 for "
                   "ChnSentiCorp, whose inputs are twice as long)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-4, help="peak learning rate (AdamW, 10%% warmup, linear decay)")
    p.add_argument("--max-eval-examples", type=int, default=None, help="score only the first N dev examples")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results", default=None, help="also write the JSON here (e.g. under benchmarks/results/)")
    args = p.parse_args(argv)
    if args.reinit and not args.model:
        p.error("--reinit needs --model")
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    report = {"model": (f"{args.model}, re-initialised (--reinit)" if args.reinit else args.model)
              or "random-init albert-tiny (vocabulary trained on each task's training text)",
              "torch_threads": torch.get_num_threads(), "tasks": {}}
    for task in args.tasks.split(","):
        folder, max_len, vocab, default_steps = TASKS[task]
        steps = args.steps or default_steps
        data = Path(args.data) / folder
        start = time.perf_counter()
        if args.model:
            model_dir = reinit_dir(Path(args.model), out, args.seed) if args.reinit else Path(args.model)
        else:
            model_dir = random_init_dir(task, data, out, vocab, args.seed)
        setup = time.perf_counter() - start
        recipe = FinetuneRecipe(lr=args.lr, batch_size=args.batch_size, steps=steps,
                                warmup_steps=steps // 10, max_seq_length=max_len, dropout=0.0,
                                classifier_dropout=0.1, eval_every=max(1, steps // 3),
                                max_eval_examples=args.max_eval_examples, seed=args.seed)
        results = finetune(task, model_dir, data, out / task, recipe, progress=False)
        report["tasks"][task] = {
            "main_metric": results["main_metric"], "dev": results["best"], "best_step": results["best_step"],
            "steps": results["steps"], "train_examples": results["train_examples"],
            "dev_examples": results["dev_examples"], "train_seconds": round(results["train_seconds"], 1),
            "examples_per_s": round(results["steps"] * args.batch_size / results["train_seconds"], 1),
            "setup_seconds": round(setup, 1), "recipe": dataclasses.asdict(recipe)}
        print(f"{task}: {results['main_metric']} {results['best'][results['main_metric']]:.4f} "
              f"(step {results['best_step']}, {results['train_seconds']:.0f} s)", file=sys.stderr, flush=True)
    publish(envelope("experiments.finetune_real", argv, report, started=started), out / "results.json",
            also=[args.results])
    return 0


if __name__ == "__main__":
    sys.exit(main())
