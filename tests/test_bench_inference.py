"""The inference benchmark's plumbing, end to end on a tiny early-exit model (its timings mean nothing)."""

import json
import random

import pytest
import torch



@pytest.mark.slow
def test_one_run_gives_every_row_and_target(tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from albertlm import AlbertForPreTraining, get_preset
    from albertlm.cli import main
    from albertlm.tokenizer import Tokenizer, train_tokenizer

    r = random.Random(0)
    pos, neg, fill = ["good", "great"], ["bad", "dull"], "the movie was a film and it very".split()
    data = tmp_path / "sst"
    data.mkdir()
    for split, n in (("train", 120), ("dev", 24)):
        rows = ["sentence\tlabel"]
        for _ in range(n):
            y = r.randint(0, 1)
            rows.append(" ".join([*r.choices(fill, k=3), r.choice(pos if y else neg)]) + f"\t{y}")
        (data / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    model = tmp_path / "pretrained"
    train_tokenizer([" ".join(r.choices(pos + neg + fill, k=8)) for _ in range(200)], model, vocab_size=40,
                    log=lambda msg: None)
    torch.manual_seed(0)
    AlbertForPreTraining(get_preset("test", vocab_size=Tokenizer.load(model).vocab_size)).save_pretrained(model)
    assert main(["finetune", "--task", "sst-2", "--model", str(model), "--data", str(data), "--out",
                 str(tmp_path / "ft"), "--early-exit", "--steps", "10", "--batch-size", "8", "--max-seq-length", "16",
                 "--eval-every", "10", "--no-progress"]) == 0

    from benchmarks import bench_inference as bench, int8_rounds

    out = tmp_path / "result.json"
    assert bench.main(["--model", str(tmp_path / "ft"), "--data", str(data), "--threads", "1", "--rounds", "1",
                       "--latency-examples", "3", "--patiences", "1", "2", "--combo-patience", "2", "3", "--also", str(tmp_path / "ft"), str(data),
                       "--out", str(out)]) == 0
    envelope = json.loads(out.read_text())
    assert envelope["command"].startswith("python -m benchmarks.bench_inference --model ")
    result = envelope["results"]
    assert {"transformers fp32", "ours fp32", "ours int8", "onnxruntime fp32", "onnxruntime int8",
            "early exit, patience 2", "int8 + early exit, patience 2", "int8 + early exit, patience 3"} <= set(result["rows"])
    rows = result["rows"]
    assert rows["ours fp32"]["max_abs_logit_diff_vs_ours_fp32"] == 0.0
    assert rows["transformers fp32"]["max_abs_logit_diff_vs_ours_fp32"] < 1e-4  # the same weights
    assert 1 <= rows["early exit, patience 2"]["average_layers"] <= 3
    # patience 1 can stop before the last of the 3 layers: its layer count is evaluate's, input for input
    from albertlm.inference.evaluate import evaluate_dir

    expected = evaluate_dir(tmp_path / "ft", data, patience=1)["early_exit"]["average_layers"]
    assert rows["early exit, patience 1"]["average_layers"] == pytest.approx(expected)
    assert result["onnx_initializer_bytes_over_parameter_bytes"] < 1.05
    assert len(envelope["targets"]) == 5 and all("met" in t for t in envelope["targets"])
    # the second task's columns: here the same model and data, so the same scores row by row
    [other] = result["other_tasks"]
    second = other["rows"]
    assert set(second) == set(rows)
    for name in ("ours fp32", "onnxruntime fp32", "early exit, patience 2"):
        assert second[name]["metrics"] == rows[name]["metrics"]
        assert second[name]["average_layers"] == rows[name]["average_layers"]
    table = bench.markdown(envelope)
    assert "\n|" + "---|" * 10 + "\n" in table and "sst-2 layers run |" in table

    # the int8 round-spread script on the same model
    rounds_out = tmp_path / "rounds.json"
    assert int8_rounds.main(
        ["--model", str(tmp_path / "ft"), "--data", str(data), "--examples", "3", "--rounds", "2", "--threads", "1",
         "--out", str(rounds_out)]) == 0
    spread = json.loads(rounds_out.read_text())["results"]
    assert len(spread["speedup_per_round"]) == 2 and spread["speedup_min"] <= spread["speedup_median"]


def test_quantize_onnx_targets_judge_each_int8_backend_within_one_point():
    from benchmarks import quantize_onnx

    row = lambda acc, speedup, diff=0.0: {"metrics": {"accuracy": acc}, "batch1_speedup": speedup,
                                          "max_abs_logit_diff_vs_ours_fp32": diff}
    result = {"finetuned": {"task": "sst-2", "export": {"ours (dynamo, no folding, weight transposes folded once)": 1.0},
                            "variants": {"ours fp32": row(0.64, 1.0), "ours int8 (fbgemm)": row(0.635, 2.1),
                                         "ours int8 (torchao)": row(0.62, 2.5), "ORT fp32": row(0.64, 2.7, 1e-6)}}}
    got = {t.name.split(":")[0]: t for t in quantize_onnx.targets(result)}
    assert got["ours int8 (fbgemm)"].met is True  # 2.1x at -0.5 point
    assert got["ours int8 (torchao)"].measured is None  # 2 points below fp32: not within 1
    assert got["ONNX"].met is True and got["onnxruntime fp32"].met is True
