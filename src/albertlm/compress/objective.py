"""What the compressed student learns from its teacher on unlabelled text: `run_steps` loss functions.

Both networks see the same batch; the teacher runs without gradients. Every objective is a sum over
real tokens (or sentences) divided by the step's global count of them (`train/loop.py`), so gradient
accumulation gives the gradient of the one big batch.

    hidden    mean squared error between the student's and the teacher's hidden states at every
              layer application (the projected embeddings, then each layer's output): the student's
              layer i stands for the teacher's layer i, however its blocks are shared
    last      the same at the last layer only
    pooled    `hidden`, plus 1 - cosine between the two models' mean-pooled sentence vectors (what a
              sentence embedder is scored on)

The student and the teacher must run the same number of layer applications (compress keeps L).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import nn

from albertlm.errors import AlbertlmError
from albertlm.train.loop import Batch, CountFn, LossFn

Objective = Literal["hidden", "last", "pooled"]
OBJECTIVES: tuple[str, ...] = get_args(Objective)


def count(batch: Batch) -> dict[str, float]:
    """The targets each loss is averaged over: real tokens, sentences."""
    return {"tokens": float(batch["attention_mask"].sum()), "sentences": float(batch["input_ids"].shape[0])}


def mean_pool(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """h [B, S, H], mask [B, S] (1 = token) -> the mean of the real tokens' vectors [B, H]."""
    m = mask[..., None].to(h.dtype)  # [B, S, 1]
    return (h * m).sum(1) / m.sum(1).clamp(min=1.0)


def squared_error(states, target, keep: torch.Tensor) -> torch.Tensor:
    """Squared error of matched hidden states, summed over the real tokens (`keep` [B, S], True = token)
    and averaged over the hidden width and the layers matched."""
    pairs = list(zip(states, target))
    H = pairs[-1][0].shape[-1]
    return sum(((s - t)[keep].float() ** 2).sum() for s, t in pairs) / (len(pairs) * H)


def pooled_cosine(student_last: torch.Tensor, teacher_last: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The cosine between the two models' mean-pooled sentence vectors, one per sentence [B]."""
    return F.cosine_similarity(mean_pool(student_last, mask).float(), mean_pool(teacher_last, mask).float(), dim=-1)


def hidden_states(model: nn.Module, batch: Batch, unpad: bool = True) -> tuple[torch.Tensor, ...]:
    out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                output_hidden_states=True, unpad=unpad)
    return out.hidden_states  # 1 + L of [B, S, H], zeros at padding when unpadded


def distill_loss(objective: str, teacher: nn.Module, unpad: bool = True) -> tuple[LossFn, CountFn]:
    """The (loss_fn, count_fn) pair of one objective, the teacher held in the closure.

    The loss's metrics are sums: "hidden_se" (squared error per token, averaged over the hidden width
    and the layers matched) and, for pooled, "cosine" (student-teacher cosine per sentence).
    """
    if objective not in OBJECTIVES:
        raise AlbertlmError(f"--objective {objective!r}: choose one of {', '.join(OBJECTIVES)}")

    def loss_fn(model: nn.Module, batch: Batch, totals: dict[str, float]):
        with torch.no_grad():
            target = hidden_states(teacher, batch, unpad)
        states = hidden_states(model, batch, unpad)
        if len(states) != len(target):
            raise AlbertlmError(f"the student runs {len(states) - 1} layer applications and the teacher "
                                f"{len(target) - 1}; they must match")
        matched = slice(-1, None) if objective == "last" else slice(None)
        se = squared_error(states[matched], target[matched], batch["attention_mask"].bool())  # summed over tokens
        loss = se / max(totals["tokens"], 1.0)
        metrics = {"hidden_se": float(se.detach())}
        if objective == "pooled":
            cos = pooled_cosine(states[-1], target[-1], batch["attention_mask"])
            loss = loss + (1.0 - cos).sum() / max(totals["sentences"], 1.0)
            metrics["cosine"] = float(cos.detach().sum())
        return loss, metrics

    return loss_fn, count
