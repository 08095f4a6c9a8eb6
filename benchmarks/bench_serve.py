"""`albertlm serve` under load: requests/s, latency and memory of real server processes on a loopback
port, against the baseline a user builds without it (benchmarks/serve_baseline_app.py: a FastAPI route
calling a transformers pipeline on the same weights, one request at a time).

Servers (each a subprocess on 127.0.0.1, port chosen by the system, stopped by SIGTERM, killed if it
does not stop, whatever happens to this script):
  - serve fp32, serve int8 (`--int8`), serve int8 + early exit (`--int8 --patience K`; skipped, with a
    note, for a directory without exit heads);
  - the baseline (skipped, with a note, without transformers).
Each runs the concurrency sweep: C clients (httpx, one asyncio loop in this process, one keep-alive
connection per client) post `{"inputs": ...}` bodies back to back, after an untimed warm-up, until
--requests answers or --max-seconds. Per server and concurrency: requests/s and sentences/s (200s
over the wall time), p50/p99 latency as the client sees it, the server's peak RSS (sampled every 20
ms, psutil or /proc/PID/status) and CPU, the client's own CPU per request (its overhead), and every
answer that is not a 200. Then:
  - in-process batch-1 latency: `ServedModel.predict` (what the server runs per batch) on one request's
    inputs, in this process, for each serve mode;
  - memory: the headline server (int8 + early exit, else int8), after its sweep, takes --memory-requests
    more at --memory-concurrency (within --memory-max-seconds), its RSS sampled at the start, every 5%
    and at the end;
  - overload: a fresh headline server with --max-queue --overload-queue gets --overload-clients
    clients; every answer is counted (200, 429, any other status, timeouts, connection errors), and
    the server must still answer /health afterwards.
Inputs: SST-2 dev sentences with --data DIR (the task's folder), else synthetic ones. Without --model
a tiny SST-2-like classifier with exit heads is fine-tuned in a temporary folder first (seconds; its
numbers say nothing about a real model).

    python -m benchmarks.bench_serve --model MODEL --data DATA/SST-2 --threads 1 --patience 3

Writes the results envelope (benchmarks/harness.py) to benchmarks/results/serve.json (--out) with the
targets; prints a markdown table (--markdown FILE appends it there).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import itertools
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from pathlib import Path

from albertlm.errors import AlbertlmError
from benchmarks.harness import (REPO, RESULTS, ForeignLoad, PeakRss, ProcessProbe, Target, envelope, percentile,
                                publish, targets_markdown)

OUT = RESULTS / "serve.json"
BASELINE_APP = REPO / "benchmarks" / "serve_baseline_app.py"
STARTUP_S = 300  # importing torch on a loaded machine is slow
URL = re.compile(r"on (http://127\.0\.0\.1:\d+)")  # albertlm serve's first line; uvicorn's "Uvicorn running on"
BASELINE = "baseline"
MODES = {"fp32": [], "int8": ["--int8"], "int8+ee": ["--int8", "--patience"]}  # int8+ee: the patience follows
LABELS = {"fp32": "serve fp32", "int8": "serve int8", "int8+ee": "serve int8 + early exit",
          BASELINE: "baseline: FastAPI + transformers pipeline"}
WORDS = {1: "good great fun lovely superb moving witty".split(), 0: "bad awful boring dull terrible flat".split()}
FILL = "the movie film plot story acting a an and of it is was very quite so its this that with".split()


# ---------------------------------------------------------------------------- inputs and the default model
def synthetic_sentence(r: random.Random) -> tuple[str, int]:
    """A sentence of 4..30 words with one sentiment word, and its label."""
    label = r.randint(0, 1)
    words = r.choices(FILL, k=r.randint(3, 29))
    words.insert(r.randrange(len(words) + 1), r.choice(WORDS[label]))
    return " ".join(words), label


def load_sentences(data: str | None, n: int, seed: int = 0) -> tuple[list[str], str]:
    """Up to `n` input sentences and where they came from: SST-2 dev (`data` is its folder) or synthetic."""
    if data:
        from albertlm.tasks.registry import get_task

        examples = get_task("sst-2").read(data, "dev")
        return [e.text_a for e in examples[:n]], f"SST-2 dev ({data}, {min(n, len(examples))} sentences)"
    r = random.Random(seed)
    return [synthetic_sentence(r)[0] for _ in range(n)], f"synthetic ({n} sentences, seed {seed})"


def build_tiny_model(root: Path) -> Path:
    """A `test`-preset SST-2-like classifier with exit heads, fine-tuned for a few steps: the default
    model, for smoke runs (its speed says nothing about a real model). Returns its directory."""
    import torch

    from albertlm import AlbertForPreTraining, get_preset
    from albertlm.tokenizer import Tokenizer, train_tokenizer
    from albertlm.train.finetune import FinetuneRecipe, finetune

    r = random.Random(0)
    data = root / "data"
    data.mkdir(parents=True)
    for split, n in (("train", 160), ("dev", 32)):
        rows = ["sentence\tlabel"] + ["%s\t%d" % synthetic_sentence(r) for _ in range(n)]
        (data / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    pretrained = root / "pretrained"
    train_tokenizer([synthetic_sentence(r)[0] for _ in range(400)], pretrained, vocab_size=120, log=lambda m: None)
    torch.manual_seed(0)
    config = get_preset("test", vocab_size=Tokenizer.load(pretrained).vocab_size)
    AlbertForPreTraining(config).save_pretrained(pretrained)
    recipe = FinetuneRecipe(early_exit=True, steps=20, eval_every=20, lr=3e-3, batch_size=16, warmup_steps=2,
                            max_seq_length=64, log_every=10)
    finetune("sst-2", pretrained, data, root / "sst-2", recipe, device="cpu", progress=False)
    return root / "sst-2"


def request_bodies(sentences: list[str], per_request: int) -> list[bytes]:
    """The /predict bodies: one sentence as a bare string, or lists of `per_request` sentences."""
    if per_request == 1:
        return [json.dumps({"inputs": s}).encode() for s in sentences]
    groups = [sentences[i:i + per_request] for i in range(0, len(sentences) - per_request + 1, per_request)]
    return [json.dumps({"inputs": g}).encode() for g in groups]


# ---------------------------------------------------------------------------- statistics (pure)
def count_outcomes(records: list[tuple[float, int | str]]) -> dict[str, int]:
    """Answers by kind: the status code as a string ("200", "429", ...), "timeout" or "connection"."""
    return dict(sorted(Counter(str(outcome) for _, outcome in records).items()))


def summarize(records: list[tuple[float, int | str]], wall_s: float, per_request: int) -> dict:
    """One (server, concurrency) run: rates over `wall_s` from the 200s, latency percentiles of the 200s
    in ms, and every other answer counted."""
    ok = [latency for latency, outcome in records if outcome == 200]
    ms = lambda x: None if x is None else round(1e3 * x, 3)
    counts = count_outcomes(records)
    return {"requests": len(records), "ok": len(ok), "errors": {k: n for k, n in counts.items() if k != "200"},
            "wall_s": round(wall_s, 3), "requests_per_s": round(len(ok) / wall_s, 2) if wall_s > 0 else None,
            "sentences_per_s": round(len(ok) * per_request / wall_s, 2) if wall_s > 0 else None,
            "p50_ms": ms(percentile(ok, 50)), "p90_ms": ms(percentile(ok, 90)), "p99_ms": ms(percentile(ok, 99)),
            "max_ms": ms(max(ok, default=None))}


# ---------------------------------------------------------------------------- server processes
class ServerProcess:
    """A server subprocess as a context manager: started on entry in its own session (a Ctrl-C here does
    not reach it), `wait_ready` until it printed its URL and /health answers, stopped on exit by SIGTERM
    (SIGKILL after `grace_s`), on errors and KeyboardInterrupt too.

    Args:
        name: for messages.
        command: the command line; it must print `... on http://127.0.0.1:PORT` on stderr once listening.
        env: its environment.
        logs: folder for its stdout and stderr.
    """

    def __init__(self, name: str, command: list[str], env: dict[str, str], logs: Path, grace_s: float = 30):
        self.name, self.command, self.env, self.grace_s = name, command, env, grace_s
        self.out, self.err = logs / f"{name}.out", logs / f"{name}.err"
        self.url, self.proc, self.exit_status = "", None, None

    def __enter__(self) -> ServerProcess:
        self._start = time.perf_counter()
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(self.command, stdout=out, stderr=err, env=self.env, start_new_session=True)
        self.probe = ProcessProbe(self.proc.pid)
        return self

    def wait_ready(self) -> ServerProcess:
        """Return once it listens and /health answers 200; raise if it exits or takes over STARTUP_S."""
        self._wait_ready(self._start + STARTUP_S)
        self.startup_s = time.perf_counter() - self._start
        return self

    def _wait_ready(self, deadline: float) -> None:
        import httpx

        while True:
            if not self.url and (found := URL.search(self.err.read_text(errors="replace"))):
                self.url = found.group(1)
            if self.url:
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                        return
            if self.proc.poll() is not None or time.perf_counter() > deadline:
                raise RuntimeError(f"{self.name} did not start (exit status {self.proc.poll()}): {self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self, lines: int = 5) -> str:
        return " | ".join(self.err.read_text(errors="replace").strip().splitlines()[-lines:])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after grace_s; the exit status (negative: killed by that signal)."""
        stop_all([self])
        return self.exit_status

    def __exit__(self, *exc):
        self.stop()
        return False


