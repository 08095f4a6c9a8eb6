"""A sentence embedder without a pretrained model: `albertlm finetune --objective cosent|mnrl|cosine|simcse`
without --model.

`embedder_from_scratch(task, data_dir, out_dir, budget_minutes, recipe, settings)` runs the stages of
train/scratch.py (a vocabulary and a random ALBERT with its word table from the training text, in
OUT/base/; a timed probe; the steps planned to fit the budget; the clock), but trains a bi-encoder
with one of train/embedding.py's objectives instead of the task's head: each text pooled alone, dev
scored by the embedding metrics (inference/embed_eval.py), the best checkpoint kept, and
OUT/sentence-transformers/ written from it, as `finetune --model DIR --objective X` writes them.
What differs from the task head is `EmbedderTarget`:

  - the input check: embedding.check_recipe's refusals (the head's flags), and dev pairs read before
    OUT is claimed (tasks/pairs.py: every objective is scored on them, simcse's included);
  - max_seq_length from the length of each text alone (a bi-encoder encodes one at a time);
  - the baseline: the tf-idf cosine of the same dev pairs (tasks/baselines.embedding_baseline), their
    main metric beside the model's (Spearman for graded pairs, accuracy for binary ones);
  - the recorded command: `albertlm finetune --model OUT/base --objective X ...` repeats the run;
  - the end: the sentence-transformers copy, and on graded training pairs the cosine -> score map
    (train/embedding.score_map_stage), as `finetune --model DIR --objective X` ends.

Measured on STS-B (docs/transfer.md, runs 11, 16 and 24): the same kind of start trained as a bi-encoder
with CoSENT reaches 72.48 Spearman / 68.66 Pearson (3 seeds), 72.29 Pearson through its score map, where
the cross-encoder from scratch stays near 20 Pearson. So `finetune` without --model and without --objective
trains this embedder when the task's training pairs are graded (`default_objective`), and the task head for
everything else.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from albertlm.config import AlbertConfig
from albertlm.errors import AlbertlmError
from albertlm.tasks.baselines import embedding_baseline, embedding_headline, sklearn_missing
from albertlm.tasks.pairs import Pairs, pairs_of
from albertlm.tasks.registry import TaskSpec
from albertlm.train.embedding import (SIMCSE_DROPOUT, ST_SUBDIR, EmbeddingSettings, check_recipe, embedding_objective,
                                      embedding_scorer, new_embedder, prepare_run, score_map_stage,
                                      sentence_transformers_copy)
from albertlm.train.finetune import FinetuneRecipe, TaskRun
from albertlm.train.loop import unpadded
from albertlm.train.scratch import (DEFAULT_BUDGET_MINUTES, ScratchRecipe, ScratchTarget, Trainable, recipe_flags,
                                    run_from_scratch)

EMBEDDING_RECIPE = ScratchRecipe(name="albert-tiny-task-vocab-word-vectors-bi-encoder", epochs=10.0, word_vectors=True,
                                 finetune=FinetuneRecipe(lr=3e-4, batch_size=32, dropout=0.0))
"""The task head's start (scratch.DEFAULT_RECIPE: albert-tiny, the task's own vocabulary, word vectors
of its text) and settings (AdamW at 3e-4, batch 32, 10% warmup, dropout 0, up to 10 epochs as the
budget holds), with no classifier: those of docs/transfer.md's run 11, whose curve still rose at 8
epochs. simcse takes SIMCSE_DROPOUT instead of 0 (`default_recipe`): its positives are dropout's."""

OBJECTIVES_FOR_PAIRS = {"graded": "--objective cosent", "binary": "--objective mnrl or --objective cosent"}
"""Pair kind (tasks/pairs.py) -> the objectives suggested for it when a task head from scratch loses to
its count-based baseline (scratch.format_scratch)."""


DEFAULT_OBJECTIVES = {"graded": "cosent"}
"""Pair kind of a task's training split (tasks/pairs.py) -> the objective `finetune` trains without
--model and without --objective; a kind not here, and a task without pairs, get "task" (its head). Graded
pairs (a similarity score over two texts, STS-B's shape) get the CoSENT bi-encoder: from a random start
the cosine of two separately encoded texts is learnable from a few thousand pairs, the cross-encoder's
regression head over the joined pair is not (docs/transfer.md runs 12 and 16). Binary pairs (paraphrase,
entailment) keep their head: no run has compared the two shapes on them."""


def default_objective(spec: TaskSpec, data_dir: str | Path) -> str:
    """The objective a run without --model takes when --objective is not given (DEFAULT_OBJECTIVES).

    Only a regression task's training split is read (to see whether every example is a pair); a split
    that cannot be read gives "task", whose run then refuses it with its own one-line message.
    """
    if spec.problem_type != "regression":
        return "task"
    try:
        with warnings.catch_warnings():  # skipped rows are reported once, by the run that reads them again
            warnings.simplefilter("ignore")
            kind = pairs_of(spec, spec.read(data_dir, "train"), f"{data_dir} (train)").kind
    except AlbertlmError:
        return "task"
    return DEFAULT_OBJECTIVES.get(kind, "task")


