"""`albertlm export`: a model directory to another format (ONNX, optionally int8)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from albertlm.errors import AlbertlmError
from albertlm.outputs import check_not_input


def export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="DIR", help="a model directory: pretrained (AlbertForPreTraining) or fine-tuned")
    p.add_argument("out", metavar="OUT", help="the file to write, e.g. model.onnx")
    p.add_argument("--format", default="onnx", choices=["onnx"], help="output format (default: onnx)")
    p.add_argument("--int8", action="store_true", help="write onnxruntime's dynamic int8 quantization of the "
                   "export instead of fp32 (docs/benchmarks.md has its accuracy and speed)")
    p.add_argument("--exporter", default="dynamo", choices=["dynamo", "legacy"], help="torch.onnx.export's "
                   "current exporter (torch.export based) or the TorchScript one, ~20x faster to run "
                   "(default: dynamo)")


def _architecture(model_dir: str | Path) -> str:
    """The class config.json's `architectures` names, refusing a field that is not a list of names.

    read_architecture takes the first entry of whatever the field holds, so a string gives its first
    letter ("holds an A") and a list of objects a TypeError. The same check belongs in
    AlbertConfig.from_dict, for every command that reads the field; until it is there, it lives here.
    """
    from albertlm.train.inference import read_architecture

    arch, _ = read_architecture(model_dir)  # config.json read and checked: exists, UTF-8, a JSON object
    path = Path(model_dir) / "config.json"
    value = json.loads(path.read_text(encoding="utf-8")).get("architectures")
    if value not in (None, []) and not (isinstance(value, list) and all(isinstance(a, str) and a for a in value)):
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise AlbertlmError(f"{path}: architectures must be a list of class names, e.g. "
                            f"[\"AlbertForSequenceClassification\"], got {shown}")
    return arch


def export_run(args: argparse.Namespace) -> int:
    """Export a model directory; print what was written."""
    import warnings

    from albertlm.heads import HEADS
    from albertlm.interop.onnx import ONNX_OUTPUTS, export_onnx, quantize_onnx_int8, scratch_beside
    from albertlm.model import AlbertForPreTraining

    out = Path(args.out)
    if out.is_dir() or not out.parent.is_dir():
        raise AlbertlmError(f"{out}: {'is a directory' if out.is_dir() else 'its directory does not exist'}")
    if not Path(args.model).is_dir():
        raise AlbertlmError(f"{args.model}: not a model directory")
    check_not_input(out, "OUT", {"DIR": args.model})
    arch = _architecture(args.model)
    classes = {"AlbertForPreTraining": AlbertForPreTraining, **HEADS}
    if arch not in ONNX_OUTPUTS:
        raise AlbertlmError(f"{args.model}: holds an {arch}; the export takes one of {', '.join(ONNX_OUTPUTS)}")
    with warnings.catch_warnings():  # a pretrained directory without an SOP head says so: not an error here
        warnings.filterwarnings("ignore", message=".*SOP head.*")
        model = classes[arch].from_pretrained(args.model).eval()
    if not args.int8:
        report = export_onnx(model, out, dynamo=args.exporter == "dynamo")
    else:
        with scratch_beside(out) as tmp:
            report = export_onnx(model, tmp / "fp32.onnx", dynamo=args.exporter == "dynamo")
            report.update(quantize_onnx_int8(tmp / "fp32.onnx", out))
    print(f"{out}: {arch} -> {', '.join(report['outputs'])}; {out.stat().st_size / 2**20:.2f} MiB on disk, "
          f"fp32 initializers {report['ratio']:.3f}x the distinct parameter bytes"
          + (f"; int8: {report['quantized_matmuls']} int8 MatMuls" if args.int8 else ""))
    return 0
