"""`albertlm serve`: a model directory over HTTP (albertlm/serve, docs/serving.md)."""

from __future__ import annotations

import argparse

from albertlm.options import add_dataclass_options, dataclass_from_args


def serve_args(p: argparse.ArgumentParser) -> None:
    from albertlm.serve.settings import ServeSettings

    p.add_argument("model", metavar="DIR", help="a fine-tuned model directory (as `albertlm predict --model` takes); "
                   "a pretrained or sentence-transformers one serves the embedding routes only")
    add_dataclass_options(p, ServeSettings, "server")


def serve_run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM (answering the requests in flight) or Ctrl-C."""
    from albertlm.cli.tasks import _one_line_warnings
    from albertlm.serve.server import serve
    from albertlm.serve.settings import ServeSettings

    _one_line_warnings()
    serve(args.model, dataclass_from_args(ServeSettings, args))
    return 0
