"""Round-to-round spread of the int8 batch-1 speed-up: ours int8 against ours fp32, the same
examples one at a time, the two models in alternation for many rounds.

benchmarks.bench_inference reports the median of 3 rounds among 15 rows. On a shared virtual machine
one round can run 1.5x slower than the next, and the int8 / fp32 ratio moves with it. This
script times only the two models, round after round, and writes every round's ratio, so the
spread of the ratio is measured rather than guessed.

    python -m benchmarks.int8_rounds --model runs/ee/sst-2-long --data DATA/SST-2 --rounds 8

Output: the results envelope (benchmarks/harness.py; target: the median speed-up at least 1.8x) on
stdout, and in --out when given.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings

import torch

from albertlm.heads import AlbertForSequenceClassification
from albertlm.inference.evaluate import task_inputs
from albertlm.inference.quantize import quantize_int8
from benchmarks.harness import Target, batch_of, envelope, latency_rounds, publish


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a fine-tuned sequence classifier")
    p.add_argument("--data", required=True, help="the task's data directory")
    p.add_argument("--examples", type=int, default=100, help="the first N dev examples, one at a time")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    features = task_inputs(args.model, args.data, max_examples=args.examples).features
    singles = [batch_of([f]) for f in features]
    fp32 = AlbertForSequenceClassification.from_pretrained(args.model).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the fbgemm path's deprecation notice
        int8 = quantize_int8(fp32, "fbgemm")  # a quantized copy: fp32 stays as it is
    start = time.perf_counter()
    rounds = latency_rounds({"fp32": fp32, "int8": int8}, {"singles": lambda m: [m(**b) for b in singles]}, args.rounds)
    ms = {name: [1e3 * t / len(singles) for t in jobs["singles"]] for name, jobs in rounds.items()}
    ratios = [a / b for a, b in zip(ms["fp32"], ms["int8"])]
    median = statistics.median(ratios)
    result = envelope("benchmarks.int8_rounds", argv, {
        "model": args.model, "examples": len(singles), "threads": args.threads, "fp32_ms": ms["fp32"],
        "int8_ms": ms["int8"], "speedup_per_round": ratios, "speedup_median": median, "speedup_min": min(ratios),
        "speedup_max": max(ratios)}, [Target("int8: batch-1 speed-up vs ours fp32, median of the rounds", median, 1.8)],
        start)
    publish(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
