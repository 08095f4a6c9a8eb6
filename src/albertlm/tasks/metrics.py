"""Evaluation metrics to their official definitions, in pure Python / numpy.

Every score is a fraction in [0, 1] (correlations in [-1, 1]); the official SQuAD scripts print
the same numbers x 100.

    accuracy, f1_binary            GLUE (MRPC and QQP report F1 of the positive class 1)
    matthews_corrcoef              CoLA; the multi-class form of sklearn, 0 when undefined
    pearson, spearman              STS-B; Spearman is Pearson of average ranks (ties share a rank)
    squad_scores                   SQuAD v1.1 / v2.0 official EM and F1 (normalisation: lower-case,
                                   drop punctuation and the articles a/an/the, collapse whitespace;
                                   max over the gold answers; an unanswerable question's gold is "")
    cmrc_scores                    CMRC 2018: EM and longest-common-substring F1 over mixed
                                   segments (each Chinese character alone, other runs as words)
    entity_scores                  seqeval's default (conlleval) entity-level precision/recall/F1
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence

import numpy as np


# ---------------------------------------------------------------------------- classification
def accuracy(preds: Sequence[Hashable], golds: Sequence[Hashable]) -> float:
    """Share of predictions equal to the gold label."""
    _same_length(preds, golds)
    return sum(p == g for p, g in zip(preds, golds)) / len(golds) if golds else 0.0


def f1_binary(preds: Sequence[Hashable], golds: Sequence[Hashable], positive: Hashable = 1) -> float:
    """F1 of the positive class: 2PR / (P + R); 0 when there is no true positive."""
    _same_length(preds, golds)
    tp = sum(p == positive and g == positive for p, g in zip(preds, golds))
    predicted = sum(p == positive for p in preds)
    actual = sum(g == positive for g in golds)
    if tp == 0:
        return 0.0
    precision, recall = tp / predicted, tp / actual
    return 2 * precision * recall / (precision + recall)


def matthews_corrcoef(preds: Sequence[Hashable], golds: Sequence[Hashable]) -> float:
    """Matthews correlation (CoLA's metric), the multi-class form (Gorodkin 2004, as sklearn).

    With C the confusion matrix, t the true and p the predicted class counts, c correct of s:
    (c·s - t·p) / sqrt((s² - p·p)(s² - t·t)); 0.0 when a factor of the denominator is 0 (a
    constant prediction or a single gold class).
    """
    _same_length(preds, golds)
    classes = {c: i for i, c in enumerate(sorted(set(preds) | set(golds), key=str))}
    conf = np.zeros((len(classes), len(classes)), dtype=np.float64)
    for p, g in zip(preds, golds):
        conf[classes[g], classes[p]] += 1
    t, p = conf.sum(1), conf.sum(0)
    s, c = conf.sum(), np.trace(conf)
    cov_tp, cov_pp, cov_tt = c * s - t @ p, s * s - p @ p, s * s - t @ t
    if cov_pp * cov_tt == 0:
        return 0.0
    return float(cov_tp / math.sqrt(cov_tt * cov_pp))


# ---------------------------------------------------------------------------- regression
def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation; NaN when either side is constant (undefined, as scipy)."""
    _same_length(x, y)
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    a, b = a - a.mean(), b - b.mean()
    denom = math.sqrt(float(a @ a) * float(b @ b))
    return float(a @ b) / denom if denom > 0 else float("nan")


def average_ranks(x: Sequence[float]) -> np.ndarray:
    """1-based ranks, tied values sharing the mean of their ranks (scipy's rankdata 'average')."""
    a = np.asarray(x, dtype=np.float64)
    order = np.argsort(a, kind="mergesort")
    ranks = np.empty(len(a), dtype=np.float64)
    sorted_a = a[order]
    i = 0
    while i < len(a):
        j = i
        while j + 1 < len(a) and sorted_a[j + 1] == sorted_a[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1  # mean of ranks i+1 .. j+1
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: Pearson of the average ranks (correct with ties); NaN when undefined."""
    return pearson(average_ranks(x), average_ranks(y))


# ---------------------------------------------------------------------------- SQuAD
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """The official SQuAD normalisation: lower, remove punctuation, remove a/an/the, fix whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def squad_exact(prediction: str, gold: str) -> int:
    """1 when the normalised strings are equal."""
    return int(normalize_answer(prediction) == normalize_answer(gold))


def squad_f1(prediction: str, gold: str) -> float:
    """Bag-of-tokens F1 of the normalised strings; an empty side scores 1 only against empty (v2.0)."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def gold_answers(answers: Sequence[str]) -> list[str]:
    """The golds scored against: answers that do not normalise to nothing, or [""] (no answer)."""
    golds = [a for a in answers if normalize_answer(a)]
    return golds or [""]


def squad_scores(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """Official SQuAD EM and F1 over every question of `references`.

    Args:
        predictions: {question id: predicted text}; "" means "no answer". A missing id scores 0.
        references: {question id: gold answer texts}; an empty list marks an unanswerable (v2.0)
            question.
    Returns:
        {"exact_match", "f1", "total"} plus, when some questions are unanswerable, the same split
        into "has_ans_*" and "no_ans_*" (as the v2.0 script).
    """
    em: dict[str, float] = {}
    f1: dict[str, float] = {}
    for qid, answers in references.items():
        golds = gold_answers(answers)
        pred = predictions.get(qid)
        em[qid] = 0.0 if pred is None else float(max(squad_exact(pred, g) for g in golds))
        f1[qid] = 0.0 if pred is None else max(squad_f1(pred, g) for g in golds)
    out = _means(em, f1, list(references))
    no_ans = [q for q, a in references.items() if gold_answers(a) == [""]]
    if no_ans:
        has_ans = [q for q in references if q not in set(no_ans)]
        for prefix, ids in (("has_ans_", has_ans), ("no_ans_", no_ans)):
            out.update({prefix + k: v for k, v in _means(em, f1, ids).items()})
    return out


def _means(em: dict[str, float], f1: dict[str, float], ids: list[str]) -> dict[str, float]:
    n = len(ids)
    return {"exact_match": sum(em[q] for q in ids) / n if n else 0.0,
            "f1": sum(f1[q] for q in ids) / n if n else 0.0, "total": float(n)}


# ---------------------------------------------------------------------------- CMRC 2018
_CMRC_PUNCT = set("-:_*^/\\~`+=，。：？！“”；’《》……·、「」（）－～『』")
_HAN = re.compile(r"[\u4e00-\u9fa5]")
_LATIN_WORDS = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def _mixed_segments(text: str) -> list[str]:
    """CMRC 2018's segmentation: each Chinese character alone, other runs split into words."""
    out: list[str] = []
    run = ""
    for ch in text.lower().strip():
        if ch in _CMRC_PUNCT:
            continue
        if _HAN.match(ch):
            out.extend(_LATIN_WORDS.findall(run))  # the official script uses nltk's word_tokenize here
            run = ""
            out.append(ch)
        else:
            run += ch
    out.extend(_LATIN_WORDS.findall(run))
    return out


def _longest_common_substring(a: Sequence[str], b: Sequence[str]) -> int:
    best = 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, 1):
            if x == y:
                cur[j] = prev[j - 1] + 1
                best = max(best, cur[j])
        prev = cur
    return best


def cmrc_scores(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """CMRC 2018 EM (equal after dropping punctuation) and F1 over the longest common run of segments.

    Args / Returns: as `squad_scores` (no unanswerable questions in CMRC).
    """
    em: dict[str, float] = {}
    f1: dict[str, float] = {}
    strip = lambda s: "".join(ch for ch in s.lower().strip() if ch not in _CMRC_PUNCT)  # noqa: E731
    for qid, answers in references.items():
        pred = predictions.get(qid)
        if pred is None or not answers:
            em[qid] = f1[qid] = 0.0
            continue
        em[qid] = float(any(strip(a) == strip(pred) for a in answers))
        scores = []
        for a in answers:
            ref, hyp = _mixed_segments(a), _mixed_segments(pred)
            lcs = _longest_common_substring(ref, hyp)
            scores.append(0.0 if lcs == 0 else 2 * lcs / (len(ref) + len(hyp)))  # 2PR/(P+R)
        f1[qid] = max(scores)
    return _means(em, f1, list(references))


# ---------------------------------------------------------------------------- entities
def _split_tag(tag: str) -> tuple[str, str]:
    """('B', 'PER') from 'B-PER', ('B', 'PER.NAM') from 'B-PER.NAM', ('O', '') from 'O' (as seqeval)."""
    if tag in ("O", ""):
        return "O", ""
    return tag[0], tag[1:].split("-", 1)[-1]


def get_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Entities of one tag sequence as (type, first, last) with conlleval's rules (seqeval default).

    Works for BIO, IOB1 and IOBES alike: an entity ends before a B or O, before a tag of another
    type, or after an E/S; one starts at B or S, at an I/E after O or after another type
    ("an I- after O starts an entity"), and at an I/E after an E/S.
    """
    entities = []
    prev_tag, prev_type, begin = "O", "", 0
    for i, tag in enumerate([*tags, "O"]):
        cur_tag, cur_type = _split_tag(tag)
        ends = (prev_tag in ("E", "S")
                or (prev_tag in ("B", "I") and cur_tag in ("B", "S", "O"))
                or (prev_tag != "O" and prev_type != cur_type))
        starts = (cur_tag in ("B", "S")
                  or (prev_tag in ("E", "S", "O") and cur_tag in ("E", "I"))
                  or (cur_tag != "O" and prev_type != cur_type))
        if ends and prev_tag != "O":
            entities.append((prev_type, begin, i - 1))
        if starts:
            begin = i
        prev_tag, prev_type = cur_tag, cur_type
    return entities


def iob1_to_bio(tags: Sequence[str]) -> list[str]:
    """IOB1 (CoNLL-2003: B- only between two adjacent entities of one type) to BIO.

    An I-X that does not continue an X entity becomes B-X; valid BIO is returned unchanged.
    """
    out = []
    prev_type = ""
    for tag in tags:
        t, typ = _split_tag(tag)
        if t == "I" and prev_type != typ:
            tag = f"B-{typ}"
        out.append(tag)
        prev_type = typ if t != "O" else ""
    return out


def entity_scores(predictions: Sequence[Sequence[str]], golds: Sequence[Sequence[str]]) -> dict[str, float]:
    """Micro entity-level precision, recall and F1 (an entity counts when type and span match exactly).

    Args:
        predictions, golds: one tag sequence per sentence (BIO or IOB1 tags), same lengths.
    Returns:
        {"precision", "recall", "f1", "entities" (gold count), "f1_<TYPE>" per gold or predicted type,
        "token_accuracy"}.
    """
    _same_length(predictions, golds)
    pred_set, gold_set = set(), set()
    correct_tokens = total_tokens = 0
    for n, (p, g) in enumerate(zip(predictions, golds)):
        _same_length(p, g)
        pred_set.update((n, *e) for e in get_entities(p))
        gold_set.update((n, *e) for e in get_entities(g))
        correct_tokens += sum(a == b for a, b in zip(p, g))
        total_tokens += len(g)
    out = _prf(pred_set, gold_set)
    out["entities"] = float(len(gold_set))
    for typ in sorted({e[1] for e in pred_set | gold_set}):
        out[f"f1_{typ}"] = _prf({e for e in pred_set if e[1] == typ}, {e for e in gold_set if e[1] == typ})["f1"]
    out["token_accuracy"] = correct_tokens / total_tokens if total_tokens else 0.0
    return out


def _prf(pred: set, gold: set) -> dict[str, float]:
    tp = len(pred & gold)
    precision = tp / len(pred) if pred else 0.0
    recall = tp / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if tp else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def _same_length(a: Sequence, b: Sequence) -> None:
    if len(a) != len(b):
        raise ValueError(f"predictions and references differ in length ({len(a)} vs {len(b)})")
