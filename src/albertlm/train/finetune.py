"""The fine-tuning recipe: any registered task, from any ALBERT directory, best dev checkpoint kept.

`finetune(task, model_dir, data_dir, out_dir, recipe)` reads the task's train and dev splits,
builds the task's head on the pretrained backbone (our `albertlm pretrain` output or any Hugging
Face ALBERT directory with spiece.model or a WordPiece vocab.txt), and trains with the step shared with pretraining
(train/loop.train_step): AdamW, linear warmup then linear decay to 0 (`optim.lr_at`), gradient
clipping at 1.0. Every `eval_every` steps it scores the dev split; whenever the task's main metric
improves, the model is written to `out_dir` (config.json with num_labels / id2label / problem_type /
architectures, model.safetensors, spiece.model or vocab.txt + tokenizer_config.json) together with the dev
predictions in the task's usual format. So `out_dir` always holds the best dev checkpoint, which is
what the paper reports (Table 14 note), and it loads in transformers' class of the same name.
`patience` evaluations without improvement stop the run early.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from albertlm.config import CLASSIFIER_POOLINGS, AlbertConfig
from albertlm.distributed import DistContext, resolve_device
from albertlm.errors import AlbertlmError
from albertlm.exit_heads import EXIT_HEADS, with_exit_heads
from albertlm.inference.features import MIN_SEQ_LENGTH, feature_settings
from albertlm.inference.load import load_head, load_tokenizer
from albertlm.inference.post import score
from albertlm.inference.run import to_device
from albertlm.heads import reinit_pooler
from albertlm.interop.hf import transformers_can_load
from albertlm.optim import OptimizerName, build_optimizer, lr_at
from albertlm.tasks.common import Feature, FeatureSettings, pad_batch
from albertlm.tasks.registry import TaskSpec, get_task
from albertlm.train.loop import Cadence, CountFn, LossFn, Precision, StepSettings, Unpad, run_steps, unpadded
from albertlm.train.metrics import MetricsLogger
from albertlm.outputs import FINETUNE_FILES, MODEL_FILES, OutputDir
from albertlm.utils import atomic_write_text, check_field_types
from albertlm.vocab import IGNORE_INDEX


@dataclass(frozen=True)
class FinetuneRecipe:
    """Fine-tuning settings; unset (None) fields take the task's default (paper Table 14 where it has one)."""

    lr: float | None = None
    """Peak learning rate."""
    batch_size: int | None = None
    """Examples (features) per optimizer step."""
    micro_batch_size: int | None = None
    """Examples per forward pass (gradient accumulation up to batch_size); default: the whole batch."""
    dropout: float | None = None
    """ALBERT hidden and attention dropout (Table 14: 0 or 0.1)."""
    classifier_dropout: float | None = None
    """Dropout before the classifier (Table 14: 0.1)."""
    steps: int | None = None
    """Optimizer steps (default: Table 14's, else `epochs` passes over the training set)."""
    epochs: float | None = None
    """Passes over the training set; overrides the task's step count."""
    warmup_steps: int | None = None
    """Linear warmup steps (default: Table 14's share of the steps, else a tenth of them)."""
    max_seq_length: int | None = None
    """Pieces per input (capped by the model's max_position_embeddings)."""
    doc_stride: int = 128
    """QA: pieces between two windows over a long context."""
    max_query_length: int = 64
    """QA: question pieces kept."""
    max_answer_length: int | None = None
    """QA: longest answer predicted, in pieces (None: 30, or 64 for a Chinese vocabulary, whose pieces are
    single characters: at 30, even perfect CMRC 2018 dev predictions would score 94.5 EM, at 64 99.7)."""
    optimizer: OptimizerName = "adamw"
    """adamw (the official fine-tuning optimizer) or lamb."""
    weight_decay: float = 0.01
    """Decoupled weight decay (LayerNorm and biases excluded)."""
    clip_norm: float = 1.0
    """Global gradient-norm clip."""
    precision: Precision = "fp32"
    """fp32, bf16 or fp16 (GPU)."""
    unpad: Unpad = "auto"
    """Training passes run the encoder on each batch's real tokens only, not on the padding to its longest
    example: the same loss (dropout masks drawn differently), less work for batches of mixed lengths (2.3x
    faster steps on CoNLL-2003 on 2 CPU cores). auto: on a CPU (a GPU pads, as it is unmeasured there); on or
    off to choose."""
    eval_every: int | None = None
    """Evaluate on dev every N steps (default: 10 evaluations per run) and at the end."""
    eval_batch_size: int = 64
    """Features per evaluation forward pass."""
    patience: int = 0
    """Stop after this many evaluations without a better dev score; 0 never stops early."""
    max_train_examples: int | None = None
    """Use a random subset of this many training examples (quick runs)."""
    max_eval_examples: int | None = None
    """Score only the first N dev examples."""
    log_every: int = 10
    """Write training metrics every N steps."""
    seed: int = 0
    """Seed of the head's initialisation, the subset, the data order and dropout."""
    strict: bool = False
    """Raise on the first malformed data row instead of skipping and reporting it."""
    early_exit: bool = False
    """Train a classifier after every layer (depth-weighted loss) for patience-based early exit at inference
    (`evaluate/predict --patience K`); sequence and token classification only."""
    mlm_weight: float = 0.0
    """Joint objective: add this times a masked-LM loss on a masked copy of each batch, from the first step
    (train/joint.py); 0 trains on the task's loss alone."""
    mlm_probability: float = 0.15
    """Joint objective: the share of pieces masked and predicted."""
    classifier_pooling: str = "cls"
    """Sentence-level heads: classify ALBERT's pooler on [CLS] (cls) or the mean of the last layer over the
    non-padding tokens (mean: no pooler; saved in config.json, which evaluate and predict follow;
    transformers refuses such a head)."""
    pooler_reinit: bool = False
    """Sentence-level heads: draw the pooler afresh (N(0, initializer_range)) instead of keeping the model's."""
    ema_decay: float | None = None
    """Keep an exponential moving average of the weights, this decay per step, and score, keep and save the
    averaged weights instead of the trained ones; results.json also records the trained weights' own dev
    curve. The first steps average with a shorter memory: min(ema_decay, (1 + n) / (10 + n)) after n
    updates, so the start's random weights fade out. 0: no averaging; None: none with --model, the
    recipe's choice without it (ScratchRecipe.ema_intervals; the default recipe does not average)."""

    def __post_init__(self) -> None:
        check_field_types(self)  # optimizer and precision among their Literal's values, named
        if self.classifier_pooling not in CLASSIFIER_POOLINGS:
            raise AlbertlmError(f"classifier_pooling must be one of {', '.join(CLASSIFIER_POOLINGS)}, got "
                                f"{self.classifier_pooling!r}")
        if self.classifier_pooling == "mean" and (self.pooler_reinit or self.early_exit):
            raise AlbertlmError(f"--classifier-pooling mean has no pooler: it does not go with "
                                f"{'--pooler-reinit' if self.pooler_reinit else '--early-exit'} (whose classifiers "
                                "pool [CLS])")
        for name in ("lr", "batch_size", "micro_batch_size", "steps", "epochs", "max_seq_length", "eval_every",
                     "max_train_examples", "max_eval_examples", "eval_batch_size", "doc_stride", "max_query_length",
                     "max_answer_length"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise AlbertlmError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_seq_length is not None and self.max_seq_length < MIN_SEQ_LENGTH:
            raise AlbertlmError(f"max_seq_length must be at least {MIN_SEQ_LENGTH} ([CLS] A [SEP] B [SEP] and some "
                                f"text), got {self.max_seq_length}")
        for name in ("dropout", "classifier_dropout"):
            if getattr(self, name) is not None and not 0.0 <= getattr(self, name) < 1.0:
                raise AlbertlmError(f"{name} must lie in [0, 1), got {getattr(self, name)}")
        if (self.warmup_steps is not None and self.warmup_steps < 0) or self.patience < 0 or self.weight_decay < 0:
            raise AlbertlmError("warmup_steps, patience and weight_decay must not be negative")
        if not (math.isfinite(self.mlm_weight) and self.mlm_weight >= 0):
            raise AlbertlmError(f"mlm_weight must be a finite number, 0 or more, got {self.mlm_weight}")
        if not 0.0 < self.mlm_probability < 1.0:
            raise AlbertlmError(f"mlm_probability must lie in (0, 1), got {self.mlm_probability}")
        if self.ema_decay is not None and not 0.0 <= self.ema_decay < 1.0:
            raise AlbertlmError(f"ema_decay must lie in [0, 1) (0: no averaging), got {self.ema_decay}")

    def resolve(self, spec: TaskSpec, n_train: int) -> FinetuneRecipe:
        """A copy with every task default filled in, for `n_train` training features."""
        paper = spec.recipe
        batch = self.batch_size or paper.batch_size
        if self.epochs is not None or (self.steps is None and paper.steps is None):
            steps = math.ceil((self.epochs or paper.epochs) * n_train / batch)
        else:
            steps = self.steps or paper.steps
        if self.warmup_steps is not None:
            warmup = self.warmup_steps
        elif paper.steps and paper.warmup_steps is not None:  # keep Table 14's warmup share
            warmup = round(steps * paper.warmup_steps / paper.steps)
        else:
            warmup = round(0.1 * steps)
        return dataclasses.replace(
            self, lr=self.lr or paper.lr, batch_size=batch, micro_batch_size=min(self.micro_batch_size or batch, batch),
            dropout=paper.dropout if self.dropout is None else self.dropout,
            classifier_dropout=paper.classifier_dropout if self.classifier_dropout is None else self.classifier_dropout,
            steps=max(1, steps), warmup_steps=min(warmup, steps), epochs=None,
            max_seq_length=self.max_seq_length or paper.max_seq_length,
            eval_every=self.eval_every or max(1, steps // 10))


# ---------------------------------------------------------------------------- loading
def head_config(spec: TaskSpec, base: AlbertConfig, labels: list[str] | None, recipe: FinetuneRecipe,
                settings: FeatureSettings) -> AlbertConfig:
    """The pretrained config with the task's head fields and the recipe's dropouts.

    config.json also records the task (`finetuning_task`, a transformers field) and the feature
    settings (`albertlm_features`), so `albertlm evaluate` / `predict` rebuild the same inputs. Exit
    heads are announced exactly when the recipe trains them (`early_exit`): a base fine-tuned with
    them does not pass its announcement on to a head trained without.
    """
    classification = spec.family.sets_problem_type
    regression = spec.problem_type == "regression" and classification
    num_labels = 1 if regression else len(labels) if labels else 2
    extra = {**base.extra, "finetuning_task": spec.name,
             "albertlm_features": dataclasses.asdict(settings)}
    config = base.replace(num_labels=num_labels, id2label=dict(enumerate(labels)) if labels else None,
                          problem_type=spec.problem_type if classification else None,
                          hidden_dropout_prob=recipe.dropout, attention_probs_dropout_prob=recipe.dropout,
                          classifier_dropout_prob=recipe.classifier_dropout,
                          classifier_pooling=recipe.classifier_pooling, extra=extra)
    return with_exit_heads(config, recipe.early_exit)  # off: drop any entry a fine-tuned base carried


SENTENCE_HEADS = ("AlbertForSequenceClassification", "AlbertForMultipleChoice")
"""The heads that classify a sentence vector, and so take --classifier-pooling and --pooler-reinit."""


def check_head_options(spec: TaskSpec, recipe: FinetuneRecipe) -> None:
    """Refuse --classifier-pooling mean and --pooler-reinit for a task whose head pools nothing (token
    classification, QA)."""
    given = [flag for flag, on in (("--classifier-pooling mean", recipe.classifier_pooling != "cls"),
                                   ("--pooler-reinit", recipe.pooler_reinit)) if on]
    if given and spec.family.head not in SENTENCE_HEADS:
        raise AlbertlmError(f"{given[0]}: task {spec.name} uses an {spec.family.head}, which has no sentence "
                            f"vector; it applies to {' and '.join(SENTENCE_HEADS)}")


# ---------------------------------------------------------------------------- the run
def finetune(task: str | TaskSpec, model_dir: str | Path, data_dir: str | Path, out_dir: str | Path,
             recipe: FinetuneRecipe | None = None, *, device: str | torch.device = "cpu",
             progress: bool = True) -> dict[str, Any]:
    """Fine-tune a pretrained ALBERT on a task and keep the best dev checkpoint.

    Args:
        task: a task name (tasks/registry.py) or a TaskSpec.
        model_dir: pretrained model directory (config.json, weights, spiece.model or vocab.txt).
        data_dir: the task's data directory (train and dev files, names per the task).
        out_dir: where the best model, predictions_dev.*, metrics.jsonl, tensorboard/ and
            results.json go.
        recipe: settings; None takes every task default.
        device: torch device ("cpu", "cuda", "auto").
        progress: show a progress bar.
    Returns:
        The results: best dev metrics and step, last dev metrics, the resolved recipe, timings.
    """
    device = resolve_device(device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        return _finetune(task, model_dir, data_dir, out_dir, recipe, device=device, progress=progress)


def _finetune(task: str | TaskSpec, model_dir: str | Path, data_dir: str | Path, out_dir: str | Path,
              recipe: FinetuneRecipe | None, *, device: torch.device, progress: bool) -> dict[str, Any]:
    """finetune()'s body, run inside a fork of torch's global generator (it seeds it)."""
    spec = get_task(task) if isinstance(task, str) else task
    recipe = recipe or FinetuneRecipe()
    out = output_dir(out_dir, "finetune", {"--model": model_dir, "--data": data_dir})
    if recipe.early_exit and spec.family.head not in EXIT_HEADS:
        raise AlbertlmError(f"--early-exit: task {spec.name} uses an {spec.family.head}; early exit is implemented "
                            f"for {' and '.join(EXIT_HEADS)}")
    check_head_options(spec, recipe)
    base = AlbertConfig.from_json_file(Path(model_dir) / "config.json")
    if recipe.max_seq_length is not None and recipe.max_seq_length > base.max_position_embeddings:
        raise AlbertlmError(f"--max-seq-length {recipe.max_seq_length}: the model at {model_dir} has only "
                            f"{base.max_position_embeddings} positions")
    tokenizer = load_tokenizer(model_dir)
    run = prepare_task(spec, data_dir, recipe, tokenizer, base)
    model = new_head(run, model_dir, base).to(device).train()
    trained, loss_fn, count_fn = task_objective(run, model, model_dir, device)
    with out.claim():
        start_outputs(out.path, {"task": spec.name, **dataclasses.asdict(run.recipe)})
        return train_task(run, model, tokenizer, out.path, loss_fn=loss_fn, count_fn=count_fn, device=device,
                          progress=progress, record={"model_dir": str(model_dir)}, trained=trained)


# ---------------------------------------------------------------------------- the pieces of a run
@dataclass
class TaskRun:
    """What a run trains and scores on: the task, its examples and features, the resolved recipe."""

    spec: TaskSpec
    recipe: FinetuneRecipe
    """Every default filled in (`FinetuneRecipe.resolve`) for the training features."""
    settings: FeatureSettings
    labels: list[str] | None
    """Class or tag names in id order (None: regression, QA, multiple choice)."""
    train_ex: list
    dev_ex: list
    train_f: list[Feature]
    dev_f: list[Feature]
    rng: np.random.Generator
    """The run's generator: it chose the training subset and draws the data order."""


def output_dir(out_dir: str | Path, command: str, inputs: dict[str, str | Path]) -> OutputDir:
    """The run's --out, checked now (writes nothing): not a file, not one of the inputs ({flag: path}), empty
    or an earlier output of the same command (outputs.py); `claim()` it once the inputs are known to be usable."""
    return OutputDir(out_dir, command, FINETUNE_FILES, inputs=inputs)


def read_splits(spec: TaskSpec, data_dir, recipe: FinetuneRecipe, rng: np.random.Generator) -> tuple[list, list]:
    """(train, dev) examples of the task, cut to the recipe's max_train_examples (an even draw from
    `rng`, kept in file order) and max_eval_examples (the first ones)."""
    train_ex = spec.read(data_dir, "train", recipe.strict)
    dev_ex = spec.read(data_dir, "dev", recipe.strict)
    if recipe.max_train_examples and recipe.max_train_examples < len(train_ex):
        keep = np.sort(rng.choice(len(train_ex), recipe.max_train_examples, replace=False))
        train_ex = [train_ex[i] for i in keep]
    return train_ex, dev_ex[:recipe.max_eval_examples] if recipe.max_eval_examples else dev_ex


def prepare_task(spec: TaskSpec, data_dir: str | Path, recipe: FinetuneRecipe, tokenizer, base: AlbertConfig,
                 labels: list[str] | None = None) -> TaskRun:
    """Read, subset and featurize the train and dev splits, and resolve the recipe for them.

    Args:
        spec: the task.
        data_dir: its data directory.
        recipe: the settings as given (unresolved).
        tokenizer: the model's tokenizer.
        base: the model's config (its max_position_embeddings caps max_seq_length).
        labels: the class names in id order, fixed by an existing classifier (the training data may not
            hold others); None: the task's own (from its files or training data).
    Returns:
        The TaskRun; nothing is written.
    """
    rng = np.random.default_rng(recipe.seed)
    train_ex, dev_ex = read_splits(spec, data_dir, recipe, rng)
    for split, examples in (("train", train_ex), ("dev", dev_ex)):
        unlabelled = sum(1 for e in examples if getattr(e, "label", "") is None or getattr(e, "tags", "") is None)
        if unlabelled:
            raise AlbertlmError(f"{data_dir}: {unlabelled} of {len(examples)} {split} examples have no label "
                                f"(is the label column missing from its {split} file?)")
    found = spec.label_list(data_dir, train_ex)
    if labels is not None and found and set(found) - set(labels):  # the model's classes are fixed already
        raise AlbertlmError(f"{data_dir}: the training data has labels {sorted(set(found) - set(labels))} that the "
                            f"model does not know (it has {labels})")
    labels = found if labels is None else labels
    partial = recipe.resolve(spec, 1)  # everything but the step counts, which need the feature count
    settings = feature_settings(partial, base, chinese=tokenizer.chinese)
    train_f = spec.family.featurize(spec, train_ex, tokenizer, labels, settings, True)
    dev_f = spec.family.featurize(spec, dev_ex, tokenizer, labels, settings, False)
    if not train_f or not dev_f:
        raise AlbertlmError(f"task {spec.name}: no usable {'training' if not train_f else 'dev'} examples")
    return TaskRun(spec, recipe.resolve(spec, len(train_f)), settings, labels, train_ex, dev_ex, train_f, dev_f, rng)


def new_head(run: TaskRun, model_dir: str | Path, base: AlbertConfig) -> nn.Module:
    """The task's head on `model_dir`'s backbone, configured for the run, its new weights drawn from the
    recipe's seed (torch's global generator, which the caller has forked: finetune()); with
    `pooler_reinit`, the pooler then drawn afresh from a generator of its own, seeded from the recipe's."""
    torch.manual_seed(run.recipe.seed)
    config = head_config(run.spec, base, run.labels, run.recipe, run.settings)
    model = load_head(run.spec, model_dir, config)
    if run.recipe.pooler_reinit:
        stream = np.random.default_rng([run.recipe.seed, 1]).integers(2 ** 63)  # not the global stream's values
        reinit_pooler(model, torch.Generator().manual_seed(int(stream)))
    return model


RERUN_REMOVES = MODEL_FILES + ("recipe.json", "results.json", "metrics.jsonl", "predictions_dev.*")
"""What a rerun into its own earlier output removes as it starts, with tensorboard/'s event files: the
files finetune and distill write, but distill's teacher-logit cache (keyed by its inputs and verified
by its sha256 before reuse) and any other name a user may have given a file there."""


def start_outputs(out_dir: Path, recipe_record: dict[str, Any]) -> None:
    """Start the records of a run in its claimed `out_dir` (output_dir(...).claim()), then write recipe.json.

    A rerun into its own earlier output first removes that output's files (`RERUN_REMOVES`), so a run
    that stops early never leaves the earlier run's results and model beside its own recipe.json,
    nor TensorBoard curves of two runs in one. A directory at a file's name is left alone (writing
    there names it).
    """
    for entry in out_dir.iterdir():
        if entry.name == "tensorboard" and entry.is_dir() and not entry.is_symlink():
            for event in entry.glob("events.out.tfevents.*"):
                event.unlink()
        elif any(fnmatch.fnmatchcase(entry.name, p) for p in RERUN_REMOVES) and not (
                entry.is_dir() and not entry.is_symlink()):
            entry.unlink()
    atomic_write_text(out_dir / "recipe.json", json.dumps(recipe_record, indent=2))


def head_objective(spec: TaskSpec, unpad: bool = False) -> tuple[LossFn, CountFn]:
    """The fine-tuning objective: the head's own loss (heads.py), averaged over the step's examples
    (or labelled tokens, for token-level tasks); with `unpad`, the head's forward runs unpadded (a head
    whose `unpads` is true). Other recipes (distillation) pass their own pair to `train_task`; theirs must
    also report a `loss_sum` metric and an `n` count."""
    tokens = spec.family.token_level
    options = {"unpad": True} if unpad else {}

    def count(batch: dict[str, torch.Tensor]) -> dict[str, float]:
        return {"n": float((batch["labels"] != IGNORE_INDEX).sum()) if tokens else float(len(batch["input_ids"]))}

    def loss_fn(model: nn.Module, batch: dict[str, torch.Tensor], totals: dict[str, float]):
        out = model(**batch, **options)
        n = count(batch)["n"]
        if n == 0:  # a micro-batch without a labelled token: no loss, keep the graph connected
            return out.logits.sum() * 0.0, {"loss_sum": 0.0}
        return out.loss * (n / totals["n"]), {"loss_sum": float(out.loss.detach()) * n}

    return loss_fn, count


def task_objective(run: TaskRun, model: nn.Module, model_dir: str | Path, device: torch.device
                   ) -> tuple[nn.Module, LossFn, CountFn]:
    """What the optimizer steps and its objective: the head and its own loss, or, when the recipe sets
    `mlm_weight`, the head with a training-only MLM head (train/joint.py: the joint objective), whose
    head starts from `model_dir`'s own MLM head when it has one. `model` is the head, on `device`; the
    forward passes run unpadded where `loop.unpadded` says so for the recipe, the head and the device."""
    r = run.recipe
    unpad = unpadded(r.unpad, model, device)
    loss_fn, count_fn = head_objective(run.spec, unpad)
    if not r.mlm_weight:
        return model, loss_fn, count_fn
    from albertlm.train.joint import JointModel, joint_objective, mlm_head_from

    with torch.random.fork_rng(devices=[]):  # building the MLM head leaves the run's dropout draws as they were
        torch.manual_seed(r.seed)
        joint = JointModel(model, mlm_head_from(model_dir, model.config).to(device))
    generator = torch.Generator(device=device).manual_seed(r.seed)
    loss_fn, count_fn = joint_objective(loss_fn, count_fn, weight=r.mlm_weight, probability=r.mlm_probability,
                                        special=load_tokenizer(model_dir).special_ids, generator=generator,
                                        unpad=unpad)
    return joint.train(), loss_fn, count_fn


@dataclass(frozen=True)
class DevScorer:
    """How a run scores its dev split and writes its best checkpoint: the head's own (`head_scorer`), or
    another objective's (train/embedding.py scores sentence vectors)."""

    metric: str
    """The metric the best checkpoint is chosen by (higher is better)."""
    score: Callable[[nn.Module], tuple[dict[str, float], Any]]
    """model -> (dev metrics, what `save` writes beside the model, e.g. the dev predictions)."""
    save: Callable[[nn.Module, Path, Any], None]
    """(model, out_dir, score's second value): write the best checkpoint."""


def head_scorer(run: TaskRun, tokenizer, device: torch.device) -> DevScorer:
    """The task's own metric on the head's dev predictions; the best checkpoint with its predictions file."""
    def score_dev(model: nn.Module) -> tuple[dict[str, float], list]:
        return score(model, run.spec, run.dev_ex, run.dev_f, run.labels, run.settings, run.recipe.eval_batch_size,
                     device)

    return DevScorer(run.spec.main_metric, score_dev,
                     lambda model, out_dir, predictions: _save_best(model, tokenizer, out_dir, run, predictions))


def train_task(run: TaskRun, model: nn.Module, tokenizer, out_dir: Path, *, loss_fn: LossFn, count_fn: CountFn,
               device: torch.device, progress: bool, record: dict[str, Any], name: str = "finetune",
               trained: nn.Module | None = None, scorer: DevScorer | None = None, deadline: float | None = None,
               eval_s: float = 0.0) -> dict[str, Any]:
    """Train `model` on the run's features with the shared loop, keeping the best dev checkpoint.

    Args:
        run: the prepared task (prepare_task).
        model: the head to train, on `device`, in train mode.
        tokenizer: saved beside every best checkpoint.
        out_dir: the output directory (start_outputs made it).
        loss_fn, count_fn: the objective (head_objective, or another recipe's); a batch holds the
            padded inputs of the training features, whatever keys those carry.
        device, progress: the torch device; whether to show a progress bar.
        record, name: more entries for results.json (at least `model_dir`); the recipe's name (the bar's).
        trained: what the optimizer steps and `loss_fn` is given, when more than the head (task_objective's
            JointModel: the head with a training-only MLM head); the head alone is scored and saved.
        scorer: how dev is scored and the best checkpoint written; None: `head_scorer`.
        deadline: a time.perf_counter() value the run must end by, its last evaluation included: when
            the next step would pass it less one evaluation, the run evaluates and stops ("stopped_by":
            "deadline"), however the machine's pace changed after the steps were planned. None: no limit.
        eval_s: the first estimate of one evaluation's seconds, replaced by the slowest one measured.
    Returns:
        The results: best dev metrics and step, last dev metrics, the resolved recipe, timings.
    """
    spec, r = run.spec, run.recipe
    trained = model if trained is None else trained
    scorer = head_scorer(run, tokenizer, device) if scorer is None else scorer
    optimizer = task_optimizer(trained, r)
    averaged = weight_average(model, r.ema_decay) if r.ema_decay else None
    kept = model if averaged is None else averaged.module  # what is scored for the best checkpoint and saved
    trained_curve: list[list[float]] = []  # with averaging: [step, main metric] of the trained weights themselves
    logger = MetricsLogger(out_dir)
    logger.log(0, "setup", {"task": spec.name, **_sizes(run), "parameters": model.num_parameters(),
                            **dataclasses.asdict(r)})
    best: dict[str, Any] = {"value": None, "step": 0, "metrics": {}}
    last: dict[str, float] = {}
    curve: list[list[float]] = []  # [step, main metric] at every evaluation
    state: dict[str, Any] = {"bad_evals": 0, "eval_s": eval_s, "train_s": 0.0, "timed": 0, "stopped_by": None}
    start = last_step = time.perf_counter()

    def time_up(done: int) -> bool:
        nonlocal last_step
        now = time.perf_counter()
        state["train_s"], state["timed"], last_step = state["train_s"] + now - last_step, state["timed"] + 1, now
        if now + state["train_s"] / state["timed"] + state["eval_s"] < deadline:  # one more step, then evaluate
            return False
        state["stopped_by"] = "deadline"
        return True

    def on_log(done: int, m: dict[str, Any], lr: float, logged: bool) -> dict[str, str]:
        if averaged is not None:
            averaged.update_parameters(model)
        train_loss = m["loss_sum"] / max(m["n_n"], 1.0)
        if logged:
            mlm = ({"mlm_loss": m["mlm_loss_sum"] / m["mlm_n"], "mlm_accuracy": m["mlm_correct"] / m["mlm_n"]}
                   if m.get("mlm_n") else {})
            logger.log(done, "train", {"loss": train_loss, "lr": lr, "grad_norm": m["grad_norm"],
                                       "skipped": m["skipped"], **mlm})
        return {"loss": f"{train_loss:.4f}", "best": f"{best['value']:.4f}" if best["value"] is not None else "-"}

    def on_eval(done: int) -> bool:
        nonlocal best, last, last_step
        began = time.perf_counter()
        if averaged is not None:
            trained_metrics, _ = scorer.score(model)
            logger.log(done, "eval_trained_weights", trained_metrics)
            trained_curve.append([done, trained_metrics.get(scorer.metric, float("nan"))])
        last, predictions = scorer.score(kept)
        logger.log(done, "eval", last)
        value = last.get(scorer.metric, float("nan"))
        curve.append([done, value])
        value = -math.inf if math.isnan(value) else value
        if best["value"] is None or value > best["value"]:
            best = {"value": value, "step": done, "metrics": last}
            state["bad_evals"] = 0
            scorer.save(kept, out_dir, predictions)
        else:
            state["bad_evals"] += 1
        last_step = time.perf_counter()
        state["eval_s"] = max(state["eval_s"], last_step - began)
        if r.patience and state["bad_evals"] >= r.patience:
            state["stopped_by"] = "patience"
            return True
        return False

    step = run_steps(trained, optimizer, start=0, cadence=Cadence(r.steps, r.log_every, r.eval_every),
                     batches=batcher(run, device), lr=lambda index: lr_at(index, r.lr, r.warmup_steps, r.steps), loss_fn=loss_fn,
                     count_fn=count_fn, ctx=DistContext(device=device),
                     settings=step_settings(r), on_log=on_log,
                     on_eval=on_eval, progress=f"{name} {spec.name}" if progress else None,
                     time_up=None if deadline is None else time_up)
    logger.close()
    results = {"task": spec.name, "main_metric": scorer.metric, "best_step": best["step"], "best": best["metrics"],
               "last": last, "steps": step, "stopped_early": step < r.steps,
               "stopped_by": state["stopped_by"], "dev_curve": curve,
               "improving_at_end": len(curve) > 1 and best["step"] == curve[-1][0], **_sizes(run),
               "train_seconds": time.perf_counter() - start, "out_dir": str(out_dir), "recipe": dataclasses.asdict(r),
               "transformers_loads": transformers_can_load(model.config), **record}
    results.update(spec.family.recorded)
    if averaged is not None:
        scored = [(value, step) for step, value in trained_curve if not math.isnan(value)]
        top, top_step = max(scored, key=lambda pair: pair[0]) if scored else (None, 0)  # the first of equal bests
        results["trained_weights"] = {"dev_curve": trained_curve, "best": top, "best_step": top_step}
    atomic_write_text(out_dir / "results.json", json.dumps(results, indent=2))
    return results


def weight_average(model: nn.Module, decay: float) -> torch.optim.swa_utils.AveragedModel:
    """An exponential moving average of `model`'s parameters (torch's AveragedModel, a copy of the model):
    the first update copies the weights, and after n updates the next keeps min(decay, (1 + n) / (10 + n))
    of the average, so the first steps are not averaged with the random start for long. Parameters only:
    the heads hold no buffers."""
    def ema(averages: list[torch.Tensor], currents: list[torch.Tensor], n: torch.Tensor) -> None:
        keep = min(decay, (1.0 + float(n)) / (10.0 + float(n)))
        torch._foreach_lerp_(averages, currents, 1.0 - keep)

    return torch.optim.swa_utils.AveragedModel(model, multi_avg_fn=ema, use_buffers=False)


def task_optimizer(model: nn.Module, r: FinetuneRecipe) -> torch.optim.Optimizer:
    """The recipe's optimizer (optim.build_optimizer: LayerNorm and biases undecayed)."""
    return build_optimizer(r.optimizer, model, lr=r.lr, weight_decay=r.weight_decay, eps=1e-6)


def step_settings(r: FinetuneRecipe) -> StepSettings:
    """How the recipe takes every optimizer step (precision, clipping)."""
    return StepSettings(precision=r.precision, clip_norm=r.clip_norm)


def _save_best(model: nn.Module, tokenizer, out_dir: Path, run: TaskRun, predictions: list) -> None:
    """The best checkpoint so far: the model, its tokenizer and its dev predictions."""
    model.save_pretrained(out_dir)
    tokenizer.save(out_dir)
    run.spec.family.write(out_dir / f"predictions_dev{run.spec.family.suffix}", run.dev_ex, predictions)


def _sizes(run: TaskRun) -> dict[str, int]:
    return {"train_examples": len(run.train_ex), "train_features": len(run.train_f), "dev_examples": len(run.dev_ex)}


def batcher(run: TaskRun, device: torch.device) -> Callable[[int], list[dict[str, torch.Tensor]]]:
    """Step index -> the step's micro-batches on `device`: a fresh shuffle of the training features
    per epoch (the run's generator), the remainder of one epoch carried into the next."""
    r, order = run.recipe, np.zeros(0, dtype=np.int64)

    def batches(index: int) -> list[dict[str, torch.Tensor]]:
        nonlocal order
        while len(order) < r.batch_size:
            order = np.concatenate([order, run.rng.permutation(len(run.train_f))])
        idx, order = order[:r.batch_size], order[r.batch_size:]
        return [to_device(pad_batch([run.train_f[i] for i in idx[k:k + r.micro_batch_size]]), device)
                for k in range(0, len(idx), r.micro_batch_size)]

    return batches


def format_results(results: dict[str, Any]) -> str:
    """The end-of-run table: every dev metric of the best checkpoint (x100 except counts) and the last eval."""
    best, last = results["best"], results.get("last", {})
    names = [k for k in best if k not in ("total", "entities")]
    lines = [f"{'metric':<20}{'best (step ' + str(results['best_step']) + ')':>18}{'last':>10}"]
    for k in names:
        mark = " *" if k == results["main_metric"] else ""
        lines.append(f"{k + mark:<20}{100 * best[k]:>18.2f}{100 * last.get(k, float('nan')):>10.2f}")
    lines.append(f"{results['task']}: {results['steps']} steps, {results['train_examples']:,} training examples, "
                 f"{results['dev_examples']:,} dev examples, {results['train_seconds'] / 60:.1f} min"
                 + (" (stopped early)" if results["stopped_early"] else ""))
    if results.get("improving_at_end"):
        lines.append(f"the best dev {results['main_metric']} came at the last evaluation: the run was still improving "
                     "when it stopped (more steps or epochs may help)")
    where = "loads in transformers" if results.get("transformers_loads", True) else "loads in albertlm only"
    lines.append(f"best model ({where}): {results['out_dir']}")
    return "\n".join(lines)
