"""Cheaper inference, one run, one table: every way albertlm runs a fine-tuned classifier on the CPU,
against transformers on the same weights.

Rows (all on the same fine-tuned weights, the model fine-tuned with `--early-exit`):
  - transformers fp32 (AlbertForSequenceClassification, sdpa attention): the baseline;
  - ours fp32 (the plain head: the exit heads are not run);
  - ours bf16 autocast, and transformers under the same autocast (a fair bf16 ratio);
  - ours prepacked (oneDNN-packed fp32 weights, `inference.prepack.prepack_for_cpu`);
  - ours int8 (dynamic int8 Linear layers, `inference.quantize`, fbgemm kernels);
  - onnxruntime fp32 and int8 (`albertlm export --format onnx`, each shared tensor stored once);
  - early exit at patience 2, 3, 4 (`inference.exit.patience_forward`, batched: exited rows leave the batch);
  - the combination: int8 + early exit at each --combo-patience.
Columns: the task's dev accuracy (every dev example, batch 32), the average layers run, batch-1
latency (median over the first --latency-examples dev examples, each at its own length), batch-32
throughput (dev examples per second over the whole dev set, batches sorted by length, as
evaluation runs them), and bytes on disk. Every variant is timed in alternation, round after round,
so that load from other processes falls on all of them; medians are reported. With --also MODEL
DATA (repeatable), every row is built again from another task's model and scored on that task's dev
set: two more columns per task (its main metric, layers run), not timed.

    python -m benchmarks.bench_inference --model runs/bench-early-exit/sst-2 --data DATA/SST-2 --threads 2

Writes the results envelope (benchmarks/harness.py) to benchmarks/results/inference/bench_inference-<date>.json;
--markdown appends the table.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from albertlm.exit_heads import EXIT_HEADS_NAME
from albertlm.heads import AlbertForSequenceClassification
from albertlm.inference.evaluate import task_inputs
from albertlm.inference.exit import PatienceExit
from albertlm.inference.onnx_backend import OnnxModel
from albertlm.inference.post import score_outputs
from albertlm.inference.prepack import prepack_for_cpu
from albertlm.inference.quantize import quantize_int8, state_bytes
from albertlm.inference.run import run_features
from albertlm.interop.onnx import export_onnx, quantize_onnx_int8
from benchmarks.harness import (RESULTS, Target, batch_of, envelope, publish, read_result, targets_markdown,
                                time_rounds)

RESULTS = RESULTS / "inference"


class Autocast(torch.nn.Module):
    """A model run under CPU bf16 autocast, its logits returned in fp32."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, **batch):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = self.model(**batch)
        out.logits = out.logits.float()
        return out


def variants(model_dir: Path, exits: torch.nn.Module, tmp: Path, threads: int, patiences: tuple[int, ...],
             combos: tuple[int, ...]) -> tuple[dict[str, torch.nn.Module], dict[str, int]]:
    """{row name: runnable model}, {row name: bytes on disk}; `exits` is the directory's early-exit model."""
    import transformers

    plain = AlbertForSequenceClassification.from_pretrained(model_dir).eval()  # the plain head class
    hf = transformers.AlbertForSequenceClassification.from_pretrained(model_dir, attn_implementation="sdpa").eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the fbgemm path's deprecation notice (docs/benchmarks.md)
        int8 = quantize_int8(plain, "fbgemm")
        int8_exits = quantize_int8(exits, "fbgemm")  # a quantized copy: `exits` stays fp32
    export_onnx(plain, tmp / "fp32.onnx")
    quantize_onnx_int8(tmp / "fp32.onnx", tmp / "int8.onnx")
    weights = (model_dir / "model.safetensors").stat().st_size
    heads = (model_dir / EXIT_HEADS_NAME).stat().st_size
    runs = {"transformers fp32": hf, "ours fp32": plain, "transformers bf16 autocast": Autocast(hf),
            "ours bf16 autocast": Autocast(plain), "ours prepacked": prepack_for_cpu(plain), "ours int8": int8,
            "onnxruntime fp32": OnnxModel(tmp / "fp32.onnx", threads),
            "onnxruntime int8": OnnxModel(tmp / "int8.onnx", threads)}
    sizes = {"transformers fp32": weights, "ours fp32": weights, "transformers bf16 autocast": weights,
             "ours bf16 autocast": weights, "ours prepacked": weights, "ours int8": state_bytes(int8),
             "onnxruntime fp32": (tmp / "fp32.onnx").stat().st_size,
             "onnxruntime int8": (tmp / "int8.onnx").stat().st_size}
    for p in patiences:
        runs[f"early exit, patience {p}"] = PatienceExit(exits, p)
        sizes[f"early exit, patience {p}"] = weights + heads
    for p in combos:
        runs[f"int8 + early exit, patience {p}"] = PatienceExit(int8_exits, p)
        sizes[f"int8 + early exit, patience {p}"] = state_bytes(int8_exits)
    return {name: model.eval() for name, model in runs.items()}, sizes


