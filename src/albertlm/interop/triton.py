"""Triton Inference Server model repositories around an exported ONNX graph: the layout and config.pbtxt.

A repository holds one directory per model; albertlm writes one of them:

    OUT/NAME/config.pbtxt          platform onnxruntime_onnx, the graph's inputs and outputs, max_batch_size,
                                   dynamic_batching
    OUT/NAME/1/model.onnx          the graph (`interop.onnx.export_onnx`, fp32 or int8), version 1
    OUT/NAME/1/<tokenizer files>   spiece.model | vocab.txt | tokenizer.json, tokenizer_config.json: Triton
                                   ignores them; a client tokenizes with them (the ids the graph takes)

config.pbtxt is read from the written graph itself (`graph_signature`): each input and output with
its name, data type and dims, where a symbolic axis is -1 and the batch axis is left out, as Triton
wants with max_batch_size > 0. A graph whose first axis is not symbolic cannot be batched by Triton
and is refused. onnx is optional (pip install 'albertlm[onnx]'), imported on use.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from albertlm.errors import AlbertlmError
from albertlm.interop.onnx import require

CONFIG_FILE = "config.pbtxt"
VERSION = "1"
"""The one version directory written."""
GRAPH_FILE = "model.onnx"
"""The file name Triton's onnxruntime backend loads from a version directory."""
PLATFORM = "onnxruntime_onnx"
MAX_BATCH_SIZE = 64
"""Inputs per batch Triton may form (albertlm predict's default batch size)."""
MAX_QUEUE_DELAY_US = 5000
"""How long a request may wait for others to join its batch: albertlm serve's --max-wait-ms default, 5 ms."""
MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
"""Model names written: a directory name Triton and a URL path take as they are."""
_TRITON_TYPES = {1: "TYPE_FP32", 7: "TYPE_INT64", 6: "TYPE_INT32", 10: "TYPE_FP16", 16: "TYPE_BF16", 9: "TYPE_BOOL"}
"""onnx TensorProto element type -> Triton data type (those an exported graph can hold)."""


@dataclass(frozen=True)
class Tensor:
    """One input or output of a graph, as config.pbtxt describes it."""

    name: str
    data_type: str
    """Triton's name for the element type, e.g. TYPE_INT64."""
    dims: tuple[int, ...]
    """Every axis but the batch one: its size, or -1 where the graph leaves it symbolic."""


def graph_signature(path: str | os.PathLike) -> tuple[list[Tensor], list[Tensor]]:
    """The inputs and outputs of an ONNX file, batch axis dropped.

    Args:
        path: the .onnx file.
    Returns:
        (inputs, outputs), in the graph's order.
    Raises:
        AlbertlmError: a tensor without a shape, of an element type Triton lacks, or whose first axis
            is fixed (Triton batches along it).
    """
    onnx = require("onnx")
    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {t.name for t in graph.initializer}
    tensors = ([v for v in graph.input if v.name not in initializers], list(graph.output))
    return tuple([_tensor(path, v) for v in group] for group in tensors)


def _tensor(path, value) -> Tensor:
    kind = value.type.tensor_type
    if value.type.WhichOneof("value") != "tensor_type" or not kind.HasField("shape") or not kind.shape.dim:
        raise AlbertlmError(f"{path}: {value.name} has no tensor shape; Triton needs one for config.pbtxt")
    if kind.elem_type not in _TRITON_TYPES:
        raise AlbertlmError(f"{path}: {value.name} has ONNX element type {kind.elem_type}, which albertlm does not "
                            "map to a Triton type")
    dims = [-1 if d.HasField("dim_param") or not d.HasField("dim_value") else d.dim_value for d in kind.shape.dim]
    if dims[0] != -1:
        raise AlbertlmError(f"{path}: {value.name}'s first axis is fixed at {dims[0]}; Triton batches along it")
    return Tensor(value.name, _TRITON_TYPES[kind.elem_type], tuple(dims[1:]))


def triton_config(name: str, inputs: list[Tensor], outputs: list[Tensor], *, max_batch_size: int = MAX_BATCH_SIZE,
                  max_queue_delay_us: int = MAX_QUEUE_DELAY_US) -> str:
    """config.pbtxt (protobuf text format) for an ONNX graph served by onnxruntime with dynamic batching.

    Args:
        name: the model's name (its directory in the repository).
        inputs, outputs: `graph_signature` of the graph.
        max_batch_size: the largest batch Triton forms (>= 1).
        max_queue_delay_us: the longest a request waits for a batch to fill, in microseconds (>= 0).
    Returns:
        The file's text.
    """
    def block(label: str, tensors: list[Tensor]) -> list[str]:
        rows = [f'  {{ name: "{t.name}" data_type: {t.data_type} dims: [ {", ".join(map(str, t.dims))} ] }}'
                for t in tensors]
        return [f"{label} ["] + [r + ("," if i < len(rows) - 1 else "") for i, r in enumerate(rows)] + ["]"]

    lines = [f'name: "{name}"', f'platform: "{PLATFORM}"', f"max_batch_size: {max_batch_size}",
             *block("input", inputs), *block("output", outputs),
             "dynamic_batching {", f"  max_queue_delay_microseconds: {max_queue_delay_us}", "}"]
    return "\n".join(lines) + "\n"


def check_model_name(name: str) -> str:
    """A model name Triton takes as a directory and in its URLs, or one line saying what is wrong."""
    if not MODEL_NAME.fullmatch(name):
        raise AlbertlmError(f"--model-name {name!r}: use letters, digits, '_', '-' and '.' (not first), e.g. "
                            "albert-sst2")
    return name


def model_paths(repository: str | os.PathLike, name: str) -> tuple[Path, Path]:
    """(the model's directory, its graph file) inside a repository."""
    model_dir = Path(repository) / name
    return model_dir, model_dir / VERSION / GRAPH_FILE
