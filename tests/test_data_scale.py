"""The data pipeline at scale, on a tiny build of many shards: what the loader opens at start, ranks
of a world of 2, the cursor across shards, and a build killed half way and run again."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli import main
from albertlm.data import loader
from albertlm.data.build import BuildSettings, build_dataset, format_build_summary
from albertlm.data.corpus import Corpus
from albertlm.data.loader import PretrainingDataset, read_build_meta
from albertlm.errors import AlbertlmError
from albertlm.tokenizer import train_tokenizer
from conftest import write_story_corpus

SETTINGS = BuildSettings(max_seq_length=32, shard_examples=8, block_documents=4, heldout_fraction=0.1)


def _digest(directory: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(directory.glob("*.shard")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def _same(a: dict, b: dict) -> bool:
    return all(np.array_equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(corpus, tokenizer, a build of about 20 train shards of 8 examples)."""
    root = tmp_path_factory.mktemp("scale")
    corpus = write_story_corpus(root / "c.txt", 60)
    train_tokenizer(Corpus(str(corpus)).sentences, root / "tok", vocab_size=80)
    build_dataset(str(corpus), root / "tok", root / "data", SETTINGS, progress=False)
    assert len(list((root / "data").glob("train-*.shard"))) >= 10
    return corpus, root / "tok", root / "data"


# ---------------------------------------------------------------------------- start-up
def test_start_up_opens_one_shard_and_each_shard_opens_once(built, monkeypatch):
    """Time to the first batch must not grow with the corpus: no pass over the shards at start."""
    data = built[2]
    opened: list[str] = []

    class CountingShard(loader.Shard):
        def __init__(self, path):
            opened.append(Path(path).name)
            super().__init__(path)

    monkeypatch.setattr(loader, "Shard", CountingShard)
    monkeypatch.setattr(loader, "VERIFY_AT_LOAD_BYTES", 0)  # as a split over 256 MB: no checksum pass
    ds = PretrainingDataset(data, epochs=1)
    shards = len(ds.paths)
    assert len(opened) == 1 and ds.num_examples == sum(read_build_meta(data)["shard_sizes"][p.name]
                                                       for p in ds.paths)
    it = iter(ds)
    next(it)
    assert len(opened) <= 2
    rest = sum(1 for _ in it)
    assert rest == ds.num_examples - 1
    assert sorted(opened) == sorted(set(opened)) and len(opened) == shards  # opened on first use, once


def test_a_build_without_shard_sizes_still_loads_and_a_wrong_size_is_one_line(built, tmp_path):
    import shutil

    data = tmp_path / "d"
    shutil.copytree(built[2], data)
    meta = json.loads((data / "meta.json").read_text())
    expected = [e for e in PretrainingDataset(built[2], shuffle=False, epochs=1)]
    sizes = meta.pop("shard_sizes")
    (data / "meta.json").write_text(json.dumps(meta))  # as a build made before the record
    old = PretrainingDataset(data, shuffle=False, epochs=1)
    assert all(_same(a, b) for a, b in zip(expected, old, strict=True))
    sizes["train-00001.shard"] += 1
    (data / "meta.json").write_text(json.dumps({**meta, "shard_sizes": sizes}))
    ds = PretrainingDataset(data, shuffle=False, epochs=1)
    with pytest.raises(AlbertlmError, match=r"train-00001\.shard: holds 8 examples where meta.json records 9"):
        list(ds)
    del sizes["train-00002.shard"]
    (data / "meta.json").write_text(json.dumps({**meta, "shard_sizes": sizes}))
    with pytest.raises(AlbertlmError, match=r"train-00002\.shard: not listed in .*meta\.json"):
        PretrainingDataset(data)


# ---------------------------------------------------------------------------- ranks and cursor
def test_two_ranks_read_disjoint_examples_that_interleave_into_the_one_rank_stream(built):
    data = built[2]
    one = list(PretrainingDataset(data, seed=5, epochs=1))
    ranks = [list(PretrainingDataset(data, rank=r, world_size=2, seed=5, epochs=1)) for r in (0, 1)]
    assert len(ranks[0]) + len(ranks[1]) == len(one) and abs(len(ranks[0]) - len(ranks[1])) <= 1
    assert all(_same(a, b) for a, b in zip(one[0::2], ranks[0], strict=True))
    assert all(_same(a, b) for a, b in zip(one[1::2], ranks[1], strict=True))
    orders = [PretrainingDataset(data, rank=r, world_size=2, seed=5)._order(0)[r::2] for r in (0, 1)]
    assert not set(orders[0]) & set(orders[1]) and len(set(orders[0]) | set(orders[1])) == len(one)


