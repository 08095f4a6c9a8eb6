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
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import torch

from albertlm.analysis.params import XXLARGE_NOTE, accounting
from albertlm.analysis.report_md import render
from albertlm.analysis.results import (Environment, Figures, Report, SpeedResults, StudyResults, ThreadChoice,
                                       from_json, to_json)
from albertlm.analysis.settings import ReportSettings
from albertlm.analysis.speed import measure_speed
from albertlm.analysis.study import run_study
from albertlm.errors import AlbertlmError
from albertlm.outputs import OutputDir
from albertlm.rundir import foreign_entries
from albertlm.utils import atomic_write_text

FINETUNE_SHARE = 0.3
"""Share of each run's time that goes to SST-2 fine-tuning when the downstream score is on."""
DOWNSTREAM_MIN_BUDGET = 120.0
"""`downstream=auto` fine-tunes on SST-2 only from this budget (minutes) up."""


# ---------------------------------------------------------------------------- environment
def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def environment() -> Environment:
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
    return Environment(
        albertlm=albertlm.__version__, git_commit=commit, python=platform.python_version(), torch=torch.__version__,
        numpy=version("numpy"), sentencepiece=version("sentencepiece"), matplotlib=version("matplotlib"),
        transformers=version("transformers"), platform=platform.platform(), cpu_model=cpu, cpu_count=os.cpu_count(),
        cpus_usable=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        torch_threads=torch.get_num_threads(), memory_bytes=mem, load_average=_load_average(),
        cuda=torch.cuda.is_available(), load_average_end=None)


def _load_average() -> list[float] | None:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


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


def _training_curves(study: StudyResults) -> dict[str, list[tuple[int, float]]]:
    from albertlm.train.metrics import read_metrics

    curves = {}
    for name, run in study.runs.items():
        if run.seed != study.seeds[0]:  # one seed keeps the figure legible
            continue
        path = Path(run.summary.run_dir) / "metrics.jsonl"
        curves[name] = [(r["step"], r["mlm_loss"]) for r in read_metrics(path) if r.get("split") == "train"]
    return curves


def _check_inputs(settings: ReportSettings) -> None:
    """Fail before any work on a corpus or checkpoint that cannot be read."""
    from albertlm.data.corpus import Corpus

    Corpus(settings.resolved_study().corpus)  # resolves the files now: a typo fails here
    if settings.hf_checkpoint:
        path = Path(settings.hf_checkpoint)
        missing = [f for f in ("config.json", "spiece.model") if not (path / f).is_file()]
        if missing:
            raise AlbertlmError(f"--hf-checkpoint {path}: no {' or '.join(missing)} (an HF ALBERT directory "
                                "with its SentencePiece vocabulary is needed)")


def _choose_threads(settings: ReportSettings, default: int, log: Callable[[str], None]) -> ThreadChoice:
    """Set torch's thread count: --threads, else the faster of 1 and `default` on the study's model."""
    from albertlm.analysis.speed import fastest_threads
    from albertlm.config import get_preset

    if settings.threads:
        torch.set_num_threads(settings.threads)
        return ThreadChoice(chosen=settings.threads, how="--threads", seconds={})
    if default <= 1:
        return ThreadChoice(chosen=default, how="torch's default", seconds={})
    study = settings.resolved_study()
    shape = get_preset(study.preset)
    config = get_preset(study.preset, vocab_size=study.vocab_size, embedding_size=shape.hidden_size, sharing="none")
    best, seconds = fastest_threads(config, study.batch_size, study.max_seq_length, (1, default), seed=settings.seed)
    log("report: threads " + ", ".join(f"{n}: {s:.2f} s/step" for n, s in seconds.items()) + f" -> {best}")
    return ThreadChoice(chosen=best, how=f"auto: the faster of 1 and {default} threads on a step of the study's model",
                        seconds={str(n): s for n, s in seconds.items()})


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
    claimed = OutputDir(out_dir, "report", REPORT_FILES, inputs=_inputs(settings))
    out = claimed.path
    with claimed.claim():
        _check_study_dir(out / "study")
        (out / "report.log").unlink(missing_ok=True)  # the directory is this command's own (claimed)
        return _run_report(settings, out, command, log or _logger(out / "report.log"))


REPORT_FILES = ("report.md", "results.json", "report.log", "study", "*.png")
"""What `albertlm report` writes into --out."""

_STUDY_ENTRIES = {"shared", "runs"}
_STUDY_RUN_EXTRA = frozenset({"sst2"})
"""What a study run directory holds beside a pretraining run's own entries: its SST-2 fine-tuning."""


