"""Evaluation metrics to their official definitions, in pure Python / numpy.

Every score is a fraction in [0, 1] (correlations in [-1, 1]); the official SQuAD scripts print
the same numbers x 100.

    accuracy, f1_binary            GLUE (MRPC and QQP report F1 of the positive class 1)
    matthews_corrcoef              CoLA; the multi-class form of sklearn, 0 when undefined
    pearson, spearman              STS-B; Spearman is Pearson of average ranks (ties share a rank);
                                   NaN when undefined (a NaN input, a constant side)
    squad_scores                   SQuAD v1.1 / v2.0 official EM and F1 by the rules of the version
                                   (normalisation: lower-case, drop punctuation and the articles
                                   a/an/the, collapse whitespace; max over the gold answers; v2.0
                                   alone reads "" as "no answer" and splits HasAns / NoAns)
    squad_best_thresholds          SQuAD v2.0 best EM / F1 over no-answer thresholds (best_exact ...)
    cmrc_scores                    CMRC 2018: EM and longest-common-substring F1 over mixed
                                   segments (each CJK character alone, other runs as nltk's
                                   Treebank words)
    entity_scores                  seqeval's default (conlleval) entity-level precision/recall/F1
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np

# the QA metrics live in their own module; importing them from here keeps working
from albertlm.tasks.qa_metrics import (SQUAD_VERSIONS, cmrc_scores, gold_answers, normalize_answer,  # noqa: F401
                                       squad_best_thresholds, squad_exact, squad_f1, squad_scores)


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
    """Pearson correlation, computed so that no magnitude overflows or underflows.

    Each side is divided by its largest absolute value, centred and scaled to unit length before
    the dot product, so inputs near 1e200 or 1e-200 give the same r as moderate ones (a plain sum
    of squares would overflow to inf, then give NaN). r is clipped to [-1, 1] as scipy does.

    Args:
        x, y: [N] paired values.
    Returns:
        r in [-1, 1]; NaN (undefined) when any value is NaN or infinite, when either side is
        constant, or when N < 2 (where scipy raises instead).
    """
    _same_length(x, y)
    a, b = _unit_centred(x), _unit_centred(y)
    if a is None or b is None:
        return float("nan")
    return float(np.clip(a @ b, -1.0, 1.0))


def _unit_centred(x: Sequence[float]) -> np.ndarray | None:
    """x scaled into [-1, 1], centred and divided by its norm; None when that is undefined."""
    a = np.asarray(x, dtype=np.float64)
    if len(a) < 2 or not np.isfinite(a).all():
        return None
    top = np.abs(a).max()
    if top == 0:
        return None  # all zeros: constant
    a = a / top
    a = a - a.mean()
    norm = math.sqrt(float(a @ a))
    return a / norm if norm > 0 else None  # a constant side centres to exact zeros


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
    """Spearman's rho: Pearson of the average ranks (correct with ties).

    Args:
        x, y: [N] paired values; ±inf rank as the extremes.
    Returns:
        rho in [-1, 1]; NaN when any value is NaN (ranks of NaN mean nothing; scipy's default
        nan_policy also gives NaN), when either side is constant, or when N < 2.
    """
    _same_length(x, y)
    if np.isnan(np.asarray(x, dtype=np.float64)).any() or np.isnan(np.asarray(y, dtype=np.float64)).any():
        return float("nan")
    return pearson(average_ranks(x), average_ranks(y))


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
