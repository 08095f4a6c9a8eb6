"""Full training state on disk: atomic save, exact resume, keep-last-N and best-by-metric.

A run directory holds

    checkpoints/step-00001000/     one complete checkpoint:
        config.json, model.safetensors   the model, in the Hugging Face layout (interop/hf.py)
        rtd_training.safetensors          token_objective rtd only: the generator and heads that are not the model (train/rtd.py)
        optimizer.pt                      optimizer state (tensors + plain Python, read with weights_only=True)
        trainer.json                      step, the tracked metric, and the caller's state (pretraining: data cursors, tokens seen, time)
        rng.pt                            torch CPU (and CUDA) RNG states of every rank
        checksums.json                    the sha256 of every other file of the checkpoint
    checkpoints/latest             a text file naming the newest complete checkpoint
    checkpoints/best               a text file naming the best checkpoint by the chosen metric

A checkpoint is written into a temporary directory and renamed into place in one step, then
`latest` is replaced atomically: a kill at any moment leaves the previous checkpoint intact.
safetensors carries no checksum of its own (a flipped data byte loads silently), so every file's
sha256 is recorded and `resume_checkpoint` verifies it; a checkpoint that is missing, incomplete
or fails verification is skipped, with a notice, for the newest one before it that passes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from albertlm.errors import AlbertlmError
from albertlm.utils import atomic_write_text, crash_point, sha256_file

CHECKPOINT_DIR = "checkpoints"
CHECKSUMS = "checksums.json"
REQUIRED = ("config.json", "model.safetensors", "trainer.json")


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model under DDP / torch.compile wrappers."""
    while True:
        if hasattr(model, "module") and isinstance(model.module, nn.Module):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def assert_finite_weights(model: nn.Module, step: int) -> None:
    """Stop with one line when any weight is NaN or infinite, before it can be saved as a result."""
    bad = [name.replace("._checkpoint_wrapped_module", "")  # the state-dict name, as saved
           for name, p in unwrap(model).named_parameters() if not bool(torch.isfinite(p).all())]
    if bad:
        raise AlbertlmError(f"step {step}: the weights became non-finite ({len(bad)} tensor(s), first {bad[0]}); "
                            "nothing from this step on was saved as a result; lower the learning rate, use fp32, "
                            "or resume from the last checkpoint")