def accuracy_and_layers(runs: dict, spec, examples, features, labels, settings) -> dict[str, dict]:
    """Each row's dev metrics (batch 32), for early exit the average layers run, and the largest
    logit difference from ours fp32 over the dev set."""
    cpu, out, logits = torch.device("cpu"), {}, {}
    for name, model in runs.items():
        extra = ("exit_layers",) if isinstance(model, PatienceExit) else ()
        outputs = run_features(model, spec, features, 32, cpu, per_feature=extra)
        layers = outputs.pop("exit_layers", None)
        logits[name] = outputs["logits"]
        metrics = score_outputs(spec, examples, features, outputs, labels, settings)[0]
        out[name] = {"metrics": metrics,
                     "average_layers": float(sum(int(x) for x in layers) / len(layers)) if layers else None}
    for name in runs:
        out[name]["max_abs_logit_diff_vs_ours_fp32"] = max(
            float(abs(a - b).max()) for a, b in zip(logits[name], logits["ours fp32"]))
    return out


def other_task(model: str, data: str, args: argparse.Namespace, tmp: Path) -> dict:
    """Every row's dev metrics and layers run on another task's model (built the same way; not timed)."""
    model_dir = Path(model)
    t = task_inputs(model_dir, data)
    tmp.mkdir()
    runs, _ = variants(model_dir, t.loaded.model, tmp, args.threads, tuple(args.patiences),
                       tuple(args.combo_patience))
    with torch.inference_mode():
        quality = accuracy_and_layers(runs, t.spec, t.examples, t.features, t.labels, t.settings)
    return {"task": t.spec.name, "main_metric": t.spec.main_metric, "dev_examples": len(t.examples),
            "model": str(model_dir), "rows": quality}


def measure(args: argparse.Namespace, tmp: Path) -> dict:
    model_dir = Path(args.model)
    t = task_inputs(model_dir, args.data, args.task)
    config, spec, examples, features, labels, settings = (t.loaded.config, t.spec, t.examples, t.features, t.labels,
                                                          t.settings)
    runs, sizes = variants(model_dir, t.loaded.model, tmp, args.threads, tuple(args.patiences),
                           tuple(args.combo_patience))
    with torch.inference_mode():
        quality = accuracy_and_layers(runs, spec, examples, features, labels, settings)
    singles = [batch_of([f]) for f in features[:args.latency_examples]]
    cpu = torch.device("cpu")
    jobs = {"batch1_s": lambda m: [m(**b) for b in singles],
            "batch32_s": lambda m: run_features(m, spec, features, 32, cpu)}
    times = time_rounds(runs, jobs, args.rounds)
    base = times["transformers fp32"]
    rows = {}
    for name in runs:
        t = times[name]
        rows[name] = {**quality[name], "bytes": sizes[name],
                      "batch1_latency_ms": 1e3 * t["batch1_s"] / len(singles),
                      "batch1_speedup_vs_transformers": base["batch1_s"] / t["batch1_s"],
                      "batch32_examples_per_s": len(features) / t["batch32_s"],
                      "batch32_speedup_vs_transformers": base["batch32_s"] / t["batch32_s"]}
    onnx_ratio = onnx_size_ratio(tmp / "fp32.onnx", runs["ours fp32"])
    others = [other_task(m, d, args, tmp / f"other-{k}") for k, (m, d) in enumerate(args.also or [])]
    return {"other_tasks": others, "task": spec.name, "main_metric": spec.main_metric, "dev_examples": len(examples),
            "latency_examples": len(singles), "layers": config.num_hidden_layers, "rows": rows,
            "onnx_initializer_bytes_over_parameter_bytes": onnx_ratio, "threads": args.threads}


def onnx_size_ratio(path: Path, model: torch.nn.Module) -> float:
    """The ONNX file's initializer bytes over the model's distinct parameter bytes (1.0: each once)."""
    import onnx

    from albertlm.interop.onnx import initializer_bytes, parameter_bytes

    return initializer_bytes(onnx.load(path)) / parameter_bytes(model)