def default_recipe(objective: str) -> ScratchRecipe:
    """EMBEDDING_RECIPE, with SIMCSE_DROPOUT for simcse (whose two passes differ only by dropout)."""
    if objective != "simcse":
        return EMBEDDING_RECIPE
    return dataclasses.replace(EMBEDDING_RECIPE, name=f"{EMBEDDING_RECIPE.name}-simcse",
                               finetune=dataclasses.replace(EMBEDDING_RECIPE.finetune, dropout=SIMCSE_DROPOUT))


@dataclass(frozen=True)
class EmbedderTarget(ScratchTarget):
    """A bi-encoder of the base trained with an embedding objective (train/embedding.py)."""

    settings: EmbeddingSettings
    files = (ST_SUBDIR,)
    each_text = True

    @property
    def name(self) -> str:
        return self.settings.objective

    def check_recipe(self, spec: TaskSpec, recipe: ScratchRecipe) -> None:
        if self.settings.objective == "task":
            raise AlbertlmError("embedder_from_scratch trains an embedding objective; --objective task is "
                                "train/scratch.py's finetune_from_scratch")
        check_recipe(recipe.finetune, self.settings)

    def check_data(self, spec: TaskSpec, data_dir: str | Path, recipe: ScratchRecipe) -> None:
        pairs_of(spec, spec.read(data_dir, "dev", recipe.finetune.strict), f"{data_dir} (dev)")

    def prepare(self, spec: TaskSpec, data_dir: str | Path, recipe: FinetuneRecipe, tokenizer, base: AlbertConfig
                ) -> tuple[TaskRun, Pairs]:
        return prepare_run(spec, data_dir, recipe, self.settings, tokenizer, base)

    def baseline(self, run: TaskRun, dev: Pairs, chinese: bool) -> tuple[dict[str, Any] | None, str | None]:
        missing = sklearn_missing()
        if missing:
            return None, missing
        scores, seconds = embedding_baseline(run.train_ex, dev, chinese)
        return embedding_headline(scores, seconds, dev.main_metric), None

    def build(self, run: TaskRun, dev: Pairs, base_dir: Path, base: AlbertConfig, tokenizer, device: torch.device
              ) -> Trainable:
        model = new_embedder(run, base_dir, base, self.settings, device)
        loss_fn, count_fn = embedding_objective(self.settings.objective, self.settings.similarity_scale,
                                                unpadded(run.recipe.unpad, model, device))
        return Trainable(model, model, loss_fn, count_fn,
                         embedding_scorer(run, dev, tokenizer, self.settings.pooling, device))

    def flags(self, run: TaskRun) -> list[str]:
        # the resolved recipe holds the task's classifier dropout, which an embedding run refuses as a flag
        return recipe_flags(self.settings) + recipe_flags(dataclasses.replace(run.recipe, classifier_dropout=None))

    def records(self) -> dict[str, Any]:
        return {"embedding": dataclasses.asdict(self.settings)}

    def finish(self, out_dir: Path, run: TaskRun, device: torch.device) -> dict[str, Any]:
        return {**sentence_transformers_copy(out_dir, self.settings.pooling, run.settings.max_seq_length),
                **score_map_stage(out_dir, run, self.settings.pooling, device)}


def embedder_from_scratch(task: str | TaskSpec, data_dir: str | Path, out_dir: str | Path,
                          budget_minutes: float = DEFAULT_BUDGET_MINUTES, recipe: ScratchRecipe | None = None,
                          settings: EmbeddingSettings = EmbeddingSettings("cosent"), *,
                          device: str | torch.device = "cpu", progress: bool = True,
                          log: Callable[[str], None] | None = None, unlabelled: Sequence[str] = ()
                          ) -> dict[str, Any]:
    """Train a sentence embedder for a task's pairs alone, from a random ALBERT, inside a time budget.

    Args:
        task: a task name or TaskSpec with sentence pairs (sts-b, mrpc, qnli, lcqmc, ...), or for simcse
            any task whose dev split has them (to be scored).
        data_dir: the task's data directory (train and dev files).
        out_dir: OUT: the embedder's model directory (as `finetune --objective` writes it), with base/,
            sentence-transformers/ (where it can express the model) and results.json.
        budget_minutes: wall time for the whole run, every stage included.
        recipe: the preset, the vocabulary and the fine-tuning settings; None: `default_recipe(objective)`.
        settings: the objective, pooling and similarity scale (objective "task" is refused).
        device, progress, log, unlabelled: as scratch.finetune_from_scratch's.
    Returns:
        finetune_embedder's results (the settings in "embedding", the copy in "sentence_transformers")
        plus finetune_from_scratch's "from_scratch", "baseline" (tasks/baselines.embedding_headline, or
        None) and "baseline_note".
    Raises:
        AlbertlmError: one line for a refused flag, task or data, before OUT is touched.
    """
    recipe = default_recipe(settings.objective) if recipe is None else recipe
    return run_from_scratch(EmbedderTarget(settings), task, data_dir, out_dir, budget_minutes, recipe, device=device,
                            progress=progress, log=log, unlabelled=unlabelled)


def suggested_objectives(spec: TaskSpec, data_dir: str | Path) -> str | None:
    """The objectives that suit the task's dev pairs (OBJECTIVES_FOR_PAIRS), or None where the embedding
    objectives cannot take them (single texts, labels that say nothing about similarity, no labels)."""
    try:
        kind = pairs_of(spec, spec.read(data_dir, "dev"), f"{data_dir} (dev)").kind
    except AlbertlmError:
        return None
    return OBJECTIVES_FOR_PAIRS.get(kind)