def stop_all(servers: list[ServerProcess]) -> None:
    """SIGTERM to every running one at once, then SIGKILL to any still running after its grace_s;
    each one's exit status is in `exit_status` (negative: ended by that signal)."""
    running = [s for s in servers if s.proc is not None and s.proc.poll() is None]
    for s in running:
        s.proc.send_signal(signal.SIGTERM)
    start = time.perf_counter()
    for s in running:
        try:
            s.proc.wait(max(0.0, s.grace_s - (time.perf_counter() - start)))
        except subprocess.TimeoutExpired:
            s.proc.kill()
            s.proc.wait()
    for s in servers:
        if s.proc is not None:
            s.exit_status = s.proc.returncode


@contextlib.contextmanager
def started_servers(commands: dict[str, list[str]], env: dict[str, str], logs: Path):
    """{name: ServerProcess}, every one started (not yet ready); all stopped together on the way out."""
    servers: dict[str, ServerProcess] = {}
    try:
        for name, command in commands.items():
            servers[name] = ServerProcess(name, command, env, logs).__enter__()
        yield servers
    finally:
        stop_all(list(servers.values()))


# ---------------------------------------------------------------------------- the load
async def _drive(url: str, bodies: list[bytes], concurrency: int, warmup: int, requests: int, max_seconds: float,
                 timeout_s: float, timed, on_progress=None) -> tuple[list[tuple[float, int | str]], float, float]:
    """`warmup` untimed requests, then `requests` timed ones (or until max_seconds) inside the context
    manager `timed`, from `concurrency` clients posting back to back. Returns ([(latency s, status,
    "timeout", "connection (the httpx error)" or another httpx error's name)], wall s, this process's CPU s during the
    timed part)."""
    import httpx

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout_s, headers=headers) as client:
        async def phase(n: int, offset: int, progress) -> list:
            records, counter, deadline = [], itertools.count(), time.perf_counter() + max_seconds

            async def client_loop():
                while time.perf_counter() < deadline and (i := next(counter)) < n:
                    body, t = bodies[(offset + i) % len(bodies)], time.perf_counter()
                    try:
                        outcome = (await client.post("/predict", content=body)).status_code
                    except httpx.TimeoutException:
                        outcome = "timeout"
                    except httpx.TransportError as exc:  # which one: a refused connect, a reset, a closed keep-alive
                        outcome = f"connection ({type(exc).__name__})"
                    except httpx.HTTPError as exc:
                        outcome = type(exc).__name__
                    records.append((time.perf_counter() - t, outcome))
                    if progress:
                        progress(len(records))

            await asyncio.gather(*(client_loop() for _ in range(concurrency)))
            return records

        await phase(warmup, 0, None)
        with timed:
            start, cpu = time.perf_counter(), time.process_time()
            records = await phase(requests, warmup, on_progress)
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        return records, wall, cpu


