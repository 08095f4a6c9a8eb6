"""The settings of the commands that run a trained directory: evaluate, predict and fill-mask.

Each class is a group of flags (`albertlm.options.add_dataclass_options`: the help is each field's
docstring, a `Literal` field's values are its choices) and the one check of its values, made when
it is built: the command line and the library functions (`evaluate_dir`, `predict_lines`,
`Predictor`, `fill_mask`) build the same classes, so they refuse the same things with the same
one line. --device comes from `options.DeviceSettings`; export's settings are `albertlm.export.ExportSettings`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from albertlm.errors import AlbertlmError
from albertlm.inference.exit import DEFAULT_REGRESSION_THRESHOLD, check_early_exit
from albertlm.inference.quantize import Int8Backend
from albertlm.utils import check_field_types


def _at_least_one(settings: object, *names: str) -> None:
    """Each named field (a count) at least 1, or None; the message names its flag."""
    for name in names:
        value = getattr(settings, name)
        if value is not None and value < 1:
            raise AlbertlmError(f"--{name.replace('_', '-')} must be at least 1, got {value}")


@dataclass(frozen=True)
class EarlyExitSettings:
    """Patience-based early exit (a model fine-tuned with --early-exit; `inference.exit`)."""

    patience: int | None = field(default=None, metadata={"metavar": "K"})
    """stop each input once its prediction has not changed for K consecutive layers, and report the layers
    run (unset: all layers)"""
    regression_threshold: float = field(default=DEFAULT_REGRESSION_THRESHOLD, metadata={"metavar": "T"})
    """with --patience, a regression output moving less than T counts as unchanged"""

    def __post_init__(self) -> None:
        check_early_exit(self.patience, self.regression_threshold)  # a bool patience is refused as not a count
        check_field_types(self)


@dataclass(frozen=True)
class Int8Settings:
    """int8 Linear layers on the CPU (`inference.quantize`)."""

    int8: bool = False
    """CPU only: run on a copy with dynamic int8 Linear layers (faster; accuracy change in docs/benchmarks.md)"""
    int8_backend: Int8Backend = "fbgemm"
    """int8 kernels: fbgemm (torch.ao, deprecated by PyTorch but fastest on x86) or torchao (maintained; pip
    install 'albertlm[int8]')"""

    def __post_init__(self) -> None:
        check_field_types(self)

    @property
    def backend(self) -> str | None:
        """The backend the library functions take (`int8=`): None without --int8."""
        return self.int8_backend if self.int8 else None


Split = Literal["dev", "test", "train"]


@dataclass(frozen=True)
class EvaluateSettings:
    """What `albertlm evaluate` scores and how (`inference.evaluate.evaluate_dir` takes the same names)."""

    task: str | None = None
    """task name (unset: the finetuning_task in the model's config.json)"""
    split: Split = "dev"
    """split to score"""
    batch_size: int = 64
    """features per forward pass"""
    max_examples: int | None = field(default=None, metadata={"metavar": "N"})
    """score only the first N examples"""
    predictions: str | None = field(default=None, metadata={"metavar": "FILE"})
    """also write the predictions (task format)"""
    max_answer_length: int | None = field(default=None, metadata={"metavar": "N"})
    """QA: longest answer in pieces (unset: what the model was fine-tuned with; 30, or 64 for a Chinese
    vocabulary)"""

    def __post_init__(self) -> None:
        check_field_types(self)
        _at_least_one(self, "batch_size", "max_answer_length", "max_examples")


@dataclass(frozen=True)
class PredictSettings:
    """How `albertlm predict` runs (`inference.predict.Predictor` takes the same names)."""

    batch_size: int = 64
    """examples per forward pass"""
    prepack: bool = False
    """CPU only: run on a copy with oneDNN-packed weights (faster for small batches of base and larger models;
    docs/benchmarks.md)"""

    def __post_init__(self) -> None:
        check_field_types(self)
        _at_least_one(self, "batch_size")


@dataclass(frozen=True)
class FillMaskSettings:
    """How many candidates `albertlm fill-mask` shows."""

    top_k: int = 5
    """candidates shown per mask"""

    def __post_init__(self) -> None:
        check_field_types(self)
        _at_least_one(self, "top_k")
