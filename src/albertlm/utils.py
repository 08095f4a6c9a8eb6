"""Small shared helpers: atomic file and directory writes, field checks, checksums."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fsync_directory(path: str | os.PathLike) -> None:
    """Flush a directory's entries (a rename inside it) to disk; a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def os_error_naming(exc: OSError, filename: str | os.PathLike, filename2: str | os.PathLike | None = None) -> OSError:
    """The same error (its errno, message and subclass) naming `filename` (and `filename2`) instead.

    For an error raised while writing a temporary, or by a writer that names no file (the kernel's
    write() does not), so that the message names the file the user asked for. An error without an
    errno is returned as it is.
    """
    if exc.errno is None:
        return exc
    return OSError(exc.errno, exc.strerror, str(filename), None, None if filename2 is None else str(filename2))


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path` in one rename.

    A crash at any moment leaves either the old file or the new one, never a torn file. The new
    file gets the mode `open()` would give it (0666 less the umask; mkstemp's own is 0600), and the
    directory is flushed after the rename, so the new name survives a power cut too. An OSError
    creating, writing or renaming the temporary names `path` (`os_error_naming`); one naming
    another file (one the block reads) is left as it is.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a directory where a file is to be written", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp_path = Path(tmp)
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~current_umask())  # after the write: some writers replace the file
        with open(tmp_path, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, path)
        fsync_directory(path.parent)
    except OSError as exc:
        if exc.filename is not None and not str(exc.filename).startswith(str(path.parent / f".{path.name}.")):
            raise
        raise os_error_naming(exc, path) from None
    finally:
        if tmp_path is not None and tmp_path.exists():
            tmp_path.unlink()


def replace_directory(new: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Put the complete directory `new` at `dst` as a whole, replacing what `dst` held.

    A fresh `dst` is one rename. An existing one is swapped with `new` in one atomic exchange where
    the kernel offers it (Linux renameat2 RENAME_EXCHANGE), else moved aside, `new` renamed in and
    the old one removed: at no moment does `dst` hold a mix of old and new files. The old contents
    end at `new`'s path and are deleted.
    """
    import shutil

    new, dst = Path(new), Path(dst)
    if not os.path.lexists(dst):
        os.replace(new, dst)
        fsync_directory(dst.parent)
        return
    if not _exchange(new, dst):
        aside = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", suffix=".old", dir=dst.parent))
        os.rmdir(aside)
        os.replace(dst, aside)
        try:
            os.replace(new, dst)
        except BaseException:
            os.replace(aside, dst)  # the earlier directory back in place, not left under a hidden name
            raise
        new = aside
    fsync_directory(dst.parent)
    shutil.rmtree(new)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 with RENAME_EXCHANGE); False where unsupported."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write a text file atomically (UTF-8)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write a binary file atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def read_bytes(path: str | os.PathLike, kind: str = "text file", error: type[Exception] | None = None) -> bytes:
    """The bytes of a file; every way reading it can fail is one error naming it.

    Args:
        path: the file.
        kind: what the messages call it ("config file": "PATH: no such config file", "PATH: is a
            directory, not a config file").
        error: the exception class raised (default AlbertlmError).
    Returns:
        The file's bytes.
    """
    from albertlm.errors import AlbertlmError

    error = error or AlbertlmError
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise error(f"{path}: no such {kind}") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, not a {kind}") from None
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror or exc})") from None


@functools.cache
def _type_hints(cls: type) -> dict:
    """A dataclass's resolved type hints (cached: resolving them is slow and they never change)."""
    import typing

    return typing.get_type_hints(cls)


def check_field_types(obj) -> None:
    """Every field of a dataclass instance holds a value of its declared type, and floats are finite.

    int fields take ints (not bools or strings), float fields ints or finite floats, `Literal` fields
    one of their values; None is accepted where the type allows it. Raises AlbertlmError naming the field.
    """
    import dataclasses
    import math
    import types
    import typing

    from albertlm.errors import AlbertlmError

    hints = _type_hints(type(obj))
    for f in dataclasses.fields(obj):
        hint, value = hints[f.name], getattr(obj, f.name)
        args = typing.get_args(hint)
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            if value is None and type(None) in args:
                continue
            rest = [a for a in args if a is not type(None)]
            hint = rest[0] if len(rest) == 1 else None
        if typing.get_origin(hint) is typing.Literal:
            choices = typing.get_args(hint)
            if not any(value == c and type(value) is type(c) for c in choices):
                raise AlbertlmError(f"{f.name} must be one of {', '.join(map(str, choices))}, got {value!r}")
        elif hint is float:
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

    One summation pass per tensor, without allocating: a NaN or an infinity makes the sum non-finite
    (235M float32 values take about 0.1 s on one core, where `torch.isfinite(t).all()` takes 1.5 s
    and a bool tensor of the file's size). Only a sum that is not finite (a bad value, or finite
    values so large that their sum overflows) pays for the exact count. Every loader of weights
    (safetensors, pytorch_model.bin, TF checkpoints, exit heads) calls this, so a corrupt file
    never reaches a model.

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
    if tensor.is_complex():
        total = tensor.sum()
    else:  # accumulated in float32 at least: a float16 sum of finite values would overflow
        total = tensor.sum(dtype=torch.float64 if tensor.dtype == torch.float64 else torch.float32)
    if bool(torch.isfinite(total)):
        return
    finite = torch.isfinite(tensor)
    if not bool(finite.all()):
        bad = tensor.numel() - int(finite.sum())
        raise AlbertlmError(f"{source}: {what} {name} holds {bad} NaN or infinite values (of {tensor.numel()}); "
                            "refusing weights no model can run on")
