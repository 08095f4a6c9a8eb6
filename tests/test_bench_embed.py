"""The embedding speed benchmark's plumbing on a tiny random model and a few STS-B-shaped sentences: the
envelope, both sides timed, the parity between them (its timings mean nothing here)."""

import json

import pytest

pytest.importorskip("sentence_transformers")

ROWS = [("A man is playing a guitar.", "A man plays the guitar."), ("A dog runs on the grass.", "A cat sleeps."),
        ("Two people are riding horses along a beach at sunset.", "People ride horses."),
        ("The stock market fell sharply on Tuesday after the report.", "Stocks dropped."),
        ("Yes.", "A woman is slicing an onion."), ("Nobody.", "A child is eating a potato in the kitchen.")]


def test_one_run_times_both_sides_and_their_vectors_agree(tmp_path, one_thread, monkeypatch, capsys):
    from benchmarks import bench_embed as bench

    monkeypatch.setenv("RAYON_NUM_THREADS", "1")  # main sets it; restored afterwards
    data = tmp_path / "STS-B"
    data.mkdir()
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    lines = [header] + [f"{i}\tmain\tf\t2012\t{i}\tnone\tnone\t{a}\t{b}\t{i % 5}.0" for i, (a, b) in enumerate(ROWS)]
    (data / "dev.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "result.json"
    assert bench.main(["--data", str(data), "--threads", "1", "--batch", "4", "--rounds", "1", "--min-sample-s", "0",
                       "--max-foreign", "1000", "--max-wait", "0", "--out", str(out)]) == 0
    envelope = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == envelope
    assert envelope["command"].startswith("python -m benchmarks.bench_embed --data ")
    result = envelope["results"]
    assert result["texts"]["count"] == 2 * len(ROWS) and result["texts"]["source"].startswith("STS-B dev")
    assert result["model"]["random"] and result["settings"]["batch"] == 4
    for side in ("ours", "sentence-transformers"):
        assert {"median_s", "best_s", "sentences_per_s", "tokenize_median_s", "forward_and_rest_median_s"} <= set(
            result[side])
        assert result[side]["median_s"] > 0 and len(result[side]["rounds_s"]) == 1
    assert result["parity"]["max_abs"] < 1e-5 and result["parity"]["min_cosine"] > 0.9999
    names = [t["target"] for t in envelope["targets"]]
    assert any(n.startswith("albertlm embed / sentence-transformers encode") for n in names)
    assert next(t for t in envelope["targets"] if "min cosine" in t["target"])["met"] is True


def test_a_model_flag_with_a_shape_is_refused(tmp_path, capsys):
    from benchmarks import bench_embed as bench

    with pytest.raises(SystemExit) as stop:
        bench.main(["--model", str(tmp_path), "--base-shaped"])
    assert stop.value.code == 2 and "--model takes its own shape" in capsys.readouterr().err
