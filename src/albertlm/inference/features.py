"""The input settings of a model directory: how its text becomes features.

Fine-tuning records the settings it trained with in config.json (`albertlm_features`); evaluate and
predict read them back (`saved_settings`), so a directory is always run on the inputs it was
trained on. A directory fine-tuned elsewhere has none: then the task's defaults apply.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Protocol

from albertlm.config import AlbertConfig
from albertlm.errors import AlbertlmError
from albertlm.tasks.common import FeatureSettings
from albertlm.utils import check_field_types

MIN_SEQ_LENGTH = 8
"""The shortest input length fine-tuning accepts: room for the special tokens and some text."""


class FeatureRecipe(Protocol):
    """The recipe fields features are made with (train.finetune.FinetuneRecipe has them)."""

    max_seq_length: int | None
    doc_stride: int
    max_query_length: int
    max_answer_length: int | None


MAX_ANSWER_LENGTH = {False: 30, True: 64}
"""Default longest QA answer in pieces, by whether the vocabulary is Chinese (character pieces)."""


def feature_settings(recipe: FeatureRecipe, config: AlbertConfig, chinese: bool = False) -> FeatureSettings:
    """The input settings a recipe fine-tunes with (config.json records them as albertlm_features).

    Args:
        recipe: a resolved recipe (its max_seq_length set), e.g. train.finetune.FinetuneRecipe.
        config: the model's config; its max_position_embeddings caps max_seq_length.
        chinese: the vocabulary is Chinese (single-character pieces: a longer default answer).
    Returns:
        The FeatureSettings.
    """
    answer = recipe.max_answer_length if recipe.max_answer_length is not None else MAX_ANSWER_LENGTH[chinese]
    return FeatureSettings(max_seq_length=min(recipe.max_seq_length, config.max_position_embeddings),
                           doc_stride=recipe.doc_stride, max_query_length=recipe.max_query_length,
                           max_answer_length=answer)


def saved_settings(config: AlbertConfig, default_length: int = 128, chinese: bool = False,
                   max_answer_length: int | None = None) -> FeatureSettings:
    """The input settings a fine-tuned directory was trained with (config.json's albertlm_features), or
    the defaults for one fine-tuned elsewhere; `max_answer_length` overrides the saved value."""
    saved = config.extra.get("albertlm_features") or {}
    known = {f.name for f in dataclasses.fields(FeatureSettings)}
    settings = FeatureSettings(**{k: v for k, v in saved.items() if k in known})
    if "max_seq_length" not in saved:
        settings = dataclasses.replace(settings, max_seq_length=default_length)
    if max_answer_length is not None or "max_answer_length" not in saved:
        settings = dataclasses.replace(settings, max_answer_length=max_answer_length or MAX_ANSWER_LENGTH[chinese])
    return dataclasses.replace(settings, max_seq_length=min(settings.max_seq_length, config.max_position_embeddings))


def check_saved_entries(path: Path, config: AlbertConfig) -> None:
    """The entries albertlm adds to a fine-tuned config.json hold what it writes: `albertlm_features`
    an object of FeatureSettings' fields (integers of at least 1, max_seq_length at least
    MIN_SEQ_LENGTH, a finite null_threshold), `finetuning_task` a task name.

    Raises:
        AlbertlmError: naming `path` (the config.json) and the entry.
    """
    task = config.extra.get("finetuning_task")
    if task is not None and not isinstance(task, str):
        raise AlbertlmError(f"{path}: finetuning_task must be a task name, got {task!r}")
    saved = config.extra.get("albertlm_features")
    if saved is None:
        return
    if not isinstance(saved, dict):
        raise AlbertlmError(f"{path}: albertlm_features must be an object of input settings, got {saved!r}")
    fields = dataclasses.fields(FeatureSettings)
    try:
        check_field_types(FeatureSettings(**{f.name: saved[f.name] for f in fields if f.name in saved}))
    except AlbertlmError as exc:
        raise AlbertlmError(f"{path}: albertlm_features.{exc}") from None
    for f in fields:
        least = MIN_SEQ_LENGTH if f.name == "max_seq_length" else 1
        if type(f.default) is int and f.name in saved and saved[f.name] < least:  # the int fields
            raise AlbertlmError(f"{path}: albertlm_features.{f.name} must be at least {least}, got {saved[f.name]}")