def targets(result: dict) -> list[Target]:
    """The targets of a measurement, each with its measured value (None where the accuracy condition fails)."""
    rows, metric, layers = result["rows"], result["main_metric"], result["layers"]
    onnx_ratio = result["onnx_initializer_bytes_over_parameter_bytes"]
    patiences = sorted(int(n.rsplit(" ", 1)[1]) for n in rows if n.startswith("early exit"))
    def acc(name: str) -> float:
        return 100 * rows[name]["metrics"][metric]

    fp32 = acc("ours fp32")
    close = [n for n in rows if acc(n) >= fp32 - 1.0 and not n.startswith("transformers")]
    best = max(close, key=lambda n: rows[n]["batch1_speedup_vs_transformers"])
    exit_ok = [p for p in patiences if acc(f"early exit, patience {p}") >= fp32 - 0.5]
    # with no patience within 0.5 point, only full depth is: 1.0x fewer layers
    fewer = max((layers / rows[f"early exit, patience {p}"]["average_layers"] for p in exit_ok), default=1.0)
    int8 = rows["ours fp32"]["batch1_latency_ms"] / rows["ours int8"]["batch1_latency_ms"]
    out = [
        Target(f"best row within 1 point of ours fp32 ({best}, {acc(best) - fp32:+.2f}): batch-1 speed-up vs "
               "transformers fp32", rows[best]["batch1_speedup_vs_transformers"], 3.0),
        Target("early exit: fewer layers on average, within 0.5 point of full depth", fewer, 1.5),
        Target(f"int8: batch-1 speed-up vs ours fp32, within 1 point ({acc('ours int8') - fp32:+.2f})",
               int8 if acc("ours int8") >= fp32 - 1 else None, 1.8),
        Target("ONNX: initializer bytes / distinct parameter bytes", onnx_ratio, 1.05, higher_is_better=False, unit=""),
        Target("onnxruntime fp32: largest logit difference from ours over dev",
               rows["onnxruntime fp32"]["max_abs_logit_diff_vs_ours_fp32"], 1e-4, higher_is_better=False, unit=""),
    ]
    return out


def markdown(env: dict) -> str:
    """The docs/benchmarks.md section of a result (an envelope): the table of rows, then the targets."""
    result, m = env["results"], env["machine"]
    others = result.get("other_tasks") or []
    extra_head = "".join(f" {o['task']} dev {o['main_metric']} % | {o['task']} layers run |" for o in others)
    lines = [f"## Cheaper inference, one table: {env['date'][:10]}, {m['cpu']} ({result['threads']} thread(s))", "",
             f"Command: `{env['command']}` (wall {env['wall_s'] / 60:.1f} min). {result['task']} dev: "
             f"{result['dev_examples']} examples; batch-1 latency: median over the first {result['latency_examples']}; "
             f"a {result['layers']}-layer all-shared model fine-tuned with `--early-exit`"
             + "".join(f"; {o['task']} dev: {o['dev_examples']} examples on its own model of the same shape, "
                       f"`{o['model']}` (scores only, not timed)" for o in others)
             + f". Raw numbers: `{env['json']}`.", "",
             f"| row | {result['task']} dev {result['main_metric']} % | layers run | batch-1 ms | vs transformers | "
             "batch-32 ex/s | vs transformers | MB on disk |" + extra_head,
             "|---|---|---|---|---|---|---|---|" + "---|---|" * len(others)]

    def layers(r: dict, depth: int) -> str:
        return f"{r['average_layers']:.2f}" if r["average_layers"] is not None else str(depth)

    for name, r in result["rows"].items():
        row = (f"| {name} | {100 * r['metrics'][result['main_metric']]:.2f} | {layers(r, result['layers'])} | "
               f"{r['batch1_latency_ms']:.2f} | {r['batch1_speedup_vs_transformers']:.2f}x | "
               f"{r['batch32_examples_per_s']:.0f} | {r['batch32_speedup_vs_transformers']:.2f}x | "
               f"{r['bytes'] / 2**20:.1f} |")
        for o in others:
            r2 = o["rows"][name]
            row += f" {100 * r2['metrics'][o['main_metric']]:.2f} | {layers(r2, result['layers'])} |"
        lines.append(row)
    return "\n".join(lines + ["", "Targets:", "", *targets_markdown(env["targets"])]) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="a sequence classifier fine-tuned with --early-exit (required unless --render)")
    p.add_argument("--data", help="the task's data directory (required unless --render)")
    p.add_argument("--task", default=None, help="default: the model's finetuning_task")
    p.add_argument("--threads", type=int, default=2, help="torch and onnxruntime threads (default 2)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per row (default 3)")
    p.add_argument("--latency-examples", type=int, default=100)
    p.add_argument("--patiences", type=int, nargs="+", default=[2, 3, 4])
    p.add_argument("--combo-patience", type=int, nargs="+", default=[2],
                   help="patiences of the int8 + early exit rows (default 2)")
    p.add_argument("--also", nargs=2, action="append", metavar=("MODEL", "DATA"),
                   help="another task's model (fine-tuned with --early-exit) and data directory: every row's dev "
                        "score and layers run on it become two more columns (not timed); repeatable")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--markdown", type=Path, default=None, help="append the table to this file")
    p.add_argument("--render", type=Path, default=None, metavar="JSON",
                   help="print the table of an earlier run (its targets recomputed from its rows) and exit")
    args = p.parse_args(argv)
    if args.render:
        result = read_result(args.render)
        result["targets"] = [t.as_dict() for t in targets(result["results"])]
        print(markdown(result))
        return 0
    if not (args.model and args.data):
        p.error("--model and --data are required (unless --render)")
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):
        result = measure(args, Path(tmp))
    final = envelope("benchmarks.bench_inference", argv, result, targets(result), start)
    stamp = final["date"][:16].replace("T", "-").replace(":", "")
    publish(final, args.out or RESULTS / f"bench_inference-{stamp}.json", markdown, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
