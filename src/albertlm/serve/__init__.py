"""`albertlm serve`: a model directory over HTTP, with dynamic batching (docs/serving.md).

settings.py  ServeSettings, the command's flags
predictor.py ServedModel: the directory loaded once, answering as `albertlm predict` and `albertlm embed` do
batcher.py   Batcher: concurrent requests merged into model batches (pure asyncio)
bodies.py    the request bodies: read, checked, refused in one line
metrics.py   ServeMetrics: the Prometheus metrics
app.py       create_app: routes, limits, the API key (FastAPI)
server.py    serve: bind, run uvicorn, drain on SIGTERM

Only settings.py is imported here: the server packages (pip install 'albertlm[serve]') load when serving.
"""

from albertlm.serve.settings import ServeSettings

__all__ = ["ServeSettings"]
