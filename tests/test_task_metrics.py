"""Task metrics on hand-made cases with hand-computed answers (scipy cross-checks where installed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from albertlm.tasks import metrics as m


def test_accuracy_and_f1():
    assert m.accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5
    # positive class 1: tp=2, fp=1, fn=1 -> P = R = 2/3 -> F1 = 2/3
    assert m.f1_binary([1, 1, 1, 0, 0], [1, 1, 0, 1, 0]) == pytest.approx(2 / 3)
    assert m.f1_binary(["0", "0"], ["1", "0"], positive="1") == 0.0  # no true positive
    assert m.f1_binary(["1", "0"], ["1", "0"], positive="1") == 1.0
    with pytest.raises(ValueError, match="differ in length"):
        m.accuracy([1], [1, 2])


def test_matthews_binary_by_hand():
    # tp=2 fp=1 tn=2 fn=0: (2*2 - 1*0) / sqrt(3*2*3*2) = 4/6
    assert m.matthews_corrcoef([1, 1, 0, 0, 1], [1, 0, 0, 0, 1]) == pytest.approx(2 / 3)
    assert m.matthews_corrcoef([0, 1, 0, 1], [1, 0, 1, 0]) == pytest.approx(-1.0)
    assert m.matthews_corrcoef([1, 1, 1], [1, 0, 1]) == 0.0  # constant prediction: undefined -> 0
    assert m.matthews_corrcoef(["1", "0"], ["1", "0"]) == 1.0


def test_matthews_multiclass_equals_gorodkin_formula():
    preds, golds = [0, 1, 2, 2, 1, 0, 2], [0, 2, 2, 1, 1, 0, 0]
    # confusion rows = gold, cols = pred: counts t=(3,2,2), p=(2,2,3), c=4, s=7
    expected = (4 * 7 - (3 * 2 + 2 * 2 + 2 * 3)) / math.sqrt((49 - (4 + 4 + 9)) * (49 - (9 + 4 + 4)))
    assert m.matthews_corrcoef(preds, golds) == pytest.approx(expected)


def test_pearson_spearman_with_ties():
    x, y = [1.0, 2.0, 2.0, 3.0, 5.0], [2.0, 1.0, 4.0, 4.0, 4.5]
    np.testing.assert_allclose(m.average_ranks([10, 20, 20, 30, 5]), [2, 3.5, 3.5, 5, 1])
    # by hand: ranks x = 1, 2.5, 2.5, 4, 5; ranks y = 2, 1, 3.5, 3.5, 5
    rx, ry = np.array([1, 2.5, 2.5, 4, 5]), np.array([2, 1, 3.5, 3.5, 5])
    expected = np.corrcoef(rx, ry)[0, 1]
    assert m.spearman(x, y) == pytest.approx(expected)
    assert m.pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert math.isnan(m.pearson([1, 1, 1], [1, 2, 3]))  # undefined, as scipy
    scipy = pytest.importorskip("scipy.stats")
    g = np.random.default_rng(0)
    a, b = g.integers(0, 5, 50).astype(float), g.integers(0, 5, 50).astype(float)  # many ties
    assert m.spearman(a, b) == pytest.approx(scipy.spearmanr(a, b).statistic)
    assert m.pearson(a, b) == pytest.approx(scipy.pearsonr(a, b).statistic)


def test_squad_normalization():
    assert m.normalize_answer("The  Cat, sat!") == "cat sat"
    assert m.normalize_answer("an apple a day") == "apple day"
    assert m.normalize_answer("Theatre") == "theatre"  # articles only as whole words
    assert m.normalize_answer("A") == ""


def test_squad_em_f1_by_hand():
    assert m.squad_exact("the Eiffel Tower.", "Eiffel tower") == 1
    # [big, red, cat] vs [red, cat]: P = 2/3, R = 1, F1 = 0.8
    assert m.squad_f1("the big red cat", "red cat") == pytest.approx(0.8)
    assert m.squad_f1("dog", "red cat") == 0.0
    # repeated tokens count with multiplicity: [a..] -> [red red] vs [red]: common 1, P 1/2, R 1
    assert m.squad_f1("red red", "red") == pytest.approx(2 / 3)
    scores = m.squad_scores({"q1": "red cat", "q2": "blue", "q3": ""},
                            {"q1": ["a cat", "red cat"], "q2": ["dark blue sky"], "q3": ["x"]})
    assert scores["exact_match"] == pytest.approx(1 / 3)  # max over golds: q1 matches its second gold
    assert scores["f1"] == pytest.approx((1.0 + 0.5 + 0.0) / 3)  # q2: P 1, R 1/3 -> 0.5
    assert "has_ans_f1" not in scores


def test_squad_v2_no_answer():
    refs = {"a": [], "b": [], "c": ["Paris"], "d": ["the"]}  # "the" normalises to nothing: no answer
    preds = {"a": "", "b": "London", "c": "", "d": ""}
    s = m.squad_scores(preds, refs)
    # a: empty vs no gold -> 1; b: text vs no gold -> 0; c: empty vs gold -> 0; d: counts as no-answer -> 1
    assert (s["exact_match"], s["f1"]) == (0.5, 0.5)
    assert s["no_ans_exact_match"] == pytest.approx(2 / 3) and s["has_ans_exact_match"] == 0.0
    assert s["no_ans_total"] == 3 and s["has_ans_total"] == 1
    assert m.squad_scores({}, {"x": ["y"]})["f1"] == 0.0  # a missing prediction scores 0


def test_cmrc_scores():
    s = m.cmrc_scores({"1": "北京大学", "2": "《红楼梦》", "3": "1990年"}, {"1": ["北京"], "2": ["红楼梦"], "3": ["1990年"]})
    # 1: segments 北 京 大 学 vs 北 京: LCS 2 -> P 1/2, R 1 -> F1 2/3; 2: punctuation dropped -> exact
    assert s["exact_match"] == pytest.approx(2 / 3)
    assert s["f1"] == pytest.approx((2 / 3 + 1 + 1) / 3)


def test_entities_bio_and_iob1_conventions():
    assert m.get_entities(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 1), ("LOC", 3, 3)]
    assert m.get_entities(["O", "I-LOC", "I-LOC", "O"]) == [("LOC", 1, 2)]  # an I- after O starts an entity
    assert m.get_entities(["I-PER", "I-PER", "B-PER"]) == [("PER", 0, 1), ("PER", 2, 2)]  # IOB1 adjacency
    assert m.get_entities(["B-PER", "I-LOC"]) == [("PER", 0, 0), ("LOC", 1, 1)]  # type change splits
    assert m.get_entities(["B-PER", "B-PER"]) == [("PER", 0, 0), ("PER", 1, 1)]
    assert m.get_entities(["B-PER.NAM", "I-PER.NAM"]) == [("PER.NAM", 0, 1)]
    assert m.get_entities(["S-X", "B-Y", "E-Y"]) == [("X", 0, 0), ("Y", 1, 2)]  # IOBES too
    assert m.iob1_to_bio(["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG"]) == \
        ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG"]
    assert m.iob1_to_bio(["B-PER", "I-PER", "O"]) == ["B-PER", "I-PER", "O"]  # BIO unchanged


def test_entity_scores_by_hand():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-PER"], ["I-ORG", "O"]]  # PER right, LOC typed wrong, ORG right (I- after start)
    s = m.entity_scores(pred, gold)
    assert (s["precision"], s["recall"], s["f1"]) == (2 / 3, 2 / 3, pytest.approx(2 / 3))
    assert s["entities"] == 3 and s["f1_LOC"] == 0.0 and s["f1_ORG"] == 1.0
    assert s["f1_PER"] == pytest.approx(2 / 3)  # 1 right of 2 predicted, 1 gold
    assert s["token_accuracy"] == pytest.approx(4 / 6)
    # an entity is per sentence: the same span in another sentence is another entity
    s2 = m.entity_scores([["B-PER"], ["O"]], [["O"], ["B-PER"]])
    assert s2["f1"] == 0.0 and s2["precision"] == 0.0
    assert m.entity_scores([["O"]], [["O"]])["f1"] == 0.0
