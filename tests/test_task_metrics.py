"""Task metrics on hand-made cases with hand-computed answers (scipy cross-checks where installed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from albertlm.tasks import metrics as m
from albertlm.tasks import qa_metrics


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


def test_correlations_nan_input_is_nan():
    nan = float("nan")
    # ranks of a NaN mean nothing: the old Spearman ranked it last and returned 1.0 here
    assert math.isnan(m.spearman([1.0, nan, 3.0], [1.0, 2.0, 3.0]))
    assert math.isnan(m.spearman([1.0, 2.0, 3.0], [3.0, 2.0, nan]))
    assert math.isnan(m.pearson([1.0, nan, 3.0], [1.0, 2.0, 3.0]))
    assert math.isnan(m.pearson([1.0, math.inf, 3.0], [1.0, 2.0, 3.0]))
    # inf ranks last: ranks 1 3 2 vs 1 2 3 -> centred (-1 1 0) . (-1 0 1) / 2 = 0.5
    assert m.spearman([1.0, math.inf, 3.0], [1.0, 2.0, 3.0]) == pytest.approx(0.5)


def test_correlations_extreme_magnitudes():
    # by hand: centred x = -1.5 -0.5 0.5 1.5, centred y = -1.5 0.5 -0.5 1.5 -> 4 / (sqrt 5 * sqrt 5) = 0.8
    x, y = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 3.0, 2.0, 4.0])
    assert m.pearson(x, y) == pytest.approx(0.8)
    for scale_x, scale_y, expected in ((1e200, 1.0, 0.8), (1e200, 1e200, 0.8), (1e-200, 1.0, 0.8),
                                       (1e300, 1e-300, 0.8), (-1e250, 1.0, -0.8)):
        # sums of squares near 1e400 or 1e-400 overflow / underflow: the old code returned NaN
        assert m.pearson(x * scale_x, y * scale_y) == pytest.approx(expected, rel=1e-12)
    assert m.spearman(x * 1e300, y) == pytest.approx(0.8)


def test_correlations_undefined_and_scipy():
    # a constant side is undefined -> NaN, as documented before and as scipy (the old code let the
    # rounding of the mean through: 0.0 for 0.1 x 7); fewer than two pairs -> NaN too
    assert math.isnan(m.pearson([0.1] * 7, [1, 2, 3, 4, 5, 6, 7]))
    assert math.isnan(m.pearson([0.0, 0.0], [1.0, 2.0]))
    assert math.isnan(m.spearman([2, 2, 2], [1, 2, 3]))
    assert math.isnan(m.pearson([1.0], [2.0])) and math.isnan(m.spearman([], []))
    g = np.random.default_rng(1)
    a = g.normal(size=200)
    assert -1.0 <= m.pearson(a, -a) <= 1.0 and m.pearson(a, -a) == pytest.approx(-1.0)
    scipy = pytest.importorskip("scipy.stats")
    b = a + g.normal(size=200)
    assert m.pearson(a, b) == pytest.approx(scipy.pearsonr(a, b).statistic, rel=1e-12)
    assert m.spearman(a, b) == pytest.approx(scipy.spearmanr(a, b).statistic, rel=1e-12)


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
                            {"q1": ["a cat", "red cat"], "q2": ["dark blue sky"], "q3": ["x"]}, version="1.1")
    assert scores["exact_match"] == pytest.approx(1 / 3)  # max over golds: q1 matches its second gold
    assert scores["f1"] == pytest.approx((1.0 + 0.5 + 0.0) / 3)  # q2: P 1, R 1/3 -> 0.5
    assert "has_ans_f1" not in scores  # v1.1 knows no unanswerable questions
    assert m.squad_scores({}, {"x": ["y"]}, version="1.1")["f1"] == 0.0  # a missing prediction scores 0
    with pytest.raises(ValueError, match="unknown SQuAD version"):
        m.squad_scores({}, {"x": ["y"]}, version="2")


def test_squad_v11_gold_that_normalises_to_nothing():
    # v1.1: two empty token lists share no token, so F1 = 0; v2.0 reads both as "no answer": F1 = 1
    assert m.squad_f1("", ".", version="1.1") == 0.0
    assert m.squad_f1("the", "", version="1.1") == 0.0
    assert m.squad_f1("", ".", version="2.0") == 1.0
    # v1.1 keeps "." as a gold: EM compares "" with "" -> 1, F1 stays 0. v2.0 drops it: only "Paris" left
    assert m.gold_answers([".", "Paris"], version="1.1") == [".", "Paris"]
    assert m.gold_answers([".", "Paris"], version="2.0") == ["Paris"]
    assert m.gold_answers(["."], version="2.0") == [""]
    refs, preds = {"q1": [".", "Paris"], "q2": ["."]}, {"q1": "", "q2": ""}
    v1 = m.squad_scores(preds, refs, version="1.1")
    assert (v1["exact_match"], v1["f1"]) == (1.0, 0.0)
    v2 = m.squad_scores(preds, refs, version="2.0")  # q1: "" vs Paris -> 0 / 0; q2: "" vs no answer -> 1 / 1
    assert (v2["exact_match"], v2["f1"]) == (0.5, 0.5)
    with pytest.raises(ValueError, match="no gold answer"):  # the v1.1 script cannot score it either
        m.squad_scores({"q": ""}, {"q": []}, version="1.1")


def test_squad_v2_has_ans_split_follows_the_answer_list():
    refs = {"a": [], "b": [], "c": ["Paris"], "d": ["the"]}
    preds = {"a": "", "b": "London", "c": "", "d": ""}
    s = m.squad_scores(preds, refs, version="2.0")
    # a: empty vs no gold -> 1; b: text vs no gold -> 0; c: empty vs gold -> 0;
    # d: its gold normalises to nothing, so it is scored against "" (-> 1), yet it has an answer: HasAns
    assert (s["exact_match"], s["f1"]) == (0.5, 0.5)
    assert s["has_ans_total"] == 2 and s["no_ans_total"] == 2
    assert (s["has_ans_exact_match"], s["has_ans_f1"]) == (0.5, 0.5)  # c 0, d 1
    assert (s["no_ans_exact_match"], s["no_ans_f1"]) == (0.5, 0.5)  # a 1, b 0
    assert m.squad_scores({}, {"x": ["y"]})["f1"] == 0.0  # a missing prediction scores 0
    only_answerable = m.squad_scores({"x": "y"}, {"x": ["y"]}, version="2.0")
    assert only_answerable["has_ans_total"] == 1 and "no_ans_total" not in only_answerable


def test_squad_best_thresholds_by_hand():
    refs = {"q1": ["Paris"], "q2": [], "q3": ["red cat"], "q4": []}
    preds = {"q1": "Paris", "q2": "London", "q3": "big red cat", "q4": ""}
    probs = {"q4": 0.7, "q2": 0.3, "q3": 0.2, "q1": 0.1}
    # start: no answer everywhere -> q2, q4 right: 2. Sweep q1 (0.1), q3 (0.2), q2 (0.3), q4 (0.7):
    #   EM: +1 -> 3 (best, 0.1), +0 -> 3, -1 (q2 answers "London") -> 2, +0 -> 2
    #   F1: +1 -> 3 (0.1), +0.8 -> 3.8 (best, 0.2), -1 -> 2.8, +0 -> 2.8
    b = m.squad_best_thresholds(preds, refs, probs)
    assert b == {"best_exact": 0.75, "best_exact_thresh": 0.1, "best_f1": pytest.approx(0.95), "best_f1_thresh": 0.2}
    # no improvement on "no answer everywhere": threshold 0.0. A prediction is tested before
    # normalisation: "the" costs 1 in the sweep although it scores EM 1 against "no answer"
    assert m.squad_scores({"x": "the"}, {"x": []}, version="2.0")["exact_match"] == 1.0
    b = m.squad_best_thresholds({"x": "the"}, {"x": []}, {"x": 0.4, "not-a-question": 0.0})
    assert b == {"best_exact": 1.0, "best_exact_thresh": 0.0, "best_f1": 1.0, "best_f1_thresh": 0.0}
    # equal probabilities are swept in the order given, and a running best can stop inside a tie
    refs2, preds2 = {"h": ["x"], "n": []}, {"h": "x", "n": "y"}
    assert m.squad_best_thresholds(preds2, refs2, {"h": 0.5, "n": 0.5})["best_exact"] == 1.0
    assert m.squad_best_thresholds(preds2, refs2, {"n": 0.5, "h": 0.5})["best_exact"] == 0.5
    with pytest.raises(ValueError, match="no no-answer probability"):
        m.squad_best_thresholds(preds, refs, {"q1": 0.1})
    with pytest.raises(ValueError, match="no prediction"):
        m.squad_best_thresholds({}, refs, probs)


def test_cmrc_scores():
    s = m.cmrc_scores({"1": "北京大学", "2": "《红楼梦》", "3": "1990年"}, {"1": ["北京"], "2": ["红楼梦"], "3": ["1990年"]})
    # 1: segments 北 京 大 学 vs 北 京: LCS 2 -> P 1/2, R 1 -> F1 2/3; 2: punctuation dropped -> exact
    assert s["exact_match"] == pytest.approx(2 / 3)
    assert s["f1"] == pytest.approx((2 / 3 + 1 + 1) / 3)


def test_cmrc_keeps_a_single_ellipsis():
    # the script lists "……" (two characters), which no single character equals: "…" stays
    s = m.cmrc_scores({"q": "北京…"}, {"q": ["北京"]})
    # EM: "北京…" != "北京"; F1: 北 京 … vs 北 京 -> LCS 2, P 2/3, R 1 -> 0.8 (old: stripped, 1 and 1)
    assert (s["exact_match"], s["f1"]) == (0.0, pytest.approx(0.8))
    assert m.cmrc_scores({"q": "“北京”。"}, {"q": ["北京"]})["exact_match"] == 1.0  # listed ones go


def test_cmrc_segments_like_treebank():
    seg = qa_metrics._mixed_segments
    # CJK characters alone; between them, Treebank words: numbers keep , and . ; clitics split off;
    # quotes become `` and ''; dropped punctuation does not end a word ("a-b" -> "ab")
    assert seg("《红楼梦》1,000 it's 3.5亿 \"abc\" u.s. a-b…") == \
        ["红", "楼", "梦", "1,000", "it", "'s", "3.5", "亿", "``", "abc", "''", "u.s.", "ab…"]
    assert seg("美国U.S.") == ["美", "国", "u.s", "."]  # lower-cased; a final period stands alone
    assert seg("mp3播放器 New York") == ["mp3", "播", "放", "器", "new", "york"]  # spaces only separate
    assert seg("(2010年) don't 50%") == ["(", "2010", "年", ")", "do", "n't", "50", "%"]
    assert seg("５,０ cannot") == ["５", ",", "０", "can", "not"]  # Python 2 rules: ５ is no digit to them
    # hand-computed F1 where the old regex split differed (old values in brackets):
    s = m.cmrc_scores({"a": "3.5亿元", "b": "1,000", "c": "it"}, {"a": ["3.5亿"], "b": ["1,000人"], "c": ["it's"]})
    # a: [3.5 亿 元] vs [3.5 亿]: LCS 2, P 2/3, R 1 -> 0.8 (8/9); b: [1,000] vs [1,000 人]: P 1, R 1/2 -> 2/3 (6/7)
    # c: [it] vs [it 's]: P 1, R 1/2 -> 2/3 (1/2)
    assert s["f1"] == pytest.approx((0.8 + 2 / 3 + 2 / 3) / 3)


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
