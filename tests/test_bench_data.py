"""The data-build benchmark's scale corpus: every size a prefix of the next, the same documents in
every format (benchmarks/bench_data.py)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyarrow")

from albertlm.data.corpus import Corpus  # noqa: E402
from benchmarks import bench_data  # noqa: E402


def documents(spec: str) -> list[str]:
    return ["\n".join(d.sentences) for d in Corpus(spec).documents()]


def test_each_size_is_a_prefix_of_the_next_and_every_format_holds_the_same_documents(tmp_path):
    specs, counts = bench_data.write_scale_corpus(tmp_path, [0.3, 0.1], text_mb=0.1, chunk=50)
    assert sorted(specs) == [0.1, 0.3]
    assert set(specs[0.1]) == {"lines", "jsonl", "parquet", "arrow"} and set(specs[0.3]) == {"parquet"}
    small, large = documents(specs[0.1]["parquet"]), documents(specs[0.3]["parquet"])
    assert len(small) == counts[0.1] and len(large) == counts[0.3] > 2 * counts[0.1]
    assert large[:len(small)] == small
    for fmt in ("lines", "jsonl", "arrow"):
        assert documents(specs[0.1][fmt]) == small, fmt
    # the larger corpus links the smaller one's part instead of copying it
    part = tmp_path / "parts" / "part-000.parquet"
    assert part.stat().st_nlink == 3  # parts/, parquet-0.1/, parquet-0.3/


def test_a_size_for_the_other_formats_must_be_one_of_the_sizes(tmp_path):
    with pytest.raises(ValueError, match="not one of the sizes"):
        bench_data.write_scale_corpus(tmp_path, [0.1], text_mb=0.2)


@pytest.mark.slow
def test_the_scale_run_measures_every_target(tmp_path):
    out = tmp_path / "r.json"
    assert bench_data.main(["--scale", "1", "4", "--formats-at", "1", "--kill-at", "4", "--first-step",
                            "--shard-examples", "300", "--vocab", "2000", "--work", str(tmp_path / "w"),
                            "--out", str(out)]) == 0
    found = json.loads(out.read_text())
    assert len(found["targets"]) == 6 and all(t["measured"] is not None for t in found["targets"])
    r = found["results"]
    assert r["identical_shards"] and r["kill_restart"]["equal_to_uninterrupted"]
    assert r["kill_restart"]["killed"]["meta_json"] is False
    assert r["kill_restart"]["rerun"]["restart"]["removed_shards"] == r["kill_restart"]["killed"]["shards_on_disk"]
