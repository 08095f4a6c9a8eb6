"""onnxruntime as an inference backend: an exported file (`albertlm export`) behind the model's call.

The export itself (and the contract of the file's inputs and outputs, `ONNX_OUTPUTS`) is
`albertlm.interop.onnx`; onnxruntime is optional (pip install 'albertlm[onnx]') and imported on use.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from albertlm.errors import AlbertlmError
from albertlm.interop.onnx import require


class OnnxModel(nn.Module):
    """An exported file run by onnxruntime behind the model's call signature: called with torch
    tensors input_ids / attention_mask / token_type_ids, it returns an object whose attributes are
    the file's outputs as torch tensors, so the task scoring code runs it like the torch model."""

    def __init__(self, path: str | os.PathLike, threads: int = 1):
        super().__init__()
        ort = require("onnxruntime")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types, one per failure kind
            raise AlbertlmError(f"{path}: onnxruntime cannot load it ({str(exc).splitlines()[0]})") from None
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None):
        """Inputs [B, S] (multiple choice [B, C, S]) -> a namespace of the outputs (ONNX_OUTPUTS)."""
        from types import SimpleNamespace

        given = {"input_ids": input_ids,
                 "attention_mask": torch.ones_like(input_ids) if attention_mask is None else attention_mask,
                 "token_type_ids": torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids}
        feed = {name: given[name].detach().cpu().numpy().astype("int64") for name in self.input_names}
        values = self.session.run(self.output_names, feed)
        return SimpleNamespace(**{n: torch.from_numpy(v) for n, v in zip(self.output_names, values)})
