"""Loading a model directory: its tokenizer, its head."""

from __future__ import annotations

import warnings
from pathlib import Path

from torch import nn

from albertlm.config import AlbertConfig
from albertlm.exit_heads import head_class
from albertlm.tasks.registry import TaskSpec


def load_tokenizer(model_dir: str | Path):
    """The tokenizer of a model directory: SentencePiece (spiece.model) or WordPiece (vocab.txt),
    with its tokenizer_config.json (tokenizer/auto.py)."""
    from albertlm.tokenizer import load_model_vocabulary

    return load_model_vocabulary(model_dir)  # its size must be config.json's vocab_size


def load_head(spec: TaskSpec, model_dir: str | Path, config: AlbertConfig) -> nn.Module:
    """The task's head class from `model_dir` (its early-exit class when `config` announces exit heads);
    a head the directory lacks starts random, silently."""
    with warnings.catch_warnings():  # a pretrained directory has no task head: expected here
        warnings.filterwarnings("ignore", message=".*randomly initialised.*")
        return head_class(spec.family.head, config).from_pretrained(model_dir, config=config)
