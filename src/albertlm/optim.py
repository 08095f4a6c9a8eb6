"""LAMB as in the official ALBERT code, parameter groups, and the learning rate as a pure function of step.

Pretraining recipe (paper §4.1, official run_pretraining.py / optimization.py): batch 4096, LAMB,
lr 0.00176, 125,000 steps with 3,125 warmup steps, weight decay 0.01, β (0.9, 0.999), ε 1e-6,
global gradient-norm clip 1.0 before each step, LayerNorm and bias parameters excluded from both
weight decay and LAMB's layer adaptation.

The training loop owns the step counter and sets ``group["lr"] = lr_at(step, ...)`` before each
``optimizer.step()``; nothing here keeps a scheduler object.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import nn

from albertlm.errors import ConfigError

PRETRAIN_LR = 0.00176
PRETRAIN_BATCH = 4096
OptimizerName = Literal["adamw", "lamb"]
"""The optimizers `build_optimizer` makes: torch's AdamW, or the official LAMB (`Lamb`)."""
OPTIMIZERS: tuple[str, ...] = get_args(OptimizerName)


class Lamb(torch.optim.Optimizer):
    """LAMB exactly as google-research/albert ``lamb_optimizer.LAMBOptimizer``.

    Per parameter w with gradient g (official code, no bias correction):

        m = β1·m + (1-β1)·g            v = β2·v + (1-β2)·g²
        u = m / (√v + ε) + wd·w        (the wd term only when the group's weight_decay > 0)
        r = ‖w‖ / ‖u‖ if ‖w‖ > 0 and ‖u‖ > 0 else 1.0      (only when the group's adapt is True;
                                                              not clipped, unlike some LAMB ports)
        w = w - lr · r · u

    Because there is no bias correction, the first steps are (1-β1)/√(1-β2) ≈ 3.16× larger per
    coordinate than Adam's; the official recipe relies on warmup to absorb that.

    Args:
        params: parameters or param-group dicts (see ``param_groups``). Group keys: ``lr``,
            ``betas``, ``eps``, ``weight_decay`` and ``adapt`` (False = skip the trust ratio, the
            official ``exclude_from_layer_adaptation``).
        lr: learning rate; the official pretraining value 0.00176 by default.
        betas: (β1, β2) for the moment averages.
        eps: added to √v (outside the root, as the official code does).
        weight_decay: decoupled decay coefficient added to the update before the trust ratio.
        adapt: whether to apply the layer-wise trust ratio.
        foreach: use ``torch._foreach_*`` kernels (default: when all of a group's parameters share
            one device and dtype); False runs the plain per-parameter loop, the readable reference.
    """

    def __init__(self, params, lr: float = PRETRAIN_LR, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.01, adapt: bool = True,
                 foreach: bool | None = None):
        if lr < 0 or eps < 0 or weight_decay < 0:
            raise ConfigError(f"Lamb: lr, eps and weight_decay must be >= 0 (got {lr}, {eps}, {weight_decay})")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ConfigError(f"Lamb: betas must lie in [0, 1) (got {betas})")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        adapt=adapt, foreach=foreach)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        """Apply one update to every parameter that has a gradient.

        Args:
            closure: optional callable that re-evaluates the model and returns the loss.

        Returns:
            The closure's loss, or None.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, ms, vs = [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Lamb does not support sparse gradients")
                state = self.state[p]
                if not state:  # lazily, so load_state_dict can restore before the first step
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                params.append(p)
                grads.append(p.grad)
                ms.append(state["exp_avg"])
                vs.append(state["exp_avg_sq"])
            if not params:
                continue
            foreach = group["foreach"]
            if foreach is None:
                foreach = len({(p.device, p.dtype) for p in params}) == 1
            (_lamb_foreach if foreach else _lamb_loop)(params, grads, ms, vs, group)
        return loss


def _trust_ratio(w_norm: torch.Tensor, u_norm: torch.Tensor) -> torch.Tensor:
    # Official: where(‖w‖ > 0, where(‖u‖ > 0, ‖w‖/‖u‖, 1.0), 1.0). Computed on-device (no sync).
    ok = (w_norm > 0) & (u_norm > 0)
    return torch.where(ok, w_norm / torch.where(ok, u_norm, torch.ones_like(u_norm)), torch.ones_like(w_norm))


def _lamb_loop(params, grads, ms, vs, group) -> None:
    """Reference implementation, one parameter at a time, line for line with the official code."""
    (b1, b2), eps, wd, lr = group["betas"], group["eps"], group["weight_decay"], group["lr"]
    for w, g, m, v in zip(params, grads, ms, vs):
        m.mul_(b1).add_(g, alpha=1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        u = m / (v.sqrt() + eps)
        if wd > 0:
            u.add_(w, alpha=wd)
        if group["adapt"]:
            u.mul_(_trust_ratio(torch.linalg.vector_norm(w), torch.linalg.vector_norm(u)))
        w.add_(u, alpha=-lr)


def _lamb_foreach(params, grads, ms, vs, group) -> None:
    """The same arithmetic as ``_lamb_loop`` with multi-tensor kernels (a few launches per group)."""
    (b1, b2), eps, wd, lr = group["betas"], group["eps"], group["weight_decay"], group["lr"]
    torch._foreach_mul_(ms, b1)
    torch._foreach_add_(ms, grads, alpha=1 - b1)
    torch._foreach_mul_(vs, b2)
    torch._foreach_addcmul_(vs, grads, grads, value=1 - b2)
    denom = torch._foreach_sqrt(vs)
    torch._foreach_add_(denom, eps)
    u = torch._foreach_div(ms, denom)
    del denom
    if wd > 0:
        torch._foreach_add_(u, params, alpha=wd)
    if group["adapt"]:
        w_norms = torch.stack(torch._foreach_norm(params))
        u_norms = torch.stack(torch._foreach_norm(u))
        torch._foreach_mul_(u, list(_trust_ratio(w_norms, u_norms).unbind()))
    torch._foreach_add_(params, u, alpha=-lr)


def is_excluded(name: str, param: torch.Tensor) -> bool:
    """Whether a parameter skips weight decay and the trust ratio.

    Rule: a parameter is excluded when it is at most 1-D, or when its name has a "bias" or a
    "norm" part. The official code excludes by the regexes ["LayerNorm", "layer_norm", "bias"]
    on TF variable names, which in ALBERT picks out exactly the 1-D tensors: every LayerNorm
    gamma/beta, every dense bias, and the MLM output bias ``cls/predictions/output_bias`` (here
    ``mlm.bias``, excluded too — it is a bias, and the official regex matches it). Embedding tables
    and all weight matrices (2-D) are decayed and adapted. The name test guards modules whose
    norm/bias tensors are not 1-D.

    Args:
        name: dotted name from ``named_parameters``.
        param: the tensor.

    Returns:
        True for no-decay / no-adaptation parameters.
    """
    parts = name.lower().split(".")
    return param.ndim <= 1 or any("bias" in s or "norm" in s for s in parts)


def param_groups(model: nn.Module, weight_decay: float = 0.01) -> list[dict]:
    """Split a model's trainable parameters into the decayed group and the excluded group.

    ``named_parameters`` yields each tensor once, so a shared parameter (ALBERT's shared layer,
    the word table tied to the MLM decoder, a module reused twice) is counted once. Frozen
    parameters (requires_grad False) are left out. Empty groups are dropped.

    Args:
        model: any nn.Module.
        weight_decay: decay for the decayed group; the excluded group gets 0.

    Returns:
        Up to two group dicts: {"params", "weight_decay", "adapt": True} for matrices and
        embeddings, then {"params", "weight_decay": 0.0, "adapt": False} for norms and biases
        (see ``is_excluded``). ``adapt`` is read by ``Lamb`` and ignored by other optimizers.
    """
    decay, keep = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (keep if is_excluded(name, p) else decay).append(p)
    groups = [dict(params=decay, weight_decay=weight_decay, adapt=True),
              dict(params=keep, weight_decay=0.0, adapt=False)]
    return [g for g in groups if g["params"]]


def build_optimizer(name: OptimizerName, model: nn.Module, lr: float = PRETRAIN_LR, weight_decay: float = 0.01,
                    betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6) -> torch.optim.Optimizer:
    """Make "lamb" (official ALBERT LAMB) or "adamw" over ``param_groups(model, weight_decay)``.

    "adamw" is torch.optim.AdamW: unlike the official TF ``AdamWeightDecayOptimizer`` it applies
    bias correction and decays as w·(1 - lr·wd) before the Adam step; the groups are the same.

    Args:
        name: "lamb" or "adamw".
        model: the module whose trainable parameters are optimized.
        lr: initial learning rate (the schedule overwrites it each step).
        weight_decay: decay for matrices and embeddings; norms and biases get 0.
        betas: (β1, β2).
        eps: ε.

    Returns:
        The optimizer.
    """
    groups = param_groups(model, weight_decay)
    if name == "lamb":
        return Lamb(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    raise ConfigError(f"optimizer: unknown name {name!r}; expected one of {', '.join(OPTIMIZERS)}")


def lr_at(step: int, base_lr: float, warmup_steps: int, total_steps: int, power: float = 1.0,
          end_lr: float = 0.0) -> float:
    """The learning rate for the update made at ``step`` (0 = the first update), as the official code.

    Official ``optimization.create_optimizer``: first ``polynomial_decay(base_lr, step, total_steps,
    end_lr, power)`` = (base_lr - end_lr)·(1 - min(step, total)/total)^power + end_lr, counted
    from step 0 (not from the end of warmup); then, for step < warmup_steps, replaced by
    base_lr·step/warmup_steps. So the first update runs at lr 0, the peak base_lr·(w-1)/w is at
    step w-1, and at step w the rate is base_lr·(1 - w/total) (a small drop: 2.5% for
    3,125/125,000). After total_steps it stays at end_lr.

    Args:
        step: optimizer steps already taken (TF global_step before its increment), >= 0.
        base_lr: the peak (init) learning rate.
        warmup_steps: linear-warmup length; 0 for none.
        total_steps: the decay horizon (num_train_steps), > 0.
        power: polynomial power (1.0 = linear decay).
        end_lr: the rate at and after total_steps.

    Returns:
        The learning rate, a float.
    """
    if step < 0 or warmup_steps < 0 or total_steps <= 0:
        raise ConfigError(f"lr_at: need step >= 0, warmup_steps >= 0, total_steps > 0 "
                          f"(got {step}, {warmup_steps}, {total_steps})")
    if warmup_steps and step < warmup_steps:
        return base_lr * step / warmup_steps
    frac = 1.0 - min(step, total_steps) / total_steps
    return (base_lr - end_lr) * frac ** power + end_lr


def scaled_lr(batch_size: int, base_lr: float = PRETRAIN_LR, base_batch: int = PRETRAIN_BATCH,
              rule: str = "sqrt") -> float:
    """Default learning rate for a batch other than the paper's 4096.

    "sqrt" (default): base_lr·√(batch/base_batch), the square-root scaling the LAMB paper
    (You et al. 2020) uses to move between batch sizes, since the gradient noise scales as
    1/√batch. "linear": base_lr·batch/base_batch (Goyal et al. 2017), usually too small for LAMB
    at small batches. E.g. batch 256: sqrt gives 0.00044, linear 0.00011.

    Args:
        batch_size: global batch size (sequences per optimizer step), > 0.
        base_lr: learning rate at ``base_batch``.
        base_batch: reference batch size.
        rule: "sqrt" or "linear".

    Returns:
        The scaled learning rate.
    """
    if batch_size <= 0 or base_batch <= 0:
        raise ConfigError(f"scaled_lr: batch sizes must be > 0 (got {batch_size}, {base_batch})")
    ratio = batch_size / base_batch
    if rule == "sqrt":
        return base_lr * math.sqrt(ratio)
    if rule == "linear":
        return base_lr * ratio
    raise ConfigError(f"scaled_lr: unknown rule {rule!r}; expected 'sqrt' or 'linear'")
