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
from typing import Any, Literal, get_args

import torch
from torch import nn

from albertlm.checkpoint import assert_finite_weights
from albertlm.distributed import DistContext, all_reduce_sum
from albertlm.errors import AlbertlmError

Batch = dict[str, torch.Tensor]
# loss_fn(model, batch, totals) -> (loss already divided by the global totals, {metric: sum})
LossFn = Callable[[nn.Module, Batch, dict[str, float]], tuple[torch.Tensor, dict[str, float]]]
# count_fn(batch) -> {name: count} of the targets each loss is averaged over
CountFn = Callable[[Batch], dict[str, float]]

Precision = Literal["fp32", "bf16", "fp16"]
"""How a step computes: fp32, bf16 (autocast on CPU or GPU) or fp16 (autocast + gradient scaler, GPU only)."""
PRECISIONS: tuple[str, ...] = get_args(Precision)

Unpad = Literal["auto", "on", "off"]
"""Whether training runs the encoder on each batch's real tokens only (`unpadded`)."""


def unpadded(setting: Unpad, model: nn.Module, device: torch.device) -> bool:
    """Whether a run's training forward passes go unpadded (`AlbertModel.forward(..., unpad=True)`).

    Unpadded, the encoder computes each sequence's real tokens and nothing for the padding that a batch
    of mixed lengths carries to its longest: on 2 CPU cores a CoNLL-2003 step of albert-small takes
    0.26 s against 0.60 s padded (docs/finetuning.md). The values at real tokens are the padded pass's,
    up to float rounding, so the loss is the same (with dropout on, its masks are drawn over the packed
    tokens: the same in distribution, not step for step). "auto" unpads on a CPU only: on a GPU the attention
    then runs once per sequence, many small kernels, which no run here has timed against the padding
    they save. A model whose forward does not take `unpad` (`unpads` False: question answering, whose
    loss reads the padded positions' logits too) always runs padded.
    """
    wanted = setting == "on" or (setting == "auto" and device.type == "cpu")
    return wanted and bool(getattr(model, "unpads", False))


class NonFiniteLossError(AlbertlmError):
    """The loss or the gradient norm stopped being finite."""


@dataclass(frozen=True)
class StepSettings:
    """How every optimizer step is taken."""

    precision: Precision = "fp32"
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


def resolve_precision(precision: str, device: torch.device) -> Precision:
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


def _accumulate(model: nn.Module, micro_batches: Sequence[Batch], loss_fn: LossFn, totals: dict[str, float],
                ctx: DistContext, settings: StepSettings, scaler: torch.amp.GradScaler | None
                ) -> tuple[float, dict[str, float]]:
    """Forward and backward of every micro-batch, gradients synchronised on the last one only.
    Returns (this rank's loss sum, its metric sums)."""
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
    return loss_total, sums


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
    loss_total, sums = _accumulate(model, micro_batches, loss_fn, totals, ctx, settings, scaler)
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


# ---------------------------------------------------------------------------- the outer loop
@dataclass(frozen=True)
class Cadence:
    """How often a run logs, evaluates and checkpoints (every N steps, and always at the last)."""

    steps: int
    log_every: int
    eval_every: int
    checkpoint_every: int | None = None
    """None: the recipe keeps no checkpoints (fine-tuning keeps its best model instead)."""

    def due(self, step: int, every: int | None) -> bool:
        return every is not None and (step % every == 0 or step == self.steps)


@contextlib.contextmanager
def _progress_bar(desc: str | None, total: int, initial: int):
    """A tqdm bar for run_steps, closed however the loop ends; None without a description."""
    if desc is None:
        yield None
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=total, initial=initial, desc=desc, unit="step", dynamic_ncols=True)
    try:
        yield bar
    finally:
        bar.close()


def run_steps(model: nn.Module, optimizer: torch.optim.Optimizer, *, start: int, cadence: Cadence,
              batches: Callable[[int], Sequence[Batch]], lr: Callable[[int], float], loss_fn: LossFn,
              count_fn: CountFn, ctx: DistContext, settings: StepSettings,
              on_log: Callable[[int, dict[str, Any], float, bool], dict[str, str] | None],
              on_eval: Callable[[int], bool] | None = None, on_checkpoint: Callable[[int], None] | None = None,
              scaler: torch.amp.GradScaler | None = None, progress: str | None = None,
              stop_after: int | None = None, time_up: Callable[[int], bool] | None = None) -> int:
    """The outer training loop every recipe shares.

    For each step from `start` to `cadence.steps`: take the step's micro-batches, train
    (`train_step`), report, then evaluate and checkpoint when their cadence says so. Weights are
    checked for NaN or infinity before any evaluation or checkpoint (`assert_finite_weights`).

    Args:
        batches: step index (0-based, the step about to be taken) -> that step's micro-batches on
            ctx.device.
        lr: step index -> learning rate.
        on_log: (steps done, train_step's metrics, lr, whether this step is a logging step) -> the
            progress bar's postfix or None; called after EVERY step on every rank (so it may run
            collectives, e.g. counting tokens).
        on_eval: steps done -> True to stop early (fine-tuning's patience).
        on_checkpoint: steps done -> None; runs on every rank (gathering state is collective).
        progress: the progress bar's description, None for no bar (pass None on all but the main rank).
        stop_after: stop after this many steps in this call, without the final step's work; tests
            use it to simulate an interrupted run.
        time_up: steps done -> True when the run's time is spent: that step is evaluated (when there is
            an on_eval) and is the last. Single-process recipes only: the answer is not agreed across ranks.
    Returns:
        The number of steps done.
    """
    step, done = start, 0
    with _progress_bar(progress, cadence.steps, start) as bar:
        while step < cadence.steps:
            current_lr = lr(step)
            m = train_step(model, optimizer, batches(step), lr=current_lr, loss_fn=loss_fn, count_fn=count_fn, ctx=ctx,
                           settings=settings, scaler=scaler)
            step += 1
            done += 1
            postfix = on_log(step, m, current_lr, cadence.due(step, cadence.log_every))
            if bar is not None:
                if postfix:
                    bar.set_postfix(**postfix)
                bar.update(1)
            out_of_time = time_up is not None and step < cadence.steps and time_up(step)
            evaluate = on_eval is not None and (out_of_time or cadence.due(step, cadence.eval_every))
            save = on_checkpoint is not None and cadence.due(step, cadence.checkpoint_every)
            if evaluate or save:
                assert_finite_weights(model, step)  # never evaluate, checkpoint or export NaN weights
            stop = on_eval(step) if evaluate else False
            if save:
                on_checkpoint(step)
            if stop or out_of_time or (stop_after is not None and done >= stop_after and step < cadence.steps):
                break
    return step
