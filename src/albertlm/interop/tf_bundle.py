"""Read and write TensorFlow 1 checkpoints (tensor bundles) with numpy alone.

A checkpoint PREFIX such as `model.ckpt-1000` names `PREFIX.index` (a sorted table: the empty key
holds a BundleHeaderProto, every other key is a tensor name whose value is a BundleEntryProto
giving dtype, shape, shard, byte offset, size and a masked CRC-32C) and the shards
`PREFIX.data-00000-of-0000N` (raw little-endian tensor bytes). The format is described in
docs/checkpoints.md ("TF1 checkpoint format"); the table and protobuf layers are in
`interop/sstable.py`.

bfloat16: numpy has no bfloat16, so `read` returns bfloat16 tensors as float32 (exact: every
bfloat16 is a float32 with the low 16 mantissa bits zero) while `dtype` still reports 'bfloat16'.
`write_checkpoint` stores a float32 array as bfloat16 when asked through `dtypes`, and refuses
values that bfloat16 cannot hold exactly.

Refused, each with a one-line UnsupportedCheckpointError: big-endian bundles and compressed
index blocks when the reader opens; partitioned (sliced) variables, string and other non-numeric
tensors and unknown dtypes when such a tensor is read (the rest of the checkpoint stays readable;
`names` lists a partitioned variable once, by its full name).
Corrupt or truncated files raise TFCheckpointError naming the file and, where known, the tensor.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from albertlm.interop.sstable import (TFCheckpointError, UnsupportedCheckpointError, build_table,
                                      field_bytes, field_fixed32, field_varint, masked_crc32c,
                                      parse_message, read_table, to_signed64)
from albertlm.utils import atomic_write_bytes, atomic_write_text

__all__ = ["BundleReader", "TFCheckpointError", "UnsupportedCheckpointError", "read_checkpoint",
           "resolve_checkpoint", "write_checkpoint"]

# TensorFlow DataType enum codes (types.proto) we read -> our dtype name.
_DTYPES = {1: "float32", 2: "float64", 3: "int32", 9: "int64", 14: "bfloat16", 19: "float16"}
_CODES = {name: code for code, name in _DTYPES.items()}
# Storage format of each: bfloat16 is stored as its 16-bit pattern.
_STORAGE = {"float32": "<f4", "float64": "<f8", "int32": "<i4", "int64": "<i8", "bfloat16": "<u2",
            "float16": "<f2"}
# Codes we refuse with a reason better than "unknown".
_NAMED_CODES = {4: "DT_UINT8", 5: "DT_INT16", 6: "DT_INT8", 7: "DT_STRING", 8: "DT_COMPLEX64",
                10: "DT_BOOL", 11: "DT_QINT8", 12: "DT_QUINT8", 13: "DT_QINT32", 15: "DT_QINT16",
                16: "DT_QUINT16", 17: "DT_UINT16", 18: "DT_COMPLEX128", 20: "DT_RESOURCE",
                21: "DT_VARIANT", 22: "DT_UINT32", 23: "DT_UINT64"}
_BUNDLE_VERSION = 1  # the format version TF writes (VersionDef.producer) and reads
_DATA_RE = re.compile(r"^(.*)\.data-(\d{5})-of-(\d{5})$")
_STATE_FILE = "checkpoint"


@dataclass(frozen=True)
class _Entry:
    dtype: str
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    crc: int
    refusal: str | None  # why this tensor cannot be read (slices, strings, ...), or None


def data_filename(prefix: str | os.PathLike, shard: int, num_shards: int) -> Path:
    """The path of one data shard: PREFIX.data-SSSSS-of-NNNNN."""
    return Path(f"{os.fspath(prefix)}.data-{shard:05d}-of-{num_shards:05d}")


def index_filename(prefix: str | os.PathLike) -> Path:
    """The path of a checkpoint's index: PREFIX.index."""
    return Path(f"{os.fspath(prefix)}.index")


# ---------------------------------------------------------------------------------------------
# Locating a checkpoint.

