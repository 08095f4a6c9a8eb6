"""The two low layers under TensorFlow's checkpoint index: LevelDB tables and protobuf wire format.

A TF1 checkpoint's `.index` file is a LevelDB-format sorted table (SSTable) whose values are
serialized protocol buffers. Both formats are small enough to read and write by hand, which keeps
TensorFlow and protobuf out of the runtime. The facts used here are written up in
docs/checkpoints.md ("TF1 checkpoint format").

Table layout, front to back: data blocks, meta blocks (TF writes none), the metaindex block, the
index block, and a 48-byte footer. Every block is followed by a 5-byte trailer: a compression byte
(0 = none) and the masked CRC-32C of the block contents plus that byte.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

import google_crc32c

from albertlm.errors import AlbertlmError

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48  # two block handles padded to 40 bytes, then the 8-byte magic
TRAILER_SIZE = 5  # compression type byte + masked CRC-32C
_CRC_MASK_DELTA = 0xA282EAD8
# TF's table builder defaults: a new data block after 256 KiB, a restart point every 16 keys in
# data blocks and at every key in the index block (as LevelDB does).
BLOCK_SIZE = 262144
RESTART_INTERVAL = 16


class TFCheckpointError(AlbertlmError):
    """A TF1 checkpoint that cannot be read: corrupt, truncated or missing files."""


class UnsupportedCheckpointError(TFCheckpointError):
    """A well-formed TF1 checkpoint using a feature albertlm refuses (slices, strings, ...)."""


# ---------------------------------------------------------------------------------------------
# CRC-32C (Castagnoli) with LevelDB's mask: storing the CRC of data that itself holds CRCs is
# weak, so stored CRCs are rotated and offset.

def masked_crc32c(data: bytes | memoryview) -> int:
    """The masked CRC-32C of `data`, as LevelDB and TF store it."""
    crc = google_crc32c.value(bytes(data))
    return (((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------
# Protobuf wire format: only what BundleHeaderProto / BundleEntryProto use.

def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode an unsigned base-128 varint at `pos`.

    Returns:
        (value, position after it). Raises ValueError when truncated or longer than 10 bytes.
    """
    value = shift = 0
    for i in range(10):
        if pos + i >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos + i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos + i + 1
        shift += 7
    raise ValueError("varint longer than 10 bytes")


def encode_varint(value: int) -> bytes:
    """Encode a non-negative int (or a negative int64 as its 10-byte two's complement)."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def to_signed64(value: int) -> int:
    """Reinterpret a decoded varint as a signed int64 (proto int32/int64 fields)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def parse_message(buf: bytes) -> dict[int, list[int | bytes]]:
    """Split one serialized message into its fields.

    Returns:
        field number -> values in order: ints for varint (wire type 0) and fixed32/fixed64
        (5/1), bytes for length-delimited fields (2). Raises ValueError on malformed input.
    """
    fields: dict[int, list[int | bytes]] = {}
    pos = 0
    while pos < len(buf):
        tag, pos = read_varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ValueError("field number 0")
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if pos + width > len(buf):
                raise ValueError("truncated fixed-width field")
            value = int.from_bytes(buf[pos:pos + width], "little")
            pos += width
        elif wire == 2:
            length, pos = read_varint(buf, pos)
            if pos + length > len(buf):
                raise ValueError("truncated length-delimited field")
            value = bytes(buf[pos:pos + length])
            pos += length
        else:  # groups (3, 4) never appear in these messages
            raise ValueError(f"unsupported wire type {wire}")
        fields.setdefault(number, []).append(value)
    return fields


def field_varint(number: int, value: int) -> bytes:
    """A varint field; proto3 leaves out zeros, so the caller skips them."""
    return encode_varint(number << 3) + encode_varint(value)


def field_bytes(number: int, payload: bytes) -> bytes:
    """A length-delimited field (sub-message or string)."""
    return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload


def field_fixed32(number: int, value: int) -> bytes:
    """A fixed32 field."""
    return encode_varint(number << 3 | 5) + struct.pack("<I", value)


# ---------------------------------------------------------------------------------------------
# Table reading.

def read_block_handle(buf: bytes, pos: int) -> tuple[int, int, int]:
    """Decode a BlockHandle (two varints) at `pos`.

    Returns:
        (offset, size, position after it).
    """
    offset, pos = read_varint(buf, pos)
    size, pos = read_varint(buf, pos)
    return offset, size, pos


def _block(data: bytes, offset: int, size: int, where: str) -> bytes:
    """Return a block's contents after checking its bounds, trailer CRC and compression byte."""
    end = offset + size + TRAILER_SIZE
    if end > len(data) - FOOTER_SIZE:
        raise TFCheckpointError(f"{where}: block at offset {offset} (size {size}) runs past the "
                                f"end of the {len(data)}-byte file (truncated or corrupt)")
    contents = data[offset:offset + size]
    kind = data[offset + size]
    stored = int.from_bytes(data[offset + size + 1:end], "little")
    if masked_crc32c(data[offset:offset + size + 1]) != stored:
        raise TFCheckpointError(f"{where}: block at offset {offset}: checksum mismatch (file corrupt)")
    if kind != 0:
        raise UnsupportedCheckpointError(
            f"{where}: block at offset {offset} is compressed (type {kind}); only uncompressed "
            "tables are supported (TensorFlow writes checkpoint indexes uncompressed)")
    return contents


