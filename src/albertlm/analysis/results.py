"""The report's results as frozen, typed records, and results.json in and out.

Each section's producer returns its record (params.accounting -> AccountingRow, speed.measure_speed
-> SpeedResults, study.run_study -> StudyResults, report.environment -> Environment) and
report.run_report assembles the Report; report_md.render reads only these attributes. results.json
is `to_json(report)`: every record's fields under their own names, in field order, so the file's
keys are the field names below. `from_json` reads it back and names the file and the field that
is missing, of the wrong type or out of its range: the type hints say what each field holds
(analysis/checked_json.py: `Fraction` is a finite number in [0, 1], `Count` an integer >= 0, ...),
`check` methods what must agree between fields, and `SETTINGS_HINTS` what the report needs of the
settings beyond their own checks.

Mappings keyed by data (run names, variant names, objectives, timing labels) stay dicts; records
of a fixed shape are dataclasses. A run's recipe stays the dict that recipe.json holds (its shape
belongs to train/pretrain_recipe.py, whose `pretrain_command` reads it).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from albertlm.analysis.checked_json import (NONEMPTY, Count, Fraction, Invalid, Keys, NonNegative, Positive, Reader,
                                            Size)
from albertlm.analysis.settings import ReportSettings, SpeedSettings, StudySettings, Variant
from albertlm.config import SHARING_STRATEGIES
from albertlm.data.build import BuildSettings
from albertlm.data.instances import OBJECTIVES
from albertlm.errors import AlbertlmError
from albertlm.train.pretrain_recipe import BUILD_FIELDS, PretrainRecipe

OMIT_NONE = {"omit_none": True}
"""Field metadata: the key is left out of results.json while the value is None (as the dicts did)."""
Sharing = Literal[SHARING_STRATEGIES]  # type: ignore[valid-type]
"""One of config.SHARING_STRATEGIES."""


# ---------------------------------------------------------------------------- section 1: parameters
@dataclass(frozen=True)
class AccountingRow:
    """One preset or ablation row of the parameter, FLOP and communication accounting."""

    table: Literal["1", "3", "4"]
    """The paper's table: "1" (and the presets), "3" or "4"."""
    name: str
    layers: Size
    hidden: Size
    embedding: Size
    sharing: Sharing
    backbone: Size
    """Distinct parameters of AlbertModel (what the paper counts)."""
    with_heads: Size
    """backbone + the MLM and SOP heads."""
    breakdown: dict[str, Count]
    """ParamCount's parts, plus attention and ffn totals."""
    paper_M: Positive | None
    """The paper's printed figure in millions, or None."""
    diff_M: float | None
    """backbone / 1e6 - paper_M, rounded to 3 decimals."""
    within_tolerance: bool | None
    note: str | None
    seq_len: Size
    train_flops_per_token: Positive
    infer_flops_per_token: Positive
    batch_tokens: Size
    train_flops_per_step: Positive
    allreduce_bytes_fp32: Size
    allreduce_bytes_bf16: Size


# ---------------------------------------------------------------------------- section 2: speed
@dataclass(frozen=True)
class TrainingSpeed:
    """One preset's forward + backward pretraining step."""

    name: str
    seconds: Positive
    """Median seconds per step."""
    times: Annotated[list[Positive], NONEMPTY]
    tokens_per_s: Positive
    activation_bytes: Count
    """Bytes autograd saved for the backward pass (weights excluded)."""
    parameters: Size
    """Distinct parameters with the pretraining heads."""
    flops_per_token: Positive
    paper_speedup: Positive | None
    speedup: Positive
    """Throughput over the reference preset's."""
    flops_speedup: Positive
    """The reference's training FLOPs per token over this preset's."""


@dataclass(frozen=True)
class PeakRss:
    """Resident memory of one inference forward pass in a fresh process (KiB)."""

    rss_built_kib: Count | None
    peak_kib: Count | None
    """The high-water mark after the forward pass: at least rss_built_kib."""
    peak_reset: bool

    def check(self) -> None:
        if self.peak_kib is not None and self.rss_built_kib is not None and self.peak_kib < self.rss_built_kib:
            raise Invalid("peak_kib", f"at least rss_built_kib ({self.rss_built_kib})", self.peak_kib)


@dataclass(frozen=True)
class InferenceSpeed:
    """One backbone forward pass: an ALBERT preset or its BERT twin."""

    name: str
    pair: str
    """The ALBERT preset this row belongs to."""
    twin: bool
    seconds: Positive
    times: Annotated[list[Positive], NONEMPTY]
    parameters: Size
    parameter_bytes: Size
    flops_per_token: Positive
    rss: PeakRss | None


