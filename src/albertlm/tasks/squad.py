"""Extractive question answering: SQuAD v1.1 / v2.0 JSON (and CMRC 2018, which uses the same layout).

    read_squad        {"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
                      "answers": [{"text", "answer_start"}], "is_impossible"?}]}]}]}
    squad_features    [CLS] question [SEP] window of the context [SEP]; a context longer than the
                      input is covered by windows `doc_stride` pieces apart (official run_squad)
    squad_predictions best span (start ≤ end, at most max_answer_length pieces, start where its
                      window has the most context) over all windows; v2.0 answers "" when the
                      [CLS] score beats the best span by more than null_threshold

Character offsets ↔ pieces: the context is split into words (whitespace; each CJK character alone
in Chinese mode), every word is encoded on its own and each piece gets its character span inside
the context (`common.encode_words`), so an answer's character span maps to pieces and a predicted
piece span back to the exact context substring.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.tasks.common import (Feature, FeatureSettings, MalformedDataWarning, RowErrors, encode_words,
                                   open_text, split_words)
from albertlm.utils import atomic_write_text
from albertlm.vocab import pair_inputs


@dataclass
class SquadExample:
    """One question about one context."""

    qid: str
    """The question id (the key of the official prediction file)."""
    question: str
    context: str
    answers: list[tuple[str, int]] = field(default_factory=list)
    """Gold (text, start character) pairs; empty for an unanswerable question or a test set."""
    is_impossible: bool = False
    """SQuAD 2.0: the context does not answer the question."""
    title: str = ""


def read_squad(path: str | Path, strict: bool = False) -> list[SquadExample]:
    """Read a SQuAD-format JSON file (v1.1, v2.0, CMRC 2018).

    A question without a usable id, question text or answer list is counted as malformed (named by
    its JSON path) and skipped.

    Returns:
        The examples in file order.
    """
    path = Path(path)
    try:
        with open_text(path) as fh:
            data = json.load(fh)
    except json.JSONDecodeError as exc:
        raise AlbertlmError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise AlbertlmError(f"{path}: not SQuAD format (expected an object with a \"data\" list)")
    errors = RowErrors(path, strict)
    out: list[SquadExample] = []
    for a, article in enumerate(data["data"]):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            errors(f"data[{a}]", "no paragraphs list")
            continue
        for p, para in enumerate(paragraphs):
            context = para.get("context") if isinstance(para, dict) else None
            if not isinstance(context, str) or not isinstance(para.get("qas"), list):
                errors(f"data[{a}].paragraphs[{p}]", "needs a context string and a qas list")
                continue
            for q, qa in enumerate(para["qas"]):
                where = f"data[{a}].paragraphs[{p}].qas[{q}]"
                try:
                    qid, question = str(qa["id"]), qa["question"]
                    answers = [(str(x["text"]), int(x["answer_start"])) for x in qa.get("answers", [])]
                    impossible = bool(qa.get("is_impossible", False))
                except (KeyError, TypeError, ValueError) as exc:
                    errors(where, f"malformed question ({type(exc).__name__}: {exc})")
                    continue
                if not isinstance(question, str) or not question.strip():
                    errors(where, "empty question")
                    continue
                out.append(SquadExample(qid, question.strip(), context, [] if impossible else answers,
                                        impossible, str(article.get("title", ""))))
    errors.finish(len(out))
    if not out:
        raise AlbertlmError(f"{path}: no questions")
    return out


def is_version2(examples: Sequence[SquadExample]) -> bool:
    """Whether a set has unanswerable questions (then "no answer" is a valid prediction)."""
    return any(e.is_impossible for e in examples)


def _answer_chars(ex: SquadExample) -> tuple[int, int] | None:
    """The first answer's character span [start, end) in the context; None when it cannot be found.

    An answer_start that does not point at the text (a few SQuAD answers are off by some
    characters) is replaced by the nearest occurrence of the text.
    """
    for text, start in ex.answers:
        text = text.strip()
        if text and ex.context[start:start + len(text)] == text:
            return start, start + len(text)
    for text, start in ex.answers:
        text = text.strip()
        hits, at = [], ex.context.find(text) if text else -1
        while at >= 0:
            hits.append(at)
            at = ex.context.find(text, at + 1)
        if hits:
            best = min(hits, key=lambda i: abs(i - start))
            return best, best + len(text)
    return None


def squad_features(examples: Sequence[SquadExample], tokenizer, settings: FeatureSettings,
                   train: bool = False) -> list[Feature]:
    """Windows over every context, each `[CLS] question [SEP] window [SEP]`.

    One function on purpose (longer than our 60 lines): the windowing follows the official SQuAD
    featurisation (doc_stride windows, the answer located in each) in the same order.

    Args:
        examples: the questions.
        tokenizer: an albertlm Tokenizer.
        settings: max_seq_length, doc_stride, max_query_length.
        train: add start/end positions (0, the [CLS] token, when the window holds no answer or
            the question has none); questions whose answer cannot be located are left out.
    Returns:
        Features with input_ids, token_type_ids [S] (+ start_positions, end_positions) and meta:
        span_start / span_end int [S] (the context characters of each piece, -1 outside the
        context) and max_context bool [S].
    """
    chinese = getattr(tokenizer, "chinese", False)
    queries = tokenizer.encode_batch([e.question for e in examples])
    features: list[Feature] = []
    unlocated = 0
    for i, ex in enumerate(examples):
        words = split_words(ex.context, chinese)
        encoded = encode_words(tokenizer, [w for w, _ in words], with_offsets=True)
        doc = np.concatenate([ids for ids, _ in encoded]) if encoded else np.zeros(0, np.int64)
        starts = np.array([off + s for (_, off), (_, spans) in zip(words, encoded) for s, _ in spans], dtype=np.int64)
        ends = np.array([off + e for (_, off), (_, spans) in zip(words, encoded) for _, e in spans], dtype=np.int64)
        answer = None
        if train and not ex.is_impossible:
            chars = _answer_chars(ex)
            if chars is None or not len(doc):
                unlocated += 1  # unusable for training: reported below
                continue
            first = int(np.searchsorted(ends, chars[0], side="right"))  # first piece ending after the start
            last = int(np.searchsorted(starts, chars[1], side="left")) - 1  # last piece starting before the end
            answer = (first, max(first, last))
        query = queries[i][:settings.max_query_length]
        room = settings.max_seq_length - len(query) - 3
        if room < 1:
            raise AlbertlmError(f"max_seq_length {settings.max_seq_length} leaves no room for the context "
                                f"after a {len(query)}-piece question")
        windows = []
        begin = 0
        while True:
            length = min(len(doc) - begin, room)
            windows.append((begin, length))
            if begin + length >= len(doc):
                break
            begin += min(length, settings.doc_stride)
        # the window in which each piece has the most context on both sides (official run_squad)
        best_score = np.full(len(doc), -1.0)
        best_window = np.zeros(len(doc), dtype=np.int64)
        for w, (begin, length) in enumerate(windows):
            pos = np.arange(begin, begin + length)
            score = np.minimum(pos - begin, begin + length - 1 - pos) + 0.01 * length
            better = score > best_score[pos]
            best_score[pos[better]], best_window[pos[better]] = score[better], w
        for w, (begin, length) in enumerate(windows):
            inputs = pair_inputs(query, doc[begin:begin + length], tokenizer.special_ids)
            S, offset = len(inputs["input_ids"]), len(query) + 2
            span_start = np.full(S, -1, dtype=np.int64)
            span_end = np.full(S, -1, dtype=np.int64)
            span_start[offset:offset + length] = starts[begin:begin + length]
            span_end[offset:offset + length] = ends[begin:begin + length]
            max_context = np.zeros(S, dtype=bool)
            max_context[offset:offset + length] = best_window[begin:begin + length] == w
            if train:
                s = e = 0
                if answer is not None and begin <= answer[0] and answer[1] < begin + length:
                    s, e = answer[0] - begin + offset, answer[1] - begin + offset
                inputs["start_positions"], inputs["end_positions"] = np.int64(s), np.int64(e)
            features.append(Feature(inputs, i, {"span_start": span_start, "span_end": span_end,
                                                "max_context": max_context}))
    if unlocated:
        warnings.warn(f"{unlocated:,} of {len(examples):,} training questions have an answer that is not in "
                      "their context; left out of training", MalformedDataWarning, stacklevel=2)
    return features


def squad_predictions(examples: Sequence[SquadExample], features: Sequence[Feature],
                      start_logits: Sequence[np.ndarray], end_logits: Sequence[np.ndarray],
                      settings: FeatureSettings, version2: bool) -> tuple[list[str], list[float]]:
    """The best answer text of every example from its windows' logits.

    Args:
        examples, features: as built by squad_features.
        start_logits, end_logits: per feature, float [S_feature].
        settings: n_best, max_answer_length, null_threshold.
        version2: allow "no answer".
    Returns:
        (answer text per example ("" = no answer), null score - best span score per example).
    """
    best: dict[int, tuple[float, str]] = {}
    null: dict[int, float] = {}
    for f, sl, el in zip(features, start_logits, end_logits):
        sl, el = np.asarray(sl, dtype=np.float64), np.asarray(el, dtype=np.float64)
        span_start, span_end = f.meta["span_start"], f.meta["span_end"]
        null[f.example] = min(null.get(f.example, np.inf), sl[0] + el[0])
        in_doc = span_start >= 0
        if not in_doc.any():
            continue
        k = settings.n_best
        cand_s = [s for s in np.argsort(-np.where(in_doc & f.meta["max_context"], sl, -np.inf))[:k]
                  if in_doc[s] and f.meta["max_context"][s]]
        cand_e = [e for e in np.argsort(-np.where(in_doc, el, -np.inf))[:k] if in_doc[e]]
        for s in cand_s:
            for e in cand_e:
                if e < s or e - s + 1 > settings.max_answer_length:
                    continue
                score = sl[s] + el[e]
                if f.example not in best or score > best[f.example][0]:
                    ctx = examples[f.example].context
                    best[f.example] = (score, ctx[span_start[s]:span_end[e]].strip())
    answers, odds = [], []
    for i in range(len(examples)):
        score, text = best.get(i, (-np.inf, ""))
        diff = null.get(i, np.inf) - score
        odds.append(float(diff))
        answers.append("" if version2 and diff > settings.null_threshold else text)
    return answers, odds


def write_predictions(path: str | Path, examples: Sequence[SquadExample], predictions: Sequence[str]) -> None:
    """The official evaluation script's input: a JSON object {question id: answer text}."""
    data = {ex.qid: pred for ex, pred in zip(examples, predictions)}
    atomic_write_text(path, json.dumps(data, ensure_ascii=False, indent=1) + "\n")
