"""Patience-based early exit at inference (PABEE: Zhou et al. 2020, "BERT Loses Patience").

A model fine-tuned with exit heads (`albertlm.exit_heads`) runs its layers one at a time
(`Encoder.layer`); an example stops once its prediction has not changed for `patience`
consecutive layers (argmax for single-label, the set of positive labels for multi-label, a change
under `regression_threshold` for regression; token classification: no real token's argmax
changed). Its output is the exiting layer's logits. Exited examples leave the batch; the rest go
on, and trailing columns that are padding for every remaining row are cut off.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from albertlm.errors import AlbertlmError
from albertlm.exit_heads import CONFIG_KEY, ExitHeads
from albertlm.model import attention_bias

DEFAULT_REGRESSION_THRESHOLD = 0.1
"""A regression output counts as unchanged when it moves by less than this between layers (STS-B's
scores run from 0 to 5)."""


@dataclass
class PatienceOutput:
    logits: torch.Tensor
    """Each example's logits from the layer where it exited: [B, num_labels], or [B, S, num_labels]
    with zeros at columns cut off as padding of every row still running."""
    exit_layers: torch.Tensor
    """long [B]: layer applications each example ran, 1 .. L."""


def check_patience(patience: object) -> None:
    """A one-line error unless `patience` is a positive integer (a bool is not one)."""
    if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
        raise AlbertlmError(f"--patience must be a positive integer, got {patience!r}")


@torch.no_grad()
def patience_forward(model: ExitHeads, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                     token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None, *,
                     patience: int, regression_threshold: float = DEFAULT_REGRESSION_THRESHOLD) -> PatienceOutput:
    """Run a batch layer by layer; each example stops once its prediction has held for `patience` layers.

    Example b exits after layer i (0-based) when layers i - patience .. i all predict the same (so it
    runs at least patience + 1 layers), or after the last layer. Exited rows leave the batch; the
    remaining ones are re-packed, and trailing columns that are padding in every remaining row are
    cut. Each example's result equals running it alone (float rounding aside).

    Args:
        model: an early-exit head in eval mode.
        input_ids, attention_mask, token_type_ids, position_ids: [B, S], as the plain head's forward.
        patience: layers the prediction must stay unchanged, at least 1.
        regression_threshold: regression outputs moving less than this count as unchanged.
    Returns:
        PatienceOutput with the exiting layers' logits and the layers each example ran.
    """
    check_patience(patience)
    if model.training:
        raise AlbertlmError("patience_forward: the model is in training mode (dropout on); call model.eval()")
    B, S = input_ids.shape
    valid = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    encoder = model.albert.encoder
    L = len(encoder.schedule)
    h = model.albert.embed(input_ids, token_type_ids, position_ids)  # [B, S, H]
    rows = torch.arange(B, device=input_ids.device)  # which example each remaining row is
    streak = torch.zeros(B, dtype=torch.long, device=input_ids.device)  # layers the prediction has held
    out, layers, prev = None, torch.zeros_like(streak), None
    bias = attention_bias(valid)  # rebuilt only when rows leave the batch
    for i in range(L):
        h = encoder.layer(i, h, bias)
        logits = model.exit_logits(i, h)  # [b, C] or [b, S', C]
        if out is None:
            out = logits.new_zeros((B, *logits.shape[1:]))
        if prev is not None:
            held = model.same_prediction(prev, logits, valid, regression_threshold)  # bool [b]
            streak = torch.where(held, streak + 1, torch.zeros_like(streak))
        done = streak >= patience if i < L - 1 else torch.ones_like(streak, dtype=torch.bool)
        prev = logits
        if not bool(done.any()):
            continue
        out[rows[done], :logits.shape[1]] = logits[done]  # [:C] for sequences, [:S'] for tokens
        layers[rows[done]] = i + 1
        if bool(done.all()):
            break
        keep = ~done
        h, valid, rows, streak, prev = h[keep], valid[keep], rows[keep], streak[keep], prev[keep]
        used = valid.any(0).nonzero()  # columns some remaining row uses
        columns = int(used.max()) + 1 if len(used) else h.shape[1]
        if columns < h.shape[1]:
            h, valid = h[:, :columns], valid[:, :columns]  # [b, S', H], [b, S']
            prev = prev[:, :columns] if model.per_position else prev
        bias = attention_bias(valid)
    return PatienceOutput(logits=out, exit_layers=layers)


class PatienceExit(nn.Module):
    """An early-exit head whose forward is `patience_forward`: a drop-in for the plain head in
    inference loops (its output has `logits` and `exit_layers`)."""

    def __init__(self, model: ExitHeads, patience: int,
                 regression_threshold: float = DEFAULT_REGRESSION_THRESHOLD):
        super().__init__()
        if not isinstance(model, ExitHeads):
            raise AlbertlmError(f"{type(model).__name__} has no exit heads; fine-tune with --early-exit")
        check_patience(patience)
        self.model = model
        self.patience = patience
        self.regression_threshold = regression_threshold

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None) -> PatienceOutput:
        """As `patience_forward` with this module's settings."""
        return patience_forward(self.model, input_ids, attention_mask, token_type_ids, position_ids,
                                patience=self.patience, regression_threshold=self.regression_threshold)


def patience_runner(model_dir: str | Path, model: torch.nn.Module, patience: int,
                    regression_threshold: float = DEFAULT_REGRESSION_THRESHOLD) -> PatienceExit:
    """`model` wrapped for patience-based early exit, or a one-line error when it has no exit heads."""
    if not isinstance(model, ExitHeads):
        raise AlbertlmError(f"{model_dir}: has no exit heads (no {CONFIG_KEY} in config.json); --patience needs a "
                            "model fine-tuned with --early-exit")
    return PatienceExit(model, patience, regression_threshold)


def exit_summary(exit_layers: list, patience: int, layers: int) -> dict[str, Any]:
    """Average layers run, the speed-up in layers over full depth, and how many inputs exited where."""
    counts = np.bincount(np.asarray(exit_layers, dtype=np.int64), minlength=layers + 1)[1:]
    average = float(np.mean(exit_layers))
    return {"patience": patience, "layers": layers, "average_layers": average, "speedup": layers / average,
            "exits_per_layer": counts.tolist()}


def check_early_exit(patience: int | None, regression_threshold: float) -> None:
    """The early-exit settings of evaluate and predict, each refused with one line."""
    if patience is not None:
        check_patience(patience)
    if not regression_threshold >= 0:
        raise AlbertlmError(f"--regression-threshold must not be negative, got {regression_threshold!r}")