class ServerLoad:
    """Context manager around a timed phase: the server's CPU seconds and peak RSS, and the CPU cores
    other processes (neither this one nor the server) used meanwhile."""

    def __init__(self, probe: ProcessProbe):
        self.probe = probe

    def __enter__(self):
        self._cpu, self._t = self.probe.cpu_s(), time.perf_counter()
        self._load, self._rss = ForeignLoad().__enter__(), PeakRss(self.probe).__enter__()
        return self

    def __exit__(self, *exc):
        self._rss.__exit__(*exc)
        self._load.__exit__(*exc)
        wall = time.perf_counter() - self._t
        self.server_cpu = (self.probe.cpu_s() or 0) - (self._cpu or 0)
        self.peak_rss = self._rss.peak
        # ForeignLoad counts the server's CPU (another process) with everything else: take it off
        self.other_cores = (None if self._load.cores is None
                            else round(max(0.0, self._load.cores - self.server_cpu / max(wall, 1e-9)), 3))
        return False


def load_run(server: ServerProcess, bodies: list[bytes], concurrency: int, args: argparse.Namespace,
             requests: int | None = None, warmup: int | None = None, max_seconds: float | None = None,
             on_progress=None) -> dict:
    """One timed run against a server: `summarize`'s fields plus the server's peak RSS and CPU per request,
    the client's CPU per request (its overhead) and the CPU other processes used, all over the timed part."""
    if warmup is None:
        warmup = args.warmup if args.warmup is not None else max(20, 2 * concurrency)
    load = ServerLoad(server.probe)
    records, wall, client_cpu = asyncio.run(_drive(server.url, bodies, concurrency, warmup, requests or args.requests,
                                                   max_seconds or args.max_seconds, args.timeout, load, on_progress))
    n = max(1, len(records))
    row = {"concurrency": concurrency, **summarize(records, wall, args.inputs_per_request)}
    wall = max(wall, 1e-9)
    row.update(peak_rss_mb=round(load.peak_rss / 2**20, 1),
               server_cpu_ms_per_request=round(1e3 * load.server_cpu / n, 3),
               client_cpu_ms_per_request=round(1e3 * client_cpu / n, 3), server_cores=round(load.server_cpu / wall, 3),
               client_cores=round(client_cpu / wall, 3), other_load_cores=load.other_cores)
    return row


