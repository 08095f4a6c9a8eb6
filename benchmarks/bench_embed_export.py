"""Size and agreement of the sentence-embedding ONNX export against a plain export of the same weights.

  - ours: `albertlm export --pooling mean` as a library call (pooling.SentenceEmbedder through
    interop.onnx.export_onnx: the shared block stored once, the pooling over the non-padding tokens
    inside the graph), fp32 and its onnxruntime int8 (interop.onnx.quantize_onnx_int8);
  - plain, with --st-python: sentence-transformers' own export. The same weights are written as an
    albertlm directory and exported with `albertlm export --format sentence-transformers` (export.py);
    a child process in sentence-transformers' environment (benchmarks/st_onnx_export.py) loads that
    directory with `SentenceTransformer(DIR, backend="onnx")`, which exports it through optimum, saves
    onnx/model.onnx and its int8 copy from `export_dynamic_quantized_onnx_model` (where that helper
    fails, its fp32 file is quantized here by the same call as ours, and the JSON says so). Its
    files run through onnxruntime in this process, their token vectors mean-pooled over the mask (as
    sentence-transformers' Pooling does);
  - plain, without --st-python: a stand-in, transformers' AlbertModel with the same weights through
    torch.onnx.export with its defaults (constant folding on), once per --plain-exporters entry: each
    folded use of a shared weight becomes a constant of its own, so the shared layer is stored per
    layer. Mean-pooled and quantized as above.

Per file: bytes on disk, initializer bytes, and their ratio to the model's distinct parameter bytes;
cosines of the pooled vectors: ours fp32 and int8 against PyTorch (SentenceEmbedder), ours against
plain (fp32 with fp32, int8 with int8). Weights are random (fixed seed, every tensor drawn, so no two
tensors are equal and no exporter can merge them by value), inputs random ids with padded rows; the
vocabulary of the directories is a filler WordPiece list of the model's size (the ids are drawn, not
tokenized).

The default model is tiny (runs in about a minute on one core); --base-shaped sets six all-shared
layers of albert-base's shape (H=768, E=128, 12 heads, FFN 3072, V=30000).

    python -m benchmarks.bench_embed_export                      # tiny, JSON on stdout
    python -m benchmarks.bench_embed_export --base-shaped --out result.json
    python -m benchmarks.bench_embed_export --base-shaped --st-python /work/venvs/st-onnx/bin/python \
        --out benchmarks/results/embed-export-st.json

sentence-transformers' ONNX backend needs optimum-onnx, whose release wants transformers 4.x, while
albertlm's dev environment has transformers 5; so it gets an environment of its own, never a
requirement of albertlm (as the TensorFlow fixtures do, tests/fixtures/tf/make_tf_fixtures.py):

    python3 -m venv /work/venvs/st-onnx
    /work/venvs/st-onnx/bin/pip install torch==2.13.0      # the CPU build (a bare pin may pull a CUDA one)
    /work/venvs/st-onnx/bin/pip install sentence-transformers optimum-onnx onnxruntime onnx sentencepiece

(measured with sentence-transformers 5.7.0, optimum 2.1.0, optimum-onnx 0.1.0, transformers 4.57.6;
the JSON records the versions the child found).

Prints the result in the harness's envelope as JSON (and writes it to --out); the targets carry their
verdicts.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from albertlm.errors import AlbertlmError
from albertlm.interop.onnx import export_onnx, initializer_bytes, parameter_bytes, quantize_onnx_int8
from albertlm.model import AlbertModel
from albertlm.pooling import SentenceEmbedder
from benchmarks.harness import REPO, Target, envelope, min_cosine, publish
from benchmarks.start_models import random_albert

BASE_SHAPED = {"layers": 6, "hidden": 768, "embedding": 128, "heads": 12, "intermediate": 3072, "vocab": 30000}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=6, help="layer applications, all one shared block")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--embedding", type=int, default=32)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=256)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--base-shaped", action="store_true", help=f"set {BASE_SHAPED}")
    p.add_argument("--batch", type=int, default=8, help="texts per batch (half of them padded)")
    p.add_argument("--length", type=int, default=64, help="tokens per row")
    p.add_argument("--exporter", choices=["dynamo", "legacy"], default="legacy", help="our export's exporter")
    p.add_argument("--plain-exporters", nargs="+", choices=["dynamo", "legacy"], default=["dynamo", "legacy"],
                   help="torch.onnx.export's exporters for the plain stand-in (each with its defaults)")
    p.add_argument("--st-python", type=Path,
                   help="the interpreter of an environment with sentence-transformers and optimum-onnx: compare "
                        "with sentence-transformers' own export instead of the stand-in")
    p.add_argument("--st-int8-config", default="avx512_vnni", choices=["arm64", "avx2", "avx512", "avx512_vnni"],
                   help="with --st-python: export_dynamic_quantized_onnx_model's quantization_config")
    p.add_argument("--st-timeout", type=float, default=3600, help="seconds the sentence-transformers side may take")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, help="also write the JSON here")
    args = p.parse_args(argv)
    if args.st_python is not None and not (args.st_python.is_file() and os.access(args.st_python, os.X_OK)):
        p.error(f"--st-python {args.st_python}: not an executable file")
    if args.base_shaped:
        for key, value in BASE_SHAPED.items():
            setattr(args, key, value)
    return args


def random_backbone(args: argparse.Namespace) -> AlbertModel:
    """An all-shared AlbertModel (no pooler: mean pooling does not use it), every tensor drawn at random."""
    return random_albert({k: getattr(args, k) for k in BASE_SHAPED}, positions=max(512, args.length))


def inputs(args: argparse.Namespace) -> dict[str, np.ndarray]:
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, args.vocab, (args.batch, args.length), generator=gen)
    mask = torch.ones_like(ids)
    for row in range(1, args.batch, 2):  # every other row padded, to a different length
        mask[row, max(2, args.length * row // (2 * args.batch)):] = 0
    return {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": np.zeros_like(ids.numpy())}


def plain_export(backbone: AlbertModel, path: Path, tmp: Path, exporter: str) -> None:
    """transformers' AlbertModel with `backbone`'s weights, torch.onnx.export's defaults, token vectors out."""
    import transformers

    backbone.save_pretrained(tmp / "hf")
    hf = transformers.AlbertModel.from_pretrained(tmp / "hf", add_pooling_layer=False).eval()
    tiny = argparse.Namespace(vocab=backbone.config.vocab_size, batch=2, length=8)  # traced at 2 x 8, one row padded
    example = tuple(torch.from_numpy(v) for v in inputs(tiny).values())
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {0: "batch", 1: "sequence"}
    kwargs = ({"dynamic_shapes": {n: axes for n in names}} if exporter == "dynamo" else
              {"dynamic_axes": {n: axes for n in names}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(hf, example, path, dynamo=exporter == "dynamo", input_names=names,
                          output_names=["last_hidden_state"], opset_version=18, external_data=False, **kwargs)


def write_directories(backbone: AlbertModel, tmp: Path) -> Path:
    """`backbone` as an albertlm directory (a filler WordPiece vocabulary of its size: ALBERT's special
    ids, then one piece per remaining id), exported as `albertlm export --format sentence-transformers
    --pooling mean` writes it; returns the sentence-transformers directory."""
    from albertlm.export import ExportSettings, export_model
    from albertlm.tokenizer import WordPieceTokenizer

    source = tmp / "albert"
    backbone.save_pretrained(source)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0-4, as AlbertConfig's pad/bos/eos ids
    WordPieceTokenizer(specials + [f"w{i}" for i in range(backbone.config.vocab_size - len(specials))]).save(source)
    export_model(source, tmp / "st", ExportSettings(format="sentence-transformers", pooling="mean"))
    return tmp / "st"


def st_export(args: argparse.Namespace, st_dir: Path, tmp: Path) -> tuple[dict, Path]:
    """Run benchmarks/st_onnx_export.py with --st-python on `st_dir`; its report and its output directory.

    Raises:
        AlbertlmError: the child failed (its last lines of stderr) or ran past --st-timeout.
    """
    out, report = tmp / "st-onnx", tmp / "st-report.json"
    command = [str(args.st_python), "-m", "benchmarks.st_onnx_export", str(st_dir), str(out), "--report", str(report),
               "--int8-config", args.st_int8_config, "--threads", str(args.threads)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the child imports nothing of ours
    try:
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=args.st_timeout)
    except subprocess.TimeoutExpired:
        raise AlbertlmError(f"--st-python {args.st_python}: the export ran past --st-timeout {args.st_timeout:g}s"
                            ) from None
    if done.returncode != 0 or not report.is_file():
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise AlbertlmError(f"--st-python {args.st_python}: benchmarks.st_onnx_export exited {done.returncode}: {tail}")
    return json.loads(report.read_text(encoding="utf-8")), out


def run(path: Path, feed: dict[str, np.ndarray], threads: int) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: feed[i.name] for i in session.get_inputs()})[0]