def _state_file_prefix(state: Path) -> Path:
    """The latest prefix named by a TF `checkpoint` state file (a text protobuf)."""
    try:
        text = state.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TFCheckpointError(f"{state}: cannot read checkpoint state file ({exc})") from None
    match = re.search(r'^\s*model_checkpoint_path\s*:\s*"((?:[^"\\]|\\.)*)"', text, re.M)
    if match is None:
        raise TFCheckpointError(f"{state}: no model_checkpoint_path line in the checkpoint state file")
    try:  # a text-format string: C escapes (octal for non-ASCII bytes) over UTF-8
        name = match.group(1).encode("utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")
    except (UnicodeError, ValueError):
        raise TFCheckpointError(f"{state}: model_checkpoint_path is not a valid string") from None
    prefix = state.parent / name  # a relative name is relative to the state file; an absolute one stays
    if not index_filename(prefix).is_file():
        # An absolute path written on another machine: look for the same name beside the file.
        local = state.parent / prefix.name
        if index_filename(local).is_file():
            return local
        raise TFCheckpointError(f"{state}: names checkpoint {name!r} but {index_filename(prefix)} "
                                "does not exist")
    # The state file picks a checkpoint of its own directory; one that leads elsewhere (an edited or
    # copied state file) would convert another model than the files beside it.
    if not prefix.resolve().is_relative_to(state.parent.resolve()):
        raise TFCheckpointError(f"{state}: names checkpoint {name!r}, outside {state.parent}; "
                                "a state file may only name checkpoints in its own directory")
    return prefix


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """Find the checkpoint prefix a user's path means.

    Args:
        path: a prefix (`dir/model.ckpt-3`), its `.index` or a `.data-*` file, a directory holding
            a `checkpoint` state file or exactly one `*.index`, or the state file itself.
    Returns:
        the prefix: `index_filename(prefix)` exists.
    Raises:
        TFCheckpointError when no single checkpoint is found, or a state file names one outside
        its own directory.
    """
    path = Path(path)
    if path.is_dir():
        if (path / _STATE_FILE).is_file():
            return _state_file_prefix(path / _STATE_FILE)
        indexes = sorted(path.glob("*.index"))
        if len(indexes) == 1:
            return indexes[0].with_suffix("")
        if not indexes:
            raise TFCheckpointError(f"{path}: no TF checkpoint here (no 'checkpoint' file, no *.index)")
        raise TFCheckpointError(f"{path}: {len(indexes)} checkpoints and no 'checkpoint' file naming the "
                                f"latest; pass a prefix such as {indexes[-1].with_suffix('')}")
    if path.name == _STATE_FILE and path.is_file():
        return _state_file_prefix(path)
    if path.suffix == ".index":
        prefix = path.with_suffix("")
    elif (match := _DATA_RE.match(str(path))) is not None:
        prefix = Path(match.group(1))
    else:
        prefix = path
    if index_filename(prefix).is_file():
        return prefix
    raise TFCheckpointError(f"{path}: not a TF checkpoint ({index_filename(prefix)} does not exist)")


# ---------------------------------------------------------------------------------------------
# Parsing the index.

def _one(fields: dict, number: int, default=0):
    values = fields.get(number)
    return values[-1] if values else default  # protobuf: the last occurrence wins


def _parse_header(value: bytes, where: str) -> int:
    """Check a BundleHeaderProto and return num_shards."""
    try:
        fields = parse_message(value)
        version = parse_message(_one(fields, 3, b""))
    except (ValueError, TypeError) as exc:
        raise TFCheckpointError(f"{where}: corrupt bundle header ({exc})") from None
    num_shards = to_signed64(_one(fields, 1))
    if _one(fields, 2) != 0:
        raise UnsupportedCheckpointError(f"{where}: big-endian bundle; only little-endian checkpoints "
                                         "are supported (re-save it on a little-endian machine)")
    if num_shards < 1:
        raise TFCheckpointError(f"{where}: bundle header says {num_shards} data shards")
    if _one(version, 2) > _BUNDLE_VERSION or _BUNDLE_VERSION in version.get(3, []):
        raise UnsupportedCheckpointError(f"{where}: bundle format version needs a newer reader "
                                         f"(min_consumer {_one(version, 2)})")
    return num_shards


def _parse_shape(value: bytes) -> tuple[int, ...]:
    fields = parse_message(value)
    if _one(fields, 3):
        raise ValueError("unknown rank")
    dims = tuple(to_signed64(_one(parse_message(dim), 1)) for dim in fields.get(2, []))
    if any(d < 0 for d in dims):
        raise ValueError(f"negative dimension in {dims}")
    return dims


def _parse_entry(value: bytes, name: str, where: str) -> _Entry:
    """Decode a BundleEntryProto; what we do not read gets a `refusal` raised on use."""
    try:
        fields = parse_message(value)
        shape = _parse_shape(_one(fields, 2, b""))
    except (ValueError, TypeError) as exc:
        raise TFCheckpointError(f"{where}: tensor {name}: corrupt entry ({exc})") from None
    code, refusal = _one(fields, 1), None
    if fields.get(7):
        refusal = (f"{where}: tensor {name} is partitioned into {len(fields[7])} slices (a variable "
                   "saved with a partitioner); sliced variables are not supported, re-save it unpartitioned")
    elif code not in _DTYPES:
        kind = _NAMED_CODES.get(code, f"unknown dtype code {code}")
        refusal = f"{where}: tensor {name} has dtype {kind}; supported: {', '.join(_CODES)}"
    return _Entry(_DTYPES.get(code, _NAMED_CODES.get(code, f"dtype code {code}")), shape,
                  to_signed64(_one(fields, 3)), to_signed64(_one(fields, 4)),
                  to_signed64(_one(fields, 5)), _one(fields, 6), refusal)


