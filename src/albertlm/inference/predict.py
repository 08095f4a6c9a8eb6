"""Predictions of a fine-tuned directory for raw inputs (`albertlm predict`)."""

from __future__ import annotations

from pathlib import Path

import torch

from albertlm.errors import AlbertlmError
from albertlm.inference.exit import DEFAULT_REGRESSION_THRESHOLD, check_early_exit
from albertlm.inference.load import load_model_dir
from albertlm.inference.run import check_finite_outputs, run_features
from albertlm.tasks.common import Feature


def predict_lines(model_dir: str | Path, lines: list[str], *, device: str | torch.device = "cpu",
                  batch_size: int = 64, prepack: bool = False, patience: int | None = None,
                  regression_threshold: float = DEFAULT_REGRESSION_THRESHOLD,
                  exit_layers: list | None = None, int8: str | None = None) -> list[str]:
    """Predictions of a fine-tuned model for raw input lines, one output line per input line.

    Input per head: sequence classification `text` or `text_a<TAB>text_b` → `label<TAB>probability`
    (regression: the score; multi-label: the labels above 0.5, comma-separated); token
    classification `text` → `word/TAG` per word; question answering `question<TAB>context` or JSON
    {"question", "context"} → the answer ("" for none); multiple choice JSON {"context" or
    "article", "question", "options"} → the option letter and text. A blank input line gives a
    blank output line.

    With `patience` (a model fine-tuned with exit heads) each line stops once its prediction has held
    for that many layers (`albertlm.inference.exit`); pass a list as `exit_layers` to receive the layers
    each line ran (None for blank lines; a line split into windows: its deepest window). `prepack`
    runs on oneDNN-packed fp32 weights, `int8` (a backend name) on int8 Linear layers
    (`albertlm.inference.quantize`); both are CPU only, and exclusive.
    """
    if batch_size < 1:
        raise AlbertlmError(f"--batch-size must be at least 1, got {batch_size}")
    if prepack and int8 is not None:
        raise AlbertlmError("--prepack and --int8 are exclusive: choose packed fp32 or int8 weights")
    check_early_exit(patience, regression_threshold)
    all_lines = [line.rstrip("\r\n") for line in lines]
    keep = [i for i, line in enumerate(all_lines) if line.strip()]
    layers_run: list = [None] * len(all_lines)
    out = [""] * len(all_lines)  # a blank input line gets a blank output line: outputs stay aligned
    if keep:
        predicted, layers = _predict_nonblank(model_dir, [all_lines[i] for i in keep], device, batch_size, prepack,
                                              patience, regression_threshold, int8)
        for n, (i, line) in enumerate(zip(keep, predicted)):
            out[i] = line
            layers_run[i] = int(layers[n]) if layers is not None else None
    if exit_layers is not None:
        exit_layers[:] = layers_run
    return out


def _predict_nonblank(model_dir: str | Path, lines: list[str], device: str | torch.device, batch_size: int,
                      prepack: bool, patience: int | None, regression_threshold: float,
                      int8: str | None = None) -> tuple[list[str], list | None]:
    from albertlm.tasks.registry import TaskSpec

    loaded = load_model_dir(model_dir, device=device, int8=int8, prepack=prepack, patience=patience,
                            regression_threshold=regression_threshold)
    family, tokenizer, labels, settings = loaded.family, loaded.tokenizer, loaded.labels, loaded.settings()
    spec = TaskSpec.for_prediction(family, loaded.problem_type)
    examples = [family.parse_line(i, line, tokenizer) for i, line in enumerate(lines)]
    features: list[Feature] = family.featurize(spec, examples, tokenizer, labels, settings, False)
    extra = ("exit_layers",) if patience is not None else ()
    outputs = run_features(loaded.runner, spec, features, batch_size, loaded.device, per_feature=extra)
    check_finite_outputs(outputs, spec, str(model_dir))
    rendered = family.render(spec, examples, features, outputs, labels, settings)
    if patience is None:
        return rendered, None
    layers = [0] * len(examples)  # an input split into windows: the deepest window
    for f, n in zip(features, outputs["exit_layers"]):
        layers[f.example] = max(layers[f.example], int(n))
    return rendered, layers
