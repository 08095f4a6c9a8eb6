"""Held-out masked-LM scoring that separates what the model inferred from what it could copy.

Of the positions the MLM objective predicts, 80% show [MASK], 10% show a random token and 10% show
the answer itself (paper §4.1, BERT's 80/10/10 rule). Accuracy over all of them mixes copying the
visible answer (easy: a model learns it within a few hundred steps) with prediction from context.
So every score here is split by what the input showed at the position:

- ``mask``:   the position shows [MASK]. This is the headline (``mlm_mask_accuracy``).
- ``kept``:   the position shows the answer (the "keep" rule): a copy task.
- ``random``: the position shows another token.

and the [MASK] positions are scored against two baselines that need no network:

- ``unigram``: always the most frequent target token of the training split;
- ``bigram``:  the most frequent target after the visible left neighbour, counted on the training
  split; where the left neighbour is itself [MASK] (or never seen), the unigram answer.

A model whose [MASK] accuracy does not beat the bigram baseline has learned nothing a table of
neighbour counts does not know. The baselines are fixed predictors estimated on the training split,
so they are scored on exactly the positions the model is scored on.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from pathlib import Path

import numpy as np
import torch
from torch import nn

from albertlm.checkpoint import unwrap
from albertlm.data.loader import PretrainingDataset, collate
from albertlm.vocab import IGNORE_INDEX, MASK_ID, SPIECE_IDS, SpecialIds
from albertlm.data.shards import Shard, list_shards
from albertlm.distributed import DistContext, all_reduce_sum

KINDS = ("mask", "kept", "random")


def _is_text(tokens: np.ndarray, text: np.ndarray) -> np.ndarray:
    """bool like `tokens`: not a special or reserved id (ids outside the table count as text)."""
    inside = tokens < len(text)
    return ~inside | text[np.where(inside, tokens, 0)]


@dataclass(frozen=True)
class TokenBaselines:
    """Count-based predictors of a masked token, estimated on a training split.

    Attributes:
        unigram: the most frequent target token (never a special id).
        bigram: int64 [V]; bigram[left] is the most frequent target after `left`, or `unigram`
            where `left` was never followed by a target.
    """

    unigram: int
    bigram: np.ndarray
    mask_id: int = MASK_ID
    """The vocabulary's [MASK] (a left neighbour that is masked tells nothing)."""

    @classmethod
    def from_shards(cls, directory: str | os.PathLike, vocab_size: int, split: str = "train",
                    special: SpecialIds = SPIECE_IDS) -> TokenBaselines:
        """Count unigrams and (left, right) pairs over every example of `split` in a data directory.

        Pairs never cross examples (every example starts with [CLS]) and only non-special right tokens
        count, since special tokens are never prediction targets (`special`: the vocabulary's ids;
        reserved ones count as special too).
        """
        text = np.zeros(vocab_size, dtype=bool)
        text[special.replacement_ids(vocab_size)] = True  # the ids that are text: not special, not reserved
        unigram = np.zeros(vocab_size, dtype=np.int64)
        codes = []
        for path in list_shards(Path(directory), split):
            tokens = np.asarray(Shard(path)["tokens"], dtype=np.int64)
            left, right = tokens[:-1], tokens[1:]
            keep = _is_text(right, text)
            unigram += np.bincount(tokens[_is_text(tokens, text)], minlength=vocab_size)[:vocab_size]
            codes.append(left[keep] * vocab_size + right[keep])
        top = int(unigram.argmax()) if unigram.any() else int(special.replacement_ids(vocab_size)[0])
        bigram = np.full(vocab_size, top, dtype=np.int64)
        if codes:
            pairs, counts = np.unique(np.concatenate(codes), return_counts=True)
            left, right = pairs // vocab_size, pairs % vocab_size
            # per left token, the right token with the highest count (ties: the lowest id)
            order = np.lexsort((right, -counts, left))
            first = np.ones(len(order), dtype=bool)
            first[1:] = left[order][1:] != left[order][:-1]
            bigram[left[order][first]] = right[order][first]
        return cls(unigram=top, bigram=bigram, mask_id=special.mask)

    def predict(self, input_ids: torch.Tensor, positions: torch.Tensor) -> dict[str, torch.Tensor]:
        """Both baselines' answers at `positions` of `input_ids`.

        Args:
            input_ids: [B, S] the model's input (masked).
            positions: [B, S] bool, the positions to predict.
        Returns:
            {"unigram": [N], "bigram": [N]} int64, one answer per True of `positions`, row-major.
        """
        left = torch.roll(input_ids, 1, dims=1)[positions].cpu()  # position 0 is [CLS], never predicted
        table = torch.from_numpy(self.bigram)
        bigram = torch.where(left == self.mask_id, self.unigram, table[left.clamp(0, len(table) - 1)])
        return {"unigram": torch.full_like(bigram, self.unigram), "bigram": bigram}


