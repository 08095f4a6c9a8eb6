"""The one harness of the benchmark and experiment scripts: the machine, other processes' load, the
matmul peak, alternating timings that discard disturbed rounds, latency rounds, percentiles, another
process's memory and CPU (a server's), targets that carry their verdict, and the JSON envelope every
results file is written in.

The machine may be shared: every timed call also measures how much CPU other processes used
meanwhile (/proc/stat minus our own CPU time). `compare` throws away a round in which they used
more than `Quiet.max_foreign` cores and redoes it (counting the discarded rounds), and before each
round waits, within a budget, for the machine to be quiet.

Every script that writes results writes one envelope (`envelope`, `publish`):

    {"date": ..., "command": "python -m benchmarks.NAME ...", "machine": {...}, "wall_s": ..., "json": PATH,
     "targets": [{"target", "measured", "threshold", "op", "unit", "met"}, ...], "results": {...}}

so that `python -m benchmarks.index` can list every results file with the command that made it, and
each target's comparison is computed once, where it is measured. Results files from before the envelope
are read through `read_result`, which gives them the same shape.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import platform
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch


# ---------------------------------------------------------------------------- the machine
def machine() -> dict:
    """The machine a result was measured on: CPU model, cores, memory, torch threads, GPU, versions.

    Returns:
        {"cpu", "cores", "memory_gb", "threads", "gpu" (None without CUDA), "python", "torch",
        "transformers" (None when not installed), "platform"}.
    """
    cpu = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gb = None
    with contextlib.suppress(OSError, ValueError):
        mem_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    try:
        import transformers

        hf_version = transformers.__version__
    except ImportError:
        hf_version = None
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": mem_gb, "threads": torch.get_num_threads(),
            "gpu": gpu, "python": platform.python_version(), "torch": torch.__version__,
            "transformers": hf_version, "platform": platform.platform()}


def _busy_seconds() -> float:
    """CPU seconds all processes on the machine have spent busy (user, nice, system, irq, softirq, steal)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(fields[:3]) + sum(fields[5:8])
    return busy / os.sysconf("SC_CLK_TCK")


class ForeignLoad:
    """Context manager: the CPU cores other processes kept busy while the block ran.

    All CPUs' busy time from /proc/stat minus this process's own CPU time, over the wall time.
    Resolution is the kernel tick (10 ms), so short blocks read noisily; None where /proc is missing.
    """

    cores: float | None = None

    def __enter__(self):
        self._t, self._own = time.perf_counter(), time.process_time()
        try:
            self._busy = _busy_seconds()
        except OSError:
            self._busy = None
        return self

    def __exit__(self, *exc):
        wall = time.perf_counter() - self._t
        if self._busy is not None and wall > 0:
            own = time.process_time() - self._own
            self.cores = max(0.0, (_busy_seconds() - self._busy - own) / wall)
        return False


class Quiet:
    """Waits, within a total budget, until other processes leave the CPUs (almost) alone."""

    def __init__(self, max_foreign: float, budget_s: float):
        self.max_foreign, self.budget_s, self.waited_s = max_foreign, budget_s, 0.0

    def wait(self, window_s: float = 1.0) -> float | None:
        """Sample `window_s` windows until one is quiet or the budget is spent; the last reading."""
        while True:
            with ForeignLoad() as load:
                time.sleep(window_s)
            if load.cores is None or load.cores <= self.max_foreign or self.waited_s >= self.budget_s:
                return load.cores
            self.waited_s += window_s


