"""Output directories and files: claimed, locked, never someone else's, never one of the inputs.

Every command that writes a directory (finetune, distill, report, tokenizer train, convert) follows
the rules pretrain's run directories follow (`rundir.py`):

  - it writes a marker (`.albertlm-out`, JSON naming the command) into the directory it creates;
  - it refuses a directory that holds anything it would not write itself: an unmarked directory
    must be empty, a marked one may hold only the names its command writes (so a user's notes,
    a pretraining run's records or another command's outputs are never replaced), and a directory
    marked by another command is refused;
  - it holds an OS lock (`.albertlm-lock`, `rundir.RunLock`) while it writes, so a second command
    writing the same directory fails at once and the first keeps every record;
  - no output path is one of the command's inputs, compared after resolving symlinks.
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from albertlm.errors import AlbertlmError
from albertlm.rundir import LOCK, MARKER, OWNER, RunLock, remove_entries_but
from albertlm.utils import atomic_write_text

OUT_MARKER = ".albertlm-out"
"""The marker of a directory an albertlm command (other than pretrain) created."""

_OURS = {OUT_MARKER, LOCK, OWNER}

MODEL_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json", "model-*-of-*.safetensors",
               "spiece.model", "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
               "exit_heads.safetensors")
"""The names a model directory holds (albertlm's save_pretrained and the tokenizers' save)."""

FINETUNE_FILES = MODEL_FILES + ("recipe.json", "results.json", "metrics.jsonl", "tensorboard", "predictions_*",
                                "teacher_logits*")
"""What finetune and distill write into --out."""


def _foreign(path: Path, allowed: tuple[str, ...]) -> list[str]:
    """Names in `path` that match none of the `allowed` patterns (the marker, lock and our temporaries excepted)."""
    foreign = []
    for entry in path.iterdir():
        name = entry.name
        if name in _OURS or any(fnmatch.fnmatchcase(name, p) for p in allowed) or _is_our_temporary(name, allowed):
            continue
        foreign.append(name)
    return sorted(foreign)


def _is_our_temporary(name: str, allowed: tuple[str, ...]) -> bool:
    """`.NAME.xxxx.tmp`: a temporary of the atomic writer for one of our own names (a killed write)."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return False
    stem = name[1:].rsplit(".", 2)[0]
    return any(fnmatch.fnmatchcase(stem, pattern) for pattern in allowed)


