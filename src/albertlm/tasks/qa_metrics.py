"""Extractive QA metrics as the official scripts define them: SQuAD v1.1 / v2.0 (EM, F1, the v2.0
best-threshold search) and CMRC 2018 (EM and longest-common-substring F1 over mixed segments).
docs/reliability.md lists the edge cases pinned against the official scripts."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence


# ---------------------------------------------------------------------------- SQuAD
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """The official SQuAD normalisation: lower, remove punctuation, remove a/an/the, fix whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


SQUAD_VERSIONS = ("1.1", "2.0")
"""The SQuAD evaluation rules there are; they differ only in whether "no answer" is an answer."""


def _has_no_answer(version: str) -> bool:
    """Whether `version`'s rules know "no answer" (v2.0) or not (v1.1); rejects other versions."""
    if version not in SQUAD_VERSIONS:
        raise ValueError(f"unknown SQuAD version {version!r} (expected one of {', '.join(SQUAD_VERSIONS)})")
    return version == "2.0"


def squad_exact(prediction: str, gold: str) -> int:
    """1 when the normalised strings are equal (both versions; "" equals "")."""
    return int(normalize_answer(prediction) == normalize_answer(gold))


def squad_f1(prediction: str, gold: str, version: str = "2.0") -> float:
    """Bag-of-tokens F1 of the normalised strings.

    When a side normalises to nothing, v2.0 reads it as "no answer" and scores 1 if both sides are
    empty, else 0; v1.1 has no such rule: no common token, so 0 even when both are empty.
    """
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if _has_no_answer(version) and (not pred or not ref):
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def gold_answers(answers: Sequence[str], version: str = "2.0") -> list[str]:
    """The golds a prediction is scored against (the best of them counts).

    v1.1: every answer as given (one that normalises to nothing, such as ".", stays a gold).
    v2.0: the answers that do not normalise to nothing, or [""] ("no answer") when none is left.
    """
    if not _has_no_answer(version):
        return list(answers)
    return [a for a in answers if normalize_answer(a)] or [""]


def squad_scores(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]],
                 version: str = "2.0") -> dict[str, float]:
    """Official SQuAD EM and F1 over every question of `references`, by the rules of `version`.

    Args:
        predictions: {question id: predicted text}; "" means "no answer". A missing id scores 0
            and still counts in the totals (as v1.1; the v2.0 script needs every id).
        references: {question id: gold answer texts}; an empty list marks an unanswerable question
            (v2.0 only: a v1.1 question without answers raises ValueError, as the v1.1 script fails).
        version: "1.1" or "2.0"; the default keeps the v2.0 rules of earlier releases, so a v1.1
            caller must say "1.1" (see `squad_f1` and `gold_answers` for what differs).
    Returns:
        {"exact_match", "f1", "total"}; for v2.0 also the same over "has_ans_*" questions (those
        with at least one gold answer in the list, whatever it normalises to) when there are any,
        and over "no_ans_*" questions (an empty list) when there are any, as the v2.0 script.
    """
    em, f1 = _squad_raw_scores(predictions, references, version)
    out = _means(em, f1, list(references))
    if _has_no_answer(version):
        has_ans = [q for q, answers in references.items() if answers]
        no_ans = [q for q, answers in references.items() if not answers]
        for prefix, ids in (("has_ans_", has_ans), ("no_ans_", no_ans)):
            if ids:
                out.update({prefix + k: v for k, v in _means(em, f1, ids).items()})
    return out


