"""Run directories: plain names, a marker that says albertlm made them, one run at a time.

A run directory (`<out-dir>/<name>`) holds everything one training run writes. Three rules keep
runs from destroying data:

  - the name is a plain name: no path separators, not `.` or `..`, so a run can only live
    directly under its `--out-dir`;
  - albertlm writes a marker file (`.albertlm-run`) into every run directory it creates, and
    `--restart` deletes only a directory that carries it, and only after every setting has
    been validated;
  - a lock (`.albertlm-lock`, an OS file lock through the `filelock` library) is held for the
    whole run: a second run of the same directory fails at once and names the holder.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import socket
from pathlib import Path

from albertlm.errors import AlbertlmError
from albertlm.utils import atomic_write_text

MARKER = ".albertlm-run"
LOCK = ".albertlm-lock"
OWNER = ".albertlm-lock.owner"
_MAX_NAME = 200


def validate_run_name(name: str, flag: str = "--name") -> str:
    """`name` if it is a plain directory name; otherwise a one-line error naming the flag."""
    bad = (not name or name in (".", "..") or any(c in name for c in "/\\\0") or len(name) > _MAX_NAME)
    if bad:
        raise AlbertlmError(f"{flag} {name!r}: must be a plain name (no path separators, not '.' or '..', "
                            f"at most {_MAX_NAME} characters); the run directory is <out-dir>/<name>")
    return name


def run_directory(out_dir: str | os.PathLike, name: str) -> Path:
    """<out_dir>/<name> after checking both: the name is plain, out_dir is not a file."""
    validate_run_name(name)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise AlbertlmError(f"--out-dir {out}: exists and is not a directory")
    return out / name


def is_run_directory(path: str | os.PathLike) -> bool:
    """True when albertlm created `path` as a run directory (it carries the marker)."""
    path = Path(path)
    return path.is_dir() and not path.is_symlink() and (path / MARKER).is_file()


def check_removable(run_dir: str | os.PathLike) -> None:
    """Refuse (one line) to delete a directory that albertlm did not create as a run."""
    run_dir = Path(run_dir)
    if not os.path.lexists(run_dir):
        return
    if run_dir.is_symlink() or not run_dir.is_dir():
        raise AlbertlmError(f"{run_dir}: not a directory albertlm created (a link or a file); not deleting it")
    if not (run_dir / MARKER).is_file():
        raise AlbertlmError(f"{run_dir}: not deleting it: it has no {MARKER} marker, so albertlm did not create it "
                            "as a run (remove it yourself, or choose another --name)")


def mark_run(run_dir: str | os.PathLike, command: str = "pretrain") -> None:
    """Create run_dir if needed and write its marker (kept if already there)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    marker = run_dir / MARKER
    if not marker.exists():
        atomic_write_text(marker, json.dumps({"created_by": f"albertlm {command}",
                                              "created": _dt.datetime.now().isoformat(timespec="seconds")}) + "\n")


RUN_ENTRIES = {"tokenizer", "data", "recipe.json", "checkpoints", "metrics.jsonl", "tensorboard", "model",
               "summary.json", MARKER, LOCK, OWNER}
"""What a pretraining run writes into its directory (plus data-<length>/ of a curriculum)."""


def foreign_entries(run_dir: str | os.PathLike, also: frozenset[str] = frozenset()) -> list[str]:
    """The names in `run_dir` that a pretraining run does not write (`RUN_ENTRIES`, data-<length>/,
    a summary.json temporary), nor any of `also`; sorted."""
    return sorted(e.name for e in Path(run_dir).iterdir() if e.name not in RUN_ENTRIES and e.name not in also
                  and not e.name.startswith(("data-", ".summary.json.")))


def claim_run_dir(run_dir: str | os.PathLike, command: str = "pretrain") -> None:
    """Mark run_dir as a run directory, or refuse (one line) if it holds anything albertlm did not write.

    A new or empty directory, one already marked, or one holding only what a run writes (a run
    begun before markers existed, or a tokenizer and data placed there for the run to reuse) is
    marked. Anything else is someone's data: the run refuses to write into it.
    """
    run_dir = Path(run_dir)
    if run_dir.is_symlink() or (run_dir.exists() and not run_dir.is_dir()):
        raise AlbertlmError(f"{run_dir}: exists and is not a directory")
    if not is_run_directory(run_dir) and run_dir.exists():
        foreign = foreign_entries(run_dir)
        if foreign:
            raise AlbertlmError(f"{run_dir}: exists and holds files albertlm did not write ({', '.join(foreign[:3])}"
                                f"{', ...' if len(foreign) > 3 else ''}); choose another --name or --out-dir")
    mark_run(run_dir, command)


def clear_run(run_dir: str | os.PathLike) -> None:
    """Delete everything in a marked run directory except its lock files and marker (--restart).

    The directory must carry the marker (check_removable); the lock stays held meanwhile.
    """
    run_dir = Path(run_dir)
    check_removable(run_dir)
    if run_dir.exists():
        remove_entries_but(run_dir, {MARKER, LOCK, OWNER})


def remove_entries_but(path: Path, keep: set[str]) -> list[str]:
    """Delete every entry of `path` not named in `keep` (a link itself, never what it points to).

    Only for a directory albertlm claimed and holds the lock of. Returns the names removed, sorted.
    """
    removed = []
    for entry in sorted(path.iterdir()):
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        removed.append(entry.name)
    return removed


class RunLock:
    """An exclusive, non-blocking lock on a run directory, held while the run trains.

    Use as a context manager. A second holder fails at once with the first holder's pid, host and
    start time. The lock is an OS lock: it is released when the process dies, however it dies.
    """

    def __init__(self, run_dir: str | os.PathLike, hint: str = "choose another --name"):
        from filelock import FileLock

        self.run_dir = Path(run_dir)
        self.hint = hint
        self._lock = FileLock(str(self.run_dir / LOCK), timeout=0)

    def __enter__(self) -> RunLock:
        from filelock import Timeout

        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire()
        except Timeout:
            raise AlbertlmError(f"{self.run_dir}: in use by another run ({self._holder()}); wait for it to "
                                f"finish or {self.hint}") from None
        owner = self.run_dir / OWNER
        owner.unlink(missing_ok=True)  # a link there is removed, never written through
        owner.write_text(json.dumps({
            "pid": os.getpid(), "host": socket.gethostname(),
            "started": _dt.datetime.now().isoformat(timespec="seconds")}) + "\n")
        return self

    def _holder(self) -> str:
        try:
            owner = json.loads((self.run_dir / OWNER).read_text())
            return f"pid {owner['pid']} on {owner['host']}, started {owner['started']}"
        except (OSError, ValueError, KeyError, TypeError):
            return "holder unknown"

    def __exit__(self, *exc) -> None:
        self._lock.release()
