"""`albertlm finetune --objective cosent` without --model (train/scratch_embedding.py) on a tiny STS-B-shaped
folder: scratch.py's stages (task vocabulary, random base, probe, plan) train a bi-encoder; results.json
records the plan and the tf-idf cosine baseline of the same dev pairs, the output loads in `albertlm embed`
with its sentence-transformers copy, the base repeats the run exactly, and the refusals are one line before
any work. Also the task head's suggestion of these objectives when its baseline beats it."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from albertlm.cli import main
from albertlm.inference.embed import load_embedder
from albertlm.st_directory import read_sentence_transformers
from albertlm.tasks.registry import get_task
from albertlm.train import scratch, scratch_embedding
from albertlm.train.embedding import EmbeddingSettings
from albertlm.train.finetune import FinetuneRecipe
from albertlm.train.metrics import read_metrics
from albertlm.train.scratch_embedding import (EMBEDDING_RECIPE, EmbedderTarget, default_objective, default_recipe,
                                              suggested_objectives)

from test_embedding_objectives import write_sst, write_stsb  # noqa: E402  (tests/ is on the path)
from test_scratch import SMALL as SMALL_HEAD, one_line  # noqa: E402

HAVE_SKLEARN = importlib.util.find_spec("sklearn") is not None
SMALL = dataclasses.replace(EMBEDDING_RECIPE, name="test-small-bi-encoder", preset="test", probe_steps=3)
"""The embedder's recipe on the `test` preset."""
BUDGET = "5"
"""Minutes: 48 training pairs reach the 10-epoch cap (15 steps) in seconds; the budget only has to hold
the setup on a busy machine."""


@pytest.fixture(scope="module")
def run(tmp_path_factory, one_thread) -> tuple[Path, Path, dict, str, str]:
    """One run through the CLI without --objective: graded pairs train cosent by default
    (data, OUT, results.json, stdout, stderr)."""
    data = write_stsb(tmp_path_factory.mktemp("stsb"), n_train=48, n_dev=30)
    out = tmp_path_factory.mktemp("out") / "out"
    mp = pytest.MonkeyPatch()
    mp.setattr(scratch_embedding, "EMBEDDING_RECIPE", SMALL)
    stdout, stderr = io.StringIO(), io.StringIO()
    try:  # capsys is function-scoped: capture by hand
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = main(["finetune", "--task", "sts-b", "--data", str(data), "--out", str(out),
                         "--budget", BUDGET, "--no-progress", "--device", "cpu"])
    finally:
        mp.undo()
    assert code == 0, stderr.getvalue()
    return data, out, json.loads((out / "results.json").read_text()), stdout.getvalue(), stderr.getvalue()


def test_results_record_the_plan_the_baseline_and_the_command(run):
    data, out, results, _, _ = run
    s, recipe = results["from_scratch"], results["recipe"]
    assert results["embedding"] == {"objective": "cosent", "pooling": "mean", "similarity_scale": 20.0}
    assert results["main_metric"] == "spearman" and set(results["best"]) >= {"spearman", "pearson", "mrr"}
    assert s["recipe"]["name"] == "test-small-bi-encoder" and s["budget_minutes"] == float(BUDGET)
    assert s["vocabulary"]["language"] == "en" and s["word_vectors"]["rows"] > 0
    assert s["max_seq_length"] == recipe["max_seq_length"] == 64  # the test preset's 64 positions
    plan = s["plan"]
    assert plan["epoch_cap"] == math.ceil(10 * 48 / 32) and plan["limited_by"] == "epochs"
    assert results["steps"] == recipe["steps"] == plan["steps"] == 15
    assert recipe["warmup_steps"] == plan["warmup_steps"] and len(results["dev_curve"]) == plan["evaluations"]
    assert plan["planned_s"] <= plan["budget_s"] * (1 - SMALL.reserve) + 1e-9
    assert set(s["stages"]) == {"read_s", "base_s", "features_s", "baseline_s", "probe_s", "train_s", "total_s"}
    assert results["model_dir"] == str(out / "base")
    command = s["reproduce"]
    assert command[:2] == ["albertlm", "finetune"] and command[command.index("--model") + 1] == str(out / "base")
    assert command[command.index("--objective") + 1] == "cosent" and "--classifier-dropout" not in command
    if not HAVE_SKLEARN:
        assert results["baseline"] is None and "albertlm[bench]" in results["baseline_note"]
        return
    from albertlm.tasks.baselines import embedding_baseline_scores

    b = results["baseline"]
    assert results["baseline_note"] is None and b["floor"] is None
    assert (b["name"], b["metric"]) == ("tfidf_cosine", "spearman")
    assert b["value"] == pytest.approx(embedding_baseline_scores("sts-b", data)["metrics"]["spearman"], abs=1e-12)


