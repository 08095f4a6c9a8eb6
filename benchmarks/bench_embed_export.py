"""Size and agreement of the sentence-embedding ONNX export against a plain export of the same weights.

  - ours: `albertlm export --pooling mean` as a library call (pooling.SentenceEmbedder through
    interop.onnx.export_onnx: the shared block stored once, the pooling over the non-padding tokens
    inside the graph), fp32 and its onnxruntime int8 (interop.onnx.quantize_onnx_int8);
  - plain: what a user gets without albertlm. sentence-transformers writes onnx/model.onnx through
    optimum; when `optimum` is not importable (recorded in the JSON), the stand-in is transformers'
    AlbertModel with the same weights through torch.onnx.export with its defaults (constant folding
    on), once per --plain-exporters entry: each folded use of a shared weight becomes a constant of
    its own, so the shared layer is stored per layer. Its token vectors are mean-pooled over the mask
    here (as sentence-transformers' Pooling does); int8 by the same quantizer call as ours.

Per file: bytes on disk, initializer bytes, and their ratio to the model's distinct parameter bytes;
cosines of the pooled vectors: ours fp32 and int8 against PyTorch (SentenceEmbedder), ours against
plain (fp32 with fp32, int8 with int8). Weights are random (fixed seed, every tensor drawn, so no two
tensors are equal and no exporter can merge them by value), inputs random ids with padded rows.

The default model is tiny (runs in about a minute on one core); --base-shaped sets six all-shared
layers of albert-base's shape (H=768, E=128, 12 heads, FFN 3072, V=30000).

    python -m benchmarks.bench_embed_export                      # tiny, JSON on stdout
    python -m benchmarks.bench_embed_export --base-shaped --out result.json

Prints the result in the harness's envelope as JSON (and writes it to --out); the targets carry their
verdicts.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from albertlm.config import AlbertConfig
from albertlm.interop.onnx import export_onnx, initializer_bytes, parameter_bytes, quantize_onnx_int8
from albertlm.model import AlbertModel
from albertlm.pooling import SentenceEmbedder
from benchmarks.harness import Target, envelope, publish

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
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, help="also write the JSON here")
    args = p.parse_args(argv)
    if args.base_shaped:
        for key, value in BASE_SHAPED.items():
            setattr(args, key, value)
    return args


def random_backbone(args: argparse.Namespace) -> AlbertModel:
    """An all-shared AlbertModel (no pooler: mean pooling does not use it), every tensor drawn at random."""
    config = AlbertConfig(vocab_size=args.vocab, embedding_size=args.embedding, hidden_size=args.hidden,
                          num_hidden_layers=args.layers, num_attention_heads=args.heads,
                          intermediate_size=args.intermediate, max_position_embeddings=max(512, args.length))
    model = AlbertModel(config, add_pooling_layer=False)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                base = 1.0 if isinstance(module, torch.nn.LayerNorm) and name == "weight" else 0.0
                p.copy_(base + 0.05 * torch.randn(p.shape, generator=gen))
    return model.eval()


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


def run(path: Path, feed: dict[str, np.ndarray], threads: int) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: feed[i.name] for i in session.get_inputs()})[0]


def mean_pool(tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    keep = mask[..., None].astype(tokens.dtype)  # [B, S, 1]
    return (tokens * keep).sum(1) / np.maximum(keep.sum(1), 1.0)  # [B, H]


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))).min())


def sizes(path: Path, distinct: int) -> dict:
    import onnx

    stored = initializer_bytes(onnx.load(path))
    return {"file_bytes": path.stat().st_size, "initializer_bytes": stored, "ratio": round(stored / distinct, 4)}


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
    result["plain_is"] = ("optimum is importable, but the stand-in is still torch.onnx.export of transformers' "
                          "AlbertModel" if result["optimum"] else
                          "optimum is not installed: torch.onnx.export of transformers' AlbertModel, its defaults")
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
        for exporter in args.plain_exporters:
            fp32, int8 = tmp / f"plain-{exporter}.onnx", tmp / f"plain-{exporter}-int8.onnx"
            plain_export(backbone, fp32, tmp, exporter)
            quantize_onnx_int8(fp32, int8)
            row = {"fp32": sizes(fp32, distinct), "int8": sizes(int8, distinct)}
            for kind, path in (("fp32", fp32), ("int8", int8)):
                vectors = mean_pool(run(path, feed, args.threads), feed["attention_mask"])
                row[f"cosine_{kind}_vs_ours_{kind}"] = min_cosine(vectors, ours[kind])
                row[f"file_bytes_over_ours_{kind}"] = round(row[kind]["file_bytes"] / result["ours"][kind]
                                                            ["file_bytes"], 3)
            result["plain"][exporter] = row
    targets = [Target("ours fp32: initializers / distinct parameter bytes", result["ours"]["fp32"]["ratio"], 1.05,
                      higher_is_better=False),
               Target("ours fp32 vs PyTorch: min cosine", result["cosine"]["ours_fp32_vs_torch"], 0.9999, unit=""),
               Target("ours int8 vs PyTorch: min cosine", result["cosine"]["ours_int8_vs_torch"], 0.99, unit="")]
    publish(envelope("benchmarks.bench_embed_export", argv if argv is not None else sys.argv[1:], result, targets,
                     started=started), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