@dataclass(frozen=True)
class SpeedResults:
    settings: SpeedSettings
    reference: str | None
    training: list[TrainingSpeed]
    inference: list[InferenceSpeed]


# ---------------------------------------------------------------------------- sections 3-5: the study
@dataclass(frozen=True)
class StudyPlan:
    """How the study's time became one step count for every run."""

    per_run_seconds: float
    """Negative, like pretrain, finetune and seconds_left_after_setup, when setup outran the budget."""
    pretrain_seconds: float
    finetune_seconds: float
    step_seconds: Positive
    overhead_seconds: NonNegative
    steps: Size
    steps_from: str
    seconds_available: NonNegative
    seconds_left_after_setup: float
    reserve_seconds: NonNegative
    curriculum_steps: Count
    runs: Size

    def check(self) -> None:
        if self.curriculum_steps > self.steps:
            raise Invalid("curriculum_steps", f"at most steps ({self.steps})", self.curriculum_steps)


@dataclass(frozen=True)
class HeldoutScores:
    """train.mlm_eval.evaluate's scores on one held-out set (accuracies are fractions)."""

    mlm_mask_accuracy: Fraction
    mlm_kept_accuracy: Fraction
    mlm_random_accuracy: Fraction
    mlm_mask_loss: NonNegative
    mlm_all_accuracy: Fraction
    mlm_all_loss: NonNegative
    mask_share: Fraction
    kept_share: Fraction
    random_share: Fraction
    baseline_unigram_accuracy: Fraction
    baseline_bigram_accuracy: Fraction
    mask_distinct_predictions: Count
    sop_accuracy: Fraction
    baseline_sop_accuracy: Fraction
    examples: NonNegative
    """Counts, as the float sums they are reduced from."""
    masked_tokens: NonNegative
    mask_positions: NonNegative


@dataclass(frozen=True)
class PretrainSummary:
    """train.pretrain.pretrain's summary of one finished run."""

    steps: Size
    tokens_seen: Count
    train_seconds: NonNegative
    tokens_per_s: NonNegative
    parameters: Size
    eval: HeldoutScores
    run_dir: str
    model_dir: str


@dataclass(frozen=True)
class Downstream:
    """SST-2 fine-tuning of one pretrained run."""

    accuracy: Fraction | None
    steps: Size
    dev_examples: Count
    seconds: NonNegative


@dataclass(frozen=True)
class StudyRun:
    """One variant trained with one seed."""

    variant: Variant
    seed: int
    recipe: dict[str, Any]
    """The run's PretrainRecipe as recipe.json holds it (its build settings nested, or beside the rest
    as recipes were written before they were grouped)."""
    summary: PretrainSummary
    seconds: NonNegative
    backbone: Size
    with_heads: Size
    downstream: Downstream | None = field(default=None, metadata=OMIT_NONE)

    def check(self) -> None:
        """The recipe is one PretrainRecipe accepts (the report prints it as a command line)."""
        flat = "build" not in self.recipe
        build = {k: v for k, v in self.recipe.items() if k in BUILD_FIELDS} if flat else self.recipe["build"]
        rest = {k: v for k, v in self.recipe.items() if k != "build" and not (flat and k in BUILD_FIELDS)}
        built = READER.parse(BuildSettings, build, "recipe" if flat else "recipe.build")
        _RECIPE_READER.parse(PretrainRecipe, {**rest, "build": built}, "recipe")


@dataclass(frozen=True)
class VariantSummary:
    """One variant over its seeds: every seed's value, the mean and the spread (max - min)."""

    variant: Variant
    backbone: Size
    with_heads: Size
    runs: list[str]
    seeds: Annotated[list[int], NONEMPTY]
    mask_accuracy: list[Fraction]
    """One value per seed, like runs and mask_loss (and downstream, or none)."""
    mask_loss: list[NonNegative]
    downstream: list[Fraction]
    mask_accuracy_mean: Fraction
    mask_accuracy_spread: Fraction
    mask_loss_mean: NonNegative
    mask_loss_spread: NonNegative
    downstream_mean: Fraction | None
    """None (like downstream_spread) when no run was fine-tuned."""
    downstream_spread: Fraction | None

    def check(self) -> None:
        for name in ("runs", "mask_accuracy", "mask_loss", *(["downstream"] if self.downstream else [])):
            _per_seed(name, getattr(self, name), self.seeds)
        for name in ("mask_accuracy", "mask_loss", "downstream"):
            _summarises(self, name, getattr(self, name), name)


@dataclass(frozen=True)
class Table5Seed:
    """One seed's model of one objective, scored on the held-out pairs of every build."""

    run: str
    seed: int
    mlm_accuracy: Fraction
    nsp_accuracy: Fraction
    sop_accuracy: Fraction
    scores: Annotated[dict[str, HeldoutScores], Keys(*OBJECTIVES)]
    """Build ("none", "nsp", "sop") -> its scores."""


