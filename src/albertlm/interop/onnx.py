"""ONNX export of every albertlm model class, holding each shared tensor once; onnxruntime int8.

Running an exported file is `albertlm.inference.onnx_backend`.

The table below is the contract of the exported file: per architecture (config.json's
`architectures` entry), the graph's outputs, with the inputs common to all

    inputs   input_ids, attention_mask, token_type_ids    int64 [batch, sequence]
                                                           (multiple choice: [batch, choices, sequence])
    outputs  see ONNX_OUTPUTS; every axis but the label/vocabulary one is dynamic.

The embedding graphs (EMBEDDING_OUTPUTS) take the same inputs: a bare backbone gives its token
vectors (what sentence-transformers' ONNX backend reads, pooling in its own module), and
`albertlm.pooling.SentenceEmbedder` gives one pooled, optionally normalised vector per sequence.
Both modules are built above this floor and handed in; they are matched here by class name.

ALBERT reuses one block for every layer and ties the MLM decoder to the word table. Exporters that
fold constants turn each use of a weight into a constant of its own: the current exporter
(torch.export based) folds the transpose of a Linear weight once per layer application, so a
12-layer shared model is written with 12 copies of every encoder matrix, and the older
TorchScript exporter writes the tied decoder a second time as the transposed word table. The
export therefore runs without constant folding, and `fold_weight_transposes` then transposes
each Linear weight once, in the file, for every application to share: the file holds each
parameter once (checked after every export), and onnxruntime's quantizer sees the weights as
MatMul initializers and quantizes each shared matrix once.

onnx and onnxruntime are optional (pip install 'albertlm[onnx]'); they are imported on use.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

from albertlm.errors import AlbertlmError
from albertlm.utils import atomic_path, os_error_naming

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
ONNX_OUTPUTS: dict[str, tuple[str, ...]] = {
    "AlbertForPreTraining": ("prediction_logits", "sop_logits"),  # [B, S, V], [B, 2]
    "AlbertForSequenceClassification": ("logits",),  # [B, num_labels]
    "AlbertForTokenClassification": ("logits",),  # [B, S, num_labels]
    "AlbertForQuestionAnswering": ("start_logits", "end_logits"),  # [B, S] each
    "AlbertForMultipleChoice": ("logits",),  # [B, C]
}
EMBEDDING_OUTPUTS: dict[str, tuple[str, ...]] = {
    "AlbertModel": ("last_hidden_state",),  # [B, S, H]: the token vectors
    "SentenceEmbedder": ("sentence_embedding",),  # [B, H]: pooled over the non-padding tokens inside the graph
}
"""The embedding graphs: module class -> its outputs (never a directory's `architectures` entry)."""
SIZE_TOLERANCE = 1.05
"""The file's initializers may exceed the model's distinct parameter bytes by at most this factor."""
MISSING = "the ONNX export needs onnx, onnxscript and onnxruntime: pip install 'albertlm[onnx]'"


@contextlib.contextmanager
def scratch_beside(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary directory beside `path`, removed afterwards. An OSError creating it or writing
    in it (a read-only or full disk) names `path`, the file the user asked for, rather than the
    temporary's random name or nothing (the exporters' writes name no file)."""
    path = Path(path)
    try:
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.") as name:
            yield Path(name)
    except OSError as exc:
        inside = exc.filename is None or str(exc.filename).startswith(str(path.parent / f".{path.name}."))
        if exc.errno is None or not inside:
            raise
        raise os_error_naming(exc, path) from None


_NOISE_LOGGERS = ("torch.onnx._internal.exporter._registration", "")  # "": the root logger
_NOISE_LOGGED = (
    "torchvision is not installed",  # torch's exporter, per torchvision op it registers; ALBERT uses none
    "Please consider to run pre-processing before quantization",  # onnxruntime's quantizer, every run
)
"""What the exporters and onnxruntime's quantizer log on every run that asks nothing of the user.
The quantizer's advice (a shape-inference and graph-optimisation pre-pass) is for graphs whose
shapes it cannot infer; ours are checked by `onnx.checker`, and its int8 output is held to the
fp32 predictions by the tests."""


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_NOISE_LOGGED)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the known harmless lines (`_NOISE_LOGGED`, and two warnings of torch's exporter about
    itself: its internal pytree LeafSpec deprecation, and every input sharing the batch and sequence
    axes, as ours do by design) so an export prints only what the user must read."""
    drop = _DropNoise()
    loggers = [logging.getLogger(name) for name in _NOISE_LOGGERS]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"# The axis name: .* will not be used", category=UserWarning)
        warnings.filterwarnings("ignore", message=r".*LeafSpec.*", category=FutureWarning)
        for logger in loggers:
            logger.addFilter(drop)
        try:
            yield
        finally:
            for logger in loggers:
                logger.removeFilter(drop)


