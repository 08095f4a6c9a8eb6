"""Small shared helpers: atomic file writes."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path` in one rename.

    A crash at any moment leaves either the old file or the new one, never a torn file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write a text file atomically (UTF-8)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write a binary file atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def check_field_types(obj) -> None:
    """Every field of a dataclass instance holds a value of its declared type, and floats are finite.

    int fields take ints (not bools or strings), float fields ints or finite floats; None is accepted
    where the type allows it. Raises AlbertlmError naming the field.
    """
    import dataclasses
    import math
    import types
    import typing

    from albertlm.errors import AlbertlmError

    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        hint, value = hints[f.name], getattr(obj, f.name)
        args = typing.get_args(hint)
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            if value is None and type(None) in args:
                continue
            rest = [a for a in args if a is not type(None)]
            hint = rest[0] if len(rest) == 1 else None
        if hint is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            if not ok:
                raise AlbertlmError(f"{f.name} must be a finite number, got {value!r}")
        elif hint is int and (not isinstance(value, int) or isinstance(value, bool)):
            raise AlbertlmError(f"{f.name} must be an integer, got {value!r}")


def sha256_file(path: str | os.PathLike) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


CRASH_ENV = "ALBERTLM_CRASH_AT"
"""Fault injection for the kill tests: a process whose environment names a crash point dies there."""


def crash_point(name: str) -> None:
    """Exit at once, as a SIGKILL would, when the environment names this point (tests only)."""
    if os.environ.get(CRASH_ENV) == name:
        os._exit(137)


def check_finite(tensor, name: str, source: str, what: str = "tensor") -> None:
    """Refuse a loaded floating-point tensor that holds NaN or infinity; tensors of other dtypes pass.

    One `torch.isfinite` pass per tensor, cheap beside reading the file. Every loader of weights
    (safetensors, TF checkpoints, exit heads) calls this, so a corrupt file never reaches a model.

    Args:
        tensor: a torch tensor.
        name: its name in the file.
        source: the file the message cites.
        what: how the file's format calls its entries ("tensor", "variable").
    Raises:
        AlbertlmError: naming the file, the tensor and how many values are not finite.
    """
    import torch

    from albertlm.errors import AlbertlmError

    if not (tensor.is_floating_point() or tensor.is_complex()):
        return
    finite = torch.isfinite(tensor)
    if not bool(finite.all()):
        bad = tensor.numel() - int(finite.sum())
        raise AlbertlmError(f"{source}: {what} {name} holds {bad} NaN or infinite values (of {tensor.numel()}); "
                            "refusing weights no model can run on")
