"""Using a model directory: score a fine-tuned model on a task split, predict from raw input, fill masks.

A fine-tuned directory says what it is in config.json: `architectures` (the head class),
`id2label`, `problem_type`, `finetuning_task` and `albertlm_features` (the input settings it was
trained with); directories fine-tuned by transformers work too (then the task must be named and
the feature settings are the task's defaults).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albertlm.config import AlbertConfig
from albertlm.distributed import resolve_device
from albertlm.errors import AlbertlmError
from albertlm.heads import HEADS, resolve_problem_type
from albertlm.outputs import check_not_input
from albertlm.tasks.common import Feature, FeatureSettings
from albertlm.tasks.registry import TaskSpec, get_task
from albertlm.exit_heads import CONFIG_KEY, EXIT_HEADS_NAME, has_exit_heads, head_class
from albertlm.inference.exit import DEFAULT_REGRESSION_THRESHOLD, check_early_exit, exit_summary, patience_runner
from albertlm.inference.prepack import prepack_for_cpu
from albertlm.inference.features import check_saved_entries, saved_settings
from albertlm.inference.load import load_tokenizer
from albertlm.inference.post import score_outputs
from albertlm.inference.run import check_finite_outputs, run_features
from albertlm.utils import check_field_types


def read_architecture(model_dir: str | Path) -> tuple[str, AlbertConfig]:
    """(head class name from config.json's `architectures`, the config).

    Raises:
        AlbertlmError: `architectures` is not a list of class names (a bare string would give its first
            letter, a list of objects a TypeError).
    """
    path = Path(model_dir) / "config.json"
    config = AlbertConfig.from_json_file(path)  # exists, UTF-8, a JSON object: checked there
    archs = json.loads(path.read_text(encoding="utf-8")).get("architectures")
    if archs not in (None, []) and not (isinstance(archs, list) and all(isinstance(a, str) and a for a in archs)):
        shown = repr(archs) if len(repr(archs)) <= 80 else repr(archs)[:77] + "..."
        raise AlbertlmError(f"{path}: architectures must be a list of class names, e.g. "
                            f"[\"AlbertForSequenceClassification\"], got {shown}")
    return (archs or ["AlbertModel"])[0], config


def _labels(config: AlbertConfig) -> list[str] | None:
    if config.problem_type == "regression" or config.num_labels == 1:
        return None
    names = config.id2label or {i: f"LABEL_{i}" for i in range(config.num_labels)}
    return [names[i] for i in range(config.num_labels)]


def load_finetuned(model_dir: str | Path, device: str | torch.device = "cpu", int8: str | None = None):
    """(model in eval mode, its config, its tokenizer) of a fine-tuned directory; with `int8` (a
    backend of `albertlm.inference.quantize`), a CPU copy with int8 Linear layers."""
    arch, config = read_architecture(model_dir)
    check_saved_entries(Path(model_dir) / "config.json", config)
    if arch not in HEADS:
        raise AlbertlmError(f"{model_dir}: holds an {arch}, not a fine-tuned model (one of {', '.join(HEADS)})")
    if has_exit_heads(config) and not (Path(model_dir) / EXIT_HEADS_NAME).is_file():
        raise AlbertlmError(f"{model_dir}: config.json announces exit heads ({CONFIG_KEY}) but {EXIT_HEADS_NAME} "
                            "is missing")
    if int8 is not None:
        if str(device) == "auto":
            device = "cpu"
        if resolve_device(device).type != "cpu":
            raise AlbertlmError(f"int8 inference runs on the CPU; got --device {device}")
    with warnings.catch_warnings(record=True) as caught:  # held back until the head is known to be trained
        warnings.simplefilter("always")
        model = head_class(arch, config).from_pretrained(model_dir)
    check_head_weights(model_dir, arch, model)
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    model = model.to(resolve_device(device)).eval()
    if int8 is not None:
        from albertlm.inference.quantize import quantize_int8

        model = quantize_int8(model, int8)
    return model, config, load_tokenizer(model_dir)


def _weight_names(model_dir: Path) -> tuple[set[str], str]:
    """The tensor names in a directory's weights, and the file messages cite (of model.safetensors
    only the header is read)."""
    from safetensors import SafetensorError, safe_open

    from albertlm.interop.hf import SAFETENSORS_NAME, read_hf_weights

    single = model_dir / SAFETENSORS_NAME
    if single.is_file():
        try:
            with safe_open(str(single), framework="pt") as fh:
                return set(fh.keys()), str(single)
        except (SafetensorError, OSError):
            pass  # read_hf_weights reports it in one line
    weights, source = read_hf_weights(model_dir)
    return set(weights), source


def check_head_weights(model_dir: str | Path, arch: str, model: torch.nn.Module) -> None:
    """A directory used for inference must hold trained weights for the head its config.json names.

    Loading leaves a head (or pooler) the weight file lacks randomly initialised, which is right when
    fine-tuning starts from a pretrained directory and wrong everywhere else: a pretraining directory
    whose `architectures` claims a classifier would score noise.

    Raises:
        AlbertlmError: naming the weight file and a missing key.
    """
    from albertlm.interop.hf import ARCHITECTURES, key_table

    names, source = _weight_names(Path(model_dir))
    prefix = ARCHITECTURES[arch].hf_prefix
    pooler = f"{ARCHITECTURES[arch].ours_prefix}pooler.weight" in model.state_dict()
    missing = [n for _, hf in key_table(model.config, arch, pooler) for n in hf
               if n not in names and not (n.startswith(prefix) and n[len(prefix):] in names)]  # a bare backbone
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise AlbertlmError(f"{source}: no {missing[0]}{more}, yet config.json's architectures says {arch}: "
                            "this is not a fine-tuned directory (its head would be random)")


def head_name(model: torch.nn.Module) -> str:
    """The plain head class a model is (an early-exit head counts as the head it extends)."""
    return next(k.__name__ for k in type(model).__mro__ if k.__name__ in HEADS)


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
        head: its head class name (`head_name`).
        spec: the task.
        data_dir: the task's data directory (where a labels file may fix the label set).
    Returns:
        The names (None for regression, QA and multiple choice).
    Raises:
        AlbertlmError: one line naming the directory, what its head computes and what the task scores.
    """
    if spec.family.head != head:
        raise AlbertlmError(f"{where} holds an {head}; task {spec.name} needs an {spec.family.head}")
    labels = _labels(config) if spec.family.label_names is not None else None
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

    model: torch.nn.Module
    config: AlbertConfig
    tokenizer: Any
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
    model, config, tokenizer = load_finetuned(model_dir, device, int8)
    task = task or config.extra.get("finetuning_task")
    if not task:
        raise AlbertlmError(f"{model_dir}: config.json names no finetuning_task; pass --task")
    spec = get_task(task)
    labels = task_labels(str(model_dir), config, head_name(model), spec, data_dir)
    examples = spec.read(data_dir, split, strict)
    examples = examples[:max_examples] if max_examples else examples
    check_known_labels(str(model_dir), config, spec, labels, examples, split)
    settings = saved_settings(config, spec.recipe.max_seq_length, tokenizer.chinese, max_answer_length)
    features = spec.family.featurize(spec, examples, tokenizer, labels, settings, False)
    return TaskInputs(model, config, tokenizer, spec, examples, labels, settings, features)


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
    _check_evaluate_settings(patience, regression_threshold, batch_size, max_answer_length, max_examples, predictions)
    if predictions is not None:
        check_not_input(predictions, "--predictions", {"--model": model_dir, "--data": data_dir})
    t = task_inputs(model_dir, data_dir, task, split, strict=strict, max_examples=max_examples, device=device,
                    int8=int8, max_answer_length=max_answer_length)
    runner = patience_runner(model_dir, t.model, patience, regression_threshold) if patience is not None else t.model
    extra = ("exit_layers",) if patience is not None else ()
    outputs = run_features(runner, t.spec, t.features, batch_size, next(t.model.parameters()).device,
                           per_feature=extra)
    check_finite_outputs(outputs, t.spec, str(model_dir))
    metrics, preds = score_outputs(t.spec, t.examples, t.features, outputs, t.labels, t.settings)
    if predictions is not None:
        t.spec.family.write(Path(predictions), t.examples, preds)
    elif not metrics:
        raise AlbertlmError(f"{data_dir}: the {split} split has no labels, so there is nothing to score; "
                            "pass --predictions FILE to write predictions, or use `albertlm predict`")
    result = {"task": t.spec.name, "split": split, "examples": len(t.examples), "metrics": metrics}
    if patience is not None:
        result["early_exit"] = exit_summary(outputs["exit_layers"], patience, t.config.num_layer_calls)
    return result


