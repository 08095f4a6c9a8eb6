"""Everything applied to a plain model from outside, in one documented order (torchtitan's rule):

    1. activation checkpointing of the encoder blocks   (`apply_activation_checkpointing`)
    2. torch.compile                                     (`maybe_compile`)
    3. data parallelism: DDP, or FSDP2 `fully_shard`     (`wrap_data_parallel`)

Precision is applied per step by the training loop (autocast). This is also the only module below
train/ that touches torch.distributed: the run context (`DistContext`) comes from torchrun's
environment variables, which the CLI passes in.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in a (possibly single-process) data-parallel run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def resolve_device(device: str | torch.device, local_rank: int = 0) -> torch.device:
    """The torch device a `--device` value names: "auto" is this process's GPU when CUDA is
    available, else the CPU; "cuda" is this process's GPU; anything else is taken as given."""
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(f"cuda:{local_rank}") if device == "cuda" else torch.device(device)


def init_distributed(env: dict[str, str], device: str = "auto") -> DistContext:
    """Start the process group when launched by torchrun (WORLD_SIZE > 1 in `env`).

    Args:
        env: the launcher's environment (the CLI passes os.environ).
        device: "auto" (CUDA when available), "cpu" or "cuda".
    Returns:
        The DistContext; gloo backend on CPU, nccl on CUDA.
    """
    world = int(env.get("WORLD_SIZE", "1"))
    rank = int(env.get("RANK", "0"))
    local = int(env.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local)
    use_cuda = dev.type == "cuda"
    if use_cuda:
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(minutes=30))
    return DistContext(rank=rank, world_size=world, local_rank=local, device=dev)


def shutdown() -> None:
    """Leave the process group; every rank first waits for the others, so none tears gloo's
    threads down while a peer still talks to it (that aborted a rank at exit now and then)."""
    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()


def all_reduce_sum(values: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """Sum a small tensor over all ranks (identity in a single process)."""
    if ctx.distributed:
        values = values.clone()
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def barrier(ctx: DistContext) -> None:
    if ctx.distributed:
        dist.barrier()


def all_gather_object(obj, ctx: DistContext) -> list:
    """Every rank's Python object, as a list indexed by rank."""
    if not ctx.distributed:
        return [obj]
    out = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


# ---------------------------------------------------------------------------- model transforms
def apply_activation_checkpointing(model: nn.Module) -> int:
    """Recompute every attention and FFN block in the backward pass instead of storing activations.

    Each block of the encoder's pools is replaced by torch's `checkpoint_wrapper` around it (the
    wrapper torchtitan applies), so a shared block applied L times stores only its inputs.
    State-dict keys do not change (the wrapper's hooks drop its prefix); parameter names gain
    `_checkpoint_wrapped_module.`. (transformers refuses gradient checkpointing for ALBERT; the
    paper's shared layers make it most useful, since activations, not parameters, dominate memory.)

    Returns:
        The number of blocks wrapped (0 when they already are).
    """
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (CheckpointImpl, CheckpointWrapper,
                                                                             checkpoint_wrapper)

    from albertlm.model import Encoder  # transforms know the model; the model knows no transforms

    wrapped = 0
    for encoder in [m for m in model.modules() if isinstance(m, Encoder)]:  # listed first: the loop edits the tree
        for pool in (encoder.attention, encoder.ffn):
            for i, block in enumerate(pool):
                if not isinstance(block, CheckpointWrapper):
                    pool[i] = checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
                    wrapped += 1
    return wrapped


def maybe_compile(model: nn.Module, enabled: bool) -> nn.Module:
    """torch.compile the model when asked (dynamic shapes: batches vary in length)."""
    return torch.compile(model, dynamic=True) if enabled else model


def wrap_data_parallel(model: nn.Module, ctx: DistContext, strategy: str = "ddp") -> nn.Module:
    """Wrap for data-parallel training; a no-op in a single process.

    Args:
        strategy: "ddp" (DistributedDataParallel: every rank holds the full model and all-reduces
            gradients) or "fsdp" (FSDP2 `fully_shard`: parameters, gradients and optimizer state
            sharded across ranks; for the large presets).
    """
    if not ctx.distributed:
        return model
    if strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        from albertlm.model import Encoder

        for module in model.modules():  # each distinct block its own unit (a shared one once), then the root
            if isinstance(module, Encoder):
                for block in {id(b): b for b in [*module.attention, *module.ffn]}.values():
                    fully_shard(block)
        fully_shard(model)
        return model
    if strategy != "ddp":
        raise ValueError(f"unknown data-parallel strategy {strategy!r}")
    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    # Shared blocks and the tied word table are used several times per step. Plain DDP waits for
    # each parameter's accumulated gradient; static_graph=True does NOT give the right sums for
    # them (measured: a 16% larger gradient norm than one process), so it stays off.
    return nn.parallel.DistributedDataParallel(model, device_ids=ids)


def gather_full_state(model: nn.Module, optimizer: torch.optim.Optimizer, ctx: DistContext,
                      strategy: str) -> tuple[dict | None, dict | None]:
    """Full (unsharded) model and optimizer state dicts for saving; call on EVERY rank.

    With FSDP the parameters are sharded DTensors: gathering them is a collective, so every rank
    must take part, and only rank 0 receives the tensors (on the CPU). Without FSDP it returns
    (None, None): each object's own state_dict() is already complete.
    """
    if strategy != "fsdp" or not ctx.distributed:
        return None, None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    model_sd, optim_sd = get_state_dict(model, optimizer,
                                        options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return (model_sd, optim_sd) if ctx.is_main else (None, None)


def load_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict, ctx: DistContext,
                         strategy: str) -> None:
    """Restore an optimizer from a saved full state dict (FSDP: re-sharded onto this rank)."""
    if strategy != "fsdp" or not ctx.distributed:
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))


def gradient_bytes(model: nn.Module) -> int:
    """Bytes of gradient a data-parallel step all-reduces: every trainable parameter once."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)

