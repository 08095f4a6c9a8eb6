"""The serving baseline `bench_serve.py` compares `albertlm serve` with: what a user writes without it.

A FastAPI route calling a transformers `pipeline("text-classification")` on the same fine-tuned
directory (transformers' AlbertForSequenceClassification and AlbertTokenizer, which reads the
directory's spiece.model), served by uvicorn. The route is a plain `def` (FastAPI runs it in its
thread pool) and holds a lock around the pipeline, so the model runs one request at a time: no
batching across requests, which is what `albertlm serve` adds. Same body as `albertlm serve`:
`{"inputs": "text"}` gives one `{"label", "score"}`, `{"inputs": ["text", ...]}` a list of them.

    python -m benchmarks.serve_baseline_app DIR --port 0 --threads 1 --max-length 128

Prints `Uvicorn running on http://127.0.0.1:PORT` on stderr once it listens (PORT chosen by the
system with --port 0); stops on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
import threading

from pydantic import BaseModel


class Body(BaseModel):
    """The /predict body (at module level: FastAPI resolves the annotation by name)."""

    inputs: str | list[str]


def create_app(model_dir: str, max_length: int):
    """The FastAPI app: POST /predict through the pipeline, GET /health.

    Args:
        model_dir: a fine-tuned sequence-classification directory (config.json, model.safetensors, spiece.model).
        max_length: pieces per input at most (truncation), as the served model's max_seq_length.
    Returns:
        the app.
    """
    import torch
    from fastapi import FastAPI
    from transformers import AlbertForSequenceClassification, AlbertTokenizer, pipeline

    tokenizer = AlbertTokenizer.from_pretrained(model_dir)
    model = AlbertForSequenceClassification.from_pretrained(model_dir).eval()
    classify = pipeline("text-classification", model=model, tokenizer=tokenizer, device="cpu")
    lock = threading.Lock()
    app = FastAPI()

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.post("/predict")
    def predict(body: Body):
        with lock, torch.inference_mode():
            out = classify(body.inputs, truncation=True, max_length=max_length)
        return out[0] if isinstance(body.inputs, str) else out

    return app


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="the fine-tuned directory")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free one (printed on stderr)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--max-length", type=int, default=128, help="truncate inputs to this many pieces")
    args = p.parse_args(argv)
    import torch
    import uvicorn

    if args.threads:
        torch.set_num_threads(args.threads)
    uvicorn.run(create_app(args.model, args.max_length), host=args.host, port=args.port, log_level="info")
    return 0


if __name__ == "__main__":
    sys.exit(main())