def matmul_peak(dtype: torch.dtype = torch.float32, n: int = 2048, reps: int = 8) -> float:
    """GFLOP/s of the best of `reps` n x n matmuls: the machine's practical matmul peak."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    for _ in range(2):
        a @ b
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9


# ---------------------------------------------------------------------------- timing
def compare(fns: dict[str, Callable[[], None]], repeats: int, quiet: Quiet, log: Callable[[str], None],
            warmup: int = 1, max_retries: int | None = None, min_sample_s: float = 0.5) -> dict:
    """Time the callables in alternation: `warmup` untimed rounds, then `repeats` kept rounds.

    A round calls every function once, in the given order; a function faster than `min_sample_s`
    (judged from the warm-up) is called several times in a row and timed per call, so that every
    sample spans enough kernel ticks to read the other processes' load. A round during which other
    processes used more than quiet.max_foreign cores is discarded and redone, at most
    `max_retries` times (default: 3 x repeats); after that the remaining rounds are kept whatever
    the load (the row shows it).
    Returns {"seconds": {name: [s per call, per kept round]}, "calls_per_sample": {name: n},
    "foreign_cores": [max per kept round], "discarded": n}.
    """
    max_retries = 3 * repeats if max_retries is None else max_retries
    inner = {}
    for name, fn in fns.items():
        for i in range(max(1, warmup)):
            t = time.perf_counter()
            fn()
            elapsed = time.perf_counter() - t
        inner[name] = max(1, min(50, math.ceil(min_sample_s / max(elapsed, 1e-6))))
    seconds: dict[str, list[float]] = {k: [] for k in fns}
    foreign, discarded = [], 0
    while len(foreign) < repeats:
        quiet.wait()
        times, loads = {}, []
        for name, fn in fns.items():
            with ForeignLoad() as load:
                t = time.perf_counter()
                for _ in range(inner[name]):
                    fn()
                times[name] = (time.perf_counter() - t) / inner[name]
            loads.append(load.cores or 0.0)
        if max(loads) > quiet.max_foreign and discarded < max_retries:
            discarded += 1
            log(f"    discarded a round: other processes used {max(loads):.2f} cores")
            continue
        for k, v in times.items():
            seconds[k].append(v)
        foreign.append(round(max(loads), 3))
    return {"seconds": seconds, "calls_per_sample": inner, "foreign_cores": foreign, "discarded": discarded}


def profile_steps(fns: dict[str, Callable[[], None]], log: Callable[[str], None], rows: int = 15) -> dict[str, str]:
    """torch.profiler's table of the ops that take the most time in one call of each function."""
    from torch.profiler import ProfilerActivity, profile

    tables = {}
    for name, fn in fns.items():
        fn()  # warm
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        tables[name] = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)
        log(f"  profile {name}:\n{tables[name]}")
    return tables


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between the closest ranks; None if empty."""
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def batch_of(features, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Features padded into one batch of model inputs: {input name: [B, S] tensor} (the ONNX input names)."""
    from albertlm.interop.onnx import INPUTS
    from albertlm.tasks.common import pad_batch

    batch = pad_batch(features)
    return {n: torch.from_numpy(batch[n]).to(device) for n in INPUTS}


def latency_rounds(runs: dict, jobs: dict[str, Callable], rounds: int) -> dict[str, dict[str, list[float]]]:
    """Every variant on every job, in alternation, round after round, so that other processes' load
    falls on all of them alike; one untimed warm-up round first.

    Args:
        runs: {variant name: model}.
        jobs: {job name: fn(model)}, e.g. every dev example at batch 1.
        rounds: timed rounds.
    Returns:
        {variant: {job: [seconds of each round]}}.
    """
    times: dict = {v: {j: [] for j in jobs} for v in runs}
    with torch.inference_mode():
        for model in runs.values():  # warm-up
            for job in jobs.values():
                job(model)
        for _ in range(rounds):
            for name, model in runs.items():
                for j, job in jobs.items():
                    t = time.perf_counter()
                    job(model)
                    times[name][j].append(time.perf_counter() - t)
    return times


def time_rounds(runs: dict, jobs: dict[str, Callable], rounds: int) -> dict[str, dict[str, float]]:
    """`latency_rounds` reduced to its medians: {variant: {job: median seconds}}."""
    return {v: {j: statistics.median(ts) for j, ts in js.items()} for v, js in latency_rounds(runs, jobs, rounds).items()}


def best_of_median_ms(fn: Callable, inputs: Sequence, repeats: int = 5) -> float:
    """Batch-1 time in ms: per input the fastest of `repeats` calls after one warm call (other processes
    on a shared machine only ever add time), then the median over the inputs.

    Args:
        fn: called as fn(x) for each x of `inputs`.
        inputs: one model input per item.
        repeats: timed calls per input.
    Returns:
        The median over `inputs` of each input's fastest call, in milliseconds.
    """
    best = []
    for x in inputs:
        fn(x)  # warm the path for this length
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn(x)
            times.append(time.perf_counter() - start)
        best.append(min(times))
    return 1000 * statistics.median(best)