@dataclass(frozen=True)
class Table5Row:
    """One objective's models: per seed and the means over seeds."""

    variant: str
    per_seed: Annotated[list[Table5Seed], NONEMPTY]
    """One model per seed of the study."""
    mlm_accuracy: Fraction
    nsp_accuracy: Fraction
    sop_accuracy: Fraction
    pairs: Annotated[dict[str, Count], Keys("nsp", "sop")]
    """Held-out pairs of the nsp and sop builds."""
    baseline: Annotated[dict[str, Fraction], Keys("nsp", "sop")]
    """Majority-label accuracy of the nsp and sop builds."""

    def check(self) -> None:
        for name in ("mlm_accuracy", "nsp_accuracy", "sop_accuracy"):
            _summarises(self, name, [getattr(s, name) for s in self.per_seed], f"per_seed's {name}", spread=False)


@dataclass(frozen=True)
class SmoothnessCurve:
    """analysis.smoothness.smoothness's curves of one model, per layer."""

    run: str
    layers: Size
    tokens: Count
    distance: list[NonNegative]
    """One value per layer, like angle (degrees) and cosine."""
    angle: list[NonNegative]
    cosine: list[float]

    def check(self) -> None:
        for name in ("distance", "angle", "cosine"):
            if len(getattr(self, name)) != self.layers:
                raise Invalid(name, f"one value per layer ({self.layers})", getattr(self, name))


@dataclass(frozen=True)
class BuildSummary:
    """A data build's meta.json counts; splits maps a split name to its counters."""

    documents: Count
    text_tokens: Count
    splits: Annotated[dict[str, Annotated[dict[str, Count], Keys("tokens")]], Keys("train")]


@dataclass(frozen=True)
class StudyResults:
    settings: StudySettings
    hidden: Size
    layers: Size
    plan: StudyPlan
    seeds: list[int]
    """settings.seeds of them: every variant's and every Table 5 row's."""
    runs: Annotated[dict[str, StudyRun], NONEMPTY]
    variants: Annotated[dict[str, VariantSummary], NONEMPTY]
    """Variant name -> its runs over the seeds."""
    table5: Annotated[dict[str, Table5Row], Keys(*OBJECTIVES)]
    """Objective ("none", "nsp", "sop") -> its row."""
    smoothness: Annotated[dict[str, SmoothnessCurve], NONEMPTY]
    """Curve label -> curve."""
    base_embedding: Size
    builds: Annotated[dict[str, BuildSummary], Keys("sop")]

    def check(self) -> None:
        if self.plan.curriculum_steps and self.settings.curriculum_seq_length is None:
            raise Invalid("plan.curriculum_steps", "0 when settings.curriculum_seq_length is null",
                          self.plan.curriculum_steps)
        if len(self.seeds) != self.settings.seeds:
            raise Invalid("seeds", f"{self.settings.seeds} seeds (settings.seeds)", self.seeds)
        for name, v in self.variants.items():
            if v.variant.name != name:
                raise Invalid(f"variants[{name!r}].variant.name", repr(name), v.variant.name)
            if v.seeds != self.seeds:
                raise Invalid(f"variants[{name!r}].seeds", f"the study's seeds {self.seeds}", v.seeds)
            missing = [r for r in v.runs if r not in self.runs]
            if missing:
                raise Invalid(f"variants[{name!r}].runs", "names of runs", missing)
        for name, run in self.runs.items():
            if run.variant.name not in self.variants:
                raise Invalid(f"runs[{name!r}].variant.name", "one of the variants", run.variant.name)
        for objective, row in self.table5.items():
            if row.variant not in self.variants:
                raise Invalid(f"table5[{objective!r}].variant", "one of the variants", row.variant)
            seeds = [s.seed for s in row.per_seed]
            if seeds != self.seeds:
                raise Invalid(f"table5[{objective!r}].per_seed", f"one model per seed {self.seeds}", seeds,
                              f"the seeds {seeds}")

    @property
    def embedding_sizes(self) -> list[int]:
        """The swept E values in order, "E = H" (None in the settings) as the hidden size."""
        return list(dict.fromkeys(e or self.hidden for e in self.settings.embedding_sizes))

    @property
    def first_eval(self) -> HeldoutScores:
        """The first run's held-out scores: the baselines and pair count every run shares (one data build)."""
        return next(iter(self.runs.values())).summary.eval


# ---------------------------------------------------------------------------- the report
@dataclass(frozen=True)
class Environment:
    """Versions and machine facts."""

    albertlm: str
    git_commit: str | None
    python: str
    torch: str
    numpy: str | None
    sentencepiece: str | None
    matplotlib: str | None
    transformers: str | None
    platform: str
    cpu_model: str
    cpu_count: Size | None
    cpus_usable: Size | None
    torch_threads: Size
    memory_bytes: Count | None
    load_average: list[NonNegative] | None
    cuda: bool
    load_average_end: list[NonNegative] | None


