"""`albertlm report`: the paper's findings reproduced at small scale, as one Markdown report.

`run_report(settings, out_dir)` runs, in order,
  1. parameter and communication accounting of every configuration (analysis/params.py);
  2. speed and memory on this machine (analysis/speed.py);
  3-5. a pretraining study on the built-in corpus (analysis/study.py): embedding size and sharing
     (Tables 3, 4), sentence-level objectives cross-evaluated (Table 5), layer smoothness (Figure 1);
and writes out_dir/report.md with PNG figures beside it, plus results.json with every number.

Budget: `budget_minutes` is wall-clock time for the whole report. Sections 1-2 take what they
take (a few minutes: their workload is fixed by SpeedSettings); what is left, minus a reserve for
the final evaluations, is split evenly among the study's pretraining runs and turned into one
common step count from a step time measured at the start of the study (analysis/study.py).
`quick` swaps in tiny workloads (a 6-minute budget) for smoke tests: its numbers show the
pipeline works, not the paper's effects.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from albertlm.analysis.params import XXLARGE_NOTE, accounting
from albertlm.analysis.report_md import render
from albertlm.analysis.speed import SpeedSettings, measure_speed
from albertlm.analysis.study import StudySettings, run_study

DEFAULT_BUDGET_MINUTES = 60.0
QUICK_BUDGET_MINUTES = 6.0
FINETUNE_SHARE = 0.3
"""Share of each run's time that goes to SST-2 fine-tuning when the downstream score is on."""
DOWNSTREAM_MIN_BUDGET = 120.0
"""`downstream=auto` fine-tunes on SST-2 only from this budget (minutes) up."""

QUICK_SPEED = SpeedSettings(seq_len=64, repeats=1, inference=("albert-base", "albert-large"),
                            inference_seq_len=64, inference_repeats=2)
QUICK_STUDY = StudySettings(vocab_size=4000, eval_examples=256, calibration_steps=2)


@dataclass(frozen=True)
class ReportSettings:
    """Everything `albertlm report` can be told."""

    budget_minutes: float | None = None
    """Wall-clock budget of the whole report (default: 60, or 6 with quick)."""
    quick: bool = False
    """Tiny workloads for a smoke test (a 6-minute budget): checks the pipeline, not the paper's effects."""
    hf_checkpoint: str | None = None
    """An HF-format ALBERT directory (with spiece.model) added to the smoothness figure."""
    downstream: Literal["auto", "on", "off"] = "auto"
    """SST-2 fine-tuning of every study model: on, off, or auto (on when the data is there and the
    budget is at least 120 minutes)."""
    sst2_data: str | None = None
    """GLUE SST-2 directory (train.tsv, dev.tsv); None: no downstream scores."""
    threads: int | None = None
    """torch threads for everything (None: the faster of 1 and torch's default, timed on the study's model)."""
    corpus: str = "kjv"
    """The study's corpus: the built-in King James Bible or a file path."""
    seed: int = 0
    """Seed of everything random in the study and the speed measurements."""
    steps: int | None = None
    """Steps of every study run (None: derived from the budget)."""
    seeds: int | None = None
    """Training seeds per study variant (None: the study's default, 2)."""
    study: StudySettings | None = None
    """Override the study's settings (default: StudySettings, or the quick ones)."""
    speed: SpeedSettings | None = None
    """Override the speed settings (default: SpeedSettings, or the quick ones)."""

    def __post_init__(self) -> None:
        from albertlm.errors import AlbertlmError
        from albertlm.utils import check_field_types

        check_field_types(self)
        if self.budget_minutes is not None and self.budget_minutes <= 0:
            raise AlbertlmError(f"--budget must be positive, got {self.budget_minutes}")
        if self.downstream not in ("auto", "on", "off"):
            raise AlbertlmError(f"downstream must be auto, on or off, got {self.downstream!r}")
        if self.threads is not None and self.threads <= 0:
            raise AlbertlmError(f"--threads must be positive, got {self.threads}")

    @property
    def budget(self) -> float:
        """Minutes."""
        if self.budget_minutes is not None:
            return float(self.budget_minutes)
        return QUICK_BUDGET_MINUTES if self.quick else DEFAULT_BUDGET_MINUTES

    def resolved_study(self) -> StudySettings:
        base = self.study or (QUICK_STUDY if self.quick else StudySettings())
        extra = {k: v for k, v in (("steps", self.steps), ("seeds", self.seeds)) if v is not None}
        return dataclasses.replace(base, corpus=self.corpus if self.study is None else base.corpus, seed=self.seed,
                                   **extra)

    def resolved_speed(self, threads: int | None = None) -> SpeedSettings:
        base = self.speed or (QUICK_SPEED if self.quick else SpeedSettings())
        return dataclasses.replace(base, seed=self.seed, threads=threads or self.threads)


