"""The server's Prometheus metrics (`GET /metrics`), in a registry of its own per app.

    albertlm_requests_total{route, code}     requests answered, by route and status code
    albertlm_request_seconds{route}          latency from the request's arrival to its answer
    albertlm_batch_requests, _batch_inputs   requests and inputs merged into each model batch
    albertlm_batch_tokens                    tokens of each batch (pieces plus 3 per input)
    albertlm_batch_seconds                   time the model took per batch
    albertlm_queue_depth                     requests waiting for the model now
    albertlm_requests_arriving               requests being read and checked, not yet queued (a batch
                                             that is not full waits for them)
    albertlm_early_exit_layers               layers each input ran under early exit (--patience)
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "ServeMetrics"]

_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_TOKENS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ServeMetrics:
    """The counters, gauge and histograms of one server.

    Args:
        layers: the model's depth in layer calls, for the early-exit histogram's buckets.
    """

    def __init__(self, layers: int):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("albertlm_requests", "Requests answered, by route and status code",
                                ["route", "code"], registry=r)
        self.latency = Histogram("albertlm_request_seconds", "Seconds from a request's arrival to its answer",
                                 ["route"], buckets=_SECONDS, registry=r)
        self.batch_requests = Histogram("albertlm_batch_requests", "Requests merged into one model batch",
                                        buckets=_SIZES, registry=r)
        self.batch_inputs = Histogram("albertlm_batch_inputs", "Inputs in one model batch", buckets=_SIZES, registry=r)
        self.batch_tokens = Histogram("albertlm_batch_tokens", "Tokens in one model batch (pieces plus 3 per input)",
                                      buckets=_TOKENS, registry=r)
        self.batch_seconds = Histogram("albertlm_batch_seconds", "Seconds the model took for one batch",
                                       buckets=_SECONDS, registry=r)
        self.queue_depth = Gauge("albertlm_queue_depth", "Requests waiting for the model", registry=r)
        self.arriving = Gauge("albertlm_requests_arriving", "Requests being read and checked, not yet queued",
                              registry=r)
        self.exit_layers = Histogram("albertlm_early_exit_layers", "Layers each input ran under early exit",
                                     buckets=tuple(range(1, layers + 1)), registry=r)

    def request(self, route: str, code: int, seconds: float) -> None:
        """Count one answered request and its latency."""
        self.requests.labels(route, str(code)).inc()
        self.latency.labels(route).observe(seconds)

    def batch(self, requests: int, inputs: int, tokens: int, seconds: float) -> None:
        """Record one model batch (the batcher's `on_batch`)."""
        self.batch_requests.observe(requests)
        self.batch_inputs.observe(inputs)
        self.batch_tokens.observe(tokens)
        self.batch_seconds.observe(seconds)

    def text(self) -> bytes:
        """The exposition text of every metric."""
        return generate_latest(self.registry)