@dataclass(frozen=True)
class ThreadChoice:
    chosen: Size
    how: str
    seconds: dict[str, Positive]
    """Thread count -> seconds per step, when timed."""


@dataclass(frozen=True)
class Figures:
    """File names of the PNG figures, beside report.md."""

    speed: str
    study: str
    table5: str
    smoothness: str
    curves: str


@dataclass(frozen=True)
class Report:
    """Everything report.md shows; results.json is its `to_json`."""

    settings: ReportSettings
    """With budget_minutes resolved."""
    command: str
    environment: Environment
    threads: ThreadChoice
    timings: Annotated[dict[str, NonNegative], Keys("total")]
    """Section -> wall seconds, and "total"."""
    params: list[AccountingRow]
    xxlarge_note: str
    speed: SpeedResults
    study: StudyResults
    downstream: str
    """Whether and how the SST-2 score ran."""
    figures: Figures
    out_dir: str


# ---------------------------------------------------------------------------- JSON in and out
def to_plain(obj: Any) -> Any:
    """Dataclasses as dicts (field order; OMIT_NONE fields left out while None), tuples as lists."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not (f.metadata.get("omit_none") and getattr(obj, f.name) is None)}
    if isinstance(obj, (list, tuple)):
        return [to_plain(x) for x in obj]
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj


def to_json(report: Report) -> str:
    """results.json's text."""
    return json.dumps(to_plain(report), indent=2, default=str)


SETTINGS_HINTS: dict[type, dict[str, Any]] = {
    ReportSettings: {"budget_minutes": Positive, "threads": Size | None, "steps": Size | None,
                     "seeds": Size | None},
    StudySettings: {**dict.fromkeys(("vocab_size", "max_seq_length", "batch_size", "seeds", "eval_examples",
                                     "min_steps", "calibration_steps", "workers"), Size),
                    "curriculum_seq_length": Size | None, "steps": Size | None, "lr": Positive,
                    **dict.fromkeys(("curriculum_fraction", "warmup_fraction", "heldout_fraction"), Fraction),
                    "embedding_sizes": Annotated[tuple[Count, ...], NONEMPTY]},
    SpeedSettings: {**dict.fromkeys(("batch_size", "seq_len", "repeats", "inference_batch_size",
                                     "inference_seq_len", "inference_repeats"), Size), "threads": Size | None},
    Variant: {"embedding_size": Size, "sharing": Sharing, "objective": Literal[OBJECTIVES]},  # type: ignore[valid-type]
}
"""What the report needs of the settings' fields beyond their own checks; in a Report,
settings.budget_minutes is the budget the report ran with, never None."""
READER = Reader(SETTINGS_HINTS)
_RECIPE_READER = Reader({**SETTINGS_HINTS, PretrainRecipe: {"build": Any}})
"""READER, but taking a recipe's build as the BuildSettings already read (StudyRun.check)."""
parse = READER.parse


def from_json(path: str | os.PathLike) -> Report:
    """Read a results.json back into a Report.

    Raises:
        AlbertlmError: naming the file and the field (as a path such as study.runs['x'].seed) that
        is missing, unknown, of the wrong type or out of its range, or entries that disagree.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:  # ValueError: JSONDecodeError, huge ints
        raise AlbertlmError(f"{path}: cannot read results: {e}") from None
    try:
        return parse(Report, data)
    except AlbertlmError as e:
        raise AlbertlmError(f"{path}: {e}") from None


def _per_seed(name: str, values: list[Any], seeds: list[int]) -> None:
    if len(values) != len(seeds):
        raise Invalid(name, f"one value per seed ({len(seeds)}: {seeds})", values)


def _summarises(record: Any, name: str, values: list[float], of: str, spread: bool = True) -> None:
    """record.<name>_mean (record.<name> without `spread`) is the mean of `values` (named `of`), and
    record.<name>_spread their max minus min."""
    expected = {f"{name}_mean" if spread else name: sum(values) / len(values) if values else None}
    if spread:
        expected[f"{name}_spread"] = max(values) - min(values) if values else None
    for key, want in expected.items():
        got = getattr(record, key)
        if (got is None) != (want is None) or (want is not None and not math.isclose(got, want, rel_tol=1e-9,
                                                                                       abs_tol=1e-12)):
            what = "the mean" if key.endswith("_mean") or not spread else "the max minus the min"
            raise Invalid(key, f"{what} of {of}" + ("" if want is None else f" ({want:.6g})"), got)
