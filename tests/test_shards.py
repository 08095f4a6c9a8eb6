from pathlib import Path

import numpy as np
import pytest

from albertlm.data.shards import Shard, list_shards, write_shard
from albertlm.errors import AlbertlmError


def _arrays():
    lengths = [5, 0, 3]
    tokens = np.arange(8, dtype=np.uint16)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return {"tokens": tokens, "tokens_offsets": offsets, "label": np.array([0, 1, 1], np.uint8)}


def test_round_trip(tmp_path):
    write_shard(tmp_path / "train-00000.shard", _arrays(), 3, meta={"seed": 7})
    shard = Shard(tmp_path / "train-00000.shard")
    assert len(shard) == 3 and shard.meta == {"seed": 7}
    assert shard.row("tokens", 0).tolist() == [0, 1, 2, 3, 4]
    assert shard.row("tokens", 1).tolist() == []
    assert shard.row("tokens", 2).tolist() == [5, 6, 7]
    assert shard["label"].tolist() == [0, 1, 1] and shard["tokens"].dtype == np.uint16
    assert isinstance(shard["tokens"], np.memmap)
    for name in shard.arrays:
        assert shard.arrays[name].ctypes.data % 64 == 0  # each array starts on a 64-byte boundary
    assert list_shards(tmp_path) == [tmp_path / "train-00000.shard"]


def test_an_open_shard_holds_one_file_descriptor_whatever_its_arrays(tmp_path):
    """A loader keeps every shard of a split open: one descriptor each, not one per array."""
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        pytest.skip("counts descriptors in /proc/self/fd (Linux)")
    write_shard(tmp_path / "train-00000.shard", _arrays(), 3)
    before = len(list(fds.iterdir()))
    shards = [Shard(tmp_path / "train-00000.shard") for _ in range(10)]
    assert len(list(fds.iterdir())) - before == len(shards)
    assert all(s.row("tokens", 2).tolist() == [5, 6, 7] for s in shards)


def test_offsets_must_match(tmp_path):
    with pytest.raises(ValueError, match="tokens_offsets"):
        write_shard(tmp_path / "x.shard", _arrays(), 4)


@pytest.mark.parametrize("damage, message", [
    (lambda b: b"NOTSHARD" + b[8:], "bad magic"),
    (lambda b: b[:8] + (9).to_bytes(4, "little") + b[12:], "version 9"),
    (lambda b: b[:10], "truncated"),
    (lambda b: b[:-70], "outside the file"),
])
def test_corrupt_files_are_named(tmp_path, damage, message):
    path = tmp_path / "train-00000.shard"
    write_shard(path, _arrays(), 3)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(AlbertlmError, match=message) as exc:
        Shard(path)
    assert str(path) in str(exc.value)


def test_missing(tmp_path):
    with pytest.raises(AlbertlmError, match="no train"):
        list_shards(tmp_path)
    with pytest.raises(AlbertlmError, match="no such shard"):
        Shard(tmp_path / "nope.shard")
