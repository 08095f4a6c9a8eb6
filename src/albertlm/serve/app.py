"""The HTTP application of `albertlm serve`: routes, request limits and the API key.

    POST /predict   {"inputs": "text"} -> one answer; {"inputs": ["text", ["text_a", "text_b"], ...]} -> a list
    GET  /health    {"status": "ok"} (never needs the API key)
    GET  /info      the model, its backend and early exit, the limits
    GET  /metrics   Prometheus text (metrics.py)

Every refusal is a JSON object {"error": one line, "error_type": ...}: 401 without the API key, 413 for
a body over --max-body-bytes or more than --max-inputs inputs, 422 for a body that is not the JSON
above (naming the field, e.g. `inputs[2]: expected a string or a pair of strings`), 429 when
--max-queue requests are already waiting, 503 while shutting down, 500 when the model fails. The
request's inputs are checked whole before any is queued, so one bad input never fails a batch.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from albertlm.errors import AlbertlmError
from albertlm.serve.batcher import Batcher, Closed, QueueFull
from albertlm.serve.metrics import CONTENT_TYPE_LATEST, ServeMetrics
from albertlm.serve.settings import ServeSettings

ROUTES = ("/predict", "/health", "/info", "/metrics")
"""The routes metrics count by name (anything else counts as `other`)."""

log = logging.getLogger("albertlm.serve")


class RequestError(Exception):
    """A request refused with `status` and a one-line message."""

    def __init__(self, status: int, message: str, error_type: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.error_type, self.headers = status, message, error_type, headers


def error_response(status: int, message: str, error_type: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message, "error_type": error_type}, status_code=status, headers=headers)


# ---------------------------------------------------------------------------- the request body
async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed `limit` bytes (from Content-Length
    or while reading a chunked one)."""
    too_long = RequestError(413, f"body: longer than {limit:,} bytes (--max-body-bytes)", "payload_too_large",
                            {"Connection": "close"})
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_long
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_long
    return bytes(body)


