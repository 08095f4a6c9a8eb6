"""Running the app: load the model, bind the port, serve with uvicorn until SIGTERM or Ctrl-C.

The socket is bound here, before uvicorn starts, so a busy port or an address the machine lacks is a
one-line error rather than uvicorn's log and exit status. On SIGTERM uvicorn stops accepting
connections, answers every request it holds (the batcher runs whatever is queued) and returns; the
process then exits 0.
"""

from __future__ import annotations

import errno
import signal
import socket
import sys
import threading
from pathlib import Path

from albertlm.errors import AlbertlmError
from albertlm.serve.settings import ServeSettings

SERVER_PACKAGES = ("fastapi", "uvicorn", "prometheus_client")


def check_server_packages() -> None:
    """A one-line error naming the extra to install when a server package is missing."""
    import importlib.util

    missing = [name for name in SERVER_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise AlbertlmError(f"albertlm serve needs {', '.join(missing)}: pip install 'albertlm[serve]'")


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (IPv4 or IPv6, as the host resolves).

    Raises:
        AlbertlmError: the port is taken or reserved, or the host is not an address of this machine.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise AlbertlmError(f"--host {host}: not an address of this machine ({exc.strerror})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restarted server need not wait for TIME_WAIT
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise AlbertlmError(f"--port {port}: {host}:{port} is already in use (another server?); choose another "
                                "port") from None
        if exc.errno == errno.EACCES:
            raise AlbertlmError(f"--port {port}: permission denied (ports below 1024 need privileges)") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise AlbertlmError(f"--host {host}: not an address of this machine") from None
        raise AlbertlmError(f"--host {host} --port {port}: cannot listen: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, telling the batcher when a signal starts the shutdown: the requests it holds run
        at once instead of waiting for others to join them (none will: the port is closing)."""

        def __init__(self, config, batcher):
            super().__init__(config)
            self.batcher = batcher

        def handle_exit(self, sig, frame) -> None:
            super().handle_exit(sig, frame)
            self.batcher.stop_taking()

    return Server


def serve(model_dir: str | Path, settings: ServeSettings, log=lambda line: print(line, file=sys.stderr, flush=True)
          ) -> None:
    """Serve a model directory over HTTP until SIGTERM (then exit cleanly) or Ctrl-C.

    Args:
        model_dir: a fine-tuned directory, or (embeddings only) a pretrained or sentence-transformers one.
        settings: host, port, backend and limits.
        log: where the one `serving ... on http://HOST:PORT` line goes once the port is bound.
    Raises:
        AlbertlmError: a server package missing, not a model directory, flags the directory cannot take, or
            an address that cannot be bound.
    """
    check_server_packages()
    import uvicorn

    from albertlm.serve.app import create_app
    from albertlm.serve.predictor import ServedModel

    model = ServedModel(model_dir, settings)
    sock = bind(settings.host, settings.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    log(f"albertlm serve: {model.title} from {model_dir} ({model.backend}, {model.device}"
        + (f", patience {model.patience}" if model.patience is not None else "") + f") on http://{shown}:{port}")
    app = create_app(model, settings)
    config = uvicorn.Config(app, log_level="info", lifespan="on", timeout_graceful_shutdown=None,
                            timeout_keep_alive=settings.keep_alive_s)
    server = _server_class()(config, app.state.batcher)
    # uvicorn re-raises a SIGTERM it handled once it has shut down; its default action would end the process
    # with status 143 after a clean drain. Ignoring that second delivery lets the command return 0.
    main = threading.current_thread() is threading.main_thread()  # signals are the main thread's alone
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None) if main else None
    try:
        server.run(sockets=[sock])
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
        sock.close()
    if not server.started:
        raise AlbertlmError(f"{model_dir}: the server did not start (see the log above)")
