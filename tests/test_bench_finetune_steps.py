"""The padded / unpadded fine-tuning step benchmark's plumbing on a tiny tagging set: the envelope, both ways
timed on the same batches, their losses equal (its timings mean nothing here)."""

import json
import random

import pytest

from test_finetune import write_conll


def test_both_ways_train_the_same_batches_to_the_same_losses(tmp_path, one_thread, capsys):
    from benchmarks import finetune_steps as bench

    write_conll(tmp_path, random.Random(2))
    out = tmp_path / "steps.json"
    assert bench.main(["--task", "conll2003", "--data", str(tmp_path), "--steps", "3", "--preset", "test",
                       "--report", str(out)]) == 0
    envelope = json.loads(out.read_text())
    assert envelope["command"].startswith("python -m benchmarks.finetune_steps --task conll2003")
    (row,) = envelope["results"]["tasks"]
    assert row["preset"] == "test" and row["timed_steps"] == 3
    assert set(row["ways"]) == {"off", "on"}
    for way in row["ways"].values():
        assert way["step_s"] > 0 and len(way["losses"]) == 4
    assert row["largest_loss_difference"] < 1e-4
    assert 0 < row["padding_share"] < 1 and row["real_tokens"] < row["padded_positions"]
    assert "| conll2003 | test |" in capsys.readouterr().out


def test_a_task_without_its_data_directory_is_one_line(capsys):
    from benchmarks import finetune_steps as bench

    with pytest.raises(SystemExit) as stopped:
        bench.main(["--task", "conll2003", "--task", "sst-2", "--data", "x"])
    assert stopped.value.code == 2
    assert "one --data per --task" in capsys.readouterr().err
