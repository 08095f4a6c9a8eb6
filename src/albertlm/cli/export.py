"""`albertlm export`: a model directory to an ONNX graph (task or sentence embedding, optionally int8), a
sentence-transformers directory, or a Triton model repository (albertlm/export.py)."""

from __future__ import annotations

import argparse

from albertlm.options import add_dataclass_options, dataclass_from_args


def export_args(p: argparse.ArgumentParser) -> None:
    from albertlm.export import ExportSettings

    p.add_argument("model", metavar="DIR", help="a model directory: pretrained (AlbertForPreTraining), fine-tuned, "
                   "or with --pooling any ALBERT directory (sentence-transformers ones too)")
    p.add_argument("out", metavar="OUT", help="onnx: a file ending in .onnx (the graph alone) or a directory (OUT/"
                   "model.onnx and the tokenizer files); sentence-transformers: a directory; triton: the model "
                   "repository (the model goes to OUT/NAME)")
    add_dataclass_options(p, ExportSettings, "export")


def export_run(args: argparse.Namespace) -> int:
    """Export a model directory; print what was written."""
    from albertlm.export import ExportSettings, export_model

    settings = dataclass_from_args(ExportSettings, args)
    report = export_model(args.model, args.out, settings)
    print(describe(report, settings))
    return 0


def describe(report: dict, settings) -> str:
    """One line: what was written, the graph's outputs and sizes."""
    line = f"{report['out']}: {settings.format}, {report['what']}"
    if "outputs" in report:
        line += (f" -> {', '.join(report['outputs'])}; fp32 initializers {report['ratio']:.3f}x the distinct "
                 "parameter bytes")
    if "quantized_matmuls" in report:
        line += f"; int8: {report['quantized_matmuls']} int8 MatMuls"
    if settings.format == "onnx" and len(report["files"]) == 1:
        from pathlib import Path

        line += f"; {Path(report['out']).stat().st_size / 2**20:.2f} MiB on disk"
    else:
        line += f"; {', '.join(report['files'])}"
    return line
