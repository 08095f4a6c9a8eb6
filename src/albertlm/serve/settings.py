"""The settings of `albertlm serve`: where it listens, how the model runs, how requests are batched and
bounded. A plain dataclass (no server packages imported), so `albertlm serve --help` works without them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from albertlm.inference.exit import DEFAULT_REGRESSION_THRESHOLD
from albertlm.errors import AlbertlmError
from albertlm.utils import check_field_types


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
    patience: int | None = None
    """Early exit (a model fine-tuned with --early-exit): stop each input once its prediction has held for this
    many layers; none runs every layer."""
    regression_threshold: float = DEFAULT_REGRESSION_THRESHOLD
    """With --patience, a regression output moving less than this counts as unchanged."""
    api_key: str | None = None
    """Require `Authorization: Bearer KEY` on every route but /health."""
    max_batch_tokens: int = 8192
    """Merge concurrent requests into one model batch of at most this many tokens (an input counts its pieces
    plus 3); a request larger than that runs alone."""
    max_wait_ms: float = 5.0
    """How long the first request of a batch waits for others to join it."""
    max_queue: int = 256
    """Requests waiting for the model at most; more are refused with 429."""
    max_inputs: int = 64
    """Inputs in one request at most; more are refused with 413."""
    max_body_bytes: int = 1_048_576
    """Bytes in one request body at most; more are refused with 413."""

    def __post_init__(self) -> None:
        from albertlm.inference.exit import check_patience

        check_field_types(self)
        if not self.host:
            raise AlbertlmError("--host must not be empty")
        if not 0 <= self.port <= 65535:
            raise AlbertlmError(f"--port must lie in [0, 65535], got {self.port}")
        if self.api_key is not None and (not self.api_key or any(c.isspace() for c in self.api_key)):
            raise AlbertlmError("--api-key must be a non-empty key without spaces")
        for name in ("max_batch_tokens", "max_queue", "max_inputs", "max_body_bytes"):
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

    def limits(self) -> dict[str, float]:
        """The batching and request limits, as /info shows them."""
        keys = ("max_batch_tokens", "max_wait_ms", "max_queue", "max_inputs", "max_body_bytes")
        return {k: v for k, v in asdict(self).items() if k in keys}
