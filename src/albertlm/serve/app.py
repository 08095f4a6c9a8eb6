"""The HTTP application of `albertlm serve`: routes, request limits and the API key.

    POST /predict         {"inputs": "text"} -> one answer; {"inputs": ["text", ["text_a", "text_b"], ...]} -> a list
    POST /embed           {"inputs": "text" | [...], "normalize": bool} -> a list of vectors (TEI's shape)
    POST /v1/embeddings   {"input": "text" | [...], "model": ...} -> OpenAI's {"object": "list", "data": [...], ...}
    GET  /health          {"status": "ok"} (never needs the API key)
    GET  /info            the model, its backend, early exit and embeddings, the limits
    GET  /metrics         Prometheus text (metrics.py)

Every refusal is a JSON object {"error": one line, "error_type": ...}: 401 without the API key, 413 for
a body over --max-body-bytes or more than --max-inputs inputs, 422 for a body that is not the JSON
above (bodies.py, naming the field, e.g. `inputs[2]: expected a string or a pair of strings`), 429
when --max-queue requests are already waiting, 501 for /predict on a directory without a task head,
503 while shutting down, 500 when the model fails. The request's inputs are checked whole before any
is queued, so one bad input never fails a batch. Every route that queues work tells the batcher the
request is on its way (`Batcher.expect`) before it reads the body, so a batch that is not full waits
for it.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from albertlm.errors import AlbertlmError
from albertlm.serve.batcher import Arrival, Batcher, Closed, QueueFull
from albertlm.serve.bodies import (EmbedRequest, RequestError, openai_answer, parse_embed, parse_inputs, parse_openai,
                                   read_body)
from albertlm.serve.metrics import CONTENT_TYPE_LATEST, ServeMetrics
from albertlm.serve.predictor import EMBED, PREDICT
from albertlm.serve.settings import ServeSettings

ROUTES = ("/predict", "/embed", "/v1/embeddings", "/health", "/info", "/metrics")
"""The routes metrics count by name (anything else counts as `other`)."""

log = logging.getLogger("albertlm.serve")


def error_response(status: int, message: str, error_type: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message, "error_type": error_type}, status_code=status, headers=headers)


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
        model: a `ServedModel` (or anything with its `run`, `example`, `tokens`, `embed_tokens`, `describe`,
            `no_predict`, `normalize`, `patience` and `config.num_layer_calls`).
        settings: the limits and the API key.
    Returns:
        the app (its batcher in `app.state.batcher`); its lifespan starts the batcher and, at shutdown,
        answers every request it accepted.
    """
    metrics = ServeMetrics(model.config.num_layer_calls)
    batcher = Batcher(model.run, max_batch_tokens=settings.max_batch_tokens,
                      max_wait_s=settings.max_wait_ms / 1000, max_queue=settings.max_queue,
                      on_batch=metrics.batch, on_depth=metrics.queue_depth.set)
    metrics.arriving.set_function(lambda: batcher.arriving)

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
        if model.no_predict is not None:
            raise RequestError(501, model.no_predict, "unsupported")
        with batcher.expect() as arrival:
            lines, single = parse_inputs(await read_body(request, settings.max_body_bytes), settings.max_inputs)
            try:
                for i, line in enumerate(lines):
                    model.example(i, line)
            except AlbertlmError as exc:
                raise RequestError(422, str(exc), "validation") from None
            items = [(PREDICT, None, line) for line in lines]
            answers = await _submit(batcher, items, sum(model.tokens(line) for line in lines), arrival) if lines else []
        if model.patience is not None:
            for a in answers:
                metrics.exit_layers.observe(a["layers"])
        return JSONResponse(answers[0] if single else answers)

    async def vectors(request: Request, parse) -> tuple[EmbedRequest, list, int]:
        """(the parsed request, its vectors, the tokens they were computed from)."""
        with batcher.expect() as arrival:
            asked = parse(await read_body(request, settings.max_body_bytes), settings.max_inputs)
            normalize = model.normalize if asked.normalize is None else asked.normalize
            tokens = sum(model.embed_tokens(asked.texts))
            items = [(EMBED, normalize, text) for text in asked.texts]
            return asked, (await _submit(batcher, items, tokens, arrival) if items else []), tokens

    @app.post("/embed")
    async def embed(request: Request):
        _, rows, _ = await vectors(request, parse_embed)
        return JSONResponse([v.tolist() for v in rows])

    @app.post("/v1/embeddings")
    async def openai_embeddings(request: Request):
        asked, rows, tokens = await vectors(request, parse_openai)
        return JSONResponse(openai_answer(asked, rows, tokens, model.model_dir))

    return app


async def _submit(batcher: Batcher, items: list, tokens: int, arrival: Arrival) -> list:
    """The batcher's answers, its refusals as RequestErrors."""
    try:
        return await batcher.submit(items, tokens, arrival)
    except QueueFull as exc:
        raise RequestError(429, f"the server is busy: {exc}; retry later", "overloaded", {"Retry-After": "1"}) from None
    except Closed as exc:
        raise RequestError(503, str(exc), "unavailable") from None
    except AlbertlmError as exc:
        raise RequestError(500, str(exc), "backend") from None
    except Exception as exc:
        log.exception("the model failed on a batch")
        raise RequestError(500, f"the model failed: {type(exc).__name__}: {exc}", "backend") from None