def require(module: str):
    """Import an optional ONNX package, or fail with one line saying how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise AlbertlmError(MISSING) from None


class _Exportable(nn.Module):
    """The model with positional inputs and a tuple of the table's outputs (what exporters trace)."""

    def __init__(self, model: nn.Module, outputs: tuple[str, ...]):
        super().__init__()
        self.model = model
        self.outputs = outputs

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        if isinstance(out, torch.Tensor):  # a module with one output (SentenceEmbedder)
            return (out,)
        return tuple(getattr(out, name) for name in self.outputs)


def example_inputs(model: nn.Module) -> tuple[torch.Tensor, ...]:
    """Inputs to trace with: batch 2 (choices 2), 8 tokens, the second row padded, so no axis is
    specialised to 1 and the padding mask is part of the graph."""
    S = min(8, model.config.max_position_embeddings)
    shape = (2, 2, S) if type(model).__name__ == "AlbertForMultipleChoice" else (2, S)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, model.config.vocab_size, shape, generator=gen)
    mask = torch.ones(shape, dtype=torch.long)
    mask[1, ..., S // 2:] = 0
    types = torch.zeros(shape, dtype=torch.long)
    types[..., S // 4:] = 1
    return ids, mask, types


def export_onnx(model: nn.Module, path: str | os.PathLike, *, dynamo: bool = True, opset: int = 18) -> dict:
    """Write `model` (fp32, CPU) to an ONNX file with dynamic batch, choice and sequence axes.

    Args:
        model: an albertlm model of a class in ONNX_OUTPUTS or EMBEDDING_OUTPUTS.
        path: the .onnx file to write (atomically; one file, no external data).
        dynamo: the current exporter (torch.export); False: the TorchScript one.
        opset: ONNX opset.
    Returns:
        {"architecture", "outputs", "initializer_bytes", "parameter_bytes", "ratio"}.
    Raises:
        AlbertlmError: an unknown class, a model that is not fp32 on the CPU, a missing package, or
            a file whose initializers exceed the parameters by more than SIZE_TOLERANCE.
    """
    onnx = require("onnx")
    if dynamo:
        require("onnxscript")
    arch = type(model).__name__
    graphs = {**ONNX_OUTPUTS, **EMBEDDING_OUTPUTS}
    if arch not in graphs:
        raise AlbertlmError(f"ONNX export takes one of {', '.join(graphs)}, not an {arch}")
    if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in model.parameters()):
        raise AlbertlmError("ONNX export takes an fp32 model on the CPU")
    outputs = graphs[arch]
    args = example_inputs(model)
    axes = ("batch", "choices", "sequence") if args[0].dim() == 3 else ("batch", "sequence")
    dims = {i: name for i, name in enumerate(axes)}
    kwargs = ({"dynamic_shapes": {name: dims for name in INPUTS}, "optimize": False} if dynamo else
              {"dynamic_axes": {name: dims for name in INPUTS}, "do_constant_folding": False})
    path = Path(path)
    with scratch_beside(path) as tmp:
        raw = tmp / "raw.onnx"
        with _quiet():
            torch.onnx.export(_Exportable(model, outputs).eval(), args, raw, dynamo=dynamo,
                              input_names=list(INPUTS), output_names=list(outputs), opset_version=opset,
                              external_data=False, verbose=False, **kwargs)
        graph = onnx.load(raw)
        for node in graph.graph.node:  # debugging annotations (each node's torch call stack): ~10% of
            del node.metadata_props[:]  # albert-mini's file, and nothing a runtime reads
        fold_weight_transposes(graph)
        onnx.checker.check_model(graph)
        report = {"architecture": arch, "outputs": list(outputs), "initializer_bytes": initializer_bytes(graph),
                  "parameter_bytes": parameter_bytes(model)}
        report["ratio"] = report["initializer_bytes"] / report["parameter_bytes"]
        if report["ratio"] > SIZE_TOLERANCE:  # checked before `path` is touched: an older file there stays
            raise AlbertlmError(f"ONNX export of {arch}: the file held {report['ratio']:.2f}x the parameter bytes; "
                                "a shared tensor was duplicated (nothing written)")
        final = tmp / "model.onnx"
        onnx.save(graph, final)
        put_in_place(final, path)
    return report


def put_in_place(finished: Path, path: Path) -> None:
    """Move a finished file to `path` through the atomic writer: the umask's mode, the file and its
    directory flushed, so a power cut leaves the old file or the new one."""
    with atomic_path(path) as tmp:
        os.replace(finished, tmp)


def parameter_bytes(model: nn.Module) -> int:
    """Bytes of the model's distinct parameters and buffers (shared and tied ones once)."""
    seen = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return sum(t.numel() * t.element_size() for t in seen.values())


def initializer_bytes(graph) -> int:
    """Bytes of every initializer of an onnx ModelProto (its stored tensors)."""
    from onnx import numpy_helper

    return sum(numpy_helper.to_array(t).nbytes for t in graph.graph.initializer)


def fold_weight_transposes(model) -> int:
    """Store each 2-D initializer that is only ever transposed in its transposed form, once.

    nn.Linear computes x @ W.T, which an export without constant folding writes as Transpose(W)
    then MatMul, one Transpose per layer application of a shared W. Replacing W by W.T and wiring
    every MatMul to it keeps one copy, and leaves the MatMuls' weights as initializers (what
    onnxruntime's quantizer looks for). An initializer with any other use (the word table, read by
    Gather and by the tied decoder's Transpose) keeps its layout and its Transpose.

    Args:
        model: an onnx ModelProto, changed in place.
    Returns:
        how many initializers were folded.
    """
    from onnx import numpy_helper

    graph = model.graph
    users: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            users.setdefault(name, []).append(node)
    graph_outputs = {o.name for o in graph.output}
    rename: dict[str, str] = {}
    drop: set[int] = set()
    for tensor in graph.initializer:
        nodes = users.get(tensor.name, [])
        if len(tensor.dims) != 2 or not nodes or not all(_is_plain_transpose(n) for n in nodes):
            continue
        if any(n.output[0] in graph_outputs for n in nodes):
            continue
        tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor).T.copy(), tensor.name))
        for n in nodes:
            rename[n.output[0]] = tensor.name
            drop.add(id(n))
    kept = [n for n in graph.node if id(n) not in drop]
    for node in kept:
        for i, name in enumerate(node.input):
            if name in rename:
                node.input[i] = rename[name]
    del graph.node[:]
    graph.node.extend(kept)
    folded = set(rename.values())
    stale = set(rename) | folded  # shapes recorded for the removed outputs and the old layouts
    for entries in (graph.value_info, graph.input):
        kept_infos = [v for v in entries if v.name not in stale]
        del entries[:]
        entries.extend(kept_infos)
    return len(folded)