def rng_state() -> dict[str, Any]:
    """torch's global RNG states (dropout draws from them)."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(run_dir: str | os.PathLike, step: int, model: nn.Module,
                    optimizer: torch.optim.Optimizer | None, trainer_state: dict[str, Any],
                    keep_last: int = 3, metric: float | None = None, higher_is_better: bool = True,
                    model_state: dict[str, Any] | None = None, optimizer_state: dict[str, Any] | None = None,
                    rng_states: list[dict[str, Any]] | None = None) -> Path:
    """Write a complete checkpoint atomically and prune old ones.

    Args:
        run_dir: the run directory; checkpoints go to run_dir/checkpoints/step-XXXXXXXX.
        step: optimizer steps taken.
        model: the model (wrappers are removed); saved with `save_pretrained`.
        optimizer: saved as its state_dict, or None.
        trainer_state: JSON-serialisable state of the caller (pretraining: data cursors, tokens seen, elapsed time).
        keep_last: how many recent checkpoints to keep (the best one is always kept).
        metric: value used to track the best checkpoint (e.g. held-out MLM accuracy).
        higher_is_better: direction of `metric`.
        model_state, optimizer_state: full state dicts to save instead of the objects' own
            (FSDP: gathered on every rank with `distributed.gather_full_state`).
        rng_states: every rank's `rng_state()`, indexed by rank (default: this process's alone), so
            that each rank resumes its own dropout stream.
    Returns:
        The checkpoint directory.
    """
    root = Path(run_dir) / CHECKPOINT_DIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:08d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".step-{step:08d}.", dir=root))
    try:
        unwrap(model).save_pretrained(tmp, state_dict=model_state)
        if optimizer_state is not None or optimizer is not None:
            torch.save(optimizer_state if optimizer_state is not None else optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save({"ranks": rng_states if rng_states is not None else [rng_state()]}, tmp / "rng.pt")
        state = dict(trainer_state, step=step, metric=metric)
        (tmp / "trainer.json").write_text(json.dumps(state, indent=2, sort_keys=True))
        sums = {f.name: sha256_file(f) for f in sorted(tmp.iterdir()) if f.is_file()}
        (tmp / CHECKSUMS).write_text(json.dumps(sums, indent=1, sort_keys=True))
        for f in tmp.iterdir():  # make the content durable before it becomes visible
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        crash_point("checkpoint:written")
        if final.exists():  # a re-save of the same step (e.g. after resume) replaces it whole
            shutil.rmtree(final)
        os.rename(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    crash_point("checkpoint:renamed")
    atomic_write_text(root / "latest", final.name + "\n")
    crash_point("checkpoint:latest")
    if metric is not None:
        best = best_checkpoint(run_dir)
        best_metric = _read_state(best).get("metric") if best else None
        if best_metric is None or (metric > best_metric if higher_is_better else metric < best_metric):
            atomic_write_text(root / "best", final.name + "\n")
    _prune(root, keep_last)
    crash_point("checkpoint:pruned")
    return final


def verify_checkpoint(ckpt: Path) -> str | None:
    """None when the checkpoint is complete and every recorded checksum matches; else why not."""
    missing = [f for f in REQUIRED if not (ckpt / f).is_file()]
    if missing:
        return f"incomplete (no {', '.join(missing)})"
    if not (ckpt / CHECKSUMS).is_file():
        return None  # written before checksums were recorded: nothing to verify against
    try:
        sums = json.loads((ckpt / CHECKSUMS).read_text())
    except (OSError, ValueError):
        return f"{CHECKSUMS} is unreadable"
    if not isinstance(sums, dict):
        return f"{CHECKSUMS} is not a mapping"
    for name, expected in sorted(sums.items()):
        if "/" in name or name.startswith("."):
            return f"{CHECKSUMS} names an invalid file {name!r}"
        path = ckpt / name
        if not path.is_file():
            return f"{name} is missing"
        if sha256_file(path) != expected:
            return f"{name} fails its sha256 check (the file changed after it was written)"
    return None


def resume_checkpoint(run_dir: str | os.PathLike, notice: Callable[[str], None] = print) -> Path | None:
    """The checkpoint to resume from: `latest` when it is complete and verified, otherwise the
    newest earlier one that is, with a notice naming what was skipped and why; None if none is."""
    root = Path(run_dir) / CHECKPOINT_DIR
    if not root.is_dir():
        return None
    pointer = _pointer(root, "latest")
    candidates = sorted((p for p in root.glob("step-*") if p.is_dir()), reverse=True)
    if pointer is not None:
        named = root / pointer
        if "/" in pointer or pointer.startswith(".") or not named.is_dir():
            notice(f"{root / 'latest'} names {pointer!r}, which is not a checkpoint here; looking for the newest "
                   "complete one")
        else:
            candidates = [named] + [p for p in candidates if p.name < named.name]
    elif candidates:
        notice(f"{root / 'latest'} is missing or empty; looking for the newest complete checkpoint")
    for ckpt in candidates:
        problem = verify_checkpoint(ckpt)
        if problem is None:
            return ckpt
        notice(f"{ckpt}: {problem}; skipping it")
    return None


def remove_stale_temporaries(run_dir: str | os.PathLike) -> list[Path]:
    """Delete what a killed save leaves behind (temporary files and checkpoint directories); the paths."""
    run_dir = Path(run_dir)
    root = run_dir / CHECKPOINT_DIR
    stale = [*root.glob(".step-*"), *root.glob(".latest.*.tmp"), *root.glob(".best.*.tmp"),
             *(run_dir / "model").glob(".*.tmp"), *run_dir.glob(".summary.json.*.tmp")]
    for path in stale:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return stale


def _prune(root: Path, keep_last: int) -> None:
    steps = sorted(p for p in root.glob("step-*") if p.is_dir())
    protected = {_pointer(root, "latest"), _pointer(root, "best")}
    for old in steps[:-keep_last] if keep_last > 0 else []:
        if old.name not in protected:
            shutil.rmtree(old, ignore_errors=True)
    for stale in root.glob(".step-*"):  # temporaries of a killed save
        shutil.rmtree(stale, ignore_errors=True)


def _pointer(root: Path, name: str) -> str | None:
    try:
        return (root / name).read_text().strip() or None
    except FileNotFoundError:
        return None


def _resolve(root: Path, name: str) -> Path | None:
    target = _pointer(root, name)
    if target is None:
        return None
    if "/" in target or target.startswith("."):
        raise AlbertlmError(f"{root / name}: invalid checkpoint pointer {target!r}")
    path = root / target
    return path if path.is_dir() else None


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    return _resolve(Path(run_dir) / CHECKPOINT_DIR, "latest")


def best_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The best checkpoint by the tracked metric, or None."""
    return _resolve(Path(run_dir) / CHECKPOINT_DIR, "best")


def _read_state(ckpt: Path) -> dict[str, Any]:
    try:
        return json.loads((ckpt / "trainer.json").read_text())
    except FileNotFoundError:
        raise AlbertlmError(f"{ckpt}: not a training checkpoint (no trainer.json)") from None
    except json.JSONDecodeError as exc:
        raise AlbertlmError(f"{ckpt / 'trainer.json'}: invalid JSON at line {exc.lineno}") from None


def load_checkpoint(ckpt: str | os.PathLike, model: nn.Module,
                    optimizer: torch.optim.Optimizer | None = None, restore_rng: bool = True,
                    rank: int = 0) -> dict[str, Any]:
    """Restore model (and optimizer, this rank's RNG) in place from a checkpoint directory.

    Returns:
        The trainer state saved with it (step, data cursor, ...).
    """
    ckpt = Path(ckpt)
    state = _read_state(ckpt)
    unwrap(model).load_state_from(ckpt)  # the counterpart of the save_pretrained that wrote it
    if optimizer is not None:
        optimizer.load_state_dict(read_optimizer_state(ckpt))
    if restore_rng and (ckpt / "rng.pt").exists():
        saved = torch.load(ckpt / "rng.pt", map_location="cpu", weights_only=True)
        if "ranks" not in saved:  # written before every rank's state was kept: rank 0's
            saved = {"ranks": [saved]}
        if rank >= len(saved["ranks"]):
            raise AlbertlmError(f"{ckpt / 'rng.pt'}: holds the RNG states of {len(saved['ranks'])} rank(s), not of "
                                f"rank {rank}; resume with the same number of processes")
        set_rng_state(saved["ranks"][rank])
    return state


def read_optimizer_state(ckpt: str | os.PathLike) -> dict[str, Any]:
    """A checkpoint's optimizer state dict (tensors and plain Python only: weights_only=True)."""
    path = Path(ckpt) / "optimizer.pt"
    if not path.exists():
        raise AlbertlmError(f"{ckpt}: has no optimizer.pt; cannot resume training exactly")
    return torch.load(path, map_location="cpu", weights_only=True)