def squad_best_thresholds(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]],
                          no_answer_probs: Mapping[str, float]) -> dict[str, float]:
    """The best v2.0 EM and F1 over all no-answer thresholds, as the v2.0 script searches them.

    A threshold t turns every question whose no-answer probability exceeds t into "no answer".
    The search starts from "no answer" everywhere (each unanswerable question scores 1, each
    answerable one 0), then hands the questions back their predictions one at a time in rising
    order of probability (ties in the order of `no_answer_probs`), keeping a running total: an
    answerable question adds its EM (F1) score, an unanswerable one loses 1 when its prediction is
    a non-empty string (tested before normalisation, so even " " or "the" costs 1) and 0 otherwise.
    The best total is remembered with the probability of the question that reached it, only on a
    strict improvement; with no improvement the threshold is 0.0.

    Args:
        predictions: {question id: predicted text, "" = no answer}, one for every question.
        references: {question id: gold answer texts}, [] for an unanswerable question.
        no_answer_probs: {question id: probability (or any score rising with it) of "no answer"},
            one for every question; ids outside `references` are ignored.
    Returns:
        {"best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"}: the best scores as
        fractions of all questions, and the thresholds (in the units of `no_answer_probs`) that
        reach them.
    Raises:
        ValueError: when a question has no prediction or no no-answer probability.
    """
    for name, given in (("prediction", predictions), ("no-answer probability", no_answer_probs)):
        missing = [q for q in references if q not in given]
        if missing:
            raise ValueError(f"{len(missing)} questions have no {name} (first: {missing[0]!r})")
    em, f1 = _squad_raw_scores(predictions, references, "2.0")
    order = sorted((q for q in no_answer_probs if q in references), key=lambda q: no_answer_probs[q])
    out: dict[str, float] = {}
    for key, scores in (("exact", em), ("f1", f1)):
        total = best = float(sum(1 for answers in references.values() if not answers))
        best_thresh = 0.0
        for q in order:
            if references[q]:
                total += scores[q]
            elif predictions[q]:
                total -= 1
            if total > best:
                best, best_thresh = total, float(no_answer_probs[q])
        out[f"best_{key}"] = best / len(references) if references else 0.0
        out[f"best_{key}_thresh"] = best_thresh
    return out


def _squad_raw_scores(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]],
                      version: str) -> tuple[dict[str, float], dict[str, float]]:
    """Per-question EM and F1 (the best over the golds); a missing prediction scores 0."""
    em: dict[str, float] = {}
    f1: dict[str, float] = {}
    for qid, answers in references.items():
        golds = gold_answers(answers, version)
        if not golds:
            raise ValueError(f"SQuAD v{version} question {qid!r} has no gold answer")
        pred = predictions.get(qid)
        em[qid] = 0.0 if pred is None else float(max(squad_exact(pred, g) for g in golds))
        f1[qid] = 0.0 if pred is None else max(squad_f1(pred, g, version) for g in golds)
    return em, f1


def _means(em: dict[str, float], f1: dict[str, float], ids: list[str]) -> dict[str, float]:
    n = len(ids)
    return {"exact_match": sum(em[q] for q in ids) / n if n else 0.0,
            "f1": sum(f1[q] for q in ids) / n if n else 0.0, "total": float(n)}


# ---------------------------------------------------------------------------- CMRC 2018
# The characters the CMRC 2018 script drops before scoring. Its list also holds the two-character
# string "……", which never equals a single character, so "…" (U+2026) is kept, as are ASCII
# , . ( ) " ' ; ? ! and the other characters not listed here.
_CMRC_PUNCT = frozenset("-:_*^/\\~`+=，。：？！“”；’《》·、「」（）－～『』")
_HAN = re.compile(r"[\u4e00-\u9fa5]")  # the script's CJK range: each such character is one segment


def _treebank_rules(*rules: tuple[str, str, int]) -> list[tuple[re.Pattern, str]]:
    return [(re.compile(pattern, flags), repl) for pattern, repl, flags in rules]


