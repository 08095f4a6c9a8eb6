"""Predictions of a fine-tuned directory for raw inputs (`albertlm predict`, and a server on top of it).

Input per head (one string, or a pair for the two tab-separated fields): sequence classification
`text` or (`text_a`, `text_b`); token classification `text`; question answering (`question`,
`context`) or JSON {"question", "context"}; multiple choice JSON {"context" or "article",
"question", "options"}. Each input gives one result (a dict: `Family.results` names its keys per
head) and the line `albertlm predict` prints for it (`Predictor.line`): `label<TAB>probability`
(regression: the score; multi-label: the labels above 0.5, comma-separated), `word/TAG` per word,
the answer ("" for none), the option letter and text.

`Predictor` loads a directory once and predicts batches (`predict_batch`); `predict_lines` is the
command's path, a blank input line giving a blank output line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from albertlm.errors import AlbertlmError
from albertlm.inference.exit import DEFAULT_REGRESSION_THRESHOLD
from albertlm.inference.load import LoadedModel, load_model_dir
from albertlm.inference.run import check_finite_outputs, run_features
from albertlm.inference.settings import EarlyExitSettings, PredictSettings
from albertlm.tasks.common import Feature
from albertlm.tasks.registry import TaskSpec

Input = str | tuple[str, str]
"""One raw input: a line as `albertlm predict` reads it, or a pair (its two tab-separated fields)."""


@dataclass(frozen=True)
class Predictions:
    """The results of one batch of inputs, in input order."""

    results: list[dict[str, Any]]
    """One per input (`Family.results`)."""
    exit_layers: list[int] | None = None
    """With early exit, the layers each input ran (an input split into windows: its deepest window)."""


def check_predict_settings(batch_size: int, prepack: bool = False, int8: str | None = None,
                           patience: int | None = None,
                           regression_threshold: float = DEFAULT_REGRESSION_THRESHOLD) -> None:
    """The settings of predict (PredictSettings, EarlyExitSettings), each refused with one line before any work."""
    PredictSettings(batch_size, prepack)
    if prepack and int8 is not None:
        raise AlbertlmError("--prepack and --int8 are exclusive: choose packed fp32 or int8 weights")
    EarlyExitSettings(patience, regression_threshold)


def as_line(index: int, item: Input) -> str:
    """An input as the line the head's family parses (`Family.parse_line`).

    Raises:
        AlbertlmError: a blank input, a pair that is not two strings, or a pair whose first text holds a
            tab (the line's field separator).
    """
    if isinstance(item, tuple):
        if len(item) != 2 or not all(isinstance(s, str) for s in item):
            raise AlbertlmError(f"input {index + 1}: a pair must be two strings, got {item!r:.60}")
        if "\t" in item[0]:
            raise AlbertlmError(f"input {index + 1}: the first text of a pair holds a tab")
        item = f"{item[0]}\t{item[1]}"
    if not isinstance(item, str):
        raise AlbertlmError(f"input {index + 1}: expected a string or a pair of strings, got {type(item).__name__}")
    if not item.strip():
        raise AlbertlmError(f"input {index + 1} is blank")
    return item


def predict_batch(loaded: LoadedModel, inputs: Sequence[Input], batch_size: int = 64) -> Predictions:
    """One result per input, run through `loaded` in batches of similar length.

    Args:
        loaded: a fine-tuned directory (`load_model_dir`).
        inputs: raw inputs (see the module docstring); none may be blank.
        batch_size: features per forward pass.
    Returns:
        Predictions in input order; `exit_layers` when `loaded` runs with patience.
    Raises:
        AlbertlmError: an input the head's family cannot parse (naming it by position), or outputs that
            are NaN or infinite.
    """
    lines = [as_line(i, item) for i, item in enumerate(inputs)]
    if not lines:
        return Predictions([], [] if loaded.patience is not None else None)
    family, tokenizer, labels, settings = loaded.family, loaded.tokenizer, loaded.labels, loaded.settings()
    spec = TaskSpec.for_prediction(family, loaded.problem_type)
    examples = [family.parse_line(i, line, tokenizer) for i, line in enumerate(lines)]
    features: list[Feature] = family.featurize(spec, examples, tokenizer, labels, settings, False)
    extra = ("exit_layers",) if loaded.patience is not None else ()
    outputs = run_features(loaded.runner, spec, features, batch_size, loaded.device, per_feature=extra)
    check_finite_outputs(outputs, spec, str(loaded.path))
    results = family.results(spec, examples, features, outputs, labels, settings)
    if loaded.patience is None:
        return Predictions(results)
    layers = [0] * len(examples)  # an input split into windows: the deepest window
    for f, n in zip(features, outputs["exit_layers"]):
        layers[f.example] = max(layers[f.example], int(n))
    return Predictions(results, layers)


class Predictor:
    """A fine-tuned directory loaded once, predicting for batches of raw inputs.

    Args:
        model_dir: the fine-tuned directory.
        device: torch device; prepack, int8 and onnx run on the CPU.
        batch_size: features per forward pass.
        prepack: run on oneDNN-packed fp32 weights (`inference.prepack`).
        patience: early exit (a model fine-tuned with exit heads, `inference.exit`).
        regression_threshold: with `patience`, a regression output moving less than this counts as unchanged.
        int8: run on int8 Linear layers by this backend (`inference.quantize`).
        onnx: run this exported file with onnxruntime (`inference.onnx_backend`).
    """

    def __init__(self, model_dir: str | Path, *, device: str | torch.device = "cpu", batch_size: int = 64,
                 prepack: bool = False, patience: int | None = None,
                 regression_threshold: float = DEFAULT_REGRESSION_THRESHOLD, int8: str | None = None,
                 onnx: str | Path | None = None):
        check_predict_settings(batch_size, prepack, int8, patience, regression_threshold)
        self.loaded = load_model_dir(model_dir, device=device, int8=int8, prepack=prepack, patience=patience,
                                     regression_threshold=regression_threshold, onnx=onnx)
        self.batch_size = batch_size

    def run(self, inputs: Sequence[Input]) -> Predictions:
        """The results of a batch of inputs and, with patience, the layers each ran (`predict_batch`)."""
        return predict_batch(self.loaded, inputs, self.batch_size)

    def predict(self, inputs: Sequence[Input]) -> list[dict[str, Any]]:
        """One result per input (`Family.results`); `line` gives what `albertlm predict` prints for it."""
        return self.run(inputs).results

    def line(self, result: dict[str, Any]) -> str:
        """A result as the line `albertlm predict` prints."""
        return self.loaded.family.line(result)


def predict_lines(model_dir: str | Path, lines: list[str], *, device: str | torch.device = "cpu",
                  batch_size: int = 64, prepack: bool = False, patience: int | None = None,
                  regression_threshold: float = DEFAULT_REGRESSION_THRESHOLD,
                  exit_layers: list | None = None, int8: str | None = None) -> list[str]:
    """Predictions of a fine-tuned model for raw input lines, one output line per input line.

    The lines are read as the module docstring says; a blank input line gives a blank output line
    (the model is loaded only when some line is not blank). With `patience` (a model fine-tuned with
    exit heads) each line stops once its prediction has held for that many layers
    (`albertlm.inference.exit`); pass a list as `exit_layers` to receive the layers each line ran
    (None for blank lines; a line split into windows: its deepest window). `prepack` runs on
    oneDNN-packed fp32 weights, `int8` (a backend name) on int8 Linear layers
    (`albertlm.inference.quantize`); both are CPU only, and exclusive.
    """
    check_predict_settings(batch_size, prepack, int8, patience, regression_threshold)
    all_lines = [line.rstrip("\r\n") for line in lines]
    keep = [i for i, line in enumerate(all_lines) if line.strip()]
    layers_run: list = [None] * len(all_lines)
    out = [""] * len(all_lines)  # a blank input line gets a blank output line: outputs stay aligned
    if keep:
        predictor = Predictor(model_dir, device=device, batch_size=batch_size, prepack=prepack, patience=patience,
                              regression_threshold=regression_threshold, int8=int8)
        done = predictor.run([all_lines[i] for i in keep])
        for n, (i, result) in enumerate(zip(keep, done.results)):
            out[i] = predictor.line(result)
            layers_run[i] = done.exit_layers[n] if done.exit_layers is not None else None
    if exit_layers is not None:
        exit_layers[:] = layers_run
    return out
