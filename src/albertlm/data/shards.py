"""On-disk instance shards: one self-describing file per shard, memory-mapped for reading.

File layout (format version 1), little-endian:

    bytes 0..7    magic b"ALBSHARD"
    bytes 8..11   uint32 format version
    bytes 12..19  uint64 length n of the JSON header
    bytes 20..    JSON header (UTF-8), then zero padding to a 64-byte boundary
    then          the arrays named in the header, each starting on a 64-byte boundary

The header holds {"version", "num_examples", "arrays": {name: {"dtype", "shape", "offset"}},
"meta": {...}}. Offsets are from the start of the file. Variable-length fields are stored CSR
style: a flat array plus an int64 `*_offsets` array of num_examples + 1 entries.

Fields written by the data build (see data/build.py):
    tokens, tokens_offsets       input ids of every example (already masked when masking is static)
    word_start                   uint8, 1 where a whole word starts (drives dynamic masking)
    segment_a                    uint16, tokens of type 0 ([CLS] A [SEP]); the rest is type 1
    sentence_order_label         uint8, 0 in order / 1 swapped (SOP) or random B (NSP)
    is_short                     uint8, 1 when the example drew a short target length
    mlm_positions, mlm_labels, mlm_offsets   static masks only: predicted positions and targets
    ngram                        static masks only: uint8 n of every masked span (statistics)
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.utils import atomic_path

MAGIC = b"ALBSHARD"
VERSION = 1
_ALIGN = 64
_PREFIX = struct.Struct("<8sIQ")
MAX_HEADER_BYTES = 16 << 20  # a header is a few KB; refuse absurd sizes from corrupt files


def _pad(n: int) -> int:
    return (-n) % _ALIGN


def write_shard(path: str | os.PathLike, arrays: dict[str, np.ndarray], num_examples: int,
                meta: dict[str, Any] | None = None) -> None:
    """Write one shard atomically.

    Args:
        path: destination file.
        arrays: name -> 1-D (or n-D) numpy array; written contiguous, in the given order.
        num_examples: examples in the shard (validated against every `*_offsets` array).
        meta: free-form JSON-serialisable metadata stored in the header.
    """
    table: dict[str, dict[str, Any]] = {}
    arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    for name, arr in arrays.items():
        if name.endswith("_offsets") and len(arr) != num_examples + 1:
            raise ValueError(f"{name}: {len(arr)} offsets for {num_examples} examples")
        table[name] = {"dtype": arr.dtype.str, "shape": list(arr.shape), "offset": 0}
    # Offsets depend on the header length, which depends on the offsets' digits: iterate to a fixpoint.
    header = b""
    for _ in range(4):
        start = _PREFIX.size + len(header)
        pos = start + _pad(start)
        for name, arr in arrays.items():
            table[name]["offset"] = pos
            pos += arr.nbytes + _pad(arr.nbytes)
        new = json.dumps({"version": VERSION, "num_examples": num_examples, "arrays": table,
                          "meta": meta or {}}, sort_keys=True).encode()
        if new == header:
            break
        header = new
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(_PREFIX.pack(MAGIC, VERSION, len(header)))
        fh.write(header)
        fh.write(b"\0" * _pad(fh.tell()))
        for name, arr in arrays.items():
            assert fh.tell() == table[name]["offset"]
            fh.write(arr.tobytes())
            fh.write(b"\0" * _pad(arr.nbytes))


class Shard:
    """A read-only, memory-mapped shard. Arrays are numpy memmaps; nothing is read eagerly."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            size = self.path.stat().st_size
            with open(self.path, "rb") as fh:
                prefix = fh.read(_PREFIX.size)
                if len(prefix) < _PREFIX.size:
                    raise AlbertlmError(f"{self.path}: truncated shard (no header)")
                magic, version, hlen = _PREFIX.unpack(prefix)
                if magic != MAGIC:
                    raise AlbertlmError(f"{self.path}: not an albertlm shard (bad magic)")
                if version != VERSION:
                    raise AlbertlmError(f"{self.path}: shard format version {version}, this albertlm reads "
                                        f"version {VERSION}; rebuild the data with `albertlm data build`")
                if hlen > min(MAX_HEADER_BYTES, size):
                    raise AlbertlmError(f"{self.path}: corrupt shard header length {hlen}")
                header = json.loads(fh.read(hlen))
        except FileNotFoundError:
            raise AlbertlmError(f"{self.path}: no such shard") from None
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise AlbertlmError(f"{self.path}: corrupt shard header") from None
        self.num_examples = int(header["num_examples"])
        self.meta: dict[str, Any] = header.get("meta", {})
        self.arrays: dict[str, np.ndarray] = {}
        # One mapping of the whole file, the arrays views into it: each mapping holds a file
        # descriptor, and a loader keeps hundreds of shards open (one per array would be 6-8 each).
        whole = np.memmap(self.path, dtype=np.uint8, mode="r")
        for name, spec in header["arrays"].items():
            dtype, shape, offset = np.dtype(spec["dtype"]), tuple(spec["shape"]), int(spec["offset"])
            nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
            if offset < 0 or offset + nbytes > size:
                raise AlbertlmError(f"{self.path}: array {name!r} lies outside the file (truncated shard?)")
            self.arrays[name] = (whole[offset:offset + nbytes].view(dtype).reshape(shape)
                                 if nbytes else np.zeros(shape, dtype))
        for name, arr in self.arrays.items():
            if name.endswith("_offsets") and len(arr) != self.num_examples + 1:
                raise AlbertlmError(f"{self.path}: {name} has {len(arr)} entries for {self.num_examples} examples")

    def __len__(self) -> int:
        return self.num_examples

    def __contains__(self, name: str) -> bool:
        return name in self.arrays

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def row(self, name: str, i: int, offsets: str | None = None) -> np.ndarray:
        """The i-th example's slice of a CSR field (`offsets` defaults to `<name>_offsets`)."""
        off = self.arrays[offsets or f"{name}_offsets"]
        return np.asarray(self.arrays[name][off[i]:off[i + 1]])


def list_shards(directory: str | os.PathLike, split: str = "train") -> list[Path]:
    """The shard files of one split in a data directory, in order."""
    directory = Path(directory)
    if not directory.is_dir():
        raise AlbertlmError(f"{directory}: no such data directory")
    shards = sorted(directory.glob(f"{split}-*.shard"))
    if not shards:
        raise AlbertlmError(f"{directory}: no {split}-*.shard files (build them with `albertlm data build`)")
    return shards