def _name_some(names: list[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


Inputs = Mapping[str, "str | os.PathLike | None"] | Iterable[tuple[str, "str | os.PathLike | None"]]
"""A command's inputs: {flag: path}, or (flag, path) pairs where one flag names several files."""


def check_not_input(out: str | os.PathLike, flag: str, inputs: Inputs) -> None:
    """Refuse (one line) an output path that is, or would write over, one of the command's inputs.

    Args:
        out: the output file or directory.
        flag: its flag or argument name, for the message.
        inputs: (flag, path) of every file or directory the command reads (a dict or pairs).
    Raises:
        AlbertlmError: `out` resolves to an input, to an existing file inside an input directory (a
            new file, or a directory, inside one is fine), or to a directory that holds an input.
    """
    target = Path(out).resolve()
    for in_flag, path in (inputs.items() if isinstance(inputs, Mapping) else inputs):
        if path is None:
            continue
        source = Path(path).resolve()
        inside = source.is_dir() and source in target.parents and os.path.lexists(target) and not target.is_dir()
        holds = target in source.parents
        if target == source or inside or holds:
            what = "is" if target == source else ("is a file of" if inside else "holds")
            raise AlbertlmError(f"{flag} {out} {what} the {in_flag} input {path}: the command would overwrite "
                                "its own input; choose another output path")


class OutputDir:
    """A directory one command writes: checked at once, then claimed and locked while it is written.

    Usage: `out = OutputDir(path, "finetune", allowed=FINETUNE_FILES, inputs={...})` checks the path
    and writes nothing (so every other setting can be validated first); `with out.claim():` creates
    and marks the directory and holds its lock until the block ends.

    Args:
        path: the directory.
        command: the command's name, recorded in the marker ("finetune", "report", ...).
        allowed: name patterns (fnmatch) the command writes there; a marked directory may hold only these.
        flag: the flag naming the directory, for messages.
        inputs: the command's inputs (check_not_input).
    """

    def __init__(self, path: str | os.PathLike, command: str, allowed: Iterable[str], *, flag: str = "--out",
                 inputs: Inputs = ()):
        self.path = Path(path)
        self.command = command
        self.allowed = tuple(allowed)
        self.flag = flag
        self.inputs = list(inputs.items() if isinstance(inputs, Mapping) else inputs)
        self.check()

    def check(self) -> None:
        """Refuse (one line) a path that is not a directory, is an input, or holds someone else's files."""
        path, flag = self.path, self.flag
        if path.is_symlink() and not path.exists():
            raise AlbertlmError(f"{flag} {path}: a link to nothing ({os.readlink(path)}); remove it or choose "
                                f"another {flag}")
        if path.exists() and not path.is_dir():
            raise AlbertlmError(f"{flag} {path}: exists and is not a directory")
        check_not_input(path, flag, self.inputs)
        if not path.exists():
            return
        owner = self.owner()
        if owner is None and (path / MARKER).is_file():
            raise AlbertlmError(f"{flag} {path}: is an albertlm pretrain run directory; {self.command} would "
                                f"replace its records: choose another {flag}")
        if owner is not None and owner != self.command:
            raise AlbertlmError(f"{flag} {path}: was written by albertlm {owner}, not {self.command}; choose "
                                f"another {flag}")
        allowed = self.allowed if owner is not None else ()
        foreign = _foreign(path, allowed)
        if foreign:
            why = ("holds files albertlm did not write" if owner is None
                   else f"holds files albertlm {self.command} did not write")
            raise AlbertlmError(f"{flag} {path}: exists and {why} ({_name_some(foreign)}); nothing was "
                                f"changed: choose another {flag} (an empty or new directory)")

    def owner(self) -> str | None:
        """The command recorded in the directory's marker, or None when it has none."""
        marker = self.path / OUT_MARKER
        if not marker.is_file():
            return None
        try:
            record = json.loads(marker.read_text(encoding="utf-8"))
            return str(record["command"])
        except (OSError, ValueError, KeyError, TypeError):
            raise AlbertlmError(f"{marker}: not a marker albertlm wrote (unreadable); choose another "
                                f"{self.flag}") from None

    def claim(self) -> RunLock:
        """Create and mark the directory, take its lock and check it again under the lock.

        Returns the held lock as a context manager; the lock is released when the block ends.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        lock = RunLock(self.path, hint=f"choose another {self.flag}")
        lock.__enter__()
        try:
            self.check()
            marker = self.path / OUT_MARKER
            if not marker.exists():
                atomic_write_text(marker, json.dumps({
                    "command": self.command, "created_by": f"albertlm {self.command}",
                    "created": _dt.datetime.now().isoformat(timespec="seconds")}) + "\n")
        except BaseException:
            lock.__exit__(None, None, None)
            raise
        return _Held(lock)

    def empty(self) -> list[str]:
        """Remove an earlier output from the claimed directory, so a run that starts over never mixes its
        files with the earlier run's. Only for a directory this process has claimed (under its lock, where
        `check()` found nothing but this command's own names); the marker and the lock stay, a link is
        removed without touching what it points to.

        Returns:
            The names removed, sorted.
        """
        return remove_entries_but(self.path, _OURS)


class _Held:
    """A lock already taken, as a context manager that releases it."""

    def __init__(self, lock: RunLock):
        self.lock = lock

    def __enter__(self) -> RunLock:
        return self.lock

    def __exit__(self, *exc) -> None:
        self.lock.__exit__(*exc)
