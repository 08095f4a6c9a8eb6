"""The report's results as frozen, typed records, and results.json in and out.

Each section's producer returns its record (params.accounting -> AccountingRow, speed.measure_speed
-> SpeedResults, study.run_study -> StudyResults, report.environment -> Environment) and
report.run_report assembles the Report; report_md.render reads only these attributes. results.json
is `to_json(report)`: every record's fields under their own names, in field order, so the file's
keys are the field names below. `from_json` reads it back and names the file and the field that
is missing or of the wrong type.

Mappings keyed by data (run names, variant names, objectives, timing labels) stay dicts; records
of a fixed shape are dataclasses. A run's recipe stays the dict that recipe.json holds (its shape
belongs to train/pretrain_recipe.py, whose `pretrain_command` reads it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from albertlm.analysis.settings import ReportSettings, SpeedSettings, StudySettings, Variant
from albertlm.errors import AlbertlmError

OMIT_NONE = {"omit_none": True}
"""Field metadata: the key is left out of results.json while the value is None (as the dicts did)."""


# ---------------------------------------------------------------------------- section 1: parameters
@dataclass(frozen=True)
class AccountingRow:
    """One preset or ablation row of the parameter, FLOP and communication accounting."""

    table: str
    """The paper's table: "1" (and the presets), "3" or "4"."""
    name: str
    layers: int
    hidden: int
    embedding: int
    sharing: str
    backbone: int
    """Distinct parameters of AlbertModel (what the paper counts)."""
    with_heads: int
    """backbone + the MLM and SOP heads."""
    breakdown: dict[str, int]
    """ParamCount's parts, plus attention and ffn totals."""
    paper_M: float | None
    """The paper's printed figure in millions, or None."""
    diff_M: float | None
    """backbone / 1e6 - paper_M, rounded to 3 decimals."""
    within_tolerance: bool | None
    note: str | None
    seq_len: int
    train_flops_per_token: float
    infer_flops_per_token: float
    batch_tokens: int
    train_flops_per_step: float
    allreduce_bytes_fp32: int
    allreduce_bytes_bf16: int


# ---------------------------------------------------------------------------- section 2: speed
@dataclass(frozen=True)
class TrainingSpeed:
    """One preset's forward + backward pretraining step."""

    name: str
    seconds: float
    """Median seconds per step."""
    times: list[float]
    tokens_per_s: float
    activation_bytes: int
    """Bytes autograd saved for the backward pass (weights excluded)."""
    parameters: int
    """Distinct parameters with the pretraining heads."""
    flops_per_token: float
    paper_speedup: float | None
    speedup: float
    """Throughput over the reference preset's."""
    flops_speedup: float
    """The reference's training FLOPs per token over this preset's."""


@dataclass(frozen=True)
class PeakRss:
    """Resident memory of one inference forward pass in a fresh process (KiB)."""

    rss_built_kib: int | None
    peak_kib: int | None
    peak_reset: bool


@dataclass(frozen=True)
class InferenceSpeed:
    """One backbone forward pass: an ALBERT preset or its BERT twin."""

    name: str
    pair: str
    """The ALBERT preset this row belongs to."""
    twin: bool
    seconds: float
    times: list[float]
    parameters: int
    parameter_bytes: int
    flops_per_token: float
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
    pretrain_seconds: float
    finetune_seconds: float
    step_seconds: float
    overhead_seconds: float
    steps: int
    steps_from: str
    seconds_available: float
    seconds_left_after_setup: float
    reserve_seconds: float
    curriculum_steps: int
    runs: int


@dataclass(frozen=True)
class HeldoutScores:
    """train.mlm_eval.evaluate's scores on one held-out set (accuracies are fractions)."""

    mlm_mask_accuracy: float
    mlm_kept_accuracy: float
    mlm_random_accuracy: float
    mlm_mask_loss: float
    mlm_all_accuracy: float
    mlm_all_loss: float
    mask_share: float
    kept_share: float
    random_share: float
    baseline_unigram_accuracy: float
    baseline_bigram_accuracy: float
    mask_distinct_predictions: int
    sop_accuracy: float
    baseline_sop_accuracy: float
    examples: float
    masked_tokens: float
    mask_positions: float


@dataclass(frozen=True)
class PretrainSummary:
    """train.pretrain.pretrain's summary of one finished run."""

    steps: int
    tokens_seen: int
    train_seconds: float
    tokens_per_s: float
    parameters: int
    eval: HeldoutScores
    run_dir: str
    model_dir: str


@dataclass(frozen=True)
class Downstream:
    """SST-2 fine-tuning of one pretrained run."""

    accuracy: float | None
    steps: int
    dev_examples: int
    seconds: float


@dataclass(frozen=True)
class StudyRun:
    """One variant trained with one seed."""

    variant: Variant
    seed: int
    recipe: dict[str, Any]
    """The run's PretrainRecipe as recipe.json holds it."""
    summary: PretrainSummary
    seconds: float
    backbone: int
    with_heads: int
    downstream: Downstream | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class VariantSummary:
    """One variant over its seeds: every seed's value, the mean and the spread (max - min)."""

    variant: Variant
    backbone: int
    with_heads: int
    runs: list[str]
    seeds: list[int]
    mask_accuracy: list[float]
    mask_loss: list[float]
    downstream: list[float]
    mask_accuracy_mean: float | None
    mask_accuracy_spread: float | None
    mask_loss_mean: float | None
    mask_loss_spread: float | None
    downstream_mean: float | None
    downstream_spread: float | None


