"""Fine-tuning steps padded and unpadded: seconds per step of the model the no-`--model` command trains.

A fine-tuning batch of mixed lengths is padded to its longest example, and the padded encoder
computes every padded position. `FinetuneRecipe.unpad` runs the encoder on the real tokens only
(train/loop.py `unpadded`). This script builds what `albertlm finetune --task T --data DIR` without
--model builds for the task (its vocabulary, its random model with the word-vector table, its
max_seq_length, its head and optimizer), then times the same training batches both ways, one way after
the other, each from the same start (the base, the head drawn from the same seed):

    python -m benchmarks.finetune_steps --task conll2003 --data DATA/CoNLL-2003 --steps 40 --report steps.json

Per way: seconds per step (the median of the timed steps, the first step of each way untimed), and
the loss of every step, which must agree (the largest difference is reported). Besides: the batches'
real tokens and the positions the padded encoder computes for them. The steps are the optimizer's
alone: the weight average taggers keep, and the dev evaluations, are the same either way and not timed.
Tasks of the classification and NER families (the task's own head); a bi-encoder on graded pairs
trains through train/embedding.py, which takes the same setting. Output: a markdown table and
the results envelope (benchmarks/harness.py) on stdout, and in --report when given.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from albertlm.errors import AlbertlmError
from albertlm.inference.load import load_tokenizer
from albertlm.tasks.baselines import is_chinese
from albertlm.tasks.registry import get_task
from albertlm.train.finetune import batcher, step_settings, task_optimizer
from albertlm.train.loop import train_step
from albertlm.train.scratch import DEFAULT_RECIPE, TaskHead, choose_seq_length, make_base
from albertlm.distributed import DistContext
from benchmarks.harness import ForeignLoad, envelope, markdown_table, publish

WAYS = ("off", "on")
"""FinetuneRecipe.unpad values compared: padded, then unpadded."""


def measure(task: str, data_dir: str, steps: int, seed: int, log, preset: str | None = None) -> dict:
    """Build the default command's start for the task (`preset` in place of the recipe's, when given) and
    time `steps` training steps each way."""
    spec = get_task(task)
    recipe = DEFAULT_RECIPE.for_family(spec.family.name)
    recipe = recipe if preset is None else recipe.with_preset(preset)
    train_ex = spec.read(data_dir, "train", False)
    chinese = is_chinese(train_ex)
    device = torch.device("cpu")
    with tempfile.TemporaryDirectory() as tmp:
        base_dir = Path(tmp) / "base"
        base, _ = make_base(train_ex, base_dir, recipe, seed, chinese, lambda m: None,
                            cased=spec.family.name in recipe.cased_families)
        tokenizer = load_tokenizer(base_dir)
        length = choose_seq_length(train_ex, tokenizer, recipe, base.max_position_embeddings)
        ft = dataclasses.replace(recipe.finetune, max_seq_length=length, seed=seed, steps=steps + 1, warmup_steps=0)
        run, dev = TaskHead().prepare(spec, data_dir, ft, tokenizer, base)
        log(f"{task}: {recipe.preset}, max_seq_length {length}, {len(run.train_f):,} training features")
        # The same batches both ways: drawn once from a generator of their own.
        draw = batcher(dataclasses.replace(run, rng=np.random.default_rng(seed + 1)), device)
        batches = [draw(i) for i in range(steps + 1)]
        real = sum(int(b["attention_mask"].sum()) for step in batches[1:] for b in step)
        padded = sum(int(b["attention_mask"].numel()) for step in batches[1:] for b in step)
        ways = {}
        for way in WAYS:
            way_run = dataclasses.replace(run, recipe=dataclasses.replace(run.recipe, unpad=way))
            torch.manual_seed(seed)
            built = TaskHead().build(way_run, dev, base_dir, base, tokenizer, device)
            optimizer = task_optimizer(built.trained, way_run.recipe)
            ctx, settings = DistContext(device=device), step_settings(way_run.recipe)
            times, losses = [], []
            with ForeignLoad() as load:
                for i, step in enumerate(batches):
                    start = time.perf_counter()
                    metrics = train_step(built.trained, optimizer, step, lr=way_run.recipe.lr, loss_fn=built.loss_fn,
                                         count_fn=built.count_fn, ctx=ctx, settings=settings)
                    if i:
                        times.append(time.perf_counter() - start)
                    losses.append(float(metrics["loss"]))
            ways[way] = {"step_s": float(np.median(times)), "mean_step_s": float(np.mean(times)), "losses": losses,
                         "foreign_cores": None if load.cores is None else round(load.cores, 3)}
            log(f"  unpad {way}: {ways[way]['step_s']:.4f} s a step (median of {steps})")
    difference = max(abs(a - b) for a, b in zip(ways["off"]["losses"], ways["on"]["losses"]))
    return {"task": task, "preset": recipe.preset, "max_seq_length": length, "batch_size": run.recipe.batch_size,
            "train_features": len(run.train_f), "timed_steps": steps, "real_tokens": real, "padded_positions": padded,
            "padding_share": round(1 - real / padded, 4), "ways": ways,
            "speedup": ways["off"]["step_s"] / ways["on"]["step_s"], "largest_loss_difference": difference}


def render(result: dict) -> str:
    rows = []
    for r in result["results"]["tasks"]:
        rows.append([r["task"], r["preset"], str(r["max_seq_length"]), f"{100 * r['padding_share']:.1f}%",
                     f"{r['ways']['off']['step_s']:.3f}", f"{r['ways']['on']['step_s']:.3f}", f"{r['speedup']:.2f}x",
                     f"{r['largest_loss_difference']:.1e}"])
    return "\n".join(markdown_table(["task", "model", "max_seq_length", "padding in the batches", "padded s/step",
                           "unpadded s/step", "speedup", "largest loss difference"], rows))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", action="append", required=True, help="a task (repeat with --data for more)")
    p.add_argument("--data", action="append", required=True, help="its data directory, one per --task")
    p.add_argument("--steps", type=int, default=40, help="timed steps each way (default 40)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--preset", default=None, help="train this architecture instead of the default command's")
    p.add_argument("--report", default=None, help="also write the JSON report here")
    args = p.parse_args(argv)
    if len(args.task) != len(args.data):
        p.error(f"give one --data per --task: {len(args.task)} tasks, {len(args.data)} data directories")
    if args.steps < 1:
        p.error(f"--steps must be positive, got {args.steps}")
    start = time.perf_counter()
    try:
        tasks = [measure(t, d, args.steps, args.seed, lambda m: print(m, file=sys.stderr, flush=True), args.preset)
                 for t, d in zip(args.task, args.data)]
    except AlbertlmError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    publish(envelope("benchmarks.finetune_steps", argv if argv is not None else sys.argv[1:], {"tasks": tasks},
                     started=start), args.report, render)
    return 0


if __name__ == "__main__":
    sys.exit(main())