def _inputs(settings: ReportSettings) -> dict[str, str]:
    """The report's input paths by flag (its --out may be none of them)."""
    return {flag: value for flag, value in (("--corpus", settings.corpus), ("--sst2", settings.sst2_data),
                                            ("--hf-checkpoint", settings.hf_checkpoint))
            if value and Path(value).exists()}


def _check_study_dir(study: Path) -> None:
    """Refuse (one line) to replace a study/ that holds anything the study did not write.

    The study writes shared/<objective>/ and runs/<run>/, each holding what pretraining writes
    (`rundir.foreign_entries`; a run also its sst2/ fine-tuning); anything else there (a file, a link,
    a user's notes) would be deleted with study/.
    """
    if not study.exists():
        return
    if study.is_symlink() or not study.is_dir():
        raise AlbertlmError(f"{study}: not a directory the study wrote (a link or a file); not replacing it")
    foreign = sorted(e.name for e in study.iterdir() if e.name not in _STUDY_ENTRIES)
    for part in sorted(_STUDY_ENTRIES):
        folder = study / part
        if not os.path.lexists(folder):
            continue
        if folder.is_symlink() or not folder.is_dir():
            foreign.append(part)
            continue
        for entry in sorted(folder.iterdir()):
            if entry.is_symlink() or not entry.is_dir():
                foreign.append(f"{part}/{entry.name}")
            else:
                foreign += [f"{part}/{entry.name}/{n}" for n in foreign_entries(entry, _STUDY_RUN_EXTRA)]
    if foreign:
        raise AlbertlmError(f"{study}: holds files the study did not write ({', '.join(foreign[:3])}); not "
                            "replacing it: move them, or choose another --out")


def _run_report(settings: ReportSettings, out: Path, command: str, log: Callable[[str], None]) -> Path:
    """run_report's body, in its claimed output directory."""
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
        speed = measure_speed(settings.resolved_speed(threads.chosen), log)
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
        report = Report(settings=dataclasses.replace(settings, budget_minutes=settings.budget), command=command,
                        environment=dataclasses.replace(env, load_average_end=_load_average()), threads=threads,
                        timings=timings, params=params, xxlarge_note=XXLARGE_NOTE, speed=speed, study=study,
                        downstream=downstream_note, figures=figures, out_dir=str(out.resolve()))
        atomic_write_text(out / "results.json", to_json(report))
        path = out / "report.md"
        atomic_write_text(path, render(report))
        log(f"report: wrote {path} in {wall / 60:.1f} min")
        return path
    finally:
        torch.set_num_threads(saved_threads)


def render_results(out_dir: str | os.PathLike) -> Path:
    """Re-write out_dir/report.md from out_dir/results.json (`albertlm report --render`).

    Args:
        out_dir: a directory `run_report` wrote.
    Returns:
        The path of report.md.
    Raises:
        AlbertlmError: results.json is missing, not JSON, or lacks a field (named).
    """
    out = Path(out_dir)
    text = render(from_json(out / "results.json"))
    path = out / "report.md"
    if path.is_dir() or path.is_symlink():
        raise AlbertlmError(f"{path}: a {'directory' if path.is_dir() else 'link'} where report.md is to be "
                            "written; move it away and run again")
    atomic_write_text(path, text)
    return path


def _figures(speed: SpeedResults, study: StudyResults, preset: str, out: Path) -> Figures:
    """Draw the report's figures into `out`; their file names by section."""
    from albertlm.analysis.figures import plot_curves, plot_speed, plot_study, plot_table5
    from albertlm.analysis.report_md import PAPER_TABLE5
    from albertlm.analysis.smoothness import plot_smoothness

    figures = Figures(speed="speed.png", study="embedding_sharing.png", table5="objectives.png",
                      smoothness="smoothness.png", curves="training_curves.png")
    plot_speed(speed, out / figures.speed)
    plot_study(study.variants, out / figures.study, f"Held-out [MASK] accuracy vs parameters ({preset}, "
               f"{study.plan.steps} steps, {len(study.seeds)} seeds)")
    plot_table5(study.table5, PAPER_TABLE5, out / figures.table5)
    plot_smoothness({k: dataclasses.asdict(c) for k, c in study.smoothness.items()}, out / figures.smoothness,
                    "Input vs output of every layer, held-out tokens (Figure 1)")
    plot_curves(_training_curves(study), out / figures.curves)
    return figures