# The script splits the text between CJK characters with nltk's word_tokenize. It runs on Python 2
# only, so the nltk it sees is at most 3.4.5 (3.2.5 to 3.4.5 split every CMRC 2018 dev answer and
# context alike; nltk 3.10 also splits – and —). word_tokenize is the Penn Treebank rules
# below, applied in order, after the Punkt sentence splitter. Rules that nltk compiles without
# re.UNICODE see only ASCII as digits, letters and spaces under Python 2, hence re.ASCII on them;
# the rules nltk added for Unicode quotes are Unicode-aware.
_A, _U = re.ASCII, 0
_TREEBANK_BEFORE_PADDING = _treebank_rules(
    (r"([«“‘„]|`+)", r" \1 ", _U),  # opening quotes stand alone
    (r'^"', "``", _A),
    (r"(``)", r" \1 ", _A),
    (r"([ (\[{<])(\"|'{2})", r"\1 `` ", _A),
    (r"(?i)(')(?!re|ve|ll|m|t|s|d)(\w)\b", r"\1 \2", _U),  # 'x, but not the clitics 're 's ...
    (r"([^.])(\.)([\])}>\"'»”’ ]*)\s*$", r"\1 \2 \3 ", _U),  # the final period
    (r"([:,])([^\d])", r" \1 \2", _A),  # , and : unless a digit follows (1,000 stays whole)
    (r"([:,])$", r" \1 ", _A),
    (r"\.\.\.", " ... ", _A),
    (r"[;@#$%&]", r" \g<0> ", _A),
    (r"([^.])(\.)([\])}>\"']*)\s*$", r"\1 \2\3 ", _A),
    (r"[?!]", r" \g<0> ", _A),
    (r"([^'])' ", r"\1 ' ", _A),
    (r"[\][(){}<>]", r" \g<0> ", _A),
    (r"--", " -- ", _A),
)
_TREEBANK_AFTER_PADDING = _treebank_rules(  # on " " + text + " "
    (r"([»”’])", r" \1 ", _U),  # closing quotes stand alone
    (r'"', " '' ", _A),
    (r"(\S)('')", r"\1 \2 ", _A),
    (r"([^' ])('[sS]|'[mM]|'[dD]|') ", r"\1 \2 ", _A),  # clitics: it 's, i 'm, he 'd
    (r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ", r"\1 \2 ", _A),
    *((rf"(?i)\b({a})({b})\b", r" \1 \2 ", _A)
      for a, b in (("can", "not"), ("d", "'ye"), ("gim", "me"), ("gon", "na"), ("got", "ta"), ("lem", "me"),
                   ("mor", "'n"))),
    (r"(?i)\b(wan)(na)\s", r" \1 \2 ", _A),
    (r"(?i) ('t)(is)\b", r" \1 \2 ", _A),
    (r"(?i) ('t)(was)\b", r" \1 \2 ", _A),
)


def _treebank_words(text: str) -> list[str]:
    """nltk 3.4.5's word_tokenize as the CMRC 2018 script runs it, without the sentence splitter.

    Departure: Punkt (a trained model) is not reproduced; the text is tokenised as one sentence.
    The scorer lower-cases first, and on lower-case text Punkt keeps initials, numbers and known
    abbreviations before the next word ("henry a. walsh"), which is all a CMRC 2018 dev answer
    holds; it would split "word. word", making "word." two tokens where this keeps one.

    Returns:
        The tokens: "1,000", "3.5" and "u.s" stay whole; quotes become `` and ''; ( ) % $ ; ? !
        and a final period stand alone; "don't" is "do" "n't".
    """
    for pattern, repl in _TREEBANK_BEFORE_PADDING:
        text = pattern.sub(repl, text)
    text = f" {text} "
    for pattern, repl in _TREEBANK_AFTER_PADDING:
        text = pattern.sub(repl, text)
    return text.split()


def _mixed_segments(text: str) -> list[str]:
    """CMRC 2018's segmentation: each CJK character alone, the text between them as Treebank words.

    Lower-cased and stripped first; the script's punctuation is dropped without ending a run, so
    "a-b" is the one word "ab". Spaces only separate words; digits and Latin letters run together.
    """
    out: list[str] = []
    run = ""
    for ch in text.lower().strip():
        if ch in _CMRC_PUNCT:
            continue
        if _HAN.match(ch):
            if run:
                out.extend(_treebank_words(run))
            run = ""
            out.append(ch)
        else:
            run += ch
    if run:
        out.extend(_treebank_words(run))
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
    """CMRC 2018 EM and F1, as its official script scores them (best over the gold answers).

    EM: the texts are equal once lower-cased, stripped and cleared of the script's punctuation.
    F1: 2PR / (P + R) over the longest common run of `_mixed_segments`, P and R its share of the
    prediction's and the gold's segments.

    Args / Returns: as `squad_scores` (no unanswerable questions in CMRC; an empty gold list scores 0).
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
        hyp = _mixed_segments(pred)
        scores = []
        for a in answers:
            ref = _mixed_segments(a)
            lcs = _longest_common_substring(ref, hyp)
            precision, recall = (lcs / len(hyp), lcs / len(ref)) if lcs else (0.0, 0.0)
            scores.append(2 * precision * recall / (precision + recall) if lcs else 0.0)
        f1[qid] = max(scores)
    return _means(em, f1, list(references))
