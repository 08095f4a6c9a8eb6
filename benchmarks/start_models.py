"""The model directories measurements and studies start from: a random albert-tiny with a vocabulary
trained on a task's training text (the no-pretraining baseline), and a pretrained directory's
configuration and tokenizer with fresh weights (the control for what pretraining adds).

`benchmarks.early_exit` fine-tunes the first (12 layers deep), `experiments.finetune_real` both, and
`experiments.transfer_diagnostics` compares a pretrained model with the second.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from albertlm import AlbertForPreTraining, get_preset
from albertlm.tasks.registry import get_task
from albertlm.tokenizer import Tokenizer, train_tokenizer


def training_text(task: str, data: Path) -> list[str]:
    """The training split's text (a pair as one line), the only corpus the random-init baseline's tokenizer sees."""
    examples = get_task(task).read(data, "train")
    if hasattr(examples[0], "tokens"):
        return [" ".join(e.tokens) for e in examples]
    return [e.text_a + (" " + e.text_b if e.text_b else "") for e in examples]


def random_init_dir(task: str, data: Path, out: Path, vocab_size: int, seed: int, **overrides) -> Path:
    """albert-tiny (with `overrides` of its preset fields), randomly initialised, with a vocabulary
    trained on the task's training text.

    Args:
        task, data: the task and its data folder.
        out: the parent directory; the model goes to OUT/random-init-TASK (kept when it exists).
        vocab_size: pieces asked of the vocabulary.
        seed: the tokenizer's and the weights' seed.
    Returns:
        The model directory.
    """
    path = out / f"random-init-{task}"
    if not (path / "model.safetensors").exists():
        train_tokenizer(training_text(task, data), path, vocab_size=vocab_size, seed=seed, log=lambda m: None)
        vocab = Tokenizer.load(path).vocab_size
        torch.manual_seed(seed)
        AlbertForPreTraining(get_preset("albert-tiny", **overrides, vocab_size=vocab)).save_pretrained(path)
    return path


def reinit_dir(model: Path, out: Path, seed: int) -> Path:
    """The architecture and tokenizer of `model`, with freshly initialised weights.

    Args:
        model: a pretrained directory (config.json, spiece.model, tokenizer_config.json).
        out: the parent directory; the copy goes to OUT/reinit-NAME (kept when it exists).
        seed: the weights' seed.
    Returns:
        The new directory.
    """
    path = out / f"reinit-{model.name}"
    if not (path / "model.safetensors").exists():
        path.mkdir(parents=True, exist_ok=True)
        for name in ("spiece.model", "tokenizer_config.json"):
            shutil.copy2(model / name, path / name)
        config = AlbertForPreTraining.from_pretrained(model).config
        torch.manual_seed(seed)
        AlbertForPreTraining(config).save_pretrained(path)
    return path
