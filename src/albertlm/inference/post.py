"""From a head's outputs to a task's answers: predictions, and metrics where the examples are labelled."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from albertlm.inference.run import run_features
from albertlm.tasks.common import Feature, FeatureSettings
from albertlm.tasks.registry import TaskSpec


def score(model: nn.Module, spec: TaskSpec, examples: list, features: list[Feature], labels: list[str] | None,
          settings: FeatureSettings, batch_size: int, device: torch.device) -> tuple[dict[str, float], list]:
    """(metrics, predictions) of the model on some examples; metrics are empty for unlabelled examples."""
    outputs = run_features(model, spec, features, batch_size, device)
    return score_outputs(spec, examples, features, outputs, labels, settings)


def score_outputs(spec: TaskSpec, examples: list, features: list[Feature], outputs: dict[str, list[np.ndarray]],
                  labels: list[str] | None, settings: FeatureSettings) -> tuple[dict[str, float], list]:
    """(metrics, predictions) from the head's outputs (`run_features`)."""
    predictions = spec.family.predict(spec, examples, features, outputs, labels, settings)
    labelled = all(getattr(e, "label", getattr(e, "tags", True)) is not None for e in examples)
    return (spec.metric(examples, predictions) if labelled else {}), predictions