def position_kinds(input_ids: torch.Tensor, labels: torch.Tensor, mask_id: int = MASK_ID) -> dict[str, torch.Tensor]:
    """Split predicted positions by what the input shows there.

    Args:
        input_ids, labels: [B, S]; labels are IGNORE_INDEX where nothing is predicted.
        mask_id: the vocabulary's [MASK] id.
    Returns:
        {"mask", "kept", "random"}: [B, S] bool masks, disjoint, covering every predicted position.
        (A random replacement that happens to draw the answer counts as kept: the input shows it.)
    """
    predicted = labels != IGNORE_INDEX
    mask = predicted & (input_ids == mask_id)
    kept = predicted & ~mask & (input_ids == labels)
    return {"mask": mask, "kept": kept, "random": predicted & ~mask & ~kept}


def mask_accuracy_sums(out, batch: dict[str, torch.Tensor], mask_id: int = MASK_ID) -> tuple[float, float]:
    """(correct predictions, positions) at the [MASK] positions of a training batch: the progress
    bar's `mask_acc`. `out` holds sparse `prediction_logits` [N, V] over `prediction_mask` [B, S]."""
    targets = batch["labels"][out.prediction_mask]
    at_mask = position_kinds(batch["input_ids"], batch["labels"], mask_id)["mask"][out.prediction_mask]
    return float(((out.prediction_logits.argmax(-1) == targets) & at_mask).sum()), float(at_mask.sum())


@torch.no_grad()
def evaluate(model: nn.Module, dataset: PretrainingDataset, ctx: DistContext | None = None, batch_size: int = 64,
             max_examples: int | None = None, baselines: TokenBaselines | None = None,
             forward: Callable[[nn.Module, dict[str, torch.Tensor]], Any] | None = None,
             extra_sums: Callable[[Any, dict[str, torch.Tensor]], dict[str, float]] | None = None) -> dict[str, float]:
    """Held-out MLM and sentence-order scores, split by position kind, with their baselines.

    Every rank scores its share, then the sums are all-reduced.

    Args:
        model: an AlbertForPreTraining (possibly wrapped by DDP/FSDP).
        dataset: the held-out split; example i is masked as in epoch 0, so every evaluation of a run
            scores the same positions.
        baselines: count tables of the training split (default: counted from `dataset.directory`).
        forward: (the plain model, a batch) -> its output with `prediction_logits` (sparse),
            `prediction_mask` and `sop_logits`; default `model(**batch)`. Replaced-token detection
            scores its generator's MLM this way (train/rtd.py).
        extra_sums: (output, batch) -> more sums to total over the split; returned under their
            names beside the metrics below.
    Returns:
        mlm_mask_accuracy / mlm_mask_loss: at [MASK] positions (the headline);
        mlm_kept_accuracy, mlm_random_accuracy: at the other predicted positions;
        mlm_all_accuracy / mlm_all_loss: over every predicted position (BERT's usual, inflated figure);
        mask_share, kept_share, random_share: the fraction of predicted positions of each kind;
        baseline_unigram_accuracy, baseline_bigram_accuracy: the count baselines at [MASK] positions;
        mask_distinct_predictions: how many different tokens the model predicts at [MASK] positions
            (a model on the unigram plateau predicts a handful);
        sop_accuracy, baseline_sop_accuracy (the majority label), examples, masked_tokens.
    """
    ctx = ctx or DistContext()
    config = unwrap(model).config
    if baselines is None:
        baselines = TokenBaselines.from_shards(dataset.directory, config.vocab_size, special=dataset.special_ids)
    model.eval()
    # sums: loss and correct per kind, count per kind, unigram/bigram correct at [MASK], sop correct,
    # sop ones, examples
    names = ([f"{k}_loss" for k in KINDS] + [f"{k}_correct" for k in KINDS] + [f"{k}_count" for k in KINDS]
             + ["unigram_correct", "bigram_correct", "sop_correct", "sop_ones", "examples"])
    sums = torch.zeros(len(names), dtype=torch.float64)
    predicted_at_mask = torch.zeros(config.vocab_size, dtype=torch.float64)
    extra: dict[str, float] = {}
    limit = min(max_examples if max_examples is not None else dataset.num_examples, dataset.num_examples)
    # Every rank runs the same number of forward passes (FSDP's all-gathers need all of them):
    # global chunks of batch_size x world, each rank its slice; an empty slice runs a dummy batch.
    chunk = batch_size * ctx.world_size
    for lo in range(0, limit, chunk):
        mine = list(range(lo, min(lo + chunk, limit)))[ctx.rank::ctx.world_size]
        weight = 1.0 if mine else 0.0
        batch = {k: v.to(ctx.device) for k, v in collate([dataset.example(i, epoch=0) for i in (mine or [0])],
                                                         special=dataset.special_ids).items()}
        out = forward(unwrap(model), batch) if forward is not None else unwrap(model)(**batch)
        row, guess_at_mask = _batch_sums(out, batch, baselines, dataset.special_ids.mask)
        sums += weight * row
        predicted_at_mask += weight * torch.bincount(guess_at_mask, minlength=config.vocab_size).double()
        for k, v in (extra_sums(out, batch) if extra_sums is not None else {}).items():
            extra[k] = extra.get(k, 0.0) + weight * v
    model.train()
    s = dict(zip(names, all_reduce_sum(sums.to(ctx.device), ctx).cpu().tolist()))
    distinct = int((all_reduce_sum(predicted_at_mask.to(ctx.device), ctx) > 0).sum())
    result = _metrics(s, distinct)
    if extra_sums is not None:
        keys = sorted(extra)  # every batch gives the same names, on every rank
        totals = all_reduce_sum(torch.tensor([extra[k] for k in keys], dtype=torch.float64, device=ctx.device), ctx)
        result.update(zip(keys, totals.cpu().tolist()))
    return result


