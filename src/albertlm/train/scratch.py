"""Fine-tuning without a pretrained model: a task vocabulary, a random ALBERT, steps sized to a time budget.

`finetune_from_scratch(task, data_dir, out_dir, budget_minutes)` is `albertlm finetune` without
--model, for a user who has only labelled data. Within the budget it does everything:

  1. trains a SentencePiece vocabulary on the task's training text (Chinese mode when the text
     looks Chinese), as large as the recipe asks and the text supports;
  2. draws a random ALBERT of the recipe's preset with that vocabulary, starts its word table from
     word vectors of the training text and of any unlabelled text the user gives (`unlabelled`,
     corpus specs as data/corpus.py reads them), and saves it, with the tokenizer, in OUT/base/, so
     `albertlm finetune --model OUT/base` with the recorded recipe repeats the run exactly;
  3. fits the task's count-based baselines on the same training examples and scores them on the same
     dev examples (tasks/baselines.py; scikit-learn, an optional extra, for the classification and
     regression ones);
  4. probes: a few real training steps and one dev evaluation of the task's head, built as the run
     builds it, on the run's features, timed, on a copy that is then dropped;
  5. fine-tunes (train/finetune.py: the best dev checkpoint, the dev curve) for as many steps as
     the rest of the budget holds at the probe's pace (`plan_steps`), at most `epochs` passes;
  6. for a family in `self_distill_families`, where the budget holds that plan twice (`second_round`),
     the first model goes to OUT/teacher and a second one, from the same base, learns from it and the
     labels (`distil_second`, train/distill.py's objective) and is the run's model.

OUT is claimed once for the whole run (outputs.py, as command "finetune": it holds a fine-tuned
model directory, plus base/); a rerun into an earlier output starts over and removes that output's
files first, so OUT never mixes two runs. The recipe is one named object, `DEFAULT_RECIPE`: change
the default there after an experiment.

The stages are `run_from_scratch`'s, shared with train/scratch_embedding.py (a sentence embedder
from the same start, `albertlm finetune --objective cosent` without --model); what differs, the
model, its objective, its dev scorer, its baseline and what it writes besides, is a `ScratchTarget`:
`TaskHead` here, the task's own head and loss.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from albertlm.config import AlbertConfig, get_preset
from albertlm.data.corpus import Corpus
from albertlm.distributed import DistContext, resolve_device
from albertlm.errors import AlbertlmError
from albertlm.inference.load import load_tokenizer
from albertlm.model import AlbertForPreTraining
from albertlm.outputs import FINETUNE_FILES, OutputDir
from albertlm.tasks.baselines import (BASELINES, baselines_of, example_texts, headline, is_chinese, score_baselines,
                                      sklearn_missing)
from albertlm.tasks.common import find_file
from albertlm.tasks.registry import TaskSpec, get_task
from albertlm.tokenizer import load_vocabulary, train_tokenizer
from albertlm.train.distill import (TEMPERATURE_RANGE, DistillSettings, distillation_record, distills, load_teacher,
                                    train_student)
from albertlm.train.finetune import (DevScorer, FinetuneRecipe, TaskRun, batcher, check_head_options, head_scorer,
                                     new_head, prepare_task, start_outputs, step_settings, task_objective,
                                     task_optimizer, train_task)
from albertlm.train.loop import CountFn, LossFn, train_step
from albertlm.train.word_vectors import TooLittleText, fit_word_vectors, write_rows
from albertlm.utils import atomic_write_text

BASE = "base"
"""OUT's subdirectory with the vocabulary and the random-init model the run started from."""

TEACHER = "teacher"
"""OUT's subdirectory with the first model, when a second one is distilled from it (self_distill_families)."""

SCRATCH_FILES = FINETUNE_FILES + (BASE, TEACHER)
"""What a run without a pretrained model writes into OUT."""

DEFAULT_BUDGET_MINUTES = 40.0
"""The default --budget: the whole command, on 2 CPU cores, in under 45 minutes."""

SUPPORTED = ("classification", "ner")
"""Families whose examples are text to train a vocabulary on, with a head a random model learns alone."""

PLANNED = ("steps", "epochs", "warmup_steps", "eval_every")
"""Fine-tuning fields the budget sets: giving one is refused."""