# ---------------------------------------------------------------------------------------------
# The reader.

class BundleReader:
    """Random access to the tensors of one TF1 checkpoint.

    The index is read and checked at construction (block CRCs, header, every entry's dtype and
    shape); tensor bytes are read and CRC-checked on demand.

    Args:
        prefix: the checkpoint prefix (see `resolve_checkpoint` for the other spellings).
    """

    def __init__(self, prefix: str | os.PathLike):
        self.prefix = resolve_checkpoint(prefix)
        index = index_filename(self.prefix)
        where = index.name
        try:
            data = index.read_bytes()
        except OSError as exc:
            raise TFCheckpointError(f"{index}: cannot read ({exc.strerror})") from None
        rows = read_table(data, where)
        if not rows or rows[0][0] != b"":
            raise TFCheckpointError(f"{where}: no bundle header entry (not a TF2-style checkpoint index)")
        self.num_shards = _parse_header(rows[0][1], where)
        self._entries: dict[str, _Entry] = {}
        for key, value in rows[1:]:
            if key.startswith(b"\x00"):
                continue  # one slice of a partitioned variable (an encoded name): read via its variable
            try:
                name = key.decode("utf-8")
            except UnicodeDecodeError:
                raise TFCheckpointError(f"{where}: tensor name {key[:60]!r} is not UTF-8") from None
            self._entries[name] = _parse_entry(value, name, where)
        self._shard_sizes = self._check_shards(where)

    def _check_shards(self, where: str) -> list[int]:
        """Stat every shard and check each entry's byte range against its shard's size."""
        sizes = []
        for shard in range(self.num_shards):
            path = data_filename(self.prefix, shard, self.num_shards)
            try:
                sizes.append(path.stat().st_size)
            except OSError:
                raise TFCheckpointError(f"{where}: names {self.num_shards} data shards but {path.name} "
                                        "is missing") from None
        for name, entry in self._entries.items():
            if entry.refusal:
                continue  # never read; its size and offset mean nothing for a partitioned variable
            file = data_filename(self.prefix, max(entry.shard, 0), self.num_shards).name
            expected = int(np.prod(entry.shape, dtype=object)) * np.dtype(_STORAGE[entry.dtype]).itemsize
            if not 0 <= entry.shard < self.num_shards:
                raise TFCheckpointError(f"{where}: tensor {name}: shard {entry.shard} of {self.num_shards}")
            if entry.size != expected:
                raise TFCheckpointError(f"{where}: tensor {name}: {entry.size} bytes for shape "
                                        f"{list(entry.shape)} {entry.dtype} (expected {expected}; corrupt)")
            if entry.offset < 0 or entry.offset + entry.size > sizes[entry.shard]:
                raise TFCheckpointError(f"{file}: tensor {name}: bytes {entry.offset}..{entry.offset + entry.size} "
                                        f"lie past the end of the {sizes[entry.shard]}-byte file (truncated)")
        return sizes

    def names(self) -> list[str]:
        """Tensor names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def _entry(self, name: str) -> _Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise TFCheckpointError(f"{index_filename(self.prefix).name}: no tensor {name!r} "
                                    f"in this checkpoint ({len(self)} tensors)") from None

    def shape(self, name: str) -> tuple[int, ...]:
        """The tensor's shape."""
        return self._entry(name).shape

    def dtype(self, name: str) -> str:
        """The stored dtype as a numpy-style name ('float32', 'float16', 'bfloat16', 'int64', ...).

        Raises UnsupportedCheckpointError for a dtype we do not read (strings, ...).
        """
        entry = self._entry(name)
        if entry.dtype not in _CODES:
            raise UnsupportedCheckpointError(entry.refusal)
        return entry.dtype

    def read(self, name: str) -> np.ndarray:
        """Read one tensor and check its CRC-32C.

        Returns:
            an array of `shape(name)`, dtype `dtype(name)` except bfloat16, which comes back as
            float32 holding the same values exactly.
        """
        entry = self._entry(name)
        if entry.refusal:
            raise UnsupportedCheckpointError(entry.refusal)
        path = data_filename(self.prefix, entry.shard, self.num_shards)
        try:
            with open(path, "rb") as fh:
                fh.seek(entry.offset)
                raw = fh.read(entry.size)
        except OSError as exc:
            raise TFCheckpointError(f"{path.name}: tensor {name}: cannot read ({exc.strerror})") from None
        if len(raw) != entry.size:
            raise TFCheckpointError(f"{path.name}: tensor {name}: file ends after {len(raw)} of "
                                    f"{entry.size} bytes (truncated)")
        if masked_crc32c(raw) != entry.crc:
            raise TFCheckpointError(f"{path.name}: tensor {name}: checksum mismatch (file corrupt)")
        array = np.frombuffer(raw, dtype=_STORAGE[entry.dtype]).reshape(entry.shape)
        if entry.dtype == "bfloat16":
            return (array.astype(np.uint32) << 16).view(np.float32)
        return array.astype(array.dtype.newbyteorder("="))  # native order, writable copy


