"""The settings of `albertlm serve`: where it listens, how the model runs, how requests are batched and
bounded. A plain dataclass (no server packages imported), so `albertlm serve --help` works without them."""

from __future__ import annotations

import typing
from dataclasses import asdict, dataclass, field
from typing import Literal

from albertlm.errors import AlbertlmError
from albertlm.inference.embed import EmbedSettings
from albertlm.inference.exit import DEFAULT_REGRESSION_THRESHOLD
from albertlm.utils import check_field_types

Pooling = typing.get_type_hints(EmbedSettings)["pooling"]
"""The pooling modes `albertlm embed --pooling` takes (or None: the directory's own)."""


@dataclass(frozen=True)
class ServeSettings:
    """How `albertlm serve` listens, runs the model and bounds its work."""

    host: str = "127.0.0.1"
    """Address to listen on (loopback only unless given, e.g. 0.0.0.0 for every interface)."""
    port: int = 8080
    """TCP port; 0 picks a free one (the address is printed on stderr)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the model runs."""
    int8: bool = False
    """CPU only: run a copy with dynamic int8 Linear layers (see docs/serving.md on batches and int8)."""
    int8_backend: Literal["fbgemm", "torchao"] = "fbgemm"
    """int8 kernels, as `albertlm predict --int8-backend`."""
    onnx: str | None = field(default=None, metadata={"metavar": "FILE"})
    """Answer /predict with this exported graph (`albertlm export --format onnx DIR FILE`) run by onnxruntime on
    the CPU; DIR still gives the tokenizer, labels and input settings (embeddings still run DIR's weights)."""
    pooling: Pooling = None
    """Embedding routes: cls, pooler, mean or max over the last layer, as `albertlm embed --pooling`; unset: a
    sentence-transformers directory's own, else mean."""
    normalize: bool | None = None
    """Embedding routes: unit-length vectors for requests that do not say (`normalize` in the body); unset: a
    sentence-transformers directory's own choice, else off, as `albertlm embed`."""
    patience: int | None = None
    """Early exit (a model fine-tuned with --early-exit): stop each input once its prediction has held for this
    many layers; none runs every layer."""
    regression_threshold: float = DEFAULT_REGRESSION_THRESHOLD
    """With --patience, a regression output moving less than this counts as unchanged."""
    api_key: str | None = None
    """Require `Authorization: Bearer KEY` on every route but /health."""
    max_batch_tokens: int = 8192
    """Merge concurrent requests into one model batch of at most this many tokens (a /predict input counts its
    pieces plus 3, an embedding input its tokens as embedded); a request larger than that runs alone."""
    max_wait_ms: float = 5.0
    """How long a batch that is not full waits for requests already arriving (being read); a lone request on an
    idle server never waits."""
    max_queue: int = 256
    """Requests waiting for the model at most; more are refused with 429."""
    max_inputs: int = 64
    """Inputs in one request at most; more are refused with 413."""
    max_body_bytes: int = 1_048_576
    """Bytes in one request body at most; more are refused with 413."""
    keep_alive_s: int = 30
    """Seconds an idle keep-alive connection stays open for the client's next request. A request sent as
    the server closes the connection is lost on the way (the race of every HTTP keep-alive), so this must
    outlast a busy client's gap between two requests; uvicorn's own default is 5."""

    def __post_init__(self) -> None:
        from albertlm.inference.exit import check_patience

        check_field_types(self)
        if not self.host:
            raise AlbertlmError("--host must not be empty")
        if not 0 <= self.port <= 65535:
            raise AlbertlmError(f"--port must lie in [0, 65535], got {self.port}")
        if self.api_key is not None and (not self.api_key or any(c.isspace() for c in self.api_key)):
            raise AlbertlmError("--api-key must be a non-empty key without spaces")
        for name in ("max_batch_tokens", "max_queue", "max_inputs", "max_body_bytes", "keep_alive_s"):
            if getattr(self, name) < 1:
                raise AlbertlmError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.max_wait_ms < 0:
            raise AlbertlmError(f"--max-wait-ms must not be negative, got {self.max_wait_ms:g}")
        if self.patience is not None:
            check_patience(self.patience)
        if self.regression_threshold < 0:
            raise AlbertlmError(f"--regression-threshold must not be negative, got {self.regression_threshold:g}")
        if self.int8 and self.device == "cuda":
            raise AlbertlmError("--int8 runs on the CPU; drop --device cuda")
        if self.onnx is not None:
            self._check_onnx()

    def _check_onnx(self) -> None:
        """--onnx runs the exported graph on the CPU, as exported: the flags that change the torch model refused."""
        if not self.onnx:
            raise AlbertlmError("--onnx must name a file (albertlm export --format onnx DIR FILE writes one)")
        if self.int8:
            raise AlbertlmError("--onnx runs the graph as exported; drop --int8 (albertlm export --int8 writes an "
                                "int8 graph)")
        if self.patience is not None:
            raise AlbertlmError("--patience runs the torch model's exit heads and an ONNX file holds the plain head "
                                "only; drop --patience or --onnx")
        if self.device == "cuda":
            raise AlbertlmError("--onnx runs on the CPU (onnxruntime); drop --device cuda")

    def limits(self) -> dict[str, float]:
        """The batching and request limits, as /info shows them."""
        keys = ("max_batch_tokens", "max_wait_ms", "max_queue", "max_inputs", "max_body_bytes", "keep_alive_s")
        return {k: v for k, v in asdict(self).items() if k in keys}