@dataclass(frozen=True)
class ScratchRecipe:
    """How albertlm trains a task's model when there is no pretrained one."""

    name: str
    """What results.json calls the recipe."""
    preset: str = "albert-tiny"
    """The architecture (config.PRESETS), randomly initialised; its vocab_size becomes the vocabulary's."""
    vocab_size: int = 8000
    """Pieces asked of the task vocabulary (fewer when the training text supports fewer)."""
    chinese_vocab_size: int = 6000
    """The same for Chinese text; raised to the text's distinct characters plus 1,000 (one piece each)."""
    family_presets: tuple[tuple[str, str], ...] = ()
    """(family, preset) pairs: a task of a family named here trains that architecture instead of `preset`
    (for_family). A family whose every token is labelled has far more signal to fit a larger model with."""
    cased_families: tuple[str, ...] = ()
    """Task families (SUPPORTED) whose vocabulary keeps the text's case; the others' is lower-cased, as
    ALBERT's own vocabularies are. Case is a name's strongest cue in English tagging."""
    finetune: FinetuneRecipe = FinetuneRecipe(lr=3e-4, batch_size=32, dropout=0.0, classifier_dropout=0.1)
    """Fine-tuning settings; the budget sets the steps, warmup and evaluations, the data max_seq_length
    (unless set here)."""
    seq_length_min: int = 64
    """The shortest max_seq_length chosen from the data."""
    seq_length_max: int = 256
    """The longest max_seq_length chosen from the data. 128 cut 31% of ChnSentiCorp's reviews; 256 holds
    95% of them and gave 89.75 (89.50, 89.50, 90.25 on seeds 0-2) against 88.78 at 128, every seed
    higher, though the longer steps let the budget hold 6.2-9.9 epochs instead of 10 (docs/transfer.md,
    run 30). A family named in family_seq_length_max has its own."""
    family_seq_length_max: tuple[tuple[str, int], ...] = ()
    """(family, length) pairs: a task of a family named here takes `length` as its seq_length_max
    (for_family). A tagger splits a long sentence into chunks of the max length and loses no word to
    it, so a longer cap buys context only, at more compute per chunk and fewer steps per epoch."""
    length_quantile: float = 0.95
    """max_seq_length holds this share of the training examples whole (rounded up to a multiple of 32)."""
    epochs: float = 3.0
    """The most passes over the training set, whatever the budget."""
    max_examples: int | None = None
    """The most training examples seen (steps times the batch), whatever the budget and the epochs; None
    for no such cap. It binds only on a large training set, where `epochs` passes would be many examples."""
    warmup_share: float = 0.1
    """Linear warmup, as a share of the steps."""
    evaluations: int = 10
    """Dev evaluations per run at most (each scores the whole dev set; the best is kept)."""
    eval_share: float = 0.25
    """The most of the training time dev evaluations may take (fewer of them for a large dev set)."""
    probe_steps: int = 5
    """Real training steps timed before planning (the first one, slower, is not counted)."""
    reserve: float = 0.05
    """Share of the budget left unplanned: what the probe does not time (writing the results, a machine
    whose load changes). Training stops, evaluated, by budget * (1 - reserve / 2) whatever the plan said."""
    word_vectors: bool = False
    """Start the word table from PPMI-SVD vectors of the training text (train/word_vectors.py) instead of
    random rows; special tokens and pieces without a positive-PMI context keep theirs."""
    word_vector_window: int = 5
    """With word_vectors: pieces on each side that count as a piece's context."""
    label_vectors: bool = False
    """With word_vectors, on a single-text classification task: K of the word table's E coordinates
    (1 for two classes, else one per class) start at each piece's smoothed log-ratio per class in the
    training labels instead of the K weakest SVD directions (train/word_vectors.py, label coordinates).
    Pairs, regression, multi-label and taggers keep the text's vectors alone."""
    ema_intervals: float = 0.0
    """Score and keep an exponential moving average of the weights (FinetuneRecipe.ema_decay) whose horizon
    1 / (1 - decay) is this many evaluation intervals of the plan; 0: no averaging. An ema_decay given
    with the fine-tuning settings (--ema-decay; 0 for none) takes its place."""
    ema_families: tuple[str, ...] = SUPPORTED
    """Task families (SUPPORTED) that ema_intervals averages; the others train without averaging unless
    --ema-decay asks for it."""
    unlabelled_max_texts: int = 500_000
    """With unlabelled text (--unlabelled): the most of its sentences read, the first ones; bounds the
    memory and seconds of the word vectors (their co-occurrence pairs grow with the pieces read)."""
    self_distill_families: tuple[str, ...] = ()
    """Task families (SUPPORTED) whose runs, where the budget holds the plan twice over (and the first
    model's logits on the training set), train the model, then a second one from the same base and plan,
    seed + 1, taught by the first (train/distill.py's objective at self_distill_temperature and
    self_distill_alpha): the second is the run's model, the first stays in OUT/teacher. Where the budget
    holds one round, the run trains one model and says so. Task heads only (not sentence embedders, not
    early exit, not the joint objective)."""
    self_distill_temperature: float = 2.0
    """With self_distill_families: the distillation temperature T."""
    self_distill_alpha: float = 0.5
    """With self_distill_families: the weight of the teacher's term (1 - alpha weighs the labels')."""

    def __post_init__(self) -> None:
        from albertlm.config import PRESETS
        from albertlm.utils import check_field_types

        check_field_types(self)
        if self.preset not in PRESETS:
            raise AlbertlmError(f"preset {self.preset!r} is unknown; choose one of {', '.join(PRESETS)}")
        planned = [name for name in PLANNED if getattr(self.finetune, name) is not None]
        if planned:
            raise AlbertlmError(f"{planned[0]}: the budget sets the steps, warmup and evaluations of a run "
                                "without a pretrained model")
        positive = ("vocab_size", "chinese_vocab_size", "seq_length_min", "epochs", "evaluations", "probe_steps",
                    "word_vector_window", "unlabelled_max_texts")
        if (any(getattr(self, name) <= 0 for name in positive) or self.seq_length_max < self.seq_length_min
                or (self.max_examples is not None and self.max_examples <= 0)):
            raise AlbertlmError(f"{', '.join(positive)} and max_examples must be positive and seq_length_max at least "
                                "seq_length_min")
        pairs = self.family_presets
        if (not isinstance(pairs, tuple) or any(not isinstance(p, tuple) or len(p) != 2 for p in pairs)
                or any(f not in SUPPORTED or p not in PRESETS for f, p in pairs)
                or len({f for f, _ in pairs}) != len(pairs)):
            raise AlbertlmError(f"family_presets must be (family, preset) pairs, each family ({', '.join(SUPPORTED)}) "
                                f"once and each preset one of {', '.join(PRESETS)}; got {pairs!r}")
        lengths = self.family_seq_length_max
        if (not isinstance(lengths, tuple) or any(not isinstance(p, tuple) or len(p) != 2 for p in lengths)
                or any(f not in SUPPORTED or isinstance(n, bool) or not isinstance(n, int) or n < self.seq_length_min
                       for f, n in lengths)
                or len({f for f, _ in lengths}) != len(lengths)):
            raise AlbertlmError(f"family_seq_length_max must be (family, length) pairs, each family "
                                f"({', '.join(SUPPORTED)}) once and each length an integer of at least "
                                f"seq_length_min ({self.seq_length_min}); got {lengths!r}")
        for name in ("cased_families", "ema_families", "self_distill_families"):
            families = getattr(self, name)
            if not isinstance(families, tuple) or any(f not in SUPPORTED for f in families):
                raise AlbertlmError(f"{name} must be a tuple of {', '.join(SUPPORTED)}, got {families!r}")
        low, high = TEMPERATURE_RANGE
        if not (low <= self.self_distill_temperature <= high and 0 <= self.self_distill_alpha <= 1):
            raise AlbertlmError(f"self_distill_temperature must lie in [{low:g}, {high:g}] and self_distill_alpha in "
                                f"[0, 1], got {self.self_distill_temperature:g} and {self.self_distill_alpha:g}")
        if self.label_vectors and not self.word_vectors:
            raise AlbertlmError("label_vectors starts coordinates of the word vectors: it needs word_vectors")
        if self.ema_intervals < 0:
            raise AlbertlmError(f"ema_intervals must be 0 (no averaging) or more, got {self.ema_intervals}")
        if not (0 < self.length_quantile <= 1 and 0 <= self.warmup_share < 1 and 0 < self.eval_share < 1
                and 0 <= self.reserve < 1):
            raise AlbertlmError("length_quantile must lie in (0, 1], eval_share in (0, 1), warmup_share and "
                                "reserve in [0, 1)")

    def for_family(self, family: str) -> ScratchRecipe:
        """The recipe a task of `family` runs: `preset` is family_presets' entry for it where there is one,
        and seq_length_max family_seq_length_max's entry; both pair lists are emptied, so that the recipe
        recorded names the architecture trained and the cap it chose the length under."""
        return dataclasses.replace(self, preset=dict(self.family_presets).get(family, self.preset), family_presets=(),
                                   seq_length_max=dict(self.family_seq_length_max).get(family, self.seq_length_max),
                                   family_seq_length_max=())

    def with_preset(self, preset: str) -> ScratchRecipe:
        """This recipe training `preset` for every family (the command line's --preset)."""
        return dataclasses.replace(self, preset=preset, family_presets=())

    def with_finetune(self, **changes: Any) -> ScratchRecipe:
        """This recipe with fine-tuning fields changed (the command line's recipe flags); the fields the
        budget sets (PLANNED) are refused, naming their flag."""
        planned = [name for name in PLANNED if name in changes]
        if planned:
            flag = "--" + planned[0].replace("_", "-")
            raise AlbertlmError(f"{flag}: without --model the budget sets the steps, warmup and evaluations; "
                                f"use --budget MINUTES, or give --model DIR to set {flag} yourself")
        return dataclasses.replace(self, finetune=dataclasses.replace(self.finetune, **changes))