def _check_evaluate_settings(patience: int | None, regression_threshold: float, batch_size: int,
                             max_answer_length: int | None, max_examples: int | None,
                             predictions: str | Path | None) -> None:
    """evaluate_dir's settings, each refused with one line before any work."""
    check_early_exit(patience, regression_threshold)
    if batch_size < 1:
        raise AlbertlmError(f"--batch-size must be at least 1, got {batch_size}")
    if max_answer_length is not None and max_answer_length < 1:
        raise AlbertlmError(f"--max-answer-length must be at least 1, got {max_answer_length}")
    if max_examples is not None and max_examples < 1:
        raise AlbertlmError(f"--max-examples must be at least 1, got {max_examples}")
    if predictions is not None:
        check_writable(Path(predictions), "--predictions")


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
    from albertlm.tasks.registry import TaskSpec, family_of_head

    model, config, tokenizer = load_finetuned(model_dir, device, int8)
    family = family_of_head(head_name(model))
    if prepack:  # CPU, fp32: oneDNN-packed weights (see prepack_for_cpu)
        model = prepack_for_cpu(model)
    if patience is not None:
        model = patience_runner(model_dir, model, patience, regression_threshold)
    problem = config.problem_type or ("regression" if config.num_labels == 1 else "single_label_classification")
    spec = TaskSpec.for_prediction(family, problem)
    settings = saved_settings(config, chinese=tokenizer.chinese)
    labels = _labels(config)
    examples = [family.parse_line(i, line, tokenizer) for i, line in enumerate(lines)]
    features: list[Feature] = family.featurize(spec, examples, tokenizer, labels, settings, False)
    extra = ("exit_layers",) if patience is not None else ()
    outputs = run_features(model, spec, features, batch_size, next(model.parameters()).device, per_feature=extra)
    check_finite_outputs(outputs, spec, str(model_dir))
    rendered = family.render(spec, examples, features, outputs, labels, settings)
    if patience is None:
        return rendered, None
    layers = [0] * len(examples)  # an input split into windows: the deepest window
    for f, n in zip(features, outputs["exit_layers"]):
        layers[f.example] = max(layers[f.example], int(n))
    return rendered, layers


