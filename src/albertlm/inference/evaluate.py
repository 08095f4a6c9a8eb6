"""Scoring a fine-tuned directory on a split of its task (`albertlm evaluate`), and whether a head fits a task.

The directory is featurized the way it was fine-tuned (config.json's feature settings; its label
names, or the task's own order when it has none) and scored by the task's metric, as
`albertlm finetune` scores dev.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from albertlm.config import AlbertConfig
from albertlm.errors import AlbertlmError
from albertlm.heads import resolve_problem_type
from albertlm.inference.exit import DEFAULT_REGRESSION_THRESHOLD, exit_summary
from albertlm.inference.load import LoadedModel, load_model_dir, saved_labels
from albertlm.inference.post import score_outputs
from albertlm.inference.run import check_finite_outputs, run_features
from albertlm.inference.settings import EarlyExitSettings, EvaluateSettings
from albertlm.outputs import check_not_input
from albertlm.tasks.common import Feature, FeatureSettings
from albertlm.tasks.registry import TaskSpec, get_task


# ---------------------------------------------------------------------------- does a head fit a task
def _placeholders(labels: list[str] | None) -> bool:
    """Class names a directory fine-tuned elsewhere gets when it saved none (LABEL_0, LABEL_1, ...)."""
    return bool(labels) and all(n == f"LABEL_{i}" for i, n in enumerate(labels))


def _outputs(problem: str, labels: list[str] | None, num_labels: int) -> str:
    """`regression with 1 output`, `single_label_classification with 2 labels (0, 1)`: what a head
    computes, or what a task scores (labels None: its training data decides them)."""
    if problem == "regression":
        return f"regression with {num_labels} output{'s' if num_labels != 1 else ''}"
    if labels is None:
        return f"{problem} (its training data decides the labels)"
    names = ", ".join(labels[:8]) + (f", ... ({len(labels) - 8} more)" if len(labels) > 8 else "")
    return f"{problem} with {len(labels)} label{'s' if len(labels) != 1 else ''} ({names})"


def task_labels(where: str, config: AlbertConfig, head: str, spec: TaskSpec,
                data_dir: str | Path | None = None) -> list[str] | None:
    """Check that a fine-tuned head fits a task and return its class or tag names in id order.

    The one check evaluate and distillation's teacher both go through: the head class must be the
    task family's; a sequence classifier must also have the task's problem type, number of outputs
    and, where the task fixes its labels, the same label set (a directory fine-tuned elsewhere
    without label names takes the task's own order).

    Args:
        where: how messages name the directory (`fx/ft-sst2`, `--teacher fx/ft-sst2`).
        config: the directory's config.
        head: its head class name (`LoadedModel.arch`).
        spec: the task.
        data_dir: the task's data directory (where a labels file may fix the label set).
    Returns:
        The names (None for regression, QA and multiple choice).
    Raises:
        AlbertlmError: one line naming the directory, what its head computes and what the task scores.
    """
    if spec.family.head != head:
        raise AlbertlmError(f"{where} holds an {head}; task {spec.name} needs an {spec.family.head}")
    labels = saved_labels(config) if spec.family.label_names is not None else None
    if not spec.family.sets_problem_type:
        return labels
    try:
        problem = resolve_problem_type(config)
    except ValueError as exc:
        raise AlbertlmError(f"{where}/config.json: {exc}") from None
    wanted = spec.fixed_labels(data_dir)
    if _placeholders(labels) and wanted is not None and len(wanted) == len(labels):
        labels = list(wanted)  # fine-tuned elsewhere without label names: the task's own order
    if problem == "regression":
        fits = spec.problem_type == "regression" and config.num_labels == 1
    else:
        fits = problem == spec.problem_type and (wanted is None or sorted(wanted) == sorted(labels))
    if not fits:
        task = _outputs(spec.problem_type, wanted, 1)
        raise AlbertlmError(f"{where}: its head is {_outputs(problem, labels, config.num_labels)}; task {spec.name} "
                            f"is {task}")
    return labels


def check_known_labels(where: str, config: AlbertConfig, spec: TaskSpec, labels: list[str] | None,
                       examples: list, split: str) -> None:
    """Every label of a split scored with a sequence classifier must be one of the head's (a label it
    cannot output has no id, and no score would be right); this matters where the task's data decides
    the labels (generic tasks), where `task_labels` has nothing to compare. A tagger must share at
    least one entity tag with the split (one fine-tuned elsewhere without tag names, LABEL_0, ...,
    would score 0 on every entity); one that lacks some of its tags is scored, those entities missed."""
    if labels is None:
        return
    if spec.family.token_level:
        tags = sorted(set(spec.family.label_names(examples)) - {"O"})
        if tags and not set(tags) & set(labels):
            shown = ", ".join(labels[:8]) + (", ..." if len(labels) > 8 else "")
            raise AlbertlmError(f"{where}: its head's tags are {shown}; the {split} split of task {spec.name} "
                                f"has none of them ({', '.join(tags[:8])}); config.json's id2label must name "
                                "the tags the head was trained on")
    if not spec.family.sets_problem_type:
        return
    unknown = sorted(set(spec.family.label_names(examples)) - set(labels))
    if unknown:
        problem = resolve_problem_type(config)
        raise AlbertlmError(f"{where}: its head is {_outputs(problem, labels, config.num_labels)}; the {split} split "
                            f"of task {spec.name} has labels it lacks: {', '.join(unknown[:8])}")


@dataclasses.dataclass
class TaskInputs:
    """A fine-tuned model and one split of its task, made into the model's inputs."""

    loaded: LoadedModel
    spec: TaskSpec
    examples: list
    labels: list[str] | None
    """Class or tag names in id order (None for heads without a label set)."""
    settings: FeatureSettings
    features: list[Feature]