# ---------------------------------------------------------------------------- the measurements
def serve_command(model_dir: Path, mode: str, args: argparse.Namespace, *extra: str) -> list[str]:
    flags = [*MODES[mode], *([str(args.patience)] if mode == "int8+ee" else [])]
    wait = ["--max-wait-ms", str(args.max_wait_ms)] if args.max_wait_ms is not None else []
    return [sys.executable, "-m", "albertlm.cli", "serve", str(model_dir), "--port", "0", "--device", "cpu",
            *flags, *wait, *extra]


def baseline_command(model_dir: Path, args: argparse.Namespace, max_length: int) -> list[str]:
    return [sys.executable, str(BASELINE_APP), str(model_dir), "--port", "0", "--threads", str(args.threads),
            "--max-length", str(max_length)]


def in_process(model_dir: Path, mode: str, sentences: list[str], args: argparse.Namespace) -> dict:
    """Batch-1 latency of `ServedModel.predict` in this process (one request's inputs per call)."""
    from albertlm.serve import ServeSettings
    from albertlm.serve.predictor import ServedModel

    settings = ServeSettings(device="cpu", int8=mode != "fp32", patience=args.patience if mode == "int8+ee" else None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the fbgemm path's deprecation notice (docs/benchmarks.md)
        model = ServedModel(model_dir, settings)
    k = args.inputs_per_request
    calls = [[sentences[(i * k + j) % len(sentences)] for j in range(k)] for i in range(args.inprocess_calls)]
    for lines in calls[:5]:
        model.predict(lines)
    times = []
    for lines in calls:
        t = time.perf_counter()
        model.predict(lines)
        times.append(time.perf_counter() - t)
    return {"calls": len(times), "p50_ms": round(1e3 * percentile(times, 50), 3),
            "p99_ms": round(1e3 * percentile(times, 99), 3), "max_seq_length": model.features.max_seq_length}


def sweep(server: ServerProcess, bodies: list[bytes], args: argparse.Namespace, log) -> dict:
    runs = {}
    for c in args.concurrency:
        runs[str(c)] = row = load_run(server, bodies, c, args)
        log(f"  {server.name} c={c}: {row['requests_per_s']} req/s, p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, "
            f"peak RSS {row['peak_rss_mb']} MB, errors {row['errors'] or 0}")
    return runs


def memory_run(server: ServerProcess, bodies: list[bytes], args: argparse.Namespace, log) -> dict:
    """RSS at the start, every 5% and at the end of --memory-requests requests."""
    n, samples = args.memory_requests, []
    every = max(1, n // 20)
    start = server.probe.rss() or 0

    def progress(done: int) -> None:
        if done % every == 0:
            samples.append([done, round((server.probe.rss() or 0) / 2**20, 1)])

    row = load_run(server, bodies, args.memory_concurrency, args, requests=n, max_seconds=args.memory_max_seconds,
                   on_progress=progress)
    end = server.probe.rss() or 0
    out = {"server": server.name, "concurrency": args.memory_concurrency, "requests": row["requests"],
           "ok": row["ok"], "errors": row["errors"], "wall_s": row["wall_s"], "rss_mb_start": round(start / 2**20, 1),
           "rss_mb_end": round(end / 2**20, 1), "end_over_start": round(end / start, 4) if start else None,
           "samples": samples}
    log(f"  memory: {out['rss_mb_start']} MB -> {out['rss_mb_end']} MB over {out['requests']} requests")
    return out


def overload_run(server: ServerProcess, bodies: list[bytes], args: argparse.Namespace, log) -> dict:
    """More clients than the server's queue holds, no warm-up: every answer counted; is it still alive?"""
    import httpx

    row = load_run(server, bodies, args.overload_clients, args, requests=args.overload_requests, warmup=0)
    alive, health = server.alive(), None
    with contextlib.suppress(httpx.HTTPError):
        health = httpx.get(server.url + "/health", timeout=10).status_code
    server.stop()
    answers = dict(sorted((row["errors"] | ({"200": row["ok"]} if row["ok"] else {})).items()))
    out = {"max_queue": args.overload_queue, "clients": args.overload_clients, "requests": row["requests"],
           "answers": answers, "other_than_200_or_429": row["requests"] - answers.get("200", 0) - answers.get("429", 0),
           "crashes": int(not alive or health != 200), "health_after": health, "exit_status": server.exit_status,
           "p50_ms_of_200s": row["p50_ms"], "p99_ms_of_200s": row["p99_ms"], "peak_rss_mb": row["peak_rss_mb"],
           "wall_s": row["wall_s"]}
    log(f"  overload: {answers}, crashes {out['crashes']}, exit status {out['exit_status']}")
    return out


def measure(args: argparse.Namespace, model_dir: Path, tmp: Path, log) -> dict:
    """In-process latency first (nothing else running), then every server started at once (they idle
    while another is measured), each measured in turn and stopped after its runs."""
    import httpx

    from albertlm.exit_heads import has_exit_heads
    from albertlm.inference.load import read_architecture

    arch, config = read_architecture(model_dir)
    if arch != "AlbertForSequenceClassification":
        raise AlbertlmError(f"--model {model_dir}: holds an {arch}; the benchmark (and its baseline's "
                            "text-classification pipeline) needs a sequence classifier")
    notes = []
    sentences, source = load_sentences(args.data, args.sentences)
    bodies = request_bodies(sentences, args.inputs_per_request)
    modes = list(args.modes)
    if "int8+ee" in modes and not has_exit_heads(config):
        modes.remove("int8+ee")
        notes.append(f"{model_dir} has no exit heads: serve int8 + early exit not run")
    headline = "int8+ee" if "int8+ee" in modes else ("int8" if "int8" in modes else modes[0])
    log(f"in-process batch-1 predict ({', '.join(modes)})")
    inproc = {m: in_process(model_dir, m, sentences, args) for m in modes}
    commands = {m: serve_command(model_dir, m, args) for m in modes}
    if args.no_baseline:
        notes.append("baseline not run (--no-baseline)")
    elif importlib.util.find_spec("transformers") is None:
        notes.append("baseline not run: transformers is not installed (pip install 'albertlm[hf]')")
    else:
        commands[BASELINE] = baseline_command(model_dir, args, inproc[modes[0]]["max_seq_length"])
    if args.overload_requests:
        commands["overload"] = serve_command(model_dir, headline, args, "--max-queue", str(args.overload_queue))
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads),
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    servers, memory, overload = {}, None, None
    with started_servers(commands, env, tmp) as started:
        log(f"starting {len(started)} servers: {', '.join(started)}")
        for server in started.values():
            server.wait_ready()
        for name, server in started.items():
            if name == "overload":
                log(f"overload ({LABELS[headline]}, --max-queue {args.overload_queue}): {server.url}")
                overload = {"server": headline, **overload_run(server, bodies, args, log)}
                continue
            log(f"{LABELS[name]}: {server.url} (ready after {server.startup_s:.1f} s)")
            entry = servers[name] = {"label": LABELS[name], "command": shlex.join(server.command[1:]),
                                     "startup_s": round(server.startup_s, 2)}
            if name != BASELINE:
                info = httpx.get(server.url + "/info", timeout=10).json()
                entry.update(backend=info["backend"], early_exit=info["early_exit"], limits=info["limits"])
            entry["runs"] = sweep(server, bodies, args, log)
            if name == headline and args.memory_requests:
                memory = memory_run(server, bodies, args, log)
            entry["peak_rss_mb_lifetime"] = round((server.probe.hwm() or 0) / 2**20, 1) or None
            entry["exit_status"] = server.stop()
    return {"model": str(model_dir), "inputs": source, "headline": headline, "notes": notes,
            "in_process": inproc, "servers": servers, "memory": memory, "overload": overload}


# ---------------------------------------------------------------------------- targets and the table
def targets(result: dict) -> list[Target]:
    """The serving targets, measured from a result (None where the run did not measure them)."""
    def run(server: str, c: int) -> dict | None:
        return result["servers"].get(server, {}).get("runs", {}).get(str(c))

    def ratio(a, b):
        return None if a is None or b is None or not b else round(a / b, 4)

    ee1, ee32, base1, base32 = run("int8+ee", 1), run("int8+ee", 32), run(BASELINE, 1), run(BASELINE, 32)
    out = [Target("serve int8 + early exit at concurrency 32: requests/s over the baseline's",
                  ratio(ee32 and ee32["requests_per_s"], base32 and base32["requests_per_s"]), 4.0),
           Target("serve int8 + early exit at concurrency 1: p99 over the baseline's p99",
                  ratio(ee1 and ee1["p99_ms"], base1 and base1["p99_ms"]), 1.0, higher_is_better=False)]
    for mode in MODES:
        one, inproc = run(mode, 1), result["in_process"].get(mode)
        out.append(Target(f"{LABELS[mode]} at concurrency 1: p50 over in-process batch-1 predict p50",
                          ratio(one and one["p50_ms"], inproc and inproc["p50_ms"]), 1.10, higher_is_better=False))
    overload, memory = result.get("overload"), result.get("memory")
    out += [Target("overload: server crashes", overload and overload["crashes"], 0, higher_is_better=False, unit=""),
            Target("overload: answers other than 200 or 429 (timeouts and connection errors included)",
                   overload and overload["other_than_200_or_429"], 0, higher_is_better=False, unit=""),
            Target("memory: server RSS at the end of the long run over its start", memory and memory["end_over_start"],
                   1.10, higher_is_better=False)]
    return out


def server_stack() -> str:
    """uvicorn's version, and the event loop and HTTP parser it picks here (every server of the run
    shares them): uvloop and httptools when installed, else asyncio and h11."""
    import importlib.metadata as md

    def version(name: str) -> str | None:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return None

    loop, http = version("uvloop"), version("httptools")
    return (f"uvicorn {version('uvicorn')}, " + (f"uvloop {loop}" if loop else "asyncio loop") + ", "
            + (f"httptools {http}" if http else f"h11 {version('h11')}"))


def markdown(env: dict) -> str:
    """The docs/benchmarks.md section of a result (an envelope): every run, in-process latency, overload,
    memory, then the targets."""
    result, m = env["results"], env["machine"]
    s = result["settings"]
    lines = [f"## Serving: {env['date'][:10]}, {m['cpu']} ({s['threads']} thread(s) per server)", "",
             f"Command: `{env['command']}` (wall {env['wall_s'] / 60:.1f} min). Model `{result['model']}`; "
             f"inputs: {result['inputs']}, {s['inputs_per_request']} per request; client: {s['client']}; "
             f"servers: {s.get('server_stack', 'not recorded')}. "
             f"Raw numbers: `{env['json']}`.", *(f"- {n}" for n in result["notes"]), "",
             "| server | clients | req/s | sentences/s | p50 ms | p99 ms | peak RSS MB | server CPU ms/req | "
             "client CPU ms/req | other load | errors |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, srv in result["servers"].items():
        for c, r in srv["runs"].items():
            errors = ", ".join(f"{k}: {v}" for k, v in r["errors"].items()) or "0"
            lines.append(f"| {srv['label']} | {c} | {r['requests_per_s']} | {r['sentences_per_s']} | {r['p50_ms']} | "
                         f"{r['p99_ms']} | {r['peak_rss_mb']} | {r['server_cpu_ms_per_request']} | "
                         f"{r['client_cpu_ms_per_request']} | {r['other_load_cores']} | {errors} |")
    lines += ["", "In-process batch-1 `ServedModel.predict`: " + ", ".join(
        f"{LABELS[k]} p50 {v['p50_ms']} ms (p99 {v['p99_ms']})" for k, v in result["in_process"].items()) + "."]
    if result["overload"]:
        o = result["overload"]
        lines.append(f"Overload ({LABELS[o['server']]}, --max-queue {o['max_queue']}, {o['clients']} clients, "
                     f"{o['requests']} requests): answers {o['answers']}, crashes {o['crashes']}, "
                     f"/health after {o['health_after']}, exit status {o['exit_status']}.")
    if result["memory"]:
        r = result["memory"]
        lines.append(f"Memory ({r['requests']} requests at {r['concurrency']} clients after the sweep): RSS "
                     f"{r['rss_mb_start']} MB -> {r['rss_mb_end']} MB ({r['end_over_start']}x).")
    return "\n".join(lines + ["", "Targets:", "", *targets_markdown(env["targets"])]) + "\n"


# ---------------------------------------------------------------------------- the command
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="a fine-tuned sequence classifier (with exit heads for the early-exit server); "
                                   "default: a tiny one built first, for smoke runs")
    p.add_argument("--data", help="SST-2's folder: its dev sentences are the inputs (default: synthetic)")
    p.add_argument("--sentences", type=int, default=872, help="distinct input sentences, cycled (default 872)")
    p.add_argument("--inputs-per-request", type=int, default=1)
    p.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    p.add_argument("--patience", type=int, default=2, help="the early-exit server's --patience (default 2)")
    p.add_argument("--max-wait-ms", type=float, default=None, help="passed to albertlm serve (default: its own)")
    p.add_argument("--no-baseline", action="store_true", help="skip the transformers pipeline server")
    p.add_argument("--threads", type=int, default=1, help="torch threads of every server and in-process (default 1)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 128])
    p.add_argument("--requests", type=int, default=2000, help="timed requests per server and concurrency")
    p.add_argument("--warmup", type=int, default=None, help="untimed requests first (default max(20, 2 x clients))")
    p.add_argument("--max-seconds", type=float, default=60, help="a timed run stops after this long (default 60)")
    p.add_argument("--timeout", type=float, default=60, help="a request unanswered this long counts as a timeout")
    p.add_argument("--inprocess-calls", type=int, default=200)
    p.add_argument("--memory-requests", type=int, default=20000, help="the long run (0: skip)")
    p.add_argument("--memory-concurrency", type=int, default=32)
    p.add_argument("--memory-max-seconds", type=float, default=900, help="the long run stops after this long")
    p.add_argument("--overload-queue", type=int, default=16, help="the overload server's --max-queue")
    p.add_argument("--overload-clients", type=int, default=256)
    p.add_argument("--overload-requests", type=int, default=2048, help="requests of the overload run (0: skip)")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--markdown", type=Path, default=None, help="append the table to this file")
    args = p.parse_args(argv)
    for name in ("sentences", "inputs_per_request", "patience", "threads", "requests", "inprocess_calls",
                 "memory_concurrency", "overload_queue", "overload_clients"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("warmup", "memory_requests", "overload_requests"):
        if (getattr(args, name) or 0) < 0:
            p.error(f"--{name.replace('_', '-')} must not be negative")
    if min(args.concurrency) < 1 or min(args.max_seconds, args.memory_max_seconds, args.timeout) <= 0:
        p.error("--concurrency, --max-seconds, --memory-max-seconds and --timeout must be positive")
    if args.model and not Path(args.model).is_dir():
        p.error(f"--model {args.model}: not a directory")
    if args.data and not Path(args.data).is_dir():
        p.error(f"--data {args.data}: not a directory")
    if args.inputs_per_request > args.sentences:
        p.error("--inputs-per-request must not exceed --sentences")
    return args


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # SIGTERM stops the run as Ctrl-C does: every server is stopped on the way out


def main(argv: list[str] | None = None) -> int:
    import httpx
    import torch

    args = parse_args(argv)
    log = lambda line: print(line, file=sys.stderr, flush=True)
    main_thread = threading.current_thread() is threading.main_thread()  # signals are the main thread's alone
    previous = signal.signal(signal.SIGTERM, _interrupt) if main_thread else None
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
            model_dir = Path(args.model) if args.model else build_tiny_model(Path(tmp) / "tiny")
            result = measure(args, model_dir, Path(tmp), log)
        if not args.model:
            result["model"] = "a tiny test-preset SST-2-like classifier with exit heads, built for this run"
    except KeyboardInterrupt:
        log("bench_serve: interrupted; every server it started is stopped, nothing written")
        return 130
    except AlbertlmError as exc:
        log(f"bench_serve: {exc}")
        return 2
    finally:
        torch.set_num_threads(threads)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "markdown", "model", "data")}
    settings.update(data=args.data, client=f"httpx {httpx.__version__} AsyncClient, one process, one connection "
                                            "per client", server_stack=server_stack())
    result["settings"] = settings
    publish(envelope("benchmarks.bench_serve", argv, result, targets(result), start), args.out.resolve(), markdown,
            args.markdown)
    return 0

if __name__ == "__main__":
    sys.exit(main())
