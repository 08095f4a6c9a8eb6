"""sentence-transformers' own ONNX export of a directory: the other side of benchmarks.bench_embed_export,
run by it (--st-python) in an environment of its own, since optimum-onnx needs transformers 4.x.

Nothing of albertlm is imported here: the script sees only the sentence-transformers directory our
export wrote and what sentence-transformers, optimum and onnxruntime make of it.

  1. `SentenceTransformer(DIR, backend="onnx", model_kwargs={"export": True})`: optimum exports the
     Transformer module (its token vectors) to ONNX, as for any model without an onnx/ folder;
  2. `model.save(OUT)`: OUT/onnx/model.onnx, where `SentenceTransformer(OUT, backend="onnx")` finds it;
  3. `export_dynamic_quantized_onnx_model(model, CONFIG, OUT)`: sentence-transformers' int8 helper
     (optimum's ORTQuantizer, dynamic, AutoQuantizationConfig.CONFIG), OUT/onnx/model_qint8_CONFIG.onnx;
     a failure is recorded, not raised (the caller then quantizes the fp32 file itself);
  4. a check that the saved files are what the backend runs: `SentenceTransformer(OUT, backend="onnx")`
     (fp32, then int8 through model_kwargs file_name) against `SentenceTransformer(DIR)` in PyTorch on a
     few texts.

    /work/venvs/st-onnx/bin/python -m benchmarks.st_onnx_export ST_DIR OUT --report report.json

The report: the package versions, the export's and the quantization's seconds, the files written
(relative to OUT), the int8 helper's error if any, and the check's largest absolute differences.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from importlib import metadata
from pathlib import Path

PACKAGES = ("sentence-transformers", "optimum", "optimum-onnx", "transformers", "torch", "onnxruntime", "onnx")
CHECK_TEXTS = ["a first text", "a second, longer text than the first one", ""]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("st_dir", type=Path, help="a sentence-transformers directory without onnx/")
    p.add_argument("out", type=Path, help="a new directory: SentenceTransformer.save's, onnx/ inside")
    p.add_argument("--int8-config", default="avx512_vnni", choices=["arm64", "avx2", "avx512", "avx512_vnni"],
                   help="export_dynamic_quantized_onnx_model's quantization_config")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--report", type=Path, required=True, help="the JSON report to write")
    return p.parse_args(argv)


def versions() -> dict[str, str | None]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def onnx_files(folder: Path) -> set[str]:
    return {p.name for p in folder.glob("*.onnx")} if folder.is_dir() else set()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.out.exists():
        print(f"{args.out}: exists; give a new directory", file=sys.stderr)
        return 2
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model

    torch.set_num_threads(args.threads)
    report: dict = {"versions": versions(), "int8_config": args.int8_config}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        started = time.perf_counter()
        model = SentenceTransformer(str(args.st_dir), backend="onnx", device="cpu", model_kwargs={"export": True})
        model.save(str(args.out))
        report["export_s"] = round(time.perf_counter() - started, 1)
        folder = args.out / "onnx"
        report["fp32"] = f"onnx/{sorted(onnx_files(folder))[0]}" if onnx_files(folder) else None
        before = onnx_files(folder)
        started = time.perf_counter()
        try:
            export_dynamic_quantized_onnx_model(model, args.int8_config, str(args.out))
            added = sorted(onnx_files(folder) - before)
            report["int8"], report["int8_error"] = (f"onnx/{added[0]}", None) if added else (None, "no file written")
        except Exception as exc:  # optimum parts that do not work with these versions: recorded for the caller
            report["int8"], report["int8_error"] = None, f"{type(exc).__name__}: {exc}"
        report["quantize_s"] = round(time.perf_counter() - started, 1)
        reference = SentenceTransformer(str(args.st_dir), device="cpu").encode(CHECK_TEXTS)
        check = {}
        for kind in ("fp32", "int8"):
            if report[kind] is not None:
                loaded = SentenceTransformer(str(args.out), backend="onnx", device="cpu",
                                             model_kwargs={"file_name": Path(report[kind]).name})
                check[f"{kind}_max_abs_vs_torch"] = float(np.abs(loaded.encode(CHECK_TEXTS) - reference).max())
        report["backend_check"] = check
    tmp = args.report.with_name(args.report.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, args.report)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