# ---------------------------------------------------------------------------- memory
def warm_up_libraries() -> None:
    """One small training step of unrelated layers, so that the libraries' one-time state (thread
    pools, BLAS / oneDNN buffers, the autograd engine) is in the baseline, not in the model's peak."""
    layer = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64), torch.nn.LayerNorm(64))
    opt = torch.optim.AdamW(layer.parameters())
    x = layer(torch.randn(4, 16, 64)).view(4, 16, 4, 16).transpose(1, 2)
    y = torch.nn.functional.scaled_dot_product_attention(x, x, x).sum(1)
    torch.nn.functional.cross_entropy(y.reshape(-1, 16), torch.zeros(64, dtype=torch.long)).backward()
    opt.step()


def _status_kb(pid: int, field: str) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return None


class ProcessProbe:
    """Memory and CPU of another process: psutil if installed, else /proc (None once it has ended)."""

    def __init__(self, pid: int):
        self.pid = pid
        try:
            import psutil

            self._ps = psutil.Process(pid)
        except ImportError:
            self._ps = None

    def rss(self) -> int | None:
        """Resident bytes now."""
        if self._ps is None:
            return _status_kb(self.pid, "VmRSS")
        with contextlib.suppress(Exception):  # psutil.NoSuchProcess and kin: the process has ended
            return self._ps.memory_info().rss
        return None

    def hwm(self) -> int | None:
        """The process's peak resident bytes over its life (Linux's VmHWM)."""
        return _status_kb(self.pid, "VmHWM")

    def cpu_s(self) -> float | None:
        """User + system CPU seconds so far."""
        if self._ps is not None:
            with contextlib.suppress(Exception):
                t = self._ps.cpu_times()
                return t.user + t.system
            return None
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return None


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants, summed (pages two of them share count twice:
    an upper bound of what the tree holds); 0 once it has ended. Linux (/proc) only."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += _status_kb(p, "VmRSS") or 0
        with contextlib.suppress(OSError, ValueError):
            for task in os.listdir(f"/proc/{p}/task"):
                todo.extend(int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split())
    return total


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The lowest cosine between matching rows of two [N, D] arrays."""
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return float(((a * b).sum(1) / np.maximum(norms, 1e-12)).min())


class PeakRss:
    """Context manager: a thread sampling a process's RSS every `interval_s`; `peak` bytes once done."""

    def __init__(self, probe: ProcessProbe, interval_s: float = 0.02):
        self.probe, self.interval_s, self.peak = probe, interval_s, 0
        self._done = threading.Event()

    def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, self.probe.rss() or 0)
            if self._done.wait(self.interval_s):
                return

    def __enter__(self):
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, self.probe.rss() or 0)
        return False


# ---------------------------------------------------------------------------- targets and the results file
@dataclass(frozen=True)
class Target:
    """A goal with its comparison: `measured` against `threshold`, higher or lower being better."""

    name: str
    measured: float | None
    threshold: float
    higher_is_better: bool = True
    unit: str = "x"

    @property
    def met(self) -> bool | None:
        """None when the run did not measure it."""
        if self.measured is None:
            return None
        return self.measured >= self.threshold if self.higher_is_better else self.measured <= self.threshold

    def as_dict(self) -> dict:
        return {"target": self.name, "measured": self.measured, "threshold": self.threshold,
                "op": ">=" if self.higher_is_better else "<=", "unit": self.unit, "met": self.met}


def targets_markdown(targets: list[dict]) -> list[str]:
    """The targets (as `Target.as_dict` wrote them) as a markdown table: what this run measured (the
    verdict of a goal over all runs is written once, in docs/benchmarks.md's "Targets")."""
    lines = ["| target | measured | threshold | this run |", "|---|---|---|---|"]
    for t in targets:
        v = t["measured"]
        if v is None:
            shown = "-"
        else:  # a tiny difference shows as 1.3e-06, not 0.00
            shown = (f"{v:.2f}" if v == 0 or abs(v) >= 0.01 else f"{v:.2g}") + t["unit"]
        met = "not measured" if t["met"] is None else ("yes" if t["met"] else "**no**")
        lines.append(f"| {t['target']} | {shown} | {t.get('op', '>=')} {t['threshold']} | {met} |")
    return lines


