"""`albertlm export`: one directory to an ONNX graph, a sentence-transformers directory or a Triton repository.

    --format onnx DIR OUT.onnx              the graph alone (OUT ends in .onnx)
    --format onnx DIR OUT                   OUT/model.onnx with DIR's tokenizer files beside it
    --format sentence-transformers DIR OUT  st_directory.write_sentence_transformers; --onnx adds onnx/model.onnx
    --format triton DIR OUT                 OUT/NAME/config.pbtxt, OUT/NAME/1/model.onnx and the tokenizer files
                                            in OUT/NAME/1/ (interop/triton.py)

Which graph (`graph_module`): with --pooling, or from a sentence-transformers DIR (its own pooling
and Normalize), the embedding graph: `pooling.SentenceEmbedder` as `albertlm embed` loads it, the
pooling over the non-padding tokens (from attention_mask) and the optional L2 normalisation inside,
one `sentence_embedding` [batch, hidden] output. Otherwise the directory's task graph, its outputs
those of `interop.onnx.ONNX_OUTPUTS`. Either is written by `interop.onnx.export_onnx` (each shared
tensor once, checked) and, with --int8, replaced by onnxruntime's int8 quantization of it.

Every output is checked before it is touched, and the graph is exported into a scratch directory
beside it first: a failed export leaves OUT as it was. Output directories are `outputs.OutputDir`s
(new, empty, or an earlier export); in a Triton repository that is the model's own directory, so
the repository may hold other models.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from torch import nn

from albertlm.errors import AlbertlmError
from albertlm.utils import atomic_write_text, check_field_types

GRAPH_FILE = "model.onnx"
"""The graph's name inside an output directory."""


@dataclass(frozen=True)
class ExportSettings:
    """What `albertlm export` writes."""

    format: Literal["onnx", "sentence-transformers", "triton"] = "onnx"
    """onnx: one graph (OUT.onnx alone, or a directory OUT with model.onnx and the tokenizer); sentence-transformers:
    a directory SentenceTransformer(OUT) loads; triton: a Triton model repository OUT (OUT/NAME/config.pbtxt,
    OUT/NAME/1/model.onnx)"""
    pooling: Literal["cls", "pooler", "mean", "max"] | None = None
    """export sentence vectors: the backbone with this pooling over the non-padding tokens (and --normalize) inside
    the graph, one [batch, hidden] output; unset: the directory's task graph, or a sentence-transformers directory's
    own pooling (sentence-transformers format: the directory's own, else mean)"""
    normalize: bool | None = None
    """with a pooling: scale each vector to unit L2 length inside the graph; unset: a sentence-transformers
    directory's own choice, else off"""
    int8: bool = False
    """write onnxruntime's dynamic int8 quantization of the graph instead of fp32 (sentence-transformers: with
    --onnx, onnx/model_qint8.onnx beside the fp32 onnx/model.onnx; docs/benchmarks.md has its accuracy and speed)"""
    exporter: Literal["dynamo", "legacy"] = "dynamo"
    """torch.onnx.export's current exporter (torch.export based) or the TorchScript one, ~20x faster to run"""
    onnx: bool = False
    """sentence-transformers: also write onnx/model.onnx (the token vectors, what SentenceTransformer(OUT,
    backend="onnx") runs before its Pooling)"""
    max_seq_length: int | None = None
    """sentence-transformers: tokens per text, [CLS] and [SEP] included; unset: a sentence-transformers
    directory's own, else the model's max_position_embeddings, at most 512"""
    model_name: str | None = None
    """triton: the model's name, its directory OUT/NAME (unset: DIR's own name)"""
    max_batch_size: int | None = None
    """triton: the largest batch Triton forms (unset: 64)"""
    max_queue_delay_us: int | None = None
    """triton: microseconds a request waits for others to join its batch (unset: 5000, albertlm serve's 5 ms)"""

    def __post_init__(self) -> None:
        check_field_types(self)
        only = {"sentence-transformers": ("onnx", "max_seq_length"),
                "triton": ("model_name", "max_batch_size", "max_queue_delay_us")}
        for fmt, names in only.items():
            given = [n for n in names if getattr(self, n) is not None and getattr(self, n) is not False]
            if self.format != fmt and given:
                raise AlbertlmError(f"--{given[0].replace('_', '-')} applies to --format {fmt}")
        if self.format == "sentence-transformers" and self.pooling == "pooler":
            raise AlbertlmError("--pooling pooler (ALBERT's tanh pooler) has no sentence-transformers module; "
                                "choose cls, mean or max")
        if self.format == "sentence-transformers" and self.int8 and not self.onnx:
            raise AlbertlmError("--int8 applies to the ONNX graph: add --onnx")
        for name, low in (("max_batch_size", 1), ("max_queue_delay_us", 0), ("max_seq_length", 2)):
            value = getattr(self, name)
            if value is not None and value < low:
                raise AlbertlmError(f"--{name.replace('_', '-')} must be at least {low}, got {value}")
        if self.model_name is not None:
            from albertlm.interop.triton import check_model_name

            check_model_name(self.model_name)

    @property
    def dynamo(self) -> bool:
        return self.exporter == "dynamo"