def parse_inputs(body: bytes, max_inputs: int) -> tuple[list[str], bool]:
    """The input lines of a /predict body (a pair becomes `text_a<TAB>text_b`, as predict reads it), and
    whether the body held a single input (answered by one object rather than a list).

    Raises:
        RequestError: 422 naming the field, 413 for more than `max_inputs` inputs.
    """
    try:
        data = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise RequestError(422, f"body: not valid UTF-8 (byte {exc.start})", "validation") from None
    except json.JSONDecodeError as exc:
        raise RequestError(422, f"body: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                           "validation") from None
    if not isinstance(data, dict) or "inputs" not in data:
        raise RequestError(422, 'body: expected a JSON object {"inputs": ...}', "validation")
    unknown = sorted(set(data) - {"inputs"})
    if unknown:
        raise RequestError(422, f"body: unknown field {unknown[0]!r} (the body takes only inputs)", "validation")
    inputs = data["inputs"]
    if not isinstance(inputs, (str, list)):
        raise RequestError(422, "inputs: expected a string, or a list of strings and pairs of strings", "validation")
    items = [inputs] if isinstance(inputs, str) else inputs
    if len(items) > max_inputs:
        raise RequestError(413, f"inputs: {len(items)} inputs; a request takes at most {max_inputs} (--max-inputs)",
                           "payload_too_large")
    return [_line(i, item) for i, item in enumerate(items)], isinstance(inputs, str)


def _line(index: int, item: Any) -> str:
    where = f"inputs[{index}]"
    if isinstance(item, list) and len(item) == 2 and all(isinstance(t, str) for t in item):
        for k, text in enumerate(item):
            if "\t" in text:
                raise RequestError(422, f"{where}[{k}]: a text of a pair must not hold a tab", "validation")
        line = "\t".join(item)
    elif isinstance(item, str):
        line = item
    else:
        raise RequestError(422, f"{where}: expected a string or a pair of strings", "validation")
    if not line.strip():
        raise RequestError(422, f"{where}: an empty text (nothing to predict)", "validation")
    return line


# ---------------------------------------------------------------------------- API key and metrics
class Guard:
    """ASGI middleware: the API key on every route but /health, and each answer counted in the metrics."""

    def __init__(self, app, metrics: ServeMetrics, api_key: str | None):
        self.app, self.metrics = app, metrics
        self.api_key = api_key.encode() if api_key else None

    def authorized(self, scope) -> bool:
        """No key set, /health, or the right bearer key (compared in constant time)."""
        if self.api_key is None or scope["path"] == "/health":
            return True
        header = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, key = header.partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(key.strip(), self.api_key)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), 500

        async def send_counted(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            if self.authorized(scope):
                await self.app(scope, receive, send_counted)
            else:
                await error_response(401, "missing or wrong API key: send the header Authorization: Bearer KEY",
                                     "unauthorized", {"WWW-Authenticate": "Bearer"})(scope, receive, send_counted)
        finally:
            route = scope["path"] if scope["path"] in ROUTES else "other"
            self.metrics.request(route, status, time.perf_counter() - start)


# ---------------------------------------------------------------------------- the app
def create_app(model, settings: ServeSettings) -> FastAPI:
    """The FastAPI app serving `model`.

    Args:
        model: a `ServedModel` (or anything with its `example`, `tokens`, `predict`, `describe`,
            `patience` and `config.num_layer_calls`).
        settings: the limits and the API key.
    Returns:
        the app (its batcher in `app.state.batcher`); its lifespan starts the batcher and, at shutdown,
        answers every request it accepted.
    """
    metrics = ServeMetrics(model.config.num_layer_calls)
    batcher = Batcher(model.predict, max_batch_tokens=settings.max_batch_tokens,
                      max_wait_s=settings.max_wait_ms / 1000, max_queue=settings.max_queue,
                      on_batch=metrics.batch, on_depth=metrics.queue_depth.set)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        yield
        await batcher.close()  # uvicorn has answered every open request by now; nothing is left waiting

    app = FastAPI(title="albertlm", lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None)
    app.state.batcher = batcher  # server.py tells it about SIGTERM
    app.add_middleware(Guard, metrics=metrics, api_key=settings.api_key)
    app.add_exception_handler(RequestError, lambda request, exc: error_response(exc.status, exc.message,
                                                                                 exc.error_type, exc.headers))
    app.add_exception_handler(HTTPException, lambda request, exc: error_response(exc.status_code, str(exc.detail),
                                                                                  "http", exc.headers))
    info = {**model.describe(), "limits": settings.limits(), "api_key": settings.api_key is not None}

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/info")
    async def get_info():
        return info

    @app.get("/metrics")
    async def get_metrics():
        return Response(metrics.text(), media_type=CONTENT_TYPE_LATEST)

    @app.post("/predict")
    async def predict(request: Request):
        lines, single = parse_inputs(await read_body(request, settings.max_body_bytes), settings.max_inputs)
        try:
            for i, line in enumerate(lines):
                model.example(i, line)
        except AlbertlmError as exc:
            raise RequestError(422, str(exc), "validation") from None
        answers = await _submit(batcher, lines, sum(model.tokens(line) for line in lines)) if lines else []
        if model.patience is not None:
            for a in answers:
                metrics.exit_layers.observe(a["layers"])
        return JSONResponse(answers[0] if single else answers)

    return app


async def _submit(batcher: Batcher, lines: list[str], tokens: int) -> list:
    """The batcher's answers, its refusals as RequestErrors."""
    try:
        return await batcher.submit(lines, tokens)
    except QueueFull as exc:
        raise RequestError(429, f"the server is busy: {exc}; retry later", "overloaded", {"Retry-After": "1"}) from None
    except Closed as exc:
        raise RequestError(503, str(exc), "unavailable") from None
    except AlbertlmError as exc:
        raise RequestError(500, str(exc), "backend") from None
    except Exception as exc:
        log.exception("the model failed on a batch")
        raise RequestError(500, f"the model failed: {type(exc).__name__}: {exc}", "backend") from None
