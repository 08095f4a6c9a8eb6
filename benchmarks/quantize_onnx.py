"""int8 and ONNX inference on the CPU: accuracy, latency, throughput and size of one fine-tuned model
run five ways: ours fp32, ours int8 (fbgemm and torchao backends), onnxruntime fp32 and int8.

  - accuracy: the task's dev metric through the same scoring code (`inference.post.score`; the
    onnxruntime files run behind `inference.onnx_backend.OnnxModel`), batch 32;
  - batch-1 latency: the median over single dev examples, each at its own length;
  - batch-32 throughput: dev examples per second over the whole dev set, batches of 32 sorted by
    length (as evaluation runs them);
  - size: bytes on disk (safetensors, torch.save of the int8 state, the .onnx files), and the
    ONNX initializer bytes against the model's distinct parameter bytes, for our export and for
    plain torch.onnx.export calls with constant folding (what duplicates shared tensors);
  - with --base-shaped: the same latency and throughput on albert-base-shaped random weights
    (H=768, 12 shared layers), where the matrix products dominate; no accuracy there.

Every variant is timed in alternation (round-robin) so that load from other processes spreads
over all of them (`harness.time_rounds`); medians are reported. Threads: --threads for torch and
onnxruntime alike.

Usage:
    python -m benchmarks.quantize_onnx --model runs/sst2 --data DATA/SST-2 --task sst-2 --threads 1 --base-shaped
Writes the results envelope, with the int8 and ONNX targets, to
benchmarks/results/inference/quantize_onnx-<date>.json and prints it.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from pathlib import Path

import torch

from albertlm.config import get_preset
from albertlm.heads import AlbertForSequenceClassification
from albertlm.inference.evaluate import task_inputs
from albertlm.inference.onnx_backend import OnnxModel
from albertlm.inference.post import score_outputs
from albertlm.inference.quantize import quantize_int8, state_bytes
from albertlm.inference.run import run_features
from albertlm.interop.onnx import INPUTS, _Exportable, export_onnx, initializer_bytes, parameter_bytes, quantize_onnx_int8
from benchmarks.harness import RESULTS, Target, batch_of, envelope, publish, time_rounds


def variants(model: torch.nn.Module, tmp: Path, threads: int, dynamo: bool) -> tuple[dict, dict]:
    """{name: runnable model}, {name: bytes on disk}."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # fbgemm's deprecation notice (documented)
        fbgemm = quantize_int8(model, "fbgemm")
    torchao = quantize_int8(model, "torchao")
    export_onnx(model, tmp / "fp32.onnx", dynamo=dynamo)
    quantize_onnx_int8(tmp / "fp32.onnx", tmp / "int8.onnx")
    runs = {"ours fp32": model, "ours int8 (fbgemm)": fbgemm, "ours int8 (torchao)": torchao,
            "ORT fp32": OnnxModel(tmp / "fp32.onnx", threads), "ORT int8": OnnxModel(tmp / "int8.onnx", threads)}
    sizes = {"ours fp32": state_bytes(model), "ours int8 (fbgemm)": state_bytes(fbgemm),
             "ours int8 (torchao)": state_bytes(torchao), "ORT fp32": (tmp / "fp32.onnx").stat().st_size,
             "ORT int8": (tmp / "int8.onnx").stat().st_size}
    return runs, sizes


def real_model(args, tmp: Path) -> dict:
    t = task_inputs(args.model, args.data, args.task)
    model, spec, examples, features, labels, settings = (t.loaded.model, t.spec, t.examples, t.features, t.labels,
                                                         t.settings)
    runs, sizes = variants(model, tmp, args.threads, dynamo=True)
    cpu = torch.device("cpu")
    with torch.inference_mode():  # each variant over the dev set once: its metrics, and its logits against ours fp32
        logits = {name: run_features(m, spec, features, 32, cpu) for name, m in runs.items()}
    metrics = {name: score_outputs(spec, examples, features, logits[name], labels, settings)[0] for name in runs}
    singles = [batch_of([f]) for f in features[:args.latency_examples]]
    jobs = {"batch1_s": lambda m: [m(**b) for b in singles],
            "dev_batch32_s": lambda m: run_features(m, spec, features, 32, cpu)}
    times = time_rounds(runs, jobs, args.rounds)
    result = {}
    for name in runs:
        result[name] = {"metrics": metrics[name], "bytes": sizes[name],
                        "batch1_latency_ms": 1e3 * times[name]["batch1_s"] / len(singles),
                        "batch32_examples_per_s": len(features) / times[name]["dev_batch32_s"],
                        "max_abs_logit_diff_vs_ours_fp32": max_diff(logits[name], logits["ours fp32"])}
    base = result["ours fp32"]
    for r in result.values():
        r["batch1_speedup"] = base["batch1_latency_ms"] / r["batch1_latency_ms"]
        r["batch32_speedup"] = r["batch32_examples_per_s"] / base["batch32_examples_per_s"]
    return {"task": spec.name, "dev_examples": len(examples), "latency_examples": len(singles),
            "safetensors_bytes": (Path(args.model) / "model.safetensors").stat().st_size,
            "export": export_sizes(model, tmp), "variants": result}


def max_diff(a: dict, b: dict) -> float:
    """The largest |a - b| over every output of every feature."""
    return max(float(abs(x - y).max()) for name in a for x, y in zip(a[name], b[name]))