@dataclass
class Graph:
    """The module to export and where it came from."""

    module: nn.Module
    """A SentenceEmbedder or a class of interop.onnx.ONNX_OUTPUTS, fp32, on the CPU, in eval mode."""
    what: str
    """For the record: the architecture, or the pooling."""
    source: Path
    vocabulary: object | None = None
    """The tokenizer, where loading the graph loaded it (the embedding graphs)."""

    def tokenizer(self):
        """The tokenizer of the source directory (checked against its vocab_size)."""
        if self.vocabulary is None:
            from albertlm.inference.load import load_tokenizer

            self.vocabulary = load_tokenizer(self.source)
        return self.vocabulary


def graph_module(model_dir: str | os.PathLike, settings: ExportSettings) -> Graph:
    """The module a graph export writes: the embedding graph or the directory's task graph (module docstring).

    Raises:
        AlbertlmError: one line: not a model directory, a class the export lacks, --normalize without a pooling.
    """
    from albertlm.inference.load import load_module, read_architecture
    from albertlm.interop.onnx import ONNX_OUTPUTS
    from albertlm.st_directory import is_sentence_transformers

    path = Path(model_dir)
    if not path.is_dir():
        raise AlbertlmError(f"{path}: not a model directory")
    if settings.pooling is not None or is_sentence_transformers(path):
        from albertlm.inference.embed import EmbedSettings, load_embedder

        embedder = load_embedder(path, EmbedSettings(pooling=settings.pooling, normalize=settings.normalize,
                                                     device="cpu", progress=False))
        what = f"{embedder.pooling} pooling{', normalised' if embedder.normalize else ''}"
        return Graph(embedder.model.eval(), what, path, embedder.vocabulary)
    if settings.normalize is not None:
        raise AlbertlmError("--normalize applies to a sentence-embedding graph: add --pooling MODE")
    arch, config = read_architecture(path)
    if arch not in ONNX_OUTPUTS:
        raise AlbertlmError(f"{path}: holds an {arch}; the export takes one of {', '.join(ONNX_OUTPUTS)}, or any "
                            "ALBERT directory with --pooling MODE (a sentence-embedding graph)")
    # the plain class (exit heads are albertlm's own); a head its weights lack is refused, not exported random
    return Graph(load_module(path, arch, config, exit_heads=False).eval(), arch, path)


def write_graph(module: nn.Module, path: Path, settings: ExportSettings) -> dict:
    """`export_onnx` to `path`, or with --int8 its int8 quantization (the fp32 file in a scratch directory).

    Returns:
        export_onnx's report, with "quantized_matmuls" under int8.
    """
    from albertlm.interop.onnx import export_onnx, quantize_onnx_int8, scratch_beside

    if not settings.int8:
        return export_onnx(module, path, dynamo=settings.dynamo)
    with scratch_beside(path) as tmp:
        report = export_onnx(module, tmp / "fp32.onnx", dynamo=settings.dynamo)
        report.update(quantize_onnx_int8(tmp / "fp32.onnx", path))
    return report


def export_model(model_dir: str | os.PathLike, out: str | os.PathLike,
                 settings: ExportSettings = ExportSettings()) -> dict:
    """Export a directory in `settings.format` (module docstring).

    Args:
        model_dir: any ALBERT directory albertlm reads (a task graph needs a pretrained or fine-tuned head).
        out: the file or directory to write.
        settings: the format and its options.
    Returns:
        {"format", "out", "what", "files"} and the graph's export report ("outputs", "ratio", ...; for
        sentence-transformers without --onnx, none).
    Raises:
        AlbertlmError: one line for a refused input, output or option.
    """
    from albertlm.outputs import check_not_input

    out = Path(out)
    if not Path(model_dir).is_dir():
        raise AlbertlmError(f"{model_dir}: not a model directory")
    if not out.parent.is_dir():
        raise AlbertlmError(f"{out}: its directory does not exist")
    check_not_input(out, "OUT", {"DIR": model_dir})
    if settings.format == "sentence-transformers":
        return _export_sentence_transformers(Path(model_dir), out, settings)
    if settings.format == "triton":
        return _export_triton(Path(model_dir), out, settings)
    if out.suffix.lower() == ".onnx":
        if out.is_dir():
            raise AlbertlmError(f"{out}: is a directory")
        graph = graph_module(model_dir, settings)
        report = write_graph(graph.module, out, settings)
        return {"format": "onnx", "out": str(out), "what": graph.what, "files": [out.name], **report}
    return _export_onnx_directory(Path(model_dir), out, settings)


