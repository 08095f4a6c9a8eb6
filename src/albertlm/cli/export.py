"""`albertlm export`: a model directory to another format (ONNX, optionally int8)."""

from __future__ import annotations

import argparse
from pathlib import Path

from albertlm.errors import AlbertlmError
from albertlm.options import add_dataclass_options, dataclass_from_args
from albertlm.outputs import check_not_input


def export_args(p: argparse.ArgumentParser) -> None:
    from albertlm.interop.onnx import ExportSettings

    p.add_argument("model", metavar="DIR", help="a model directory: pretrained (AlbertForPreTraining) or fine-tuned")
    p.add_argument("out", metavar="OUT", help="the file to write, e.g. model.onnx")
    add_dataclass_options(p, ExportSettings, "export")


def export_run(args: argparse.Namespace) -> int:
    """Export a model directory; print what was written."""
    from albertlm.inference.load import load_module, read_architecture
    from albertlm.interop.onnx import ONNX_OUTPUTS, ExportSettings, export_onnx, quantize_onnx_int8, scratch_beside

    settings = dataclass_from_args(ExportSettings, args)
    out = Path(args.out)
    if out.is_dir() or not out.parent.is_dir():
        raise AlbertlmError(f"{out}: {'is a directory' if out.is_dir() else 'its directory does not exist'}")
    if not Path(args.model).is_dir():
        raise AlbertlmError(f"{args.model}: not a model directory")
    check_not_input(out, "OUT", {"DIR": args.model})
    arch, config = read_architecture(args.model)
    if arch not in ONNX_OUTPUTS:
        raise AlbertlmError(f"{args.model}: holds an {arch}; the export takes one of {', '.join(ONNX_OUTPUTS)}")
    # the plain class (exit heads are albertlm's own); a head its weights lack is refused, not exported random
    model = load_module(args.model, arch, config, exit_heads=False).eval()
    dynamo = settings.exporter == "dynamo"
    if not settings.int8:
        report = export_onnx(model, out, dynamo=dynamo)
    else:
        with scratch_beside(out) as tmp:
            report = export_onnx(model, tmp / "fp32.onnx", dynamo=dynamo)
            report.update(quantize_onnx_int8(tmp / "fp32.onnx", out))
    print(f"{out}: {arch} -> {', '.join(report['outputs'])}; {out.stat().st_size / 2**20:.2f} MiB on disk, "
          f"fp32 initializers {report['ratio']:.3f}x the distinct parameter bytes"
          + (f"; int8: {report['quantized_matmuls']} int8 MatMuls" if settings.int8 else ""))
    return 0