DEFAULT_RECIPE = ScratchRecipe(name="task-vocab-word-vectors", epochs=10.0, max_examples=160_000, word_vectors=True,
                               family_presets=(("ner", "albert-small"),), cased_families=("ner",), ema_intervals=1.0,
                               ema_families=("ner",), family_seq_length_max=(("ner", 128),))
"""The best the project knows without pretraining (docs/transfer.md): albert-tiny with a vocabulary
trained on the task's own text, its word table started from PPMI-SVD vectors of the same text (on
SST-2 above the random table at every evaluation of 2,000 steps, 80.39 against 79.70 at the end, for
3 s of setup); AdamW at 3e-4, batch 32, 10% warmup, dropout 0, classifier dropout 0.1. Up to 10
epochs, as the budget holds: at 3, CoNLL-2003 stopped while still improving (63.96 F1, 68.86 at 8
epochs), and the best dev checkpoint is kept. At most 160,000 examples seen (5,000 steps of 32): on the
two large training sets measured (SST-2, 67k; TNEWS, 53k) plans of 130-185k examples beat plans of
290-480k (SST-2 81.31 against 80.31, means of 3 seeds; TNEWS 51.88 against 50.67, one seed), since
the longer plans' curves turn after 1-3 epochs; the smaller sets (ChnSentiCorp, CoNLL-2003, STS-B)
reach 10 epochs under the cap and are unchanged. With the cap, SST-2 gets 81.35 (3 seeds).

Taggers (the NER family) differ in two ways, each measured on CoNLL-2003 over 3 seeds. Their vocabulary
keeps the text's case, where sentence tasks' is lower-cased: 70.33 F1 against 68.82, every cased seed
above every uncased one. And they keep an average of the weights over one evaluation interval
(ema_intervals): 70.78 against the same runs' trained weights' 70.33, no seed lower. On the sentence
tasks the average smooths the dev curve but did not raise the best checkpoint (SST-2 -0.04 over 3
seeds), so they train without it and spend no second evaluation.

Taggers also train a larger model, albert-small (H 512, FFN 2048, 2.5x albert-tiny's compute a token):
on CoNLL-2003, 72.84 F1 over 3 seeds against albert-tiny's 70.78, every seed above every albert-tiny
one (two of the seeds in the default 40 minutes, where the budget, not the epoch cap, ends the plan);
on two Chinese tagging sets no other lever was tried on, CLUENER2020 52.00 against 40.56 (one seed) and
Weibo-NER 27.60 against 22.13 (two seeds, 1,350 training messages). A tagger labels every token, so
its training set has far more labels to fit the larger model with; the sentence tasks lose with it (STS-B -1.72 Spearman, SST-2 -1.95, one seed each) and keep
albert-tiny. Those F1 scores read each word's most probable tag; the tags are now decoded as the best
well-formed sequence (tasks/ner.py, not part of the recipe), and the same command gives CoNLL-2003 74.91
over 3 seeds. Its training steps now compute the real tokens only (FinetuneRecipe.unpad, 2.3x faster on
CoNLL-2003), so the budget holds the 10-epoch cap, and it gives 75.36 over 3 seeds in 25 minutes each.
Taggers keep 128 as their longest max length where the sentence tasks have 256: a tagger's long
sentence is split into chunks and loses no word, and on Weibo-NER the longer cap (224) gave 33.39 F1
against 35.73 at 128, both seeds lower (run 30)."""


# ---------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class Plan:
    """How many steps the budget holds, from the probe's timings (every time in seconds)."""

    budget_s: float
    spent_s: float
    """Used before training: reading, the vocabulary, the model, the features, the baselines, the probe."""
    step_s: float
    """One training step, as the probe measured it."""
    eval_s: float
    """One dev evaluation and the save of a better checkpoint."""
    epoch_cap: int
    """The most steps the recipe allows: `epochs` passes over the training features, or fewer where
    `max_examples` binds."""
    steps: int
    limited_by: str
    """"budget", "epochs" or "examples" (the recipe's max_examples)."""
    evaluations: int
    """Dev evaluations the run makes (every eval_every steps and at the last)."""
    eval_every: int
    warmup_steps: int
    planned_s: float
    """spent_s + steps * step_s + evaluations * eval_s: at most the budget less its reserve."""


def plan_steps(recipe: ScratchRecipe, *, budget_s: float, spent_s: float, step_s: float, eval_s: float,
               train_features: int, batch_size: int) -> Plan:
    """The run's steps, evaluations and warmup: as many steps as the budget holds, at most `epochs` passes
    and at most `max_examples` examples seen.

    Args:
        recipe: its epochs, evaluations, eval_share, warmup_share and reserve.
        budget_s: the whole command's budget.
        spent_s: what is used already.
        step_s, eval_s: the probe's seconds per training step and per dev evaluation.
        train_features, batch_size: the training set and the batch, for the caps.
    Returns:
        The Plan; its planned_s never exceeds budget_s * (1 - reserve).
    Raises:
        AlbertlmError: what is left of the budget does not hold one step and one evaluation.
    """
    left = budget_s * (1 - recipe.reserve) - spent_s
    if left < step_s + eval_s:
        raise AlbertlmError(f"--budget {budget_s / 60:g} minutes is too small: the setup took {spent_s:.1f} s, and one "
                            f"training step and one dev evaluation need {step_s + eval_s:.1f} s more; give a larger "
                            "--budget")
    cap = max(1, math.ceil(recipe.epochs * train_features / batch_size))
    capped_by = "epochs"
    if recipe.max_examples is not None and math.ceil(recipe.max_examples / batch_size) < cap:
        cap, capped_by = max(1, math.ceil(recipe.max_examples / batch_size)), "examples"
    evaluations = recipe.evaluations if eval_s <= 0 else max(1, min(recipe.evaluations,
                                                                    math.floor(recipe.eval_share * left / eval_s)))
    steps = max(1, math.floor((left - evaluations * eval_s) / step_s))
    limited_by = "budget" if steps < cap else capped_by
    steps = min(steps, cap)
    eval_every = math.ceil(steps / evaluations)
    evaluations = math.ceil(steps / eval_every)  # evaluated every eval_every steps and at the last
    return Plan(budget_s=budget_s, spent_s=spent_s, step_s=step_s, eval_s=eval_s, epoch_cap=cap, steps=steps,
                limited_by=limited_by, evaluations=evaluations, eval_every=eval_every,
                warmup_steps=round(recipe.warmup_share * steps),
                planned_s=spent_s + steps * step_s + evaluations * eval_s)


