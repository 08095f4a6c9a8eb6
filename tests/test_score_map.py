"""The cosine -> score map of an embedder trained on graded pairs (tasks/score_map.py): pool adjacent
violators by hand and against scikit-learn's isotonic regression, the map's order and ends, the knot cap,
and a malformed record refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

from albertlm.errors import AlbertlmError
from albertlm.tasks.score_map import ScoreMap, fit_score_map, isotonic_blocks
from test_embedding_objectives import model_dir, write_stsb  # noqa: F401  (tests/ is on the path)


def test_violators_are_pooled_by_hand():
    x, y, w = isotonic_blocks(np.array([0.1, 0.2, 0.3, 0.4]), np.array([1.0, 3.0, 2.0, 4.0]))
    assert x.tolist() == pytest.approx([0.1, 0.25, 0.4]) and y.tolist() == pytest.approx([1.0, 2.5, 4.0])
    assert w.tolist() == [1, 2, 1]
    # equal cosines are one point; equal fitted values are one block, so the knots strictly increase
    x, y, w = isotonic_blocks(np.array([0.5, 0.5, 0.1, 0.9]), np.array([2.0, 4.0, 3.0, 3.0]))
    assert x.tolist() == pytest.approx([(0.1 + 0.5 + 0.5 + 0.9) / 4]) and y.tolist() == pytest.approx([3.0])
    assert fit_score_map([0.1, 0.5, 0.5, 0.9], [3.0, 2.0, 4.0, 3.0]) is None  # the scores do not rise


def test_the_blocks_are_scikit_learn_s_isotonic_fit():
    isotonic = pytest.importorskip("sklearn.isotonic")
    r = np.random.default_rng(0)
    x = np.round(r.uniform(-0.2, 1, 2000), 3)  # with ties
    y = np.clip(5 * x ** 2 + r.normal(0, 1, 2000), 0, 5)
    bx, by, bw = isotonic_blocks(x, y)
    order = np.argsort(x, kind="stable")
    fitted = isotonic.IsotonicRegression().fit_transform(x, y)[order]
    assert np.repeat(by, bw.astype(int)) == pytest.approx(fitted, abs=1e-9)
    assert np.all(np.diff(bx) > 0) and np.all(np.diff(by) > 0)


def test_the_map_keeps_the_order_holds_the_ends_and_caps_its_knots():
    r = np.random.default_rng(1)
    x = r.uniform(0, 1, 5000)
    y = 5 * x ** 3 + r.normal(0, 0.3, 5000)
    m = fit_score_map(x, y, max_knots=40)
    assert 2 <= len(m.cosine) <= 40 and m.pairs == 5000
    assert np.all(np.diff(m.cosine) > 0) and np.all(np.diff(m.score) > 0)
    inside = np.linspace(m.cosine[0], m.cosine[-1], 300)
    assert np.all(np.diff(m(inside)) > 0)  # strictly increasing between the knots: the order is kept
    assert m([-5.0, 5.0]).tolist() == [m.score[0], m.score[-1]]
    # the map follows the curve the scores follow, not the cosine's straight line
    assert m([0.5])[0] == pytest.approx(5 * 0.5 ** 3, abs=0.25)
    assert ScoreMap.from_record(m.record(), "config.json") == m


@pytest.mark.parametrize("record, message", [
    ([1, 2], "must hold the lists 'cosine' and 'score'"),
    ({"cosine": [0.1, 0.2], "score": [1.0]}, "must be equally long"),
    ({"cosine": [0.1], "score": [1.0]}, "must be equally long, 2 to"),
    ({"cosine": [0.1, "x"], "score": [1.0, 2.0]}, "cosine must hold finite numbers"),
    ({"cosine": [0.1, 0.2], "score": [1.0, float("nan")]}, "score must hold finite numbers"),
    ({"cosine": [0.2, 0.1], "score": [1.0, 2.0]}, "cosine must be strictly increasing"),
    ({"cosine": [0.1, 0.2], "score": [2.0, 2.0]}, "score must be strictly increasing"),
    ({"cosine": [0.1, 0.2], "score": [1.0, 2.0], "pairs": -1}, "pairs must be a count"),
])
def test_a_malformed_record_is_one_line(record, message):
    with pytest.raises(AlbertlmError, match=message) as err:
        ScoreMap.from_record(record, "OUT/config.json: albertlm_embedding")
    assert str(err.value).startswith("OUT/config.json: albertlm_embedding: score_map") and "\n" not in str(err.value)


def test_fit_refuses_what_it_cannot_fit():
    with pytest.raises(AlbertlmError, match="one score per cosine"):
        fit_score_map([0.1, 0.2], [1.0])
    with pytest.raises(AlbertlmError, match="finite"):
        fit_score_map([0.1, np.inf], [1.0, 2.0])
    with pytest.raises(AlbertlmError, match="max_knots"):
        fit_score_map([0.1, 0.2], [1.0, 2.0], max_knots=1)


def test_the_script_fits_the_map_on_saved_embedders_and_on_the_tfidf_cosine(model_dir, tmp_path, capsys):
    """`python -m benchmarks.score_map`: the raw row equals `albertlm embed --evaluate`'s, the map keeps
    Spearman, and the baseline row is the tf-idf cosine the command prints."""
    pytest.importorskip("sklearn")
    import json

    from albertlm.inference.embed import EmbedSettings
    from albertlm.inference.embed_eval import evaluate_embeddings
    from albertlm.tasks.baselines import embedding_baseline_scores
    from benchmarks import score_map

    model = model_dir  # a random tiny ALBERT: any embedder does
    data = write_stsb(tmp_path / "stsb", n_train=60, n_dev=40)
    report = tmp_path / "map.json"
    assert score_map.main([str(model), "--data", str(data), "--max-seq-length", "24", "--report", str(report)]) == 0
    assert "| tfidf_cosine |" in capsys.readouterr().out
    rows = json.loads(report.read_text())["results"]["rows"]
    assert [row["model"] for row in rows] == ["tfidf_cosine", str(model)]
    evaluated = evaluate_embeddings(model, "sts-b", data, settings=EmbedSettings(max_seq_length=24, progress=False))
    assert rows[1]["raw"]["pearson"] == pytest.approx(evaluated["metrics"]["pearson"], abs=1e-6)
    assert rows[0]["raw"]["spearman"] == pytest.approx(
        embedding_baseline_scores("sts-b", data)["metrics"]["spearman"], abs=1e-9)
    for row in rows:
        if row["mapped"] is not None:  # strictly increasing inside the knots: the order moves only at the ends
            assert row["mapped"]["spearman"] == pytest.approx(row["raw"]["spearman"], abs=0.05)