def _export_onnx_directory(model_dir: Path, out: Path, settings: ExportSettings) -> dict:
    """OUT/model.onnx and the tokenizer files."""
    from albertlm.interop.onnx import put_in_place, scratch_beside
    from albertlm.outputs import OutputDir
    from albertlm.tokenizer import TOKENIZER_FILES

    target = OutputDir(out, "export", (GRAPH_FILE, *TOKENIZER_FILES), flag="OUT", inputs={"DIR": model_dir})
    graph = graph_module(model_dir, settings)
    vocabulary = graph.tokenizer()
    with scratch_beside(out) as tmp:
        report = write_graph(graph.module, tmp / GRAPH_FILE, settings)
        with target.claim():
            target.empty()
            vocabulary.save(out)
            put_in_place(tmp / GRAPH_FILE, out / GRAPH_FILE)
    return {"format": "onnx", "out": str(out), "what": graph.what, "files": _listing(out), **report}


def _export_triton(model_dir: Path, out: Path, settings: ExportSettings) -> dict:
    """OUT/NAME/config.pbtxt, OUT/NAME/1/model.onnx and the tokenizer files in OUT/NAME/1/."""
    from albertlm.interop import triton
    from albertlm.interop.onnx import put_in_place, scratch_beside
    from albertlm.outputs import OutputDir

    if out.exists() and not out.is_dir():
        raise AlbertlmError(f"{out}: exists and is not a directory (a Triton repository is one)")
    name = triton.check_model_name(settings.model_name or model_dir.resolve().name)
    model_out, graph_path = triton.model_paths(out, name)
    target = OutputDir(model_out, "export", (triton.CONFIG_FILE, triton.VERSION), flag="OUT",
                       inputs={"DIR": model_dir})
    graph = graph_module(model_dir, settings)
    vocabulary = graph.tokenizer()
    with scratch_beside(out) as tmp:
        report = write_graph(graph.module, tmp / GRAPH_FILE, settings)
        inputs, outputs = triton.graph_signature(tmp / GRAPH_FILE)
        config = triton.triton_config(
            name, inputs, outputs,
            max_batch_size=settings.max_batch_size or triton.MAX_BATCH_SIZE,
            max_queue_delay_us=(triton.MAX_QUEUE_DELAY_US if settings.max_queue_delay_us is None
                                else settings.max_queue_delay_us))
        with target.claim():
            target.empty()
            graph_path.parent.mkdir()
            put_in_place(tmp / GRAPH_FILE, graph_path)
            vocabulary.save(graph_path.parent)
            atomic_write_text(model_out / triton.CONFIG_FILE, config)  # last: it makes the directory a model
    files = [f"{triton.VERSION}/{f}" for f in _listing(graph_path.parent)] + [triton.CONFIG_FILE]
    return {"format": "triton", "out": str(model_out), "what": graph.what, "model_name": name, "files": files,
            **report}


def _export_sentence_transformers(model_dir: Path, out: Path, settings: ExportSettings) -> dict:
    """`write_sentence_transformers` with the pooling, normalisation and length `albertlm embed` would use."""
    from albertlm.inference.embed import EmbedSettings, embed_choice
    from albertlm.st_directory import write_sentence_transformers

    # the unset choices from DIR (a sentence-transformers DIR's own) as embed resolves them, weights unread
    choice = embed_choice(model_dir, EmbedSettings(pooling=settings.pooling, normalize=settings.normalize,
                                                   max_seq_length=settings.max_seq_length, device="cpu",
                                                   progress=False))
    report = write_sentence_transformers(model_dir, out, choice.pooling, choice.normalize, choice.max_seq_length,
                                         onnx=settings.onnx, int8=settings.int8, dynamo=settings.dynamo)
    graph = report.pop("onnx") or {}
    what = f"{choice.pooling} pooling{', normalised' if choice.normalize else ''}"
    return {"format": "sentence-transformers", "out": str(out), "what": what, **report, **graph}


def _listing(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if not p.name.startswith("."))