@dataclass(frozen=True)
class Table5Seed:
    """One seed's model of one objective, scored on the held-out pairs of every build."""

    run: str
    seed: int
    mlm_accuracy: float
    nsp_accuracy: float
    sop_accuracy: float
    scores: dict[str, HeldoutScores]
    """Build ("none", "nsp", "sop") -> its scores."""


@dataclass(frozen=True)
class Table5Row:
    """One objective's models: per seed and the means over seeds."""

    variant: str
    per_seed: list[Table5Seed]
    mlm_accuracy: float
    nsp_accuracy: float
    sop_accuracy: float
    pairs: dict[str, int]
    """Held-out pairs of the nsp and sop builds."""
    baseline: dict[str, float]
    """Majority-label accuracy of the nsp and sop builds."""


@dataclass(frozen=True)
class SmoothnessCurve:
    """analysis.smoothness.smoothness's curves of one model, per layer."""

    run: str
    layers: int
    tokens: int
    distance: list[float]
    angle: list[float]
    cosine: list[float]


@dataclass(frozen=True)
class BuildSummary:
    """A data build's meta.json counts; splits maps a split name to its counters."""

    documents: int
    text_tokens: int
    splits: dict[str, dict[str, int]]


@dataclass(frozen=True)
class StudyResults:
    settings: StudySettings
    hidden: int
    layers: int
    plan: StudyPlan
    seeds: list[int]
    runs: dict[str, StudyRun]
    variants: dict[str, VariantSummary]
    table5: dict[str, Table5Row]
    """Objective ("none", "nsp", "sop") -> its row."""
    smoothness: dict[str, SmoothnessCurve]
    """Curve label -> curve."""
    base_embedding: int
    builds: dict[str, BuildSummary]

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
    cpu_count: int | None
    cpus_usable: int | None
    torch_threads: int
    memory_bytes: int | None
    load_average: list[float] | None
    cuda: bool
    load_average_end: list[float] | None


@dataclass(frozen=True)
class ThreadChoice:
    chosen: int
    how: str
    seconds: dict[str, float]
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
    timings: dict[str, float]
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


def from_json(path: str | os.PathLike) -> Report:
    """Read a results.json back into a Report.

    Raises:
        AlbertlmError: naming the file and the field (as a path such as study.runs['x'].seed) that
        is missing, unknown or of the wrong type.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AlbertlmError(f"{path}: cannot read results: {e}") from None
    try:
        return parse(Report, data)
    except AlbertlmError as e:
        raise AlbertlmError(f"{path}: {e}") from None


def parse(tp: Any, value: Any, where: str = "") -> Any:
    """`value` (as json.loads gives it) checked against the type `tp` and built into it.

    Dataclasses are built field by field (a missing field takes its default if it has one; an
    unknown key is an error), lists, tuples and dicts element by element. Numbers are not
    converted (an int stays an int in a float field), so writing the result back gives the same JSON.
    """
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        return parse(rest[0], value, where)
    if origin is typing.Literal:
        if value not in args:
            _wrong(where, " or ".join(map(repr, args)), value)
        return value
    if dataclasses.is_dataclass(tp):
        return _parse_record(tp, value, where)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            _wrong(where, "a list", value)
        items = [parse(args[0], x, f"{where}[{i}]") for i, x in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            _wrong(where, "an object", value)
        return {k: parse(args[1], v, f"{where}[{k!r}]") for k, v in value.items()}
    return _parse_scalar(tp, value, where)


def _parse_scalar(tp: type, value: Any, where: str) -> Any:
    ok = {float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          int: lambda v: isinstance(v, int) and not isinstance(v, bool),
          bool: lambda v: isinstance(v, bool), str: lambda v: isinstance(v, str)}
    if tp not in ok:
        raise TypeError(f"parse: unsupported type {tp!r} at {where}")
    if not ok[tp](value):
        _wrong(where, {float: "a number", int: "an integer", bool: "true or false", str: "a string"}[tp], value)
    return value


def _parse_record(cls: type, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        _wrong(where or cls.__name__, f"an object ({cls.__name__})", value)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in value if k not in fields]
    if unknown:
        raise AlbertlmError(f"{_at(where, unknown[0])}: unknown field in {cls.__name__}")
    kwargs = {}
    for name, f in fields.items():
        if name in value:
            kwargs[name] = parse(hints[name], value[name], _at(where, name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise AlbertlmError(f"{_at(where, name)}: missing field of {cls.__name__}")
    try:
        return cls(**kwargs)
    except AlbertlmError as e:  # a settings class's own check
        raise AlbertlmError(f"{where or cls.__name__}: {e}") from None


def _at(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _wrong(where: str, expected: str, value: Any) -> None:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    raise AlbertlmError(f"{where or 'results'}: expected {expected}, got {shown}")
