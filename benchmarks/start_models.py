"""The model directories measurements and studies start from: a random albert-tiny with a vocabulary
trained on a task's training text (the no-pretraining baseline), a pretrained directory's
configuration and tokenizer with fresh weights (the control for what pretraining adds), and
weights drawn tensor by tensor for measurements that must not let any two tensors be equal.

`benchmarks.early_exit` fine-tunes the first (12 layers deep), `experiments.finetune_real` both,
`experiments.transfer_diagnostics` compares a pretrained model with the second, and the embedding
benchmarks (`benchmarks.bench_embed_export`, `benchmarks.bench_embed`) export and time the third.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from albertlm import AlbertForPreTraining, get_preset
from albertlm.tasks.registry import get_task
from albertlm.tokenizer import Tokenizer, train_tokenizer


def drawn_weights(model: torch.nn.Module, seed: int, scale: float = 0.05) -> torch.nn.Module:
    """Every parameter of `model` drawn anew from one generator, so that no two tensors are equal (an
    exporter cannot merge them by value): N(0, scale), LayerNorm weights around 1. In place; returns
    the model in eval mode."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                base = 1.0 if isinstance(module, torch.nn.LayerNorm) and name == "weight" else 0.0
                p.copy_(base + scale * torch.randn(p.shape, generator=gen))
    return model.eval()


def random_albert(shape: dict, positions: int = 512, seed: int = 0):
    """An all-shared AlbertModel without a pooler, of `shape` ({"layers", "hidden", "embedding", "heads",
    "intermediate", "vocab"}), every tensor drawn (`drawn_weights`)."""
    from albertlm.config import AlbertConfig
    from albertlm.model import AlbertModel

    config = AlbertConfig(vocab_size=shape["vocab"], embedding_size=shape["embedding"], hidden_size=shape["hidden"],
                          num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
                          intermediate_size=shape["intermediate"], max_position_embeddings=positions)
    return drawn_weights(AlbertModel(config, add_pooling_layer=False), seed=seed)


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
