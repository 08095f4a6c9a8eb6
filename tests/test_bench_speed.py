"""The speed benchmark's plumbing (not its timings: benchmarks are scripts, not tests)."""

import pytest
import torch

from albertlm.config import get_preset


@pytest.fixture(scope="module")
def bench():
    from benchmarks import bench_speed

    return bench_speed


def test_batch_labels_only_real_tokens(bench):
    config = get_preset("test")
    batch = bench.make_batch(config, 4, 40, seed=0, lengths=[40, 33, 10, 2])
    mask = batch["attention_mask"].bool()
    assert mask.sum(1).tolist() == [40, 33, 10, 2]
    labelled = batch["labels"] != -100
    assert not (labelled & ~mask).any() and labelled.any(1).all()
    assert (batch["input_ids"][~mask] == config.pad_token_id).all()
    assert not (batch["token_type_ids"].bool() & ~mask).any()
    again = bench.make_batch(config, 4, 40, seed=0, lengths=[40, 33, 10, 2])
    assert all(torch.equal(batch[k], again[k]) for k in batch)


def test_compare_keeps_the_asked_rounds(bench):
    calls = []
    quiet = bench.Quiet(max_foreign=float("inf"), budget_s=0)
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    timing = bench.compare(fns, repeats=3, quiet=quiet, log=print, warmup=1, min_sample_s=0)
    assert calls == ["a", "b"] * 4  # alternating, warm-up included
    assert len(timing["seconds"]["a"]) == len(timing["seconds"]["b"]) == 3 and timing["discarded"] == 0
    calls.clear()
    timing = bench.compare(fns, repeats=2, quiet=quiet, log=print, warmup=1, min_sample_s=1.0)
    n = timing["calls_per_sample"]["a"]
    assert n > 1 and calls == ["a", "b"] + (["a"] * n + ["b"] * n) * 2  # fast calls repeat within a sample


def test_report_from_a_result(bench):
    row = {"preset": "albert-base", "seq_len": 128, "batch": 8, "mode": "train", "foreign_cores": [0.0],
           "discarded": 0, "ours": {"tokens_per_s": 330.0, "ratio_vs_hf": 1.3, "mfu": 0.88},
           "hf": {"tokens_per_s": 254.0, "mfu": 0.68}}
    body = {"settings": {"repeats": 3, "infer_repeats": 5, "max_foreign": 0.25}, "peaks_gflops": {"fp32": 200, "bf16": 400},
            "speed": [row], "memory": [], "mixed": {}}
    result = {"date": "2026-01-01T00:00:00", "command": "python -m benchmarks.bench_speed", "wall_s": 60,
              "machine": {"cpu": "cpu", "cores": 2, "threads": 2, "torch": "x", "transformers": "y"},
              "json": "benchmarks/results/speed-x.json", "results": body,
              "targets": [t.as_dict() for t in bench.targets(body)]}
    met = {t["target"]: t["met"] for t in result["targets"]}
    assert met["train albert-base 8x128 vs HF"] is True and met["train albert-base 8x128 MFU"] is True
    assert met["train albert-large 8x128 vs HF"] is None
    text = bench.markdown(result)
    assert "| albert-base | train | 8 x 128 | 330 | 254 | **1.30x** | 88% | 68% |" in text
    assert "Raw numbers: `benchmarks/results/speed-x.json`." in text


def test_targets_carry_their_comparison(bench):
    higher = bench.Target("speed-up", 1.5, 1.2)
    lower = bench.Target("memory ratio", 1.1, 1.0, higher_is_better=False, unit="")
    unmeasured = bench.Target("not run", None, 2.0)
    assert (higher.met, lower.met, unmeasured.met) == (True, False, None)
    table = "\n".join(bench.targets_markdown([t.as_dict() for t in (higher, lower, unmeasured)]))
    assert "| speed-up | 1.50x | >= 1.2 | yes |" in table
    assert "| memory ratio | 1.10 | <= 1.0 | **no** |" in table and "not measured" in table
    empty = {"speed": [], "memory": [], "mixed": {}}
    assert all(t.met is None for t in bench.targets(empty))  # nothing measured, nothing claimed