def test_the_cursor_of_each_rank_resumes_exactly_across_shards_and_epochs(built):
    data = built[2]
    for rank in (0, 1):
        ds = PretrainingDataset(data, rank=rank, world_size=2, seed=2)
        it = iter(ds)
        for _ in range(len(ds) - 3):
            next(it)
        state = json.loads(json.dumps(ds.state_dict()))  # as a checkpoint stores it
        expected = [next(it) for _ in range(10)]
        again = PretrainingDataset(data, rank=rank, world_size=2, seed=2)
        again.load_state_dict(state)
        got = [x for _, x in zip(range(10), again)]
        assert all(_same(a, b) for a, b in zip(expected, got, strict=True)) and again.epoch == 1


# ---------------------------------------------------------------------------- a build killed half way
_KILLED_BUILD = """
import os, sys, time
from pathlib import Path

corpus, tok, out, ready = sys.argv[1:5]
rename = os.replace
shards = []


def replace(src, dst):  # stop with the fourth shard written to its temporary, not yet renamed
    if str(dst).endswith(".shard"):
        shards.append(dst)
        if len(shards) == 4:
            Path(ready).write_text(str(src))
            time.sleep(600)
    return rename(src, dst)


os.replace = replace
from albertlm.data.build import BuildSettings, build_dataset

build_dataset(corpus, tok, out, BuildSettings(max_seq_length=32, shard_examples=8, block_documents=4,
                                              heldout_fraction=0.1), progress=False)
"""


@pytest.mark.slow
def test_a_build_killed_half_way_is_never_read_and_a_rerun_reports_what_it_redid(built, tmp_path, capsys):
    corpus, tok, clean = built
    out, ready = tmp_path / "out", tmp_path / "ready"
    child = subprocess.Popen([sys.executable, "-c", _KILLED_BUILD, str(corpus), str(tok), str(out), str(ready)])
    try:
        deadline = time.monotonic() + 300
        while not ready.exists():
            assert child.poll() is None, "the build ended before it was killed"
            assert time.monotonic() < deadline, "the build never reached its fourth shard"
            time.sleep(0.1)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    shards = sorted(p.name for p in out.glob("*.shard"))
    temporaries = sorted(p.name for p in out.glob(".*.tmp"))
    assert len(shards) == 3 and len(temporaries) == 1 and not (out / "meta.json").exists()
    assert Path(ready.read_text()).name == temporaries[0]  # the fourth shard, whole but never renamed
    # nothing half-built is read as complete
    with pytest.raises(AlbertlmError, match="no meta.json"):
        PretrainingDataset(out)
    assert main(["data", "stats", str(out)]) == 2
    assert "no meta.json" in capsys.readouterr().err
    # run again: what was removed and redone is said, and the result is the uninterrupted build's
    assert main(["data", "build", "--corpus", str(corpus), "--tokenizer", str(tok), "--out", str(out),
                 "--max-seq-length", "32", "--shard-examples", "8", "--block-documents", "4",
                 "--heldout-fraction", "0.1", "--no-progress"]) == 0
    summary = capsys.readouterr().out
    assert ("restarted: removed 3 shard(s) and 1 temporary file(s) of an interrupted build (it had no "
            "meta.json); every shard was built again, 0 reused") in summary
    meta = read_build_meta(out)
    assert meta["restart"] == {"removed_shards": 3, "removed_temporaries": 1, "reused_shards": 0}
    assert not list(out.glob(".*.tmp")) and _digest(out) == _digest(clean)
    first = read_build_meta(clean)  # a build into a fresh directory has nothing to say
    assert first["restart"] == {"removed_shards": 0, "removed_temporaries": 0, "reused_shards": 0}
    assert "restarted" not in format_build_summary(first)