def _block_entries(block: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Yield (key, value) from one block, undoing the prefix compression of keys."""
    if len(block) < 4:
        raise ValueError("block shorter than its restart count")
    num_restarts = int.from_bytes(block[-4:], "little")
    limit = len(block) - 4 - 4 * num_restarts
    if num_restarts == 0 or limit < 0:
        raise ValueError(f"bad restart count {num_restarts}")
    pos, key = 0, b""
    while pos < limit:
        shared, pos = read_varint(block, pos)
        unshared, pos = read_varint(block, pos)
        value_len, pos = read_varint(block, pos)
        if shared > len(key) or pos + unshared + value_len > limit:
            raise ValueError("entry runs past the block")
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        yield key, block[pos:pos + value_len]
        pos += value_len


def read_table(data: bytes, where: str) -> list[tuple[bytes, bytes]]:
    """Read every (key, value) of a LevelDB-format table held in memory.

    Args:
        data: the whole file.
        where: the file name used in error messages.
    Returns:
        the entries in file order (checked to be strictly increasing).
    Raises:
        TFCheckpointError naming `where` for a truncated or corrupt table.
    """
    if len(data) < FOOTER_SIZE:
        raise TFCheckpointError(f"{where}: {len(data)} bytes, shorter than a table footer "
                                f"({FOOTER_SIZE}); truncated or not a checkpoint index")
    footer = data[-FOOTER_SIZE:]
    if int.from_bytes(footer[40:], "little") != TABLE_MAGIC:
        raise TFCheckpointError(f"{where}: no table magic number at the end (truncated, or not "
                                "a TF checkpoint .index file)")
    try:
        _, _, pos = read_block_handle(footer, 0)  # metaindex: TF stores no filters, so unused
        index_offset, index_size, _ = read_block_handle(footer, pos)
    except ValueError as exc:
        raise TFCheckpointError(f"{where}: corrupt table footer ({exc})") from None
    index = _block(data, index_offset, index_size, where)
    entries: list[tuple[bytes, bytes]] = []
    try:
        for _, handle in _block_entries(index):
            offset, size, _ = read_block_handle(handle, 0)
            block = _block(data, offset, size, where)
            for key, value in _block_entries(block):
                if entries and key <= entries[-1][0]:
                    raise ValueError(f"keys out of order at {key[:60]!r}")
                entries.append((key, value))
    except ValueError as exc:
        raise TFCheckpointError(f"{where}: corrupt table block ({exc})") from None
    return entries


# ---------------------------------------------------------------------------------------------
# Table writing, laid out as TF's table builder lays it out so our files match its bytes.

class _BlockBuilder:
    """One block: prefix-compressed keys with a restart point every `restart_interval` keys."""

    def __init__(self, restart_interval: int):
        self.interval = restart_interval
        self.out, self.restarts, self.count, self.last = bytearray(), [0], 0, b""

    def add(self, key: bytes, value: bytes) -> None:
        shared = 0
        if self.count and self.count % self.interval == 0:
            self.restarts.append(len(self.out))
        elif self.count:
            limit = min(len(self.last), len(key))
            while shared < limit and self.last[shared] == key[shared]:
                shared += 1
        self.out += encode_varint(shared) + encode_varint(len(key) - shared) + encode_varint(len(value))
        self.out += key[shared:] + value
        self.count, self.last = self.count + 1, key

    def size_estimate(self) -> int:
        return len(self.out) + 4 * len(self.restarts) + 4

    def finish(self) -> bytes:
        tail = b"".join(struct.pack("<I", r) for r in self.restarts) + struct.pack("<I", len(self.restarts))
        return bytes(self.out) + tail


def _shortest_separator(start: bytes, limit: bytes) -> bytes:
    """A short key k with start <= k < limit (LevelDB's bytewise comparator rule)."""
    common = 0
    while common < min(len(start), len(limit)) and start[common] == limit[common]:
        common += 1
    if common < min(len(start), len(limit)):
        byte = start[common]
        if byte < 0xFF and byte + 1 < limit[common]:
            return start[:common] + bytes([byte + 1])
    return start


def _short_successor(key: bytes) -> bytes:
    """A short key >= `key`: the first byte that can be incremented, incremented."""
    for i, byte in enumerate(key):
        if byte != 0xFF:
            return key[:i] + bytes([byte + 1])
    return key


def build_table(entries: Sequence[tuple[bytes, bytes]], block_size: int = BLOCK_SIZE) -> bytes:
    """Serialize sorted (key, value) pairs as an uncompressed LevelDB-format table.

    Args:
        entries: pairs with strictly increasing keys.
        block_size: start a new data block once the current one reaches this many bytes.
    Returns:
        the file's bytes.
    """
    out = bytearray()
    index: list[tuple[bytes, bytes]] = []

    def emit(block: bytes) -> bytes:
        handle = encode_varint(len(out)) + encode_varint(len(block))
        trailer = b"\x00" + struct.pack("<I", masked_crc32c(block + b"\x00"))
        out.extend(block + trailer)
        return handle

    block = _BlockBuilder(RESTART_INTERVAL)
    for i, (key, value) in enumerate(entries):
        block.add(key, value)
        if block.size_estimate() >= block_size and i + 1 < len(entries):
            index.append((_shortest_separator(key, entries[i + 1][0]), emit(block.finish())))
            block = _BlockBuilder(RESTART_INTERVAL)
    if block.count:
        index.append((_short_successor(block.last), emit(block.finish())))
    metaindex = emit(_BlockBuilder(RESTART_INTERVAL).finish())
    index_block = _BlockBuilder(1)
    for key, handle in index:
        index_block.add(key, handle)
    index_handle = emit(index_block.finish())
    footer = (metaindex + index_handle).ljust(40, b"\x00") + struct.pack("<Q", TABLE_MAGIC)
    return bytes(out + footer)