def export_sizes(model: torch.nn.Module, tmp: Path, outputs: tuple[str, ...] = ("logits",)) -> dict:
    """Initializer bytes / distinct parameter bytes: ours, and plain exports with constant folding."""
    import onnx

    from albertlm.interop.onnx import example_inputs

    out = {"parameter_bytes": parameter_bytes(model)}
    if not (tmp / "fp32.onnx").exists():
        export_onnx(model, tmp / "fp32.onnx")
    out["ours (dynamo, no folding, weight transposes folded once)"] = initializer_bytes(
        onnx.load(tmp / "fp32.onnx")) / out["parameter_bytes"]
    out["ours: file bytes / parameter bytes"] = (tmp / "fp32.onnx").stat().st_size / out["parameter_bytes"]
    wrapped = _Exportable(model, outputs).eval()
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUTS}
    for label, kwargs in (("plain dynamo=True (optimize=True)", {"dynamo": True, "dynamic_shapes": axes}),
                          ("plain dynamo=False (do_constant_folding=True)", {"dynamo": False, "dynamic_axes": axes})):
        path = tmp / "plain.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(wrapped, example_inputs(model), path, input_names=list(INPUTS), verbose=False, **kwargs)
        out[label] = initializer_bytes(onnx.load(path)) / out["parameter_bytes"]
    return out


def base_shaped(args, tmp: Path) -> dict:
    """albert-base-shaped random weights (V=30000, E=128, H=768, 12 shared layers), 2 labels."""
    torch.manual_seed(0)
    model = AlbertForSequenceClassification(get_preset("albert-base", num_labels=2)).eval()
    runs, sizes = variants(model, tmp, args.threads, dynamo=False)  # the TorchScript exporter: minutes faster
    gen = torch.Generator().manual_seed(0)
    one = {"input_ids": torch.randint(5, 30000, (1, 128), generator=gen)}
    one.update(attention_mask=torch.ones_like(one["input_ids"]), token_type_ids=torch.zeros_like(one["input_ids"]))
    many = {k: v.repeat(args.base_batch, 1) for k, v in one.items()}
    times = time_rounds(runs, {"b1": lambda m: m(**one), "bN": lambda m: m(**many)}, args.base_rounds)
    fp32 = times["ours fp32"]
    return {"shape": "albert-base (H=768, L=12 shared, E=128, V=30000), random weights", "seq_len": 128,
            "batch": args.base_batch,
            "variants": {name: {"bytes": sizes[name], "batch1_latency_ms": 1e3 * t["b1"],
                                "batch1_speedup": fp32["b1"] / t["b1"],
                                f"batch{args.base_batch}_sequences_per_s": args.base_batch / t["bN"],
                                f"batch{args.base_batch}_speedup": fp32["bN"] / t["bN"]}
                         for name, t in times.items()}}


def targets(result: dict) -> list[Target]:
    """int8 at least 1.8x ours fp32 at batch 1 within 1 point (each backend), the ONNX file's initializers
    at most 1.05x the distinct parameter bytes, onnxruntime within 1e-4 of ours."""
    fine = result["finetuned"]
    from albertlm.tasks.registry import get_task

    rows, metric = fine["variants"], get_task(fine["task"]).main_metric
    fp32 = rows["ours fp32"]["metrics"][metric]
    out = [Target(f"{name}: batch-1 speed-up vs ours fp32, within 1 point ({100 * (r['metrics'][metric] - fp32):+.2f})",
                  r["batch1_speedup"] if r["metrics"][metric] >= fp32 - 0.01 else None, 1.8)
           for name, r in rows.items() if name.startswith("ours int8")]
    out += [Target("ONNX: initializer bytes / distinct parameter bytes",
                   fine["export"]["ours (dynamo, no folding, weight transposes folded once)"], 1.05,
                   higher_is_better=False, unit=""),
            Target("onnxruntime fp32: largest logit difference from ours over dev",
                   rows["ORT fp32"]["max_abs_logit_diff_vs_ours_fp32"], 1e-4, higher_is_better=False, unit="")]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a fine-tuned sequence-classification directory")
    p.add_argument("--data", required=True, help="the task's data directory (its dev split is used)")
    p.add_argument("--task", default=None, help="task name (default: the model's finetuning_task)")
    p.add_argument("--threads", type=int, default=1, help="torch and onnxruntime intra-op threads (default: 1)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per variant (default: 3)")
    p.add_argument("--latency-examples", type=int, default=100, help="dev examples timed one by one (default: 100)")
    p.add_argument("--pretrained", default=None, help="also compare export sizes of this AlbertForPreTraining directory")
    p.add_argument("--base-shaped", action="store_true", help="also time albert-base-shaped random weights")
    p.add_argument("--base-batch", type=int, default=8, help="batch of the base-shaped throughput (default: 8)")
    p.add_argument("--base-rounds", type=int, default=3, help="timed rounds of the base-shaped model (default: 3)")
    p.add_argument("--out", default=None, help="JSON file (default: benchmarks/results/inference/quantize_onnx-<date>.json)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    result = {"threads": args.threads, "load_average_at_start": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        result["finetuned"] = real_model(args, Path(tmp))
        if args.pretrained:
            from albertlm.model import AlbertForPreTraining

            pre = Path(tmp) / "pretrained"
            pre.mkdir()
            model = AlbertForPreTraining.from_pretrained(args.pretrained).eval()
            result["pretraining_export"] = export_sizes(model, pre, ("prediction_logits", "sop_logits"))
        if args.base_shaped:
            result["base_shaped"] = base_shaped(args, Path(tmp))
    result["load_average_at_end"] = os.getloadavg()
    final = envelope("benchmarks.quantize_onnx", argv, result, targets(result), start)
    publish(final, args.out or RESULTS / "inference" / f"quantize_onnx-{final['date'][:10]}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