def markdown_table(header: Sequence[str], rows: Iterable[Sequence]) -> list[str]:
    """A markdown table: the header row, the rule, one line per row (cells as str() gives them)."""
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def append_markdown(path: Path, text: str) -> None:
    """Append a rendered section to a markdown file (made with a short header when new), atomically."""
    from albertlm.utils import atomic_write_text

    header = ("# Benchmarks\n\nDated results of the scripts in `benchmarks/`, newest last; each section names the "
              "command that made it and the JSON with the raw numbers.\n")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    existing = path.read_text(encoding="utf-8") if path.exists() else header
    atomic_write_text(path, existing.rstrip("\n") + "\n\n" + text)


# ---------------------------------------------------------------------------- the results envelope
REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
"""Where results files are committed (benchmarks/results/INDEX.md lists them)."""

ENVELOPE = ("date", "command", "machine", "wall_s", "json", "targets", "results")
"""The keys of every results file, in order."""


def command_line(module: str, argv: Sequence[str] | None = None) -> str:
    """How to make the result again: `python -m MODULE ARGS`, quoted for a POSIX shell.

    Args:
        module: the script's module, e.g. "benchmarks.bench_speed".
        argv: its arguments; None: this process's (sys.argv[1:]).
    """
    return shlex.join(["python", "-m", module, *(sys.argv[1:] if argv is None else [str(a) for a in argv])])


def envelope(module: str, argv: Sequence[str] | None, results: dict, targets: Iterable[Target | dict] = (),
             started: float | None = None) -> dict:
    """A result in the envelope every results file has.

    Args:
        module, argv: the command (see `command_line`).
        results: the script's own numbers.
        targets: Target objects (or their `as_dict`): each verdict is computed here, once.
        started: time.perf_counter() at the start, for wall_s (None: not recorded).
    Returns:
        {"date", "command", "machine", "wall_s", "json" (set by `publish`), "targets", "results"}.
    """
    return {"date": datetime.datetime.now().isoformat(timespec="seconds"), "command": command_line(module, argv),
            "machine": machine(), "wall_s": None if started is None else round(time.perf_counter() - started, 1),
            "json": None, "targets": [t.as_dict() if isinstance(t, Target) else t for t in targets], "results": results}


def read_result(path: str | Path) -> dict:
    """A results file in the envelope's shape; a file from before the envelope has its own keys moved
    under "results" (its date, command, machine, wall_s and targets, where it had them, kept on top)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, dict) and "results" in data and "command" in data:
        return data
    rest = dict(data) if isinstance(data, dict) else {"value": data}
    top = {k: rest.pop(k, None) for k in ENVELOPE[:-1]}
    top["targets"] = top["targets"] or []
    return {**top, "results": rest}


def write_result(result: dict, *paths: str | Path | None) -> str:
    """`result` as indented JSON, written atomically to every path given (folders made; None skipped).

    Returns:
        The JSON text.
    """
    from albertlm.utils import atomic_write_text

    text = json.dumps(result, indent=1, default=str) + "\n"
    for path in paths:
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, text)
    return text


def shown_path(path: str | Path) -> str:
    """A path as a results file names it: relative to the repository when inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def publish(result: dict, out: str | Path | None, render: Callable[[dict], str] | None = None,
            markdown: str | Path | None = None, also: Sequence[str | Path | None] = ()) -> str:
    """The end of every script: write the envelope, then print its markdown (or the JSON) and append it.

    Args:
        result: an `envelope`; its "json" key is set to where it is written.
        out: the results file (None: printed only).
        render: result -> markdown section; None prints the JSON instead.
        markdown: a markdown file to append the rendered section to (needs `render`).
        also: more paths the same JSON is written to (a run directory's copy).
    Returns:
        What was printed.
    """
    result["json"] = None if out is None else shown_path(out)
    text = write_result(result, out, *also)
    shown = render(result) if render else text
    print(shown)
    if markdown is not None and render is not None:
        append_markdown(Path(markdown), shown)
    return shown
