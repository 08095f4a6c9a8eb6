"""Round-to-round spread of the int8 batch-1 speed-up: ours int8 against ours fp32, the same
examples one at a time, the two models in alternation for many rounds.

bench_inference.py reports the median of 3 rounds among 15 rows. On a shared virtual machine
one round can run 1.5x slower than the next, and the int8 / fp32 ratio moves with it. This
script times only the two models, round after round, and writes every round's ratio, so the
spread of the ratio is measured rather than guessed.

    python benchmarks/int8_rounds.py --model runs/ee/sst-2-long --data DATA/SST-2 --rounds 8

Output: one JSON object on stdout, and in --out when given.
"""

from __future__ import annotations

import argparse
import datetime
import shlex
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from albertlm.heads import AlbertForSequenceClassification  # noqa: E402
from albertlm.inference.evaluate import task_inputs  # noqa: E402
from albertlm.inference.quantize import quantize_int8  # noqa: E402
from harness import machine, write_json  # noqa: E402
from quantize_onnx import batch_of  # noqa: E402


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
    ms: dict[str, list[float]] = {"fp32": [], "int8": []}
    with torch.inference_mode():
        for model in (fp32, int8):  # warm-up: every length once
            for b in singles:
                model(**b)
        for _ in range(args.rounds):
            for name, model in (("fp32", fp32), ("int8", int8)):
                start = time.perf_counter()
                for b in singles:
                    model(**b)
                ms[name].append(1e3 * (time.perf_counter() - start) / len(singles))
    ratios = [a / b for a, b in zip(ms["fp32"], ms["int8"])]
    result = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
              "command": shlex.join(["python", "benchmarks/int8_rounds.py", *(argv or sys.argv[1:])]),
              "model": args.model, "examples": len(singles), "threads": args.threads, "machine": machine(),
              "fp32_ms": ms["fp32"], "int8_ms": ms["int8"], "speedup_per_round": ratios,
              "speedup_median": statistics.median(ratios), "speedup_min": min(ratios), "speedup_max": max(ratios)}
    print(write_json(result, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