# ---------------------------------------------------------------------------- environment
def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def environment() -> dict[str, Any]:
    """Versions and machine facts for the reproducibility section."""
    from importlib import metadata

    import albertlm

    def version(pkg: str) -> str | None:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    cpu = next((line.split(":", 1)[1].strip() for line in _read("/proc/cpuinfo").splitlines()
                if line.startswith("model name")), platform.processor() or platform.machine())
    mem = next((int(line.split()[1]) * 1024 for line in _read("/proc/meminfo").splitlines()
                if line.startswith("MemTotal:")), None)
    src = Path(albertlm.__file__).resolve().parent
    commit = None
    try:
        out = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
        if out.returncode == 0:
            commit = out.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {"albertlm": albertlm.__version__, "git_commit": commit, "python": platform.python_version(),
            "torch": torch.__version__, "numpy": version("numpy"), "sentencepiece": version("sentencepiece"),
            "matplotlib": version("matplotlib"), "transformers": version("transformers"),
            "platform": platform.platform(), "cpu_model": cpu, "cpu_count": os.cpu_count(),
            "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "memory_bytes": mem,
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "cuda": torch.cuda.is_available()}


# ---------------------------------------------------------------------------- the run
def _logger(path: Path) -> Callable[[str], None]:
    start = time.perf_counter()

    def log(message: str) -> None:
        line = f"[{time.perf_counter() - start:7.1f} s] {message}"
        print(line, flush=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    return log


def _sst2(settings: ReportSettings) -> tuple[Path | None, str]:
    """(SST-2 directory or None, why) per settings.downstream."""
    if settings.downstream == "off":
        return None, "off (--downstream off)"
    if settings.sst2_data is None:
        return None, "skipped: no SST-2 directory given (--sst2 DIR)"
    path = Path(settings.sst2_data)
    if not ((path / "train.tsv").is_file() and (path / "dev.tsv").is_file()):
        return None, f"skipped: no SST-2 data at {path}"
    if settings.downstream == "auto" and (settings.quick or settings.budget < DOWNSTREAM_MIN_BUDGET):
        return None, (f"skipped: the budget ({settings.budget:g} min) is under {DOWNSTREAM_MIN_BUDGET:g} min "
                      "(--downstream on forces it)")
    return path.resolve(), f"on: SST-2 from {path.resolve()}"


def _training_curves(study: dict[str, Any]) -> dict[str, list[tuple[int, float]]]:
    from albertlm.train.metrics import read_metrics

    curves = {}
    for name, run in study["runs"].items():
        if run["seed"] != study["seeds"][0]:  # one seed keeps the figure legible
            continue
        path = Path(run["summary"]["run_dir"]) / "metrics.jsonl"
        curves[name] = [(r["step"], r["mlm_loss"]) for r in read_metrics(path) if r.get("split") == "train"]
    return curves


def _check_inputs(settings: ReportSettings) -> None:
    """Fail before any work on a corpus or checkpoint that cannot be read."""
    from albertlm.data.corpus import Corpus
    from albertlm.errors import AlbertlmError

    Corpus(settings.resolved_study().corpus)  # resolves the files now: a typo fails here
    if settings.hf_checkpoint:
        path = Path(settings.hf_checkpoint)
        missing = [f for f in ("config.json", "spiece.model") if not (path / f).is_file()]
        if missing:
            raise AlbertlmError(f"--hf-checkpoint {path}: no {' or '.join(missing)} (an HF ALBERT directory "
                                "with its SentencePiece vocabulary is needed)")


def _choose_threads(settings: ReportSettings, default: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Set torch's thread count: --threads, else the faster of 1 and `default` on the study's model."""
    from albertlm.analysis.speed import fastest_threads
    from albertlm.config import get_preset

    if settings.threads:
        torch.set_num_threads(settings.threads)
        return {"chosen": settings.threads, "how": "--threads", "seconds": {}}
    if default <= 1:
        return {"chosen": default, "how": "torch's default", "seconds": {}}
    study = settings.resolved_study()
    shape = get_preset(study.preset)
    config = get_preset(study.preset, vocab_size=study.vocab_size, embedding_size=shape.hidden_size, sharing="none")
    best, seconds = fastest_threads(config, study.batch_size, study.max_seq_length, (1, default), seed=settings.seed)
    log("report: threads " + ", ".join(f"{n}: {s:.2f} s/step" for n, s in seconds.items()) + f" -> {best}")
    return {"chosen": best, "how": f"auto: the faster of 1 and {default} threads on a step of the study's model",
            "seconds": {str(n): s for n, s in seconds.items()}}


def run_report(settings: ReportSettings, out_dir: str | os.PathLike, command: str = "",
               log: Callable[[str], None] | None = None) -> Path:
    """Run every section and write out_dir/report.md, its figures and results.json.

    Args:
        settings: ReportSettings.
        out_dir: output directory; the study's run directories go to out_dir/study (replaced).
        command: the command line that started the report, quoted in it.
        log: progress lines (default: print and append to out_dir/report.log).
    Returns:
        The path of report.md.
    """
    _check_inputs(settings)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.log").unlink(missing_ok=True)
    log = log or _logger(out / "report.log")
    saved_threads = torch.get_num_threads()
    try:
        start = time.perf_counter()
        budget_s = settings.budget * 60
        log(f"report: budget {settings.budget:g} min{' (quick)' if settings.quick else ''}, output {out}")
        threads = _choose_threads(settings, saved_threads, log)
        env = environment()
        timings: dict[str, float] = {}

        t = time.perf_counter()
        params = accounting()
        timings["1 parameters"] = time.perf_counter() - t

        t = time.perf_counter()
        speed = measure_speed(settings.resolved_speed(threads["chosen"]), log)
        timings["2 speed"] = time.perf_counter() - t

        sst2, downstream_note = _sst2(settings)
        study_settings = settings.resolved_study()
        if (out / "study").exists():
            shutil.rmtree(out / "study")
        t = time.perf_counter()
        left = budget_s - (t - start)
        study = run_study(study_settings, out / "study", max(left, 0.0), log, hf_checkpoint=settings.hf_checkpoint,
                          sst2_dir=sst2, finetune_share=FINETUNE_SHARE)
        timings["3-5 study"] = time.perf_counter() - t

        log("report: figures")
        figures = _figures(speed, study, study_settings.preset, out)
        wall = time.perf_counter() - start
        timings["total"] = wall
        env["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
        results = {"settings": {**dataclasses.asdict(settings), "budget_minutes": settings.budget},
                   "command": command, "environment": env, "threads": threads, "timings": timings, "params": params,
                   "xxlarge_note": XXLARGE_NOTE, "speed": speed, "study": study,
                   "downstream": downstream_note, "figures": figures, "out_dir": str(out.resolve())}
        (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
        path = out / "report.md"
        path.write_text(render(results))
        log(f"report: wrote {path} in {wall / 60:.1f} min")
        return path
    finally:
        torch.set_num_threads(saved_threads)


def _figures(speed: dict[str, Any], study: dict[str, Any], preset: str, out: Path) -> dict[str, str]:
    """Draw the report's figures into `out`; their file names by section."""
    from albertlm.analysis.figures import plot_curves, plot_speed, plot_study, plot_table5
    from albertlm.analysis.report_md import PAPER_TABLE5
    from albertlm.analysis.smoothness import plot_smoothness

    figures = {"speed": "speed.png", "study": "embedding_sharing.png", "table5": "objectives.png",
               "smoothness": "smoothness.png", "curves": "training_curves.png"}
    plot_speed(speed, out / figures["speed"])
    plot_study(study["variants"], out / figures["study"], f"Held-out [MASK] accuracy vs parameters ({preset}, "
               f"{study['plan']['steps']} steps, {len(study['seeds'])} seeds)")
    plot_table5(study["table5"], PAPER_TABLE5, out / figures["table5"])
    plot_smoothness(dict(study["smoothness"]), out / figures["smoothness"],
                    "Input vs output of every layer, held-out tokens (Figure 1)")
    plot_curves(_training_curves(study), out / figures["curves"])
    return figures