MASKED_LM_ARCHITECTURES = ("AlbertForPreTraining", "AlbertForMaskedLM")
"""Directories whose config.json names one of these hold trained MLM-head weights."""


@torch.no_grad()
def fill_mask(model_dir: str | Path, text: str, top_k: int = 5, device: str | torch.device = "cpu"
              ) -> tuple[str, list[list[tuple[str, float]]]]:
    """Fill every [MASK] of a text with a pretrained model's MLM head.

    Args:
        model_dir: a pretrained directory (ours, or transformers' AlbertForPreTraining / AlbertForMaskedLM).
        text: text containing at least one literal [MASK].
        top_k: candidates per mask.
        device: torch device.
    Returns:
        (the text with every mask replaced by its best piece, [[(piece, probability)] per mask]).
    """
    import warnings

    from albertlm.model import AlbertForPreTraining

    if top_k < 1:
        raise AlbertlmError(f"--top-k must be at least 1, got {top_k}")
    arch, _ = read_architecture(model_dir)
    if arch not in MASKED_LM_ARCHITECTURES:
        raise AlbertlmError(f"{model_dir}: holds an {arch}, which has no masked-LM head; fill-mask needs a "
                            f"pretrained directory ({' or '.join(MASKED_LM_ARCHITECTURES)})")
    tokenizer = load_tokenizer(model_dir)
    with warnings.catch_warnings():  # the SOP head plays no part here
        warnings.filterwarnings("ignore", message=".*SOP head.*")
        model = AlbertForPreTraining.from_pretrained(model_dir).to(resolve_device(device)).eval()
    ids, _ = tokenizer.build_inputs(tokenizer.encode(text))
    positions = np.flatnonzero(ids == tokenizer.special_ids.mask)
    if not len(positions):
        raise AlbertlmError("the text has no [MASK] to fill")
    if len(ids) > model.config.max_position_embeddings:
        raise AlbertlmError(f"the text has {len(ids)} pieces; the model takes at most "
                            f"{model.config.max_position_embeddings}")
    input_ids = torch.from_numpy(ids.astype(np.int64))[None].to(next(model.parameters()).device)
    logits = model(input_ids).prediction_logits[0, positions].float()  # [masks, V]
    probs = torch.softmax(logits, -1)
    top = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    candidates = [[(tokenizer.convert_ids_to_tokens([int(i)])[0], float(p)) for p, i in zip(ps, ix)]
                  for ps, ix in zip(top.values, top.indices)]
    filled = ids.copy()
    filled[positions] = top.indices[:, 0].cpu().numpy()
    return tokenizer.decode(filled[1:-1]), candidates
