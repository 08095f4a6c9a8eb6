"""What `albertlm report` and its sections can be told, and what the study runs: frozen settings.

They sit below every producer of the report (analysis/params.py, speed.py, study.py, report.py)
and below the typed results (analysis/results.py), which carry them, so the results can be read
back from results.json without importing the code that made them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

DEFAULT_BUDGET_MINUTES = 60.0
QUICK_BUDGET_MINUTES = 6.0


@dataclass(frozen=True)
class StudySettings:
    """The study's model, data and optimisation (the budget comes from the report)."""

    preset: str = "albert-mini"
    """The model shape (config.PRESETS); E and sharing vary per variant."""
    corpus: str = "kjv"
    """Corpus spec: the built-in King James Bible by default, or a file path."""
    vocab_size: int = 8000
    """SentencePiece vocabulary (capped at what the corpus supports)."""
    max_seq_length: int = 64
    """Tokens per pretraining example after the curriculum."""
    curriculum_seq_length: int | None = 16
    """Tokens per example during the curriculum (None: no curriculum)."""
    curriculum_fraction: float = 1 / 3
    """Share of the steps trained at curriculum_seq_length (each step then holds
    max_seq_length / curriculum_seq_length times more, shorter, examples)."""
    batch_size: int = 32
    """Examples per step."""
    optimizer: str = "adamw"
    """adamw (the quick recipe's) or lamb (the paper's)."""
    lr: float = 1e-3
    """Peak learning rate."""
    warmup_fraction: float = 0.06
    """Share of the steps spent warming up."""
    embedding_sizes: tuple[int, ...] = (64, 128, 0)
    """Table 3's E values; 0 means E = H."""
    table3_sharing: tuple[str, ...] = ("all",)
    """Sharing strategies swept over E in Table 3 (the paper's grid: ("all", "none"))."""
    seeds: int = 2
    """Training runs per variant, with seeds seed, seed + 1, ..."""
    steps: int | None = None
    """Steps of every run; None: as many as the budget allows (plan_steps)."""
    heldout_fraction: float = 0.08
    """Documents held out (never trained on) for every evaluation."""
    eval_examples: int = 1024
    """Held-out pairs per evaluation at most."""
    min_steps: int = 5
    """A run trains at least this many steps whatever the budget."""
    calibration_steps: int = 3
    """Timed steps (after one warm-up) that measure the step time."""
    seed: int = 0
    """Seed of the tokenizer sample and the data builds, and of each variant's first run."""
    workers: int = 1
    """Processes of each data build."""

    def __post_init__(self) -> None:
        from albertlm.errors import AlbertlmError

        if self.seeds < 1:
            raise AlbertlmError(f"study seeds must be at least 1, got {self.seeds}")
        if self.steps is not None and self.steps < 1:
            raise AlbertlmError(f"study steps must be at least 1, got {self.steps}")
        if not 0.0 <= self.curriculum_fraction < 1.0:
            raise AlbertlmError(f"study curriculum_fraction must be in [0, 1), got {self.curriculum_fraction}")
        unknown = [s for s in self.table3_sharing if s not in ("all", "attention", "ffn", "none")]
        if unknown or not self.table3_sharing:
            raise AlbertlmError(f"study table3_sharing: unknown or empty {unknown or self.table3_sharing}")


@dataclass(frozen=True)
class SpeedSettings:
    """What the speed section measures."""

    presets: tuple[str, ...] = ("bert-base", "bert-large", "albert-base", "albert-large", "albert-xlarge",
                                "albert-xxlarge")
    """Presets timed for training; `reference` must be among them."""
    reference: str = "bert-large"
    """Throughputs are divided by this preset's (the paper: BERT-large)."""
    batch_size: int = 1
    """Sequences per training step."""
    seq_len: int = 128
    """Tokens per sequence."""
    repeats: int = 2
    """Timed training steps per preset (after one warm-up step)."""
    inference: tuple[str, ...] = ("albert-base", "albert-large")
    """ALBERT presets whose inference is compared with their BERT twin (albert-xlarge's twin is 5 GB)."""
    inference_batch_size: int = 1
    """Sequences per inference call."""
    inference_seq_len: int = 128
    """Tokens per sequence at inference."""
    inference_repeats: int = 3
    """Timed inference calls (after one warm-up call)."""
    memory: bool = True
    """Measure the peak RSS of inference in a fresh process (Linux)."""
    threads: int | None = None
    """torch threads in the memory process (None: torch's default)."""
    seed: int = 0
    """Seed of the random weights and inputs."""


@dataclass(frozen=True)
class Variant:
    """One model of the study: its embedding size, sharing strategy and sentence-level objective."""

    name: str
    embedding_size: int
    sharing: str
    objective: str = "sop"


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