def _batch_sums(out, batch: dict[str, torch.Tensor], baselines: TokenBaselines, mask_id: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch's sums in `evaluate`'s order (loss, correct and count per kind; unigram and bigram
    correct at [MASK]; SOP correct, SOP ones, examples), and the predictions at [MASK] positions."""
    kinds = {k: v[out.prediction_mask] for k, v in position_kinds(batch["input_ids"], batch["labels"], mask_id).items()}
    targets = batch["labels"][out.prediction_mask]
    logits = out.prediction_logits.float()
    losses = nn.functional.cross_entropy(logits, targets, reduction="none")
    guess = logits.argmax(-1)
    right = guess == targets
    base = baselines.predict(batch["input_ids"], out.prediction_mask)
    at_mask = kinds["mask"].cpu()
    row = ([float(losses[kinds[k]].sum()) for k in KINDS] + [float(right[kinds[k]].sum()) for k in KINDS]
           + [float(kinds[k].sum()) for k in KINDS]
           + [float((base[b][at_mask] == targets.cpu()[at_mask]).sum()) for b in ("unigram", "bigram")]
           + [float((out.sop_logits.argmax(-1) == batch["sentence_order_label"]).sum()),
              float(batch["sentence_order_label"].sum()), float(len(batch["labels"]))])
    return torch.tensor(row, dtype=torch.float64), guess[kinds["mask"]].cpu()


def _metrics(s: dict[str, float], distinct: int) -> dict[str, float]:
    """`evaluate`'s results from the all-reduced sums."""
    total = sum(s[f"{k}_count"] for k in KINDS)
    n_mask = max(s["mask_count"], 1.0)
    result = {f"mlm_{k}_accuracy": s[f"{k}_correct"] / max(s[f"{k}_count"], 1.0) for k in KINDS}
    result.update({
        "mlm_mask_loss": s["mask_loss"] / n_mask,
        "mlm_all_accuracy": sum(s[f"{k}_correct"] for k in KINDS) / max(total, 1.0),
        "mlm_all_loss": sum(s[f"{k}_loss"] for k in KINDS) / max(total, 1.0),
        **{f"{k}_share": s[f"{k}_count"] / max(total, 1.0) for k in KINDS},
        "baseline_unigram_accuracy": s["unigram_correct"] / n_mask,
        "baseline_bigram_accuracy": s["bigram_correct"] / n_mask,
        "mask_distinct_predictions": distinct,
        "sop_accuracy": s["sop_correct"] / max(s["examples"], 1.0),
        "baseline_sop_accuracy": max(s["sop_ones"], s["examples"] - s["sop_ones"]) / max(s["examples"], 1.0),
        "examples": s["examples"], "masked_tokens": total, "mask_positions": s["mask_count"],
    })
    return result