def read_checkpoint(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read every tensor of a checkpoint (see `BundleReader.read` for the dtypes returned)."""
    reader = BundleReader(path)
    return {name: reader.read(name) for name in reader.names()}


# ---------------------------------------------------------------------------------------------
# The writer.

def _to_storage(name: str, array: np.ndarray, dtype: str) -> bytes:
    """The little-endian bytes TF stores for `array` as `dtype`."""
    if dtype == "bfloat16":
        if array.dtype.name != "float32":
            raise TFCheckpointError(f"tensor {name}: bfloat16 is written from float32, got {array.dtype}")
        bits = np.ascontiguousarray(array, dtype="<f4").view("<u4")
        if np.any(bits & 0xFFFF):
            raise TFCheckpointError(f"tensor {name}: values not exactly representable in bfloat16")
        return (bits >> 16).astype("<u2").tobytes()
    if dtype not in _STORAGE:
        raise TFCheckpointError(f"tensor {name}: cannot write dtype {dtype}; supported: {', '.join(_CODES)}")
    if array.dtype.name != dtype:
        raise TFCheckpointError(f"tensor {name}: array is {array.dtype} but dtype {dtype} was asked; "
                                "cast it first")
    return np.ascontiguousarray(array, dtype=_STORAGE[dtype]).tobytes()


def _entry_proto(code: int, shape: tuple[int, ...], offset: int, size: int, crc: int) -> bytes:
    """A BundleEntryProto as TF serializes it: zero scalars left out, shape always present."""
    dims = b"".join(field_bytes(2, field_varint(1, d) if d else b"") for d in shape)
    out = field_varint(1, code) + field_bytes(2, dims)
    out += field_varint(4, offset) if offset else b""  # shard_id (3) is always 0 here
    out += field_varint(5, size) if size else b""
    return out + field_fixed32(6, crc)


def write_checkpoint(prefix: str | os.PathLike, tensors: Mapping[str, np.ndarray], *,
                     dtypes: Mapping[str, str] | None = None) -> None:
    """Write a single-shard TF1 checkpoint that `tf.train.load_checkpoint` reads.

    Files appear atomically (each written to a temporary name, then renamed): the data shard,
    then the index, then the directory's `checkpoint` state file naming this prefix.

    Args:
        prefix: e.g. `out/model.ckpt-0`; writes `.index` and `.data-00000-of-00001` beside it.
        tensors: name -> array; float32, float64, float16, int32 or int64.
        dtypes: optional name -> stored dtype; use 'bfloat16' to store a float32 array (whose
            values must be exact bfloat16s) as bfloat16.
    """
    prefix = Path(prefix)
    dtypes = dict(dtypes or {})
    unknown = sorted(set(dtypes) - set(tensors))
    if unknown:
        raise TFCheckpointError(f"dtypes names tensors not being written: {unknown[:5]}")
    data, rows = bytearray(), []
    for name in sorted(tensors, key=lambda n: n.encode("utf-8")):
        if not name:
            raise TFCheckpointError("a tensor name must not be empty (the empty key holds the header)")
        array = np.asarray(tensors[name])
        dtype = dtypes.get(name, array.dtype.name)
        raw = _to_storage(name, array, dtype)
        rows.append((name.encode("utf-8"),
                     _entry_proto(_CODES[dtype], array.shape, len(data), len(raw), masked_crc32c(raw))))
        data += raw
    header = field_varint(1, 1) + field_bytes(3, field_varint(1, _BUNDLE_VERSION))
    index = build_table([(b"", header)] + rows)
    atomic_write_bytes(data_filename(prefix, 0, 1), bytes(data))
    atomic_write_bytes(index_filename(prefix), index)
    quoted = prefix.name.replace("\\", "\\\\").replace('"', '\\"')
    atomic_write_text(prefix.parent / _STATE_FILE, f'model_checkpoint_path: "{quoted}"\n'
                      f'all_model_checkpoint_paths: "{quoted}"\n')