def test_graded_pairs_train_a_bi_encoder_without_objective_and_say_so(run):
    _, out, results, _, stderr = run
    assert results["embedding"]["objective"] == "cosent"
    assert json.loads((out / "config.json").read_text())["architectures"] == ["AlbertModel"]
    assert ("sts-b: graded sentence pairs: training a sentence embedder (--objective cosent; the cosine of the two "
            "texts' vectors is the score); --objective task trains the task's cross-encoder head instead") in stderr


def test_only_graded_training_pairs_change_the_default_objective(folders, tmp_path):
    assert default_objective(get_task("sts-b"), folders["sts-b"]) == "cosent"
    assert default_objective(get_task("sst-2"), folders["sst-2"]) == "task"  # not a regression
    rte = tmp_path / "rte"
    rte.mkdir()
    (rte / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta b\ta c\tentailment\n")
    assert default_objective(get_task("rte"), rte) == "task"  # binary pairs keep their head
    single = tmp_path / "single"
    single.mkdir()
    (single / "train.tsv").write_text("text\tlabel\ngood film\t4.5\nbad film\t0.5\n")
    assert default_objective(get_task("regression"), single) == "task"  # one text: nothing to pair
    paired = get_task("regression", text_pair_column="text_b")
    (single / "train.tsv").write_text("text\ttext_b\tlabel\ngood film\tgreat film\t4.5\n")
    assert default_objective(paired, single) == "cosent"
    assert default_objective(get_task("sts-b"), tmp_path / "missing") == "task"  # the head's run refuses it


def test_the_terminal_shows_the_table_the_baseline_the_budget_and_the_copy(run):
    _, out, results, stdout, stderr = run
    assert "spearman *" in stdout
    assert f"test from scratch, a cosent bi-encoder: dev spearman {100 * results['best']['spearman']:.2f}" in stdout
    if HAVE_SKLEARN:
        assert "baseline: dev spearman tfidf_cosine" in stderr
        assert (f"count-based baseline, same split: dev spearman tfidf_cosine {100 * results['baseline']['value']:.2f}"
                in stdout)
        assert ("the count-based baseline beats the model" in stdout) == scratch.baseline_wins(results)
    assert f"budget {float(BUDGET):g} min: used " in stdout and f"random-init base: {out / 'base'}" in stdout
    assert f"sentence-transformers copy: {out / 'sentence-transformers'}" in stdout
    assert "a bi-encoder from the same start may do better" not in stdout  # it is one
    assert (f"score map (cosine -> the task's scores, isotonic on 48 training pairs, {results['score_map']['knots']} "
            f"knots, in config.json): dev pearson {100 * results['score_map']['dev']['pearson']:.2f}") in stdout


def test_the_output_loads_as_an_embedder_with_its_copy(run, tmp_path, capsys):
    data, out, results, _, _ = run
    record = json.loads((out / "config.json").read_text())["albertlm_embedding"]
    assert {k: record[k] for k in ("pooling", "objective", "task")} == {
        "pooling": "mean", "objective": "cosent", "task": "sts-b"}
    assert len(record["score_map"]["cosine"]) == results["score_map"]["knots"] >= 2  # graded pairs: a score map
    assert load_embedder(out).pooling == "mean"
    st = read_sentence_transformers(out / "sentence-transformers")
    assert st.pooling == "mean" and st.max_seq_length == 64
    assert results["sentence_transformers"] == str(out / "sentence-transformers")
    # the saved weights are the best dev checkpoint's: `albertlm embed --evaluate` gives its score again
    report = tmp_path / "m.json"
    assert main(["embed", str(out), "--evaluate", "sts-b", "--data", str(data), "--output", str(report),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert json.loads(report.read_text())["metrics"]["spearman"] == pytest.approx(results["best"]["spearman"], abs=1e-6)


def test_the_base_repeats_the_run_exactly(run, tmp_path, capsys):
    """The recorded command (plain `finetune --model OUT/base --objective cosent`): same losses, same weights."""
    _, out, results, _, _ = run
    again = tmp_path / "again"
    command = results["from_scratch"]["reproduce"][1:]
    assert main([*command, "--out", str(again), "--no-progress", "--device", "cpu"]) == 0
    capsys.readouterr()
    repeated = json.loads((again / "results.json").read_text())
    assert repeated["recipe"] == results["recipe"] and repeated["dev_curve"] == results["dev_curve"]

    def losses(path):
        return [r["loss"] for r in read_metrics(path / "metrics.jsonl") if r["split"] == "train"]

    assert losses(again) == losses(out)
    a, b = load_file(out / "model.safetensors"), load_file(again / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_simcse_defaults_to_dropout_and_flags_repeat_the_settings():
    assert default_recipe("cosent") is EMBEDDING_RECIPE and EMBEDDING_RECIPE.finetune.classifier_dropout is None
    assert default_recipe("simcse").finetune.dropout == 0.1 and EMBEDDING_RECIPE.finetune.dropout == 0.0
    target = EmbedderTarget(EmbeddingSettings("simcse", pooling="max", similarity_scale=5.0))
    resolved = default_recipe("simcse").finetune.resolve(get_task("sts-b"), 64)
    assert resolved.classifier_dropout == 0.1  # the task's, which an embedding run refuses as a flag
    flags = target.flags(SimpleNamespace(recipe=resolved))
    assert flags[:6] == ["--objective", "simcse", "--pooling", "max", "--similarity-scale", "5"]
    assert flags[flags.index("--dropout") + 1] == "0.1" and "--classifier-dropout" not in flags
    assert target.name == "simcse" and target.each_text and target.files == ("sentence-transformers",)


def test_seq_length_measures_each_text_alone():
    from albertlm.tasks.glue import TextExample

    class Pieces:  # one piece per character
        def encode(self, text):
            return np.zeros(len(text), dtype=np.int32)

    pairs = [TextExample(str(i), "x" * 50, "y" * 50) for i in range(100)]
    assert scratch.choose_seq_length(pairs, Pieces(), SMALL, 512) == 128  # [CLS] A [SEP] B [SEP]: 103
    assert scratch.choose_seq_length(pairs, Pieces(), SMALL, 512, each_text=True) == 64  # [CLS] A [SEP]: 52
    longer = [TextExample(str(i), "x" * 40, "y" * 80) for i in range(100)]  # half the texts need 82
    assert scratch.choose_seq_length(longer, Pieces(), SMALL, 512, each_text=True) == 96


@pytest.fixture
def folders(tmp_path) -> dict[str, Path]:
    return {"sts-b": write_stsb(tmp_path / "stsb", 8, 6), "sst-2": write_sst(tmp_path / "sst")}


@pytest.mark.parametrize("task, flags, message", [
    ("sts-b", ["--objective", "cosent", "--budget", "0"], "--budget must be a positive number of minutes, got 0"),
    ("sts-b", ["--objective", "cosent", "--classifier-pooling", "mean"],
     "--classifier-pooling: --objective cosent trains no task head"),
    ("sts-b", ["--objective", "mnrl", "--classifier-dropout", "0.1"], "--classifier-dropout: --objective mnrl trains "
                                                                      "no task head"),
    ("sts-b", ["--objective", "simcse", "--dropout", "0"], "--objective simcse needs --dropout above 0"),
    ("sts-b", ["--objective", "cosent", "--steps", "10"], "--steps: without --model the budget sets the steps"),
    ("sts-b", ["--objective", "cosent", "--max-seq-length", "1024"], "albert-tiny has only 512 positions"),
    ("sst-2", ["--objective", "cosent"], "task sst-2 has no sentence pairs"),
    ("sst-2", ["--objective", "simcse"], "task sst-2 has no sentence pairs"),
    ("sts-b", ["--budget", "0"], "--budget must be a positive number of minutes, got 0"),  # the default, cosent
    ("sts-b", ["--classifier-pooling", "mean"], "--classifier-pooling: --objective cosent trains no task head"),
    ("sst-2", ["--pooling", "max"], "--pooling applies to the embedding objectives"),
])
def test_refusals_are_one_line_before_any_work(folders, tmp_path, capsys, task, flags, message):
    out = tmp_path / "out"
    assert main(["finetune", "--task", task, "--data", str(folders[task]), "--out", str(out), *flags]) == 2
    assert message in one_line(capsys.readouterr().err)
    assert not out.exists()


def test_the_pairs_decide_the_suggested_objectives(folders, tmp_path):
    assert suggested_objectives(get_task("sts-b"), folders["sts-b"]) == "--objective cosent"
    assert suggested_objectives(get_task("sst-2"), folders["sst-2"]) is None  # single sentences
    for task, positive in (("rte", "entailment"), ("wnli", "1")):  # wnli's labels say nothing about similarity
        d = tmp_path / task
        d.mkdir()
        (d / "dev.tsv").write_text(f"index\tsentence1\tsentence2\tlabel\n0\ta b\ta c\t{positive}\n")
    assert suggested_objectives(get_task("rte"), tmp_path / "rte") == "--objective mnrl or --objective cosent"
    assert suggested_objectives(get_task("wnli"), tmp_path / "wnli") is None


@pytest.mark.parametrize("model, objectives, shown", [(0.30, "--objective cosent", True), (0.30, None, False),
                                                      (0.90, "--objective cosent", False)])
def test_a_task_head_beaten_on_pairs_suggests_a_bi_encoder(model, objectives, shown):
    results = {"main_metric": "pearson", "steps": 100, "best": {"pearson": model}, "model_dir": "OUT/base",
               "baseline_note": None, "baseline": {"metric": "pearson", "name": "ridge", "value": 0.78,
                                                   "floor": {"name": "mean", "value": None}},
               "from_scratch": {"recipe": {"preset": "albert-tiny"}, "budget_minutes": 40.0,
                                "stages": {"total_s": 600.0}, "plan": {"steps": 100, "limited_by": "epochs"}}}
    text = scratch.format_scratch(results, objectives)
    line = "a bi-encoder from the same start may do better: the same command with --objective cosent (docs/transfer.md)"
    assert (line in text) == shown


def test_the_cli_suggests_the_objectives_of_the_task_s_pairs(tmp_path, capsys, monkeypatch, one_thread):
    """The head path's wiring: when the baseline wins (forced here), the line names the pairs' objectives."""
    monkeypatch.setattr(scratch, "DEFAULT_RECIPE", SMALL_HEAD)
    monkeypatch.setattr(scratch, "baseline_wins", lambda results: True)
    data = write_stsb(tmp_path / "stsb", 40, 12)
    assert main(["finetune", "--task", "sts-b", "--data", str(data), "--out", str(tmp_path / "out"), "--budget", BUDGET,
                 "--objective", "task", "--no-progress", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "the count-based baseline beats the model" in printed
    assert "the same command with --objective cosent (docs/transfer.md)" in printed


def test_an_embedder_keeps_its_averaged_weights(tmp_path, capsys, monkeypatch, one_thread):
    """--ema-decay on a bi-encoder: the averaged encoder is what `albertlm embed` reads, and it scores as recorded."""
    monkeypatch.setattr(scratch_embedding, "EMBEDDING_RECIPE", SMALL)
    data = write_stsb(tmp_path / "stsb", n_train=48, n_dev=30)
    out = tmp_path / "out"
    assert main(["finetune", "--task", "sts-b", "--data", str(data), "--out", str(out), "--budget", BUDGET,
                 "--no-progress", "--device", "cpu", "--ema-decay", "0.9"]) == 0
    capsys.readouterr()
    results = json.loads((out / "results.json").read_text())
    assert results["recipe"]["ema_decay"] == 0.9
    assert len(results["trained_weights"]["dev_curve"]) == len(results["dev_curve"])
    assert main(["evaluate", "--model", str(out), "--data", str(data)]) == 0
    printed = capsys.readouterr().out
    metric = results["main_metric"]
    assert f"{100 * results['best'][metric]:.2f}" in printed