def _is_plain_transpose(node) -> bool:
    """A Transpose that swaps the two axes of a matrix (no perm, or perm [1, 0])."""
    if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx"):
        return False
    perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
    return perm in (None, [1, 0])


def quantize_onnx_int8(src: str | os.PathLike, dst: str | os.PathLike) -> dict:
    """onnxruntime's dynamic int8 quantization of an exported file.

    MatMul weights become int8 with one scale per output column (per-channel), and the embedding
    tables int8 too (Gather); activations are quantized on the fly. Run on a file from
    `export_onnx`, whose shared weights are single MatMul initializers, each shared matrix is
    quantized once and every layer application reads the same int8 copy.

    Args:
        src: an fp32 file written by `export_onnx`.
        dst: the int8 file to write (atomically).
    Returns:
        {"initializer_bytes", "quantized_matmuls"}.
    """
    onnx = require("onnx")
    quantization = require("onnxruntime.quantization")
    dst = Path(dst)
    with scratch_beside(dst) as tmp:
        out = tmp / "int8.onnx"
        with _quiet():
            quantization.quantize_dynamic(Path(src), out, weight_type=quantization.QuantType.QInt8,
                                          per_channel=True, op_types_to_quantize=["MatMul", "Gather"])
        graph = onnx.load(out)
        put_in_place(out, dst)
    return {"initializer_bytes": initializer_bytes(graph),
            "quantized_matmuls": sum(n.op_type == "MatMulInteger" for n in graph.graph.node)}
