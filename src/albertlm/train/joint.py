"""The joint objective: the task's loss plus a masked-LM loss on the same batch, from the first step.

A model trained from random weights on a few thousand labelled examples has only the labels to learn
the language from. Adding the pretraining objective to fine-tuning (`FinetuneRecipe.mlm_weight`) lets
every training text teach the backbone as well, through the backbone the task head uses:

    loss = task loss (heads.py) + mlm_weight * masked-LM loss on a masked copy of the batch's inputs

The masked copy takes a second forward pass through the same backbone; the task's pass sees the
unmasked inputs, as dev and test inputs are. The MLM head (model.MLMHead: dense, activation,
LayerNorm, the decoder tied to the word table) starts from the model directory's own head when it has
one (a pretrained or random-init AlbertForPreTraining), else it is drawn new. It is training state
only: the saved model is the task head alone, an ordinary ALBERT directory.

Masking departs from pretraining's (data/masking.py) on purpose: single pieces, not whole-word n-grams,
chosen on the padded batch tensors with the run's own torch.Generator, 80% [MASK], 10% a random piece,
10% kept (BERT's split). An auxiliary loss needs no span structure, and masking here keeps the
features (and their cache) the same as an ordinary run's.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from albertlm.config import AlbertConfig
from albertlm.model import AlbertForPreTraining, MLMHead
from albertlm.train.loop import CountFn, LossFn
from albertlm.vocab import IGNORE_INDEX, NUM_SPECIAL, SpecialIds

__all__ = ["JointModel", "joint_objective", "mask_batch", "mlm_head_from"]


class JointModel(nn.Module):
    """What the optimizer steps in a joint run: the task head and the training-only MLM head.

    Calling it runs the task head (so the loop and the task's loss treat it as the head); `head` is
    what is scored and saved.
    """

    def __init__(self, head: nn.Module, mlm: MLMHead):
        super().__init__()
        self.head = head
        self.mlm = mlm

    @property
    def config(self) -> AlbertConfig:
        return self.head.config

    def forward(self, **batch: torch.Tensor):
        return self.head(**batch)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def mlm_head_from(model_dir: str | Path, config: AlbertConfig) -> MLMHead:
    """The MLM head saved in `model_dir` (its AlbertForPreTraining weights), or a new one of `config`'s
    shape when the directory holds none (then drawn from torch's global generator, forked by the caller)."""
    with warnings.catch_warnings():  # a fine-tuned directory has no MLM head: a new one is expected then
        warnings.filterwarnings("ignore", message=".*randomly initialised.*")
        return AlbertForPreTraining.from_pretrained(model_dir, config=config).mlm


def mask_batch(input_ids: torch.Tensor, attention_mask: torch.Tensor, special: SpecialIds, vocab_size: int,
               probability: float, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A masked copy of a padded batch and its MLM labels.

    Args:
        input_ids, attention_mask: [B, S] the batch as the task's features pad it.
        special: the vocabulary's special ids (never masked, never drawn as replacements).
        vocab_size: the model's vocabulary; replacements are drawn from its ordinary pieces.
        probability: the share of ordinary pieces to predict (at least one per batch that has any).
        generator: the run's generator (on the batch's device); draws are in a fixed order.
    Returns:
        (masked ids [B, S], labels [B, S]: the original id where a prediction is made, IGNORE_INDEX
        elsewhere).
    """
    excluded = torch.tensor(sorted(special.excluded), device=input_ids.device)
    candidate = attention_mask.bool() & ~torch.isin(input_ids, excluded)  # [B, S]
    draw = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)  # [B, S]
    chosen = candidate & (draw < probability)
    if not bool(chosen.any()) and bool(candidate.any()):  # a tiny batch: still predict one piece
        first = torch.nonzero(candidate)[0]
        chosen[first[0], first[1]] = True
    action = torch.rand(input_ids.shape, generator=generator, device=input_ids.device)  # [B, S]
    random_ids = torch.randint(NUM_SPECIAL, vocab_size, input_ids.shape, generator=generator,
                               device=input_ids.device)  # [B, S]
    masked = input_ids.clone()
    masked[chosen & (action < 0.8)] = special.mask
    swap = chosen & (action >= 0.8) & (action < 0.9)
    masked[swap] = random_ids[swap]
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    return masked, labels


def joint_objective(task_loss: LossFn, count_fn: CountFn, *, weight: float, probability: float,
                    special: SpecialIds, generator: torch.Generator, unpad: bool = False) -> tuple[LossFn, CountFn]:
    """The task's objective plus `weight` times the masked-LM loss, for a JointModel.

    The MLM loss of a micro-batch is its mean over the predicted pieces, weighted as the task loss
    weights the micro-batch (its share of the step's examples or labelled tokens): with one micro-batch
    per step, the step's mean. Metrics: the task's, plus `mlm_loss_sum` and `mlm_correct` over
    `mlm_n` predicted pieces. With `unpad`, the masked copy's encoder pass runs unpadded, as the task's
    loss (its own `task_loss`) does.
    """

    def loss_fn(model: nn.Module, batch: dict[str, torch.Tensor], totals: dict[str, float]):
        loss, sums = task_loss(model, batch, totals)
        share = count_fn(batch)["n"] / totals["n"] if totals["n"] else 0.0
        head = model.head
        masked, labels = mask_batch(batch["input_ids"], batch["attention_mask"], special, head.config.vocab_size,
                                    probability, generator)
        where = labels != IGNORE_INDEX  # [B, S]
        if not bool(where.any()):
            return loss, {**sums, "mlm_loss_sum": 0.0, "mlm_correct": 0.0, "mlm_n": 0.0}
        out = head.albert(masked, batch["attention_mask"], batch.get("token_type_ids"), unpad=unpad)
        logits = model.mlm(out.last_hidden_state[where], head.albert.embeddings)  # [N, V]
        mlm = F.cross_entropy(logits.float(), labels[where])
        n = float(where.sum())
        correct = float((logits.detach().argmax(-1) == labels[where]).sum())
        return loss + weight * share * mlm, {**sums, "mlm_loss_sum": float(mlm.detach()) * n, "mlm_correct": correct,
                                             "mlm_n": n}

    return loss_fn, count_fn