def mean_pool(tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    keep = mask[..., None].astype(tokens.dtype)  # [B, S, 1]
    return (tokens * keep).sum(1) / np.maximum(keep.sum(1), 1.0)  # [B, H]


def sizes(path: Path, distinct: int) -> dict:
    """Bytes on disk (with optimum's external data file, where there is one), initializer bytes, their ratio to
    the distinct parameter bytes, and the graph's MatMul nodes (fp32 products, the attention's two per layer
    among them), MatMulInteger nodes (int8 products) and DynamicQuantizeLinear nodes (a tensor quantized at run
    time: each int8 product's activation, and any weight the quantizer did not find as an initializer)."""
    import onnx

    graph = onnx.load(path)
    stored = initializer_bytes(graph)
    data = path.with_name(path.name + "_data")
    on_disk = path.stat().st_size + (data.stat().st_size if data.is_file() else 0)
    ops = [n.op_type for n in graph.graph.node]
    return {"file_bytes": on_disk, "initializer_bytes": stored, "ratio": round(stored / distinct, 4),
            "matmuls": ops.count("MatMul"), "int8_matmuls": ops.count("MatMulInteger"),
            "run_time_quantizations": ops.count("DynamicQuantizeLinear")}


def plain_row(fp32: Path, int8: Path, feed: dict[str, np.ndarray], ours: dict[str, np.ndarray], ours_sizes: dict,
              distinct: int, threads: int) -> dict:
    """A plain export's sizes, and its mean-pooled vectors' lowest cosines to ours (fp32 with fp32, int8 with int8)."""
    row = {"fp32": sizes(fp32, distinct), "int8": sizes(int8, distinct)}
    for kind, path in (("fp32", fp32), ("int8", int8)):
        vectors = mean_pool(run(path, feed, threads), feed["attention_mask"])
        row[f"cosine_{kind}_vs_ours_{kind}"] = min_cosine(vectors, ours[kind])
        row[f"file_bytes_over_ours_{kind}"] = round(row[kind]["file_bytes"] / ours_sizes[kind]["file_bytes"], 3)
    return row


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    backbone = random_backbone(args)
    embedder = SentenceEmbedder(backbone, "mean").eval()
    distinct = parameter_bytes(embedder)
    feed = inputs(args)
    with torch.no_grad():
        reference = embedder(*(torch.from_numpy(v) for v in feed.values())).numpy()
    started = time.perf_counter()
    result: dict = {
        "model": {k: getattr(args, k) for k in ("layers", "hidden", "embedding", "heads", "intermediate", "vocab")},
        "inputs": {"batch": args.batch, "length": args.length}, "distinct_parameter_bytes": distinct,
        "optimum": importlib.util.find_spec("optimum") is not None}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        export_onnx(embedder, tmp / "ours.onnx", dynamo=args.exporter == "dynamo")
        quantize_onnx_int8(tmp / "ours.onnx", tmp / "ours-int8.onnx")
        ours = {"fp32": run(tmp / "ours.onnx", feed, args.threads), "int8": run(tmp / "ours-int8.onnx", feed,
                                                                                args.threads)}
        result["ours"] = {"exporter": args.exporter, "fp32": sizes(tmp / "ours.onnx", distinct),
                          "int8": sizes(tmp / "ours-int8.onnx", distinct)}
        result["cosine"] = {"ours_fp32_vs_torch": min_cosine(ours["fp32"], reference),
                            "ours_int8_vs_torch": min_cosine(ours["int8"], reference)}
        result["max_abs_ours_fp32_vs_torch"] = float(np.abs(ours["fp32"] - reference).max())
        result["plain"] = {}
        if args.st_python is not None:
            try:
                report, out = st_export(args, write_directories(backbone, tmp), tmp)
            except AlbertlmError as exc:
                print(f"bench_embed_export: {exc}", file=sys.stderr)
                return 1
            fp32 = out / report["fp32"]
            if report["int8"] is not None:
                int8, int8_by = out / report["int8"], f"export_dynamic_quantized_onnx_model ({args.st_int8_config})"
            else:  # the helper failed (report["int8_error"]): its fp32 file through our quantizer call
                int8, int8_by = tmp / "st-int8.onnx", "quantize_onnx_int8 (ours) on its fp32 file"
                quantize_onnx_int8(fp32, int8)
            result["plain_is"] = ("sentence-transformers' own export: SentenceTransformer(DIR, backend='onnx') "
                                  "through optimum, in --st-python's environment")
            result["st"] = {**report, "int8_by": int8_by, "python": str(args.st_python)}
            result["plain"]["sentence-transformers"] = plain_row(fp32, int8, feed, ours, result["ours"], distinct,
                                                                 args.threads)
        else:
            result["plain_is"] = ("optimum is importable, but the stand-in is still torch.onnx.export of "
                                  "transformers' AlbertModel (--st-python runs sentence-transformers' own)"
                                  if result["optimum"] else
                                  "optimum is not installed: torch.onnx.export of transformers' AlbertModel, "
                                  "its defaults")
            for exporter in args.plain_exporters:
                fp32, int8 = tmp / f"plain-{exporter}.onnx", tmp / f"plain-{exporter}-int8.onnx"
                plain_export(backbone, fp32, tmp, exporter)
                quantize_onnx_int8(fp32, int8)
                result["plain"][exporter] = plain_row(fp32, int8, feed, ours, result["ours"], distinct, args.threads)
    targets = [Target("ours fp32: initializers / distinct parameter bytes", result["ours"]["fp32"]["ratio"], 1.05,
                      higher_is_better=False),
               Target("ours fp32 vs PyTorch: min cosine", result["cosine"]["ours_fp32_vs_torch"], 0.9999, unit=""),
               Target("ours int8 vs PyTorch: min cosine", result["cosine"]["ours_int8_vs_torch"], 0.99, unit="")]
    if "sentence-transformers" in result["plain"]:
        st = result["plain"]["sentence-transformers"]
        targets += [Target("sentence-transformers' fp32 file / ours", st["file_bytes_over_ours_fp32"], 3.0),
                    Target("sentence-transformers' int8 file / ours", st["file_bytes_over_ours_int8"], 3.0),
                    Target("ours fp32 vs sentence-transformers' fp32: min cosine", st["cosine_fp32_vs_ours_fp32"],
                           0.9999, unit=""),
                    Target("ours int8 vs sentence-transformers' int8: min cosine", st["cosine_int8_vs_ours_int8"],
                           0.99, unit="")]
    publish(envelope("benchmarks.bench_embed_export", argv if argv is not None else sys.argv[1:], result, targets,
                     started=started), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
