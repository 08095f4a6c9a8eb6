"""The training step shared by pretraining and fine-tuning (nanoGPT / torchtitan style).

One optimizer step = k micro-batches (gradient accumulation) x world_size ranks. Losses are
normalised by the GLOBAL count of their targets (masked tokens, examples), summed over all
micro-batches and ranks before any forward pass, so that accumulating k micro-batches, or splitting
a batch over ranks, gives the gradient of the one big batch (up to float rounding), however the
masked tokens fall.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from albertlm.distributed import DistContext, all_reduce_sum
from albertlm.errors import AlbertlmError

Batch = dict[str, torch.Tensor]
# loss_fn(model, batch, totals) -> (loss already divided by the global totals, {metric: sum})
LossFn = Callable[[nn.Module, Batch, dict[str, float]], tuple[torch.Tensor, dict[str, float]]]
# count_fn(batch) -> {name: count} of the targets each loss is averaged over
CountFn = Callable[[Batch], dict[str, float]]

PRECISIONS = ("fp32", "bf16", "fp16")


class NonFiniteLossError(AlbertlmError):
    """The loss or the gradient norm stopped being finite."""


@dataclass(frozen=True)
class StepSettings:
    """How every optimizer step is taken."""

    precision: str = "fp32"
    """fp32, bf16 (autocast on CPU or GPU) or fp16 (autocast + gradient scaler, GPU only)."""
    clip_norm: float | None = 1.0
    """Global gradient-norm clipping before the step (official: 1.0); None disables it."""
    on_nonfinite: str = "skip"
    """skip: drop the step and go on (a message is logged); stop: raise NonFiniteLossError."""

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise AlbertlmError(f"precision {self.precision!r} is unknown; choose one of {', '.join(PRECISIONS)}")
        if self.on_nonfinite not in ("skip", "stop"):
            raise AlbertlmError(f"on_nonfinite must be skip or stop, got {self.on_nonfinite!r}")


def resolve_precision(precision: str, device: torch.device) -> str:
    """"auto" becomes bf16 where the hardware multiplies bf16 natively, fp32 elsewhere.

    Native means a CUDA device with bf16 support, or a CPU whose flags (Linux /proc/cpuinfo) list
    avx512_bf16 or amx_bf16. Without them CPU bf16 is emulated and slower than fp32.
    Other values pass through unchanged.
    """
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            flags = next((line.split(":", 1)[1].split() for line in fh if line.startswith("flags")), [])
    except OSError:
        flags = []
    return "bf16" if {"avx512_bf16", "amx_bf16"} & set(flags) else "fp32"


def autocast(device: torch.device, precision: str):
    """The autocast context for a precision (a no-op for fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def make_scaler(settings: StepSettings, device: torch.device) -> torch.amp.GradScaler | None:
    """A gradient scaler for fp16 (needed against underflow); None otherwise."""
    if settings.precision != "fp16":
        return None
    if device.type != "cuda":
        raise AlbertlmError("precision fp16 needs a CUDA device; use bf16 on CPU")
    return torch.amp.GradScaler("cuda")


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, micro_batches: Sequence[Batch], *,
               lr: float, loss_fn: LossFn, count_fn: CountFn, ctx: DistContext,
               settings: StepSettings, scaler: torch.amp.GradScaler | None = None) -> dict[str, Any]:
    """Accumulate gradients over the micro-batches, clip, check, and take one optimizer step.

    Args:
        model: the (possibly DDP-wrapped) model, in train mode.
        optimizer: its optimizer.
        micro_batches: this rank's share of the step's batch, already on ctx.device.
        lr: the learning rate for this step (the schedule is a pure function of the step).
        loss_fn: computes the normalised loss of one micro-batch and metric sums.
        count_fn: the per-micro-batch target counts used for normalisation.
        ctx: the data-parallel context.
        settings: precision, clipping, non-finite policy.
        scaler: the fp16 gradient scaler, if any.
    Returns:
        Metric sums over the whole step (all ranks), plus "grad_norm", "lr" and "skipped" (0/1).
    """
    set_lr(optimizer, lr)
    names = sorted(count_fn(micro_batches[0]))
    local = torch.tensor([[count_fn(b)[n] for n in names] for b in micro_batches], dtype=torch.float64).sum(0)
    totals = dict(zip(names, all_reduce_sum(local.to(ctx.device), ctx).tolist()))
    # DDP averages gradients over ranks; our losses are already global sums, so undo the average.
    scale = float(ctx.world_size)
    sums: dict[str, float] = {}
    loss_total = 0.0
    for i, batch in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        sync = contextlib.nullcontext()
        if hasattr(model, "set_requires_gradient_sync"):  # FSDP2: reduce-scatter on the last micro-batch only
            model.set_requires_gradient_sync(last)
        elif not last and hasattr(model, "no_sync"):  # DDP: all-reduce on the last micro-batch only
            sync = model.no_sync()
        with sync:
            with autocast(ctx.device, settings.precision):
                loss, metrics = loss_fn(model, batch, totals)
            scaled = loss * scale
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        loss_total += float(loss.detach())
        for k, v in metrics.items():
            sums[k] = sums.get(k, 0.0) + float(v)

    if scaler is not None:
        scaler.unscale_(optimizer)
    params = [p for p in model.parameters() if p.grad is not None]
    if settings.clip_norm is not None:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, settings.clip_norm))
    else:
        grad_norm = float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])))
    loss_sum = float(all_reduce_sum(torch.tensor([loss_total], dtype=torch.float64, device=ctx.device), ctx)[0])
    finite = math.isfinite(loss_sum) and math.isfinite(grad_norm)
    skipped = 0
    if scaler is not None:
        # The scaler skips steps with inf/nan gradients itself and lowers its scale; only a
        # non-finite loss is a real problem in fp16.
        scaler.step(optimizer)
        scaler.update()
        if not math.isfinite(loss_sum):
            skipped = 1
    elif finite:
        optimizer.step()
    else:
        skipped = 1
    optimizer.zero_grad(set_to_none=True)
    if skipped and settings.on_nonfinite == "stop":
        raise NonFiniteLossError(f"non-finite loss ({loss_sum}) or gradient norm ({grad_norm}); "
                                 "the weights were not updated. Lower the learning rate, use fp32/bf16, "
                                 "or pass --on-nonfinite skip")
    out = {k: v for k, v in _reduce_metrics(sums, ctx).items()}
    out.update(loss=loss_sum, grad_norm=grad_norm, lr=lr, skipped=skipped, **{f"n_{k}": v for k, v in totals.items()})
    return out


def _reduce_metrics(sums: dict[str, float], ctx: DistContext) -> dict[str, float]:
    if not sums:
        return {}
    keys = sorted(sums)
    vals = all_reduce_sum(torch.tensor([sums[k] for k in keys], dtype=torch.float64, device=ctx.device), ctx)
    return dict(zip(keys, vals.tolist()))