def task_inputs(model_dir: str | Path, data_dir: str | Path, task: str | None = None, split: str = "dev", *,
                strict: bool = False, max_examples: int | None = None, device: str | torch.device = "cpu",
                int8: str | None = None, max_answer_length: int | None = None) -> TaskInputs:
    """Load a fine-tuned directory and featurize a split of its task the way it was fine-tuned
    (config.json's feature settings; its label names, or the task's own order when it has none).

    Raises:
        AlbertlmError: no task named or recorded, or a head that does not fit the task.
    """
    loaded = load_model_dir(model_dir, device=device, int8=int8)
    config = loaded.config
    task = task or config.extra.get("finetuning_task")
    if not task:
        raise AlbertlmError(f"{model_dir}: config.json names no finetuning_task; pass --task")
    spec = get_task(task)
    labels = task_labels(str(model_dir), config, loaded.arch, spec, data_dir)
    examples = spec.read(data_dir, split, strict)
    examples = examples[:max_examples] if max_examples else examples
    check_known_labels(str(model_dir), config, spec, labels, examples, split)
    settings = loaded.settings(spec.recipe.max_seq_length, max_answer_length)
    features = spec.family.featurize(spec, examples, loaded.tokenizer, labels, settings, False)
    return TaskInputs(loaded, spec, examples, labels, settings, features)


def evaluate_dir(model_dir: str | Path, data_dir: str | Path, task: str | None = None, split: str = "dev",
                 *, batch_size: int = 64, max_examples: int | None = None, predictions: str | Path | None = None,
                 device: str | torch.device = "cpu", strict: bool = False,
                 max_answer_length: int | None = None, patience: int | None = None,
                 regression_threshold: float = DEFAULT_REGRESSION_THRESHOLD, int8: str | None = None
                 ) -> dict[str, Any]:
    """Score a fine-tuned model on one split of a task.

    Args:
        model_dir: the fine-tuned directory.
        data_dir: the task's data directory (or the split's file).
        task: the task name; default: config.json's `finetuning_task`.
        split: dev, test or train.
        batch_size: features per forward pass.
        max_examples: score only the first N examples.
        predictions: also write the predictions there, in the task's format.
        device: torch device.
        strict: raise on the first malformed row.
        max_answer_length: QA: longest answer in pieces (default: what the model was fine-tuned with).
        patience: early exit (a model fine-tuned with exit heads): each input stops once its prediction
            has held for this many layers (`albertlm.inference.exit`); None runs every layer.
        regression_threshold: with `patience`, a regression output moving less than this counts as unchanged.
        int8: score a CPU copy with int8 Linear layers, by this backend ("fbgemm" or "torchao";
            `albertlm.inference.quantize`); None: the model as saved.
    Returns:
        {"task", "split", "examples", "metrics"} (metrics empty when the split has no labels), and with
        `patience` "early_exit": {"patience", "layers", "average_layers", "speedup", "exits_per_layer"},
        counted per input feature.
    """
    EarlyExitSettings(patience, regression_threshold)  # each setting refused with one line before any work
    EvaluateSettings(task, split, batch_size, max_examples, None if predictions is None else str(predictions),
                     max_answer_length)
    if predictions is not None:
        check_writable(Path(predictions), "--predictions")
        check_not_input(predictions, "--predictions", {"--model": model_dir, "--data": data_dir})
    t = task_inputs(model_dir, data_dir, task, split, strict=strict, max_examples=max_examples, device=device,
                    int8=int8, max_answer_length=max_answer_length)
    loaded = t.loaded.with_patience(patience, regression_threshold) if patience is not None else t.loaded
    extra = ("exit_layers",) if patience is not None else ()
    outputs = run_features(loaded.runner, t.spec, t.features, batch_size, loaded.device, per_feature=extra)
    check_finite_outputs(outputs, t.spec, str(model_dir))
    metrics, preds = score_outputs(t.spec, t.examples, t.features, outputs, t.labels, t.settings)
    if predictions is not None:
        t.spec.family.write(Path(predictions), t.examples, preds)
    elif not metrics:
        raise AlbertlmError(f"{data_dir}: the {split} split has no labels, so there is nothing to score; "
                            "pass --predictions FILE to write predictions, or use `albertlm predict`")
    result = {"task": t.spec.name, "split": split, "examples": len(t.examples), "metrics": metrics}
    if patience is not None:
        result["early_exit"] = exit_summary(outputs["exit_layers"], patience, loaded.config.num_layer_calls)
    return result


def check_writable(path: Path, flag: str) -> None:
    """Fail before any work when `path` cannot be written (a directory, or a parent that is missing
    or read-only)."""
    import os

    if path.is_dir():
        raise AlbertlmError(f"{flag} {path}: is a directory")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise AlbertlmError(f"{flag} {path}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise AlbertlmError(f"{flag} {path}: not writable")