# ---------------------------------------------------------------------------- what the run trains
@dataclass(frozen=True)
class Trainable:
    """A model built on the base, the same way for the probe and for the run."""

    model: nn.Module
    """What is scored and saved: on the device, in train mode."""
    trained: nn.Module
    """What the optimizer steps and the loss is given: the model, or more (task_objective's JointModel)."""
    loss_fn: LossFn
    count_fn: CountFn
    scorer: DevScorer
    """How dev is scored and the best checkpoint written (train/finetune.train_task)."""


class ScratchTarget:
    """What a run without a pretrained model trains on its base: the stages that differ between the task's
    head (`TaskHead`) and a sentence embedder (train/scratch_embedding.py). The vocabulary, the base, the
    probe's timing, the plan, the clock and the records are `run_from_scratch`'s, the same for both."""

    name = "finetune"
    """The run's name (the progress bar's)."""
    files: tuple[str, ...] = ()
    """What the run writes into OUT besides a fine-tuned directory and base/ (SCRATCH_FILES)."""
    each_text = False
    """max_seq_length holds each text of an example alone (a bi-encoder), not its texts together."""

    def check_recipe(self, spec: TaskSpec, recipe: ScratchRecipe) -> None:
        """Refuse, before the data is looked at, a task or recipe flags the target cannot train."""

    def check_data(self, spec: TaskSpec, data_dir: str | Path, recipe: ScratchRecipe) -> None:
        """Refuse, before OUT is claimed, data the target cannot train on (the split files exist)."""

    def prepare(self, spec: TaskSpec, data_dir: str | Path, recipe: FinetuneRecipe, tokenizer, base: AlbertConfig
                ) -> tuple[TaskRun, Any]:
        """(the TaskRun: its examples, features and resolved recipe; what dev is scored against, for
        `baseline` and `build`)."""
        raise NotImplementedError

    def baseline(self, run: TaskRun, dev: Any, chinese: bool) -> tuple[dict[str, Any] | None, str | None]:
        """(the count-based baseline shown beside the model, headline-shaped, None) or (None, why none)."""
        raise NotImplementedError

    def build(self, run: TaskRun, dev: Any, base_dir: Path, base: AlbertConfig, tokenizer, device: torch.device
              ) -> Trainable:
        """The model on the base, its objective and its dev scorer (torch's global generator seeded here)."""
        raise NotImplementedError

    def flags(self, run: TaskRun) -> list[str]:
        """The `albertlm finetune --model OUT/base` flags after --data that repeat the run."""
        return recipe_flags(run.recipe)

    def records(self) -> dict[str, Any]:
        """Entries for recipe.json and results.json beside the recipe's."""
        return {}

    def finish(self, out_dir: Path, run: TaskRun, device: torch.device) -> dict[str, Any]:
        """Write what the run adds to OUT after training (on `device`); returns its entries for results.json."""
        return {}

    def distillable(self, run: TaskRun) -> str | None:
        """None where a second model can be distilled from the first (ScratchRecipe.self_distill_families), else
        why not."""
        return "a sentence embedder has no class distribution to teach"


class TaskHead(ScratchTarget):
    """The task's own head and loss (train/finetune.py), scored by the task's metric; the classification
    and NER families, whose count-based baselines tasks/baselines.py fits."""

    def check_recipe(self, spec: TaskSpec, recipe: ScratchRecipe) -> None:
        if spec.family.name not in SUPPORTED:
            family = spec.family.name.replace("_", " ")
            raise AlbertlmError(f"task {spec.name}: without --model albertlm trains classification (single "
                                f"sentences, pairs, regression) and NER tasks, not {family}; give --model DIR (a "
                                "pretrained model)")
        check_head_options(spec, recipe.finetune)

    def prepare(self, spec: TaskSpec, data_dir: str | Path, recipe: FinetuneRecipe, tokenizer, base: AlbertConfig
                ) -> tuple[TaskRun, None]:
        return prepare_task(spec, data_dir, recipe, tokenizer, base), None

    def baseline(self, run: TaskRun, dev: None, chinese: bool) -> tuple[dict[str, Any] | None, str | None]:
        return run_baselines(run.spec, run.train_ex, run.dev_ex, chinese)

    def distillable(self, run: TaskRun) -> str | None:
        spec, r = run.spec, run.recipe
        if not distills(spec):
            return f"task {spec.name} has no soft target to distil"
        if r.early_exit:
            return "--early-exit trains exit heads, which distillation does not"
        if r.mlm_weight:
            return "--mlm-weight trains a joint objective, which distillation does not"
        return None

    def build(self, run: TaskRun, dev: None, base_dir: Path, base: AlbertConfig, tokenizer, device: torch.device
              ) -> Trainable:
        model = new_head(run, base_dir, base).to(device).train()
        trained, loss_fn, count_fn = task_objective(run, model, base_dir, device)
        return Trainable(model, trained, loss_fn, count_fn, head_scorer(run, tokenizer, device))


# ---------------------------------------------------------------------------- the stages
def check_inputs(spec: TaskSpec, data_dir: str | Path, budget_minutes: float, recipe: ScratchRecipe,
                 target: ScratchTarget | None = None, unlabelled: Sequence[str] = ()) -> None:
    """Refuse, before any work, a budget that is not a positive number, a max_seq_length the preset's
    positions do not hold, what the target refuses (the task's head: a family a random model cannot train
    on alone, head options its head does not take), a data directory without a train or a dev file, data
    the target refuses (TaskHead: none), and unlabelled text with a recipe that has no word vectors to
    feed or whose files do not resolve (data/corpus.py names the spec)."""
    target = TaskHead() if target is None else target
    if unlabelled:
        if not recipe.word_vectors:
            raise AlbertlmError(f"--unlabelled: recipe {recipe.name} starts no word vectors, the only use of "
                                "unlabelled text in a run without --model")
        Corpus(list(unlabelled))  # resolves every spec's files now: a typo fails before OUT is claimed
    number = isinstance(budget_minutes, (int, float)) and not isinstance(budget_minutes, bool)
    if not (number and math.isfinite(budget_minutes) and budget_minutes > 0):
        shown = f"{budget_minutes:g}" if number else repr(budget_minutes)
        raise AlbertlmError(f"--budget must be a positive number of minutes, got {shown}")
    positions = get_preset(recipe.preset).max_position_embeddings
    if recipe.finetune.max_seq_length is not None and recipe.finetune.max_seq_length > positions:
        raise AlbertlmError(f"--max-seq-length {recipe.finetune.max_seq_length}: {recipe.preset} has only {positions} "
                            "positions")
    target.check_recipe(spec, recipe)
    for split in ("train", "dev"):
        if split not in spec.files:
            raise AlbertlmError(f"task {spec.name} has no {split} split; training without --model needs one")
        find_file(data_dir, spec.files[split], split)
    target.check_data(spec, data_dir, recipe)


