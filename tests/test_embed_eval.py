"""Embedding evaluation (tasks/pairs.py, inference/embed_eval.py): the metrics against hand-computed and scipy
values, `albertlm embed --evaluate` (table, JSON, one-line refusals), and the tf-idf cosine baseline fitted on
the training text alone."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import scipy.stats
from scipy import sparse

from albertlm.cli import main
from albertlm.errors import AlbertlmError
from albertlm.inference.embed import EmbedSettings, load_embedder
from albertlm.tasks.baselines import embedding_baseline, embedding_baseline_scores, fit_split, tfidf_vectorizer
from albertlm.tasks.glue import TextExample
from albertlm.tasks.pairs import (Pairs, graded_scores, pair_metrics, pairs_of, retrieval_scores, threshold_accuracy,
                                  unit_rows)
from albertlm.tasks.registry import get_task

from test_embedding_objectives import model_dir, write_sst, write_stsb  # noqa: F401  (tests/ is on the path)


def test_graded_scores_are_scipy_s():
    r = np.random.default_rng(0)
    cos, gold = r.uniform(-1, 1, 50), r.uniform(0, 5, 50)
    gold[:10] = 2.0  # ties in the gold scores, as STS-B has
    got = graded_scores(cos, gold)
    assert got["spearman"] == pytest.approx(scipy.stats.spearmanr(cos, gold).statistic, abs=1e-12)
    assert got["pearson"] == pytest.approx(scipy.stats.pearsonr(cos, gold).statistic, abs=1e-12)


def test_threshold_accuracy_is_the_best_cut():
    cos = np.array([0.9, 0.8, 0.8, 0.3, 0.1])
    alike = np.array([1, 0, 1, 1, 0])
    # cuts: >=0.9 -> 3/5; >=0.8 -> 3/5 (the two 0.8 go together); >=0.3 -> 4/5; all -> 3/5
    assert threshold_accuracy(cos, alike) == {"accuracy": 0.8, "threshold": 0.3}
    r = np.random.default_rng(1)
    for _ in range(20):  # brute force over every threshold
        cos, alike = np.round(r.uniform(-1, 1, 30), 1), r.integers(0, 2, 30)
        best = max(np.mean((cos >= t) == alike) for t in np.unique(cos))
        assert threshold_accuracy(cos, alike)["accuracy"] == pytest.approx(best)


def test_retrieval_ranks_with_ties_against_the_target():
    q = np.eye(3)
    c = unit_rows(np.array([[1.0, 0, 0], [0.9, 0.1, 0], [0, 0, 1], [1.0, 0, 0]]))
    # query 0 -> target 0: candidate 3 ties it (rank 2), candidate 1 is below; query 1 -> target 1: candidates 0, 3
    # score 0 against 0.11, candidate 1 is first (rank 1); query 2 -> target 2: rank 1
    got = retrieval_scores(q, c, np.array([0, 1, 2]))
    assert got == {"recall_at_1": pytest.approx(2 / 3), "recall_at_10": 1.0, "mrr": pytest.approx((1 / 2 + 1 + 1) / 3),
                   "queries": 3, "candidates": 4}
    dense = retrieval_scores(q, c, np.array([0, 1, 2]), chunk=1)  # chunking changes nothing
    assert dense == got
    assert retrieval_scores(sparse.csr_matrix(q), sparse.csr_matrix(c), np.array([0, 1, 2])) == got


def test_pair_metrics_by_kind_and_duplicate_second_texts():
    a = unit_rows(np.array([[1.0, 0], [0, 1.0], [1.0, 1.0]]))
    b = unit_rows(np.array([[1.0, 0.1], [0.2, 1.0], [1.0, 0.1]]))
    graded = Pairs(["x", "y", "z"], ["p", "q", "p"], "graded", np.array([5.0, 4.0, 1.0]))
    m = pair_metrics(graded, a, b)
    assert m["queries"] == 2 and m["candidates"] == 2  # "p" twice is one candidate; score 1.0 is no query
    assert m["spearman"] == pytest.approx(scipy.stats.spearmanr((a * b).sum(1), [5, 4, 1]).statistic)
    binary = Pairs(["x", "y", "z"], ["p", "q", "r"], "binary", np.array([1.0, 1.0, 0.0]))
    assert set(pair_metrics(binary, a, b)) == {"accuracy", "threshold", "recall_at_1", "recall_at_10", "mrr",
                                               "queries", "candidates"}
    unlabelled = Pairs(["x", "y"], ["p", "q"], "unlabelled", None)
    assert pair_metrics(unlabelled, a[:2], b[:2])["queries"] == 2 and unlabelled.main_metric == "mrr"
    with pytest.raises(AlbertlmError, match="no pair is alike"):
        pair_metrics(Pairs(["x"], ["p"], "binary", np.array([0.0])), a[:1], b[:1])


def test_pairs_of_reads_the_kind_and_refuses_tasks_without_pairs():
    ex = [TextExample("0", "a", "b", "entailment"), TextExample("1", "c", "d", "not_entailment")]
    p = pairs_of(get_task("qnli"), ex, "qnli")
    assert p.kind == "binary" and list(p.scores) == [1.0, 0.0]
    assert pairs_of(get_task("lcqmc"), [TextExample("0", "a", "b", "1")], "x").kind == "binary"
    assert pairs_of(get_task("sts-b"), [TextExample("0", "a", "b", 3.2)], "x").scores[0] == 3.2
    with pytest.raises(AlbertlmError, match="task sst-2 has no sentence pairs"):
        pairs_of(get_task("sst-2"), [TextExample("0", "a", None, "1")], "x")
    with pytest.raises(AlbertlmError, match="say nothing about similarity"):
        pairs_of(get_task("classification"), [TextExample("0", "a", "b", "x")], "x")


# ---------------------------------------------------------------------------- the command
def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_embed_evaluate_prints_the_table_and_writes_json(model_dir, tmp_path, capsys):  # noqa: F811
    data = write_stsb(tmp_path / "stsb", 8, 12)
    out = tmp_path / "m.json"
    assert main(["embed", str(model_dir), "--evaluate", "sts-b", "--data", str(data), "--output", str(out),
                 "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "sts-b dev: 12 pairs (graded), mean pooling" in printed and "spearman *" in printed
    result = json.loads(out.read_text())
    embedder = load_embedder(model_dir, EmbedSettings(progress=False))
    pairs = pairs_of(get_task("sts-b"), get_task("sts-b").read(data, "dev"), "x")
    a, b = (unit_rows(embedder.encode(t)) for t in (pairs.text_a, pairs.text_b))
    assert result["metrics"]["spearman"] == pytest.approx(
        scipy.stats.spearmanr((a * b).sum(1), pairs.scores).statistic, abs=1e-6)
    assert result["main_metric"] == "spearman" and result["pairs"] == 12


def test_embed_evaluate_refusals_are_one_line(model_dir, tmp_path, capsys):  # noqa: F811
    sst, stsb = write_sst(tmp_path / "sst"), write_stsb(tmp_path / "stsb", 4, 4)
    cases = {("--evaluate", "sst-2", "--data", str(sst)): "task sst-2 has no sentence pairs",
             ("--evaluate", "sts-b", "--data", str(stsb), "--output", str(tmp_path / "m.npy")): "must end in .json",
             ("--evaluate", "sts-b"): "--evaluate TASK and --data DIR go together",
             ("--evaluate", "sts-b", "--data", str(stsb), "--input", "x.txt"): "without --input",
             ("--evaluate", "nope", "--data", str(stsb)): "unknown task 'nope'",
             ("--evaluate", "sts-b", "--data", str(stsb), "--split", "test"): "no test file",
             (): "--input FILE is required"}
    for argv, message in cases.items():
        assert main(["embed", str(model_dir), *argv]) == 2, argv
        assert message in _one_line(capsys), argv
    assert not (tmp_path / "m.npy").exists()


# ---------------------------------------------------------------------------- the tf-idf baseline
def test_the_tfidf_baseline_is_fitted_on_the_training_text_only(tmp_path):
    train = [TextExample("0", "the cat sat", "a dog ran", 1.0)]
    vectorizer = tfidf_vectorizer(["the cat sat", "a dog ran"], chinese=False)
    assert vectorizer.transform([["zebra"]]).nnz == 0  # a word only the scored split has carries nothing
    pairs = Pairs(["the cat sat", "zebra quagga"], ["the cat ran", "zebra okapi"], "graded", np.array([4.5, 4.0]))
    scores, _ = embedding_baseline(train, pairs, chinese=False)
    # pair 2 shares only "zebra", unknown to the training text: its cosine is 0, and it ranks last of 2
    assert scores["queries"] == 2 and scores["recall_at_1"] == 0.5
    zh = tfidf_vectorizer(["我喜欢猫"], chinese=True)
    assert {"我", "喜欢"[0], "喜 欢", "猫"} <= set(zh.vocabulary_)  # character uni+bigrams


def test_baseline_scores_fit_on_train_or_else_test(tmp_path):
    data = write_stsb(tmp_path / "stsb", 30, 20, seed=3)
    result = embedding_baseline_scores("sts-b", data)
    assert result["fit_split"] == "train" and result["fit_examples"] == 30 and result["pairs"] == 20
    assert result["main_metric"] == "spearman" and -1 <= result["metrics"]["spearman"] <= 1
    lcqmc = tmp_path / "lcqmc"
    lcqmc.mkdir()
    r = random.Random(0)
    for split in ("dev", "test"):
        (lcqmc / f"{split}.txt").write_text("".join(f"问题{r.randint(0, 9)}\t问题{r.randint(0, 9)}\t{i % 2}\n"
                                                    for i in range(12)))
    assert fit_split(get_task("lcqmc"), lcqmc) == "test"
    assert embedding_baseline_scores("lcqmc", lcqmc)["language"] == "zh"
    with pytest.raises(AlbertlmError, match="neither a train nor a test split"):
        fit_split(get_task("lcqmc"), tmp_path / "nowhere")


def test_the_experiment_script_prints_model_beside_baseline(model_dir, tmp_path, capsys):  # noqa: F811
    from experiments import embedding_eval

    write_stsb(tmp_path / "STS-B", 20, 12)
    out = tmp_path / "eval.json"
    assert embedding_eval.main(["--data", str(tmp_path), "--model", str(model_dir), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| sts-b | spearman |" in printed and "pending" not in printed and "lcqmc" not in printed
    record = json.loads(out.read_text())
    assert record["rows"][0]["model"] == pytest.approx(100 * record["model"]["sts-b"]["metrics"]["spearman"])
    assert embedding_eval.main(["--data", str(tmp_path / "none")]) == 2
    assert _one_line(capsys) == "embedding_eval: error: --data DATA: holds neither STS-B/ nor LCQMC/"
