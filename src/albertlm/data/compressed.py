"""Opening corpus files as binary streams, decompressing .gz and .zst on the fly."""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import BinaryIO


class _ZstdReader(io.RawIOBase):
    """Streaming .zst decompression, frame after frame, that notices a truncated file.

    (zstandard's own stream_reader just stops at the end of the input, so a cut-off download
    would be read as a shorter corpus without a word.)
    """

    def __init__(self, path: Path):
        import zstandard  # lazy: only needed for .zst inputs

        self._new = zstandard.ZstdDecompressor().decompressobj
        self._fh = open(path, "rb")
        self._dobj = None
        self._pending, self._pos = b"", 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self._pos >= len(self._pending):
            chunk = self._fh.read(1 << 20)
            if not chunk:
                if self._dobj is not None and not self._dobj.eof:
                    raise EOFError("compressed file ended before the end of its last frame")
                return 0
            out = []
            while chunk:
                if self._dobj is None or self._dobj.eof:
                    self._dobj = self._new()
                out.append(self._dobj.decompress(chunk))
                chunk = self._dobj.unused_data if self._dobj.eof else b""
            self._pending, self._pos = b"".join(out), 0
        n = min(len(buffer), len(self._pending) - self._pos)
        buffer[:n] = self._pending[self._pos:self._pos + n]
        self._pos += n
        return n

    def close(self) -> None:
        self._fh.close()
        super().close()


def open_binary(path: Path) -> BinaryIO:
    """Open a file for buffered binary reading, decompressing .gz / .zst transparently."""
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if name.endswith((".zst", ".zstd")):
        return io.BufferedReader(_ZstdReader(path), buffer_size=1 << 20)  # type: ignore[return-value]
    return open(path, "rb")