def choose_seq_length(examples: Sequence, tokenizer, recipe: ScratchRecipe, positions: int, *,
                      each_text: bool = False) -> int:
    """max_seq_length from the data: the pieces (special tokens included) that `length_quantile` of the
    training examples fit in, rounded up to a multiple of 32, within [seq_length_min, seq_length_max] and
    at most the model's `positions`. Measured on at most 2,000 evenly spaced examples; a tagged sentence
    counts its tokens joined. With `each_text` (a bi-encoder, which encodes one text at a time) every text
    of a pair is one input of its own, `[CLS] text [SEP]`."""
    sample = examples[::max(1, len(examples) // 2000)][:2000]
    lengths = []
    for e in sample:
        texts = [" ".join(e.tokens)] if hasattr(e, "tokens") else [t for t in (e.text_a, e.text_b) if t]
        if each_text:
            lengths += [len(tokenizer.encode(t)) + 2 for t in texts]  # [CLS] A [SEP], [CLS] B [SEP]
        else:
            lengths.append(1 + sum(len(tokenizer.encode(t)) + 1 for t in texts))  # [CLS] A [SEP] (B [SEP])
    wanted = 32 * math.ceil(float(np.quantile(lengths, recipe.length_quantile)) / 32)
    return int(min(max(wanted, recipe.seq_length_min), recipe.seq_length_max, positions))


def single_text_classes(examples: Sequence) -> bool:
    """The examples are single texts, each with one class name: what label coordinates read."""
    return bool(examples) and all(getattr(e, "text_b", True) is None and isinstance(getattr(e, "label", None), str)
                                  for e in examples)


def make_base(train_ex: Sequence, base_dir: Path, recipe: ScratchRecipe, seed: int, chinese: bool,
              log: Callable[[str], None], extra_texts: Sequence[str] = (), *, cased: bool = False
              ) -> tuple[AlbertConfig, dict[str, Any]]:
    """Train the vocabulary on the training text and save a random-init model of the preset beside it.

    With `recipe.word_vectors` the random word table's rows are replaced by vectors of the same
    text and of `extra_texts` (unlabelled sentences, in the task vocabulary's pieces;
    train/word_vectors.py, from a generator seeded with `seed`) before the model is saved, so base/
    is still an ordinary ALBERT directory that `--model` repeats the run from. The vocabulary is
    the training text's alone: the pieces the task's examples are made of.

    Returns:
        (the model's config, a record: the vocabulary asked for and trained, the language, the texts
        it was trained on, the model's parameters, the seconds of the vocabulary and of the model, and
        "word_vectors": None, or the seconds, window, rows and share of the vocabulary initialised).
    """
    texts = list(example_texts(train_ex))
    wanted = recipe.vocab_size
    if chinese:  # one piece per character: room for every character of the text, and more
        wanted = max(recipe.chinese_vocab_size, len({ch for t in texts for ch in t if not ch.isspace()}) + 1000)
    start = time.perf_counter()
    trained = train_tokenizer(texts, base_dir, vocab_size=wanted, do_lower_case=not cased, chinese=chinese, seed=seed,
                              log=log)
    vocab_s = time.perf_counter() - start
    torch.manual_seed(seed)  # torch's global generator, forked by finetune_from_scratch
    config = get_preset(recipe.preset, vocab_size=trained.vocab_size)
    model = AlbertForPreTraining(config)
    vectors = None
    if recipe.word_vectors:
        classes = sorted({e.label for e in train_ex}) if recipe.label_vectors and single_text_classes(train_ex) else []
        if classes and 2 * (1 if len(classes) == 2 else len(classes)) > config.embedding_size:
            log(f"label coordinates: {len(classes)} classes would take over half of the word table's "
                f"{config.embedding_size} coordinates; the vectors come from the text alone")
            classes = []
        ids = {name: i for i, name in enumerate(classes)}
        label_kw = {"labels": [ids[e.label] for e in train_ex], "classes": len(classes)} if classes else {}
        try:
            result = fit_word_vectors([*texts, *extra_texts], load_vocabulary(base_dir), config.embedding_size,
                                      config.initializer_range, torch.Generator().manual_seed(seed),
                                      window=recipe.word_vector_window, **label_kw)
        except TooLittleText as e:  # a tiny training set: the table stays random, and the record says why
            vectors = {"skipped": str(e)}
            log(f"{e}: the word table stays random")
        else:
            write_rows(model.albert.embeddings.word.weight, result)  # the MLM decoder is tied to it
            k = (1 if len(classes) == 2 else len(classes)) if classes else 0
            vectors = {"seconds": round(result.seconds, 3), "window": recipe.word_vector_window,
                       "rows": int(result.initialised.sum()), "share": round(result.share, 4), "pairs": result.pairs,
                       "unlabelled_texts": len(extra_texts), "label_coordinates": k}
            source = f" and {len(extra_texts):,} unlabelled sentences" if extra_texts else ""
            labelled = f", {k} of {config.embedding_size} coordinates from the labels" if k else ""
            log(f"word vectors: {vectors['rows']:,} of {trained.vocab_size:,} rows ({100 * result.share:.1f}%) from "
                f"PPMI-SVD of the training text{source}{labelled} in {result.seconds:.1f} s")
    start = time.perf_counter()
    model.save_pretrained(base_dir)
    record = {"vocab_size": trained.vocab_size, "requested_vocab_size": wanted, "language": "zh" if chinese else "en",
              "cased": cased,
              "texts": len(texts), "parameters": sum(p.numel() for p in model.parameters()),
              "vocabulary_s": round(vocab_s, 3), "save_s": time.perf_counter() - start, "word_vectors": vectors}
    return config, record


def read_unlabelled(specs: Sequence[str], limit: int) -> tuple[list[str], dict[str, Any]]:
    """The first `limit` non-blank sentences of the corpus specs (data/corpus.py), read one after the other.

    Returns:
        (the sentences, a record: the specs, the sentences read, whether the limit cut the corpus, seconds).
    Raises:
        AlbertlmError: a spec that resolves to no file or gives no sentence, named (data/corpus.py).
    """
    start, texts, truncated = time.perf_counter(), [], False
    for sentence in Corpus(list(specs)).sentences():
        if not sentence.strip():
            continue
        if len(texts) == limit:
            truncated = True
            break
        texts.append(sentence)
    return texts, {"specs": list(specs), "texts": len(texts), "truncated": truncated,
                   "seconds": round(time.perf_counter() - start, 3)}


def run_baselines(spec: TaskSpec, train_ex: Sequence, dev_ex: Sequence, chinese: bool
                  ) -> tuple[dict[str, Any] | None, str | None]:
    """(the headline baseline record (tasks/baselines.headline), None) on the run's own examples, or
    (None, why there is none: no baseline for the task's shape, or scikit-learn missing)."""
    shape = baselines_of(spec)
    if shape is None:
        return None, f"no count-based baseline for the {spec.family.name} family ({spec.problem_type})"
    missing = sklearn_missing() if shape.needs_sklearn else None
    if missing:
        return None, missing
    return headline(spec, score_baselines(spec, train_ex, dev_ex, chinese)), None


def probe(run: TaskRun, built: Trainable, device: torch.device, steps: int) -> tuple[float, float]:
    """Time real training steps and one dev evaluation of a model built as the run builds it, on its features.

    The model (ScratchTarget.build) is dropped afterwards; its batches come from a generator of its own,
    so the run's data order is untouched.

    Returns:
        (seconds per training step, the mean after the first; seconds of one dev evaluation).
    """
    from torch.utils.tensorboard import SummaryWriter  # noqa: F401  (its first import is slow: time it here)

    r = run.recipe
    optimizer = task_optimizer(built.trained, r)
    batches = batcher(dataclasses.replace(run, rng=np.random.default_rng(r.seed + 1)), device)
    ctx, settings = DistContext(device=device), step_settings(r)
    times = []
    for index in range(steps):
        start = time.perf_counter()
        train_step(built.trained, optimizer, batches(index), lr=r.lr, loss_fn=built.loss_fn, count_fn=built.count_fn,
                   ctx=ctx, settings=settings)
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    built.scorer.score(built.model)
    eval_s = time.perf_counter() - start
    return float(np.mean(times[1:] if len(times) > 1 else times)), eval_s


def recipe_flags(recipe: Any) -> list[str]:
    """The `albertlm finetune` flags that give `recipe`, a dataclass of its flags (FinetuneRecipe,
    EmbeddingSettings): its fields that differ from the defaults."""
    flags = []
    for f in dataclasses.fields(recipe):
        value, default = getattr(recipe, f.name), f.default
        if value == default:
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + f.name.replace("_", "-"))
        else:
            flags += [flag, "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)]
    return flags


# ---------------------------------------------------------------------------- the run
def finetune_from_scratch(task: str | TaskSpec, data_dir: str | Path, out_dir: str | Path,
                          budget_minutes: float = DEFAULT_BUDGET_MINUTES, recipe: ScratchRecipe = DEFAULT_RECIPE, *,
                          device: str | torch.device = "cpu", progress: bool = True,
                          log: Callable[[str], None] | None = None, unlabelled: Sequence[str] = ()
                          ) -> dict[str, Any]:
    """Train the best model albertlm knows for a task's labelled data alone, inside a time budget.

    Args:
        task: a task name (tasks/registry.py) or a TaskSpec, of the classification or NER family.
        data_dir: the task's data directory (train and dev files).
        out_dir: OUT: the fine-tuned model directory (as `albertlm finetune` writes it), with base/
            (the vocabulary and the random-init model) and results.json.
        budget_minutes: wall time for the whole run, every stage included.
        recipe: the preset, the vocabulary and the fine-tuning settings.
        device: torch device ("cpu", "cuda", "auto").
        progress: show a progress bar while fine-tuning.
        log: receives one line per stage (default: nothing).
        unlabelled: corpus specs (data/corpus.py: files, folders, globs, kjv) of more text whose
            sentences join the training text's for the word vectors (read_unlabelled; the vocabulary
            stays the training text's).
    Returns:
        Fine-tuning's results plus "from_scratch" (the recipe, the budget, the vocabulary, the probe,
        the plan, each stage's seconds, the command that repeats the run from OUT/base), "baseline"
        (tasks/baselines.headline, or None) and "baseline_note" (why there is none, else None).
    """
    return run_from_scratch(TaskHead(), task, data_dir, out_dir, budget_minutes, recipe, device=device,
                            progress=progress, log=log, unlabelled=unlabelled)


def run_from_scratch(target: ScratchTarget, task: str | TaskSpec, data_dir: str | Path, out_dir: str | Path,
                     budget_minutes: float, recipe: ScratchRecipe, *, device: str | torch.device = "cpu",
                     progress: bool = True, log: Callable[[str], None] | None = None,
                     unlabelled: Sequence[str] = ()) -> dict[str, Any]:
    """The run without a pretrained model (the module docstring's stages), training `target`.

    Args:
        target: what is trained on the base (TaskHead, or train/scratch_embedding.py's embedder).
        task, data_dir, out_dir, budget_minutes, recipe, device, progress, log, unlabelled: as
            finetune_from_scratch's.
    Returns:
        finetune_from_scratch's results, with the target's own entries (ScratchTarget.records, .finish).
    """
    spec = get_task(task) if isinstance(task, str) else task
    recipe = recipe.for_family(spec.family.name)
    check_inputs(spec, data_dir, budget_minutes, recipe, target, unlabelled)
    out = OutputDir(out_dir, "finetune", SCRATCH_FILES + target.files, inputs={"--data": data_dir})
    device = resolve_device(device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), out.claim():
        return _from_scratch(target, spec, data_dir, out, budget_minutes, recipe, device=device, progress=progress,
                             log=log or (lambda line: None), unlabelled=unlabelled)


def _from_scratch(target: ScratchTarget, spec: TaskSpec, data_dir: str | Path, out: OutputDir, budget_minutes: float,
                  recipe: ScratchRecipe, *, device: torch.device, progress: bool, log: Callable[[str], None],
                  unlabelled: Sequence[str] = ()) -> dict[str, Any]:
    """run_from_scratch()'s body, in its claimed OUT and a fork of torch's global generator."""
    start, budget_s = time.perf_counter(), 60.0 * budget_minutes
    stages: dict[str, float] = {}

    def stage(name: str, since: float) -> float:
        stages[name] = round(time.perf_counter() - since, 3)
        return time.perf_counter()

    removed = out.empty()
    if removed:
        log(f"{out.path}: an earlier run's output; starting over (removed its {len(removed)} files and folders)")
    ft, base_dir = recipe.finetune, out.path / BASE
    t = time.perf_counter()
    train_ex = spec.read(data_dir, "train", ft.strict)
    chinese = is_chinese(train_ex)
    t = stage("read_s", t)
    extra, extra_record = [], None
    if unlabelled:
        extra, extra_record = read_unlabelled(unlabelled, recipe.unlabelled_max_texts)
        cut = f" (the first {recipe.unlabelled_max_texts:,}: the recipe's limit)" if extra_record["truncated"] else ""
        log(f"unlabelled text: {len(extra):,} sentences{cut} from {', '.join(unlabelled)}")
        t = stage("unlabelled_s", t)
    base, vocab = make_base(train_ex, base_dir, recipe, ft.seed, chinese, log, extra,
                            cased=spec.family.name in recipe.cased_families)
    word_vectors = vocab.pop("word_vectors")
    t = stage("base_s", t)
    log(f"vocabulary: {vocab['vocab_size']:,} pieces ({'Chinese' if chinese else 'English'}"
        f"{', cased' if vocab['cased'] else ''}) from {vocab['texts']:,} "
        f"training texts; {recipe.preset}, random init{' (word table from the text)' if word_vectors else ''}, "
        f"{vocab['parameters'] / 1e6:.1f}M parameters: {base_dir}")
    tokenizer = load_tokenizer(base_dir)
    if ft.max_seq_length is None:
        ft = dataclasses.replace(ft, max_seq_length=choose_seq_length(
            train_ex, tokenizer, recipe, base.max_position_embeddings, each_text=target.each_text))
    run, dev = target.prepare(spec, data_dir, ft, tokenizer, base)
    t = stage("features_s", t)
    baseline, note = target.baseline(run, dev, chinese)
    t = stage("baseline_s", t)
    log(f"baseline: {describe_baseline(baseline, note)}")
    step_s, eval_s = probe(run, target.build(run, dev, base_dir, base, tokenizer, device), device, recipe.probe_steps)
    t = stage("probe_s", t)
    averages = (bool(ft.ema_decay) if ft.ema_decay is not None  # the flag, else the recipe
                else recipe.ema_intervals > 0 and spec.family.name in recipe.ema_families)
    plan = plan_steps(recipe, budget_s=budget_s, spent_s=time.perf_counter() - start, step_s=step_s,
                      eval_s=eval_s * (2 if averages else 1) + vocab["save_s"],  # averaging scores both weights
                      train_features=len(run.train_f), batch_size=run.recipe.batch_size)
    decay = None if not averages else ft.ema_decay or 1.0 - 1.0 / max(1.0, recipe.ema_intervals * plan.eval_every)
    log(f"plan: {plan.steps:,} steps of {run.recipe.batch_size} at {plan.step_s:.3f} s ("
        + ("as many as the budget holds" if plan.limited_by == "budget"
           else f"{recipe.epochs:g} epochs, inside the budget" if plan.limited_by == "epochs"
           else f"{recipe.max_examples:,} examples seen, the recipe's cap, inside the budget")
        + f"), {plan.evaluations} dev evaluations at {plan.eval_s:.2f} s"
        + (f" of the trained and the averaged weights (decay {decay:.5g})" if decay else "")
        + f"; {plan.spent_s:.0f} s of {budget_s:.0f} s used so far")
    final = dataclasses.replace(ft, steps=plan.steps, warmup_steps=plan.warmup_steps, eval_every=plan.eval_every,
                                ema_decay=decay)
    run = dataclasses.replace(run, recipe=final.resolve(spec, len(run.train_f)))
    built = target.build(run, dev, base_dir, base, tokenizer, device)
    record = {"recipe": dataclasses.asdict(recipe), "budget_minutes": budget_minutes, "vocabulary": vocab,
              "word_vectors": word_vectors, "unlabelled": extra_record,
              "max_seq_length": run.recipe.max_seq_length,
              "probe": {"steps": recipe.probe_steps, "step_s": step_s, "eval_s": eval_s},
              "plan": dataclasses.asdict(plan),
              "reproduce": ["albertlm", "finetune", "--task", spec.name, "--model", str(base_dir), "--data",
                            str(data_dir), *target.flags(run)]}
    second, why = second_round(recipe, plan, run, target)
    record["self_distill"] = why
    if spec.family.name in recipe.self_distill_families:
        log(f"self-distillation: {why}")
    first_dir = out.path / TEACHER if second else out.path
    first_dir.mkdir(exist_ok=True)
    start_outputs(first_dir, {"task": spec.name, **target.records(), **dataclasses.asdict(run.recipe),
                              "from_scratch": record})
    deadline = start + budget_s * (1 - recipe.reserve / 2)
    results = train_task(run, built.model, tokenizer, first_dir, loss_fn=built.loss_fn, count_fn=built.count_fn,
                         device=device, progress=progress, name=target.name,
                         record={"model_dir": str(base_dir), **target.records()}, trained=built.trained,
                         scorer=built.scorer, deadline=deadline, eval_s=plan.eval_s)
    t = stage("train_s", t)
    if second:
        del built
        first = results
        results = distil_second(spec, data_dir, run, first_dir, base_dir, base, tokenizer, out.path, recipe, record,
                                device=device, progress=progress, deadline=deadline, eval_s=plan.eval_s)
        results["self_distillation"] = {"teacher_dir": str(first_dir), "teacher": {
            k: first.get(k) for k in ("best", "best_step", "last", "steps", "dev_curve", "stopped_by", "train_seconds",
                                      "trained_weights")}}
        log(f"self-distillation: the first model's best dev {results['main_metric']} "
            f"{100 * first['best'].get(results['main_metric'], float('nan')):.2f}, its student's "
            f"{100 * results['best'].get(results['main_metric'], float('nan')):.2f} (the run's model; the first is in "
            f"{first_dir})")
        stage("student_s", t)
    results.update(target.finish(out.path, run, device))
    stages["total_s"] = round(time.perf_counter() - start, 3)
    results.update(from_scratch={**record, "stages": stages}, baseline=baseline, baseline_note=note)
    results["near_floor"] = near_floor(results)
    atomic_write_text(out.path / "results.json", json.dumps(results, indent=2))
    return results


def second_round(recipe: ScratchRecipe, plan: Plan, run: TaskRun, target: ScratchTarget) -> tuple[bool, str]:
    """(whether the run distils a second model from its first, the log line's reason): with
    the task's family in recipe.self_distill_families, where the target can (ScratchTarget.distillable) and
    the budget less its reserve holds the plan's training twice plus the first model's pass over the
    training set, estimated from a dev evaluation's seconds per dev feature."""
    if run.spec.family.name not in recipe.self_distill_families:
        return False, "off"
    cannot = target.distillable(run)
    if cannot is not None:
        return False, f"skipped: {cannot}"
    round_s = plan.planned_s - plan.spent_s
    logits_s = plan.eval_s * len(run.train_f) / max(1, len(run.dev_f))
    need, left = plan.planned_s + round_s + logits_s, plan.budget_s * (1 - recipe.reserve)
    if need > left:
        return False, (f"skipped: the budget holds one round of this plan ({need / 60:.1f} min needed for two, "
                       f"{left / 60:.1f} planned at most); a larger --budget trains a second model taught by the first")
    return True, (f"the budget holds two rounds ({need / 60:.1f} of {left / 60:.1f} min): the first model trains "
                  f"into {TEACHER}/, then a second from the same base (seed {run.recipe.seed + 1}) learns from it and "
                  f"the labels (T {recipe.self_distill_temperature:g}, alpha {recipe.self_distill_alpha:g})")


def distil_second(spec: TaskSpec, data_dir: str | Path, run: TaskRun, teacher_dir: Path, base_dir: Path,
                  base: AlbertConfig, tokenizer, out_dir: Path, recipe: ScratchRecipe, record: dict[str, Any], *,
                  device: torch.device, progress: bool, deadline: float, eval_s: float) -> dict[str, Any]:
    """The second round of a self-distilling run: the first model's best checkpoint (`teacher_dir`)
    teaches a student started from the same base with the same plan and seed + 1, trained into `out_dir`,
    as `albertlm distill --teacher OUT/teacher --student OUT/base` with the recorded flags trains it
    (record["reproduce_student"]; the same features, drawn again for the student's seed)."""
    settings = DistillSettings(temperature=recipe.self_distill_temperature, alpha=recipe.self_distill_alpha)
    teacher, _, _, labels = load_teacher(teacher_dir, spec, device, data_dir)
    student = prepare_task(spec, data_dir, dataclasses.replace(run.recipe, seed=run.recipe.seed + 1), tokenizer,
                           base, labels)
    distillation = distillation_record([teacher_dir], base_dir, settings)
    record["reproduce_student"] = ["albertlm", "distill", "--teacher", str(teacher_dir), "--student", str(base_dir),
                                   "--task", spec.name, "--data", str(data_dir), *recipe_flags(student.recipe),
                                   "--temperature", f"{settings.temperature:g}", "--alpha", f"{settings.alpha:g}"]
    start_outputs(out_dir, {"task": spec.name, **dataclasses.asdict(student.recipe), "distillation": distillation,
                            "from_scratch": record})
    return train_student(student, [teacher], distillation, base_dir, base, tokenizer, out_dir, settings,
                         device=device, progress=progress, where=f"the first model ({teacher_dir})", deadline=deadline,
                         eval_s=eval_s)


# ---------------------------------------------------------------------------- the terminal
def describe_baseline(baseline: dict[str, Any] | None, note: str | None) -> str:
    """One line: the headline baseline's dev score and its floor's (where it has one), x100 as `albertlm
    evaluate` prints them."""
    if baseline is None:
        return f"not computed: {note}"

    def shown(row: dict[str, Any]) -> str:
        value = "undefined (constant)" if row["value"] is None else f"{100 * row['value']:.2f}"
        return f"{row['name']} {value} ({BASELINES[row['name']]})"

    floor = "" if baseline.get("floor") is None else f", {shown(baseline['floor'])}"
    return f"dev {baseline['metric']} {shown(baseline)}{floor}"


CAPS = {"budget": "the budget", "epochs": "the epoch cap", "examples": "the cap on examples seen"}
"""What a Plan's limited_by names, as the verdict prints it."""


def baseline_wins(results: dict[str, Any]) -> bool:
    """Whether the count-based baseline scores above the model's best dev checkpoint (its main metric)."""
    baseline = results["baseline"]
    return (baseline is not None and baseline["value"] is not None
            and baseline["value"] > results["best"].get(results["main_metric"], float("-inf")))


NOISE_ERRORS = 2.0
"""How many standard errors of the majority class's dev accuracy a model's must clear to count as above it."""


def near_floor(results: dict[str, Any]) -> dict[str, Any] | None:
    """Whether a classifier's best dev accuracy lies within NOISE_ERRORS standard errors of the majority
    class's on the same dev examples: a small dev set where the model has not shown it learned the task
    (the best of several evaluations, so its score leans high).

    The standard error is that of the majority's accuracy p on the n dev examples, sqrt(p (1 - p) / n):
    how far a model with nothing learned strays from p by chance. Tasks without an accuracy (regression,
    NER) or without a majority floor give None.

    Returns:
        {"accuracy", "majority", "standard_error", "dev_examples"} when within, else None.
    """
    floor = ((results.get("baseline") or {}).get("floor") or {}).get("metrics", {}).get("accuracy")
    model, n = results["best"].get("accuracy"), results.get("dev_examples")
    if floor is None or model is None or not n:
        return None
    se = math.sqrt(floor * (1.0 - floor) / n)
    if model - floor >= NOISE_ERRORS * se:
        return None
    return {"accuracy": model, "majority": floor, "standard_error": se, "dev_examples": n}


def format_scratch(results: dict[str, Any], objectives: str | None = None, *, tagger: bool = False) -> str:
    """The lines printed after fine-tuning's table: the baseline beside the model's dev score, the budget.

    Args:
        results: run_from_scratch's.
        objectives: for a task head on sentence pairs, the embedding objectives that suit them
            (scratch_embedding.suggested_objectives): suggested where the baseline beats the head.
        tagger: the task is NER: a run without --unlabelled is told that unlabelled text of the
            language, read for the word vectors, lifted CoNLL-2003 (docs/transfer.md).
    """
    s, metric = results["from_scratch"], results["main_metric"]
    model = 100 * results["best"].get(metric, float("nan"))
    shape = f", a {results['embedding']['objective']} bi-encoder" if "embedding" in results else ""
    lines = [f"{s['recipe']['preset']} from scratch{shape}: dev {metric} {model:.2f}",
             f"count-based baseline, same split: {describe_baseline(results['baseline'], results['baseline_note'])}"]
    if results.get("self_distillation"):
        sd = results["self_distillation"]
        first = sd["teacher"]
        lines.insert(1, f"  (distilled from the first model, {sd['teacher_dir']}: its best dev {metric} "
                        f"{100 * first['best'].get(metric, float('nan')):.2f} at step {first['best_step']:,})")
    if (results.get("trained_weights") or {}).get("best") is not None:
        raw = results["trained_weights"]
        lines.insert(1, f"  (the averaged weights, decay {results['recipe']['ema_decay']:.5g}; the trained weights' "
                        f"best at the same evaluations: {100 * raw['best']:.2f} at step {raw['best_step']:,})")
    if baseline_wins(results):
        if s["plan"]["limited_by"] != "budget":
            why = (f"the run stopped at {CAPS[s['plan']['limited_by']]}, not the budget, so a longer --budget would "
                   "not change it")
        elif results.get("improving_at_end", True):
            why = "a longer --budget may close the gap"
        else:  # the budget ran out after the curve had turned
            why = (f"its best dev score came at step {results['best_step']:,} of {results['steps']:,} and no later "
                   "evaluation passed it, so a longer --budget would not close the gap")
        lines.append(f"the count-based baseline beats the model on dev ({why}); the baseline is the better choice "
                     "for this data")
        if objectives and "embedding" not in results:
            lines.append(f"for sentence vectors of these pairs, a bi-encoder from the same start may do better: "
                         f"the same command with {objectives} (docs/transfer.md)")
    near = near_floor(results)
    if near is not None:
        lines.append(f"the model's dev accuracy {100 * near['accuracy']:.2f} is less than {NOISE_ERRORS:g} standard errors "
                     f"({NOISE_ERRORS:g} x {100 * near['standard_error']:.2f} points on {near['dev_examples']:,} dev "
                     f"examples) above the majority class's {100 * near['majority']:.2f}: it has not shown that it learned "
                     "this task (a random start rarely does on a few thousand labels; a pretrained --model may)")
    if tagger and not s.get("unlabelled"):
        lines.append("a tagger's word vectors may also read unlabelled text of the language: the same command with "
                     "--unlabelled FILE (on CoNLL-2003, 140k sentences of other English text gave +1.8 F1 over 3 "
                     "seeds with a lower-cased vocabulary, -0.3 with the cased one of one seed; docs/transfer.md)")
    total = s["stages"]["total_s"]
    if results.get("stopped_by") == "deadline":
        lines.append(f"stopped by the clock at step {results['steps']:,} of {s['plan']['steps']:,} planned: the "
                     "machine ran slower than the probe measured (other work on it?); the best dev checkpoint is kept")
    lines.append(f"budget {s['budget_minutes']:g} min: used {total / 60:.1f} min ({results['steps']:,} steps, "
                 f"limited by {CAPS[s['plan']['limited_by']]}); "
                 f"vocabulary and random-init base: {results['model_dir']}")
    return "\n".join(lines)
