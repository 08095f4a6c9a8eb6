"""Multiple-choice reading comprehension: RACE-style JSON.

RACE ships one JSON object per article file, in `train/high/*.txt`, `train/middle/*.txt`, ...:

    {"id": "high123.txt", "article": "...", "questions": ["...", ...],
     "options": [["A text", "B text", "C text", "D text"], ...], "answers": ["B", ...]}

`read_race` takes such a directory (recursively), one such file, a JSON list of them, or JSON lines
of them; one-question records `{"article"|"context", "question", "options", "answer"|"label"}`
are accepted too. Every question of a file must have the same number of options.

Each choice becomes `[CLS] article [SEP] question+option [SEP]` as the official ALBERT RACE code
builds it: a blank `_` in the question is filled with the option, otherwise the option is
appended; the question+option part keeps its last `max_qa_length` pieces, then the article is
trimmed first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.tasks.common import Feature, FeatureSettings, RowErrors, numbered_lines, truncate_pair
from albertlm.utils import atomic_write_text
from albertlm.vocab import pair_inputs

LETTERS = "ABCDEFGHIJ"


@dataclass
class ChoiceExample:
    """One question with its options."""

    guid: str
    """Article id and question number, e.g. "high123.txt-0"."""
    context: str
    question: str
    options: list[str]
    label: int | None = None
    """Index of the right option (0 = A), None when unknown."""


def _label_index(raw: Any, n_options: int) -> int:
    if isinstance(raw, str) and len(raw.strip()) == 1 and raw.strip().upper() in LETTERS[:n_options]:
        return LETTERS.index(raw.strip().upper())
    if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw < n_options:
        return raw
    if isinstance(raw, str) and raw.strip().isdigit() and int(raw) < n_options:
        return int(raw)
    raise ValueError(f"answer {raw!r} is not one of {LETTERS[:n_options]} or an option index")


def _records(path: Path) -> list[tuple[str, Any]]:
    """(where, JSON value) of every record in a file, directory, list or JSON-lines file."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".txt", ".json", ".jsonl"))
        if not files:
            raise AlbertlmError(f"{path}: no .txt/.json/.jsonl files")
        return [rec for f in files for rec in _records(f)]
    text = "\n".join(line for _, line in numbered_lines(path))
    try:
        value = json.loads(text)
        return [(f"{path}[{i}]", v) for i, v in enumerate(value)] if isinstance(value, list) else [(str(path), value)]
    except json.JSONDecodeError:
        pass
    out = []
    for n, line in numbered_lines(path):  # JSON lines
        if line.strip():
            try:
                out.append((f"{path}:{n}", json.loads(line)))
            except json.JSONDecodeError as exc:
                out.append((f"{path}:{n}", ValueError(f"invalid JSON ({exc.msg})")))
    return out


def read_race(path: str | Path, strict: bool = False) -> list[ChoiceExample]:
    """Read RACE-style multiple-choice data (see the module docstring); malformed records are skipped.

    Returns:
        One example per question.
    """
    path = Path(path)
    if not path.exists():
        raise AlbertlmError(f"{path}: no such file or directory")
    errors = RowErrors(path, strict)
    out: list[ChoiceExample] = []
    n_options = None
    for where, rec in _records(path):
        try:
            if isinstance(rec, Exception):
                raise rec
            if not isinstance(rec, dict):
                raise ValueError("expected a JSON object")
            context = rec.get("article", rec.get("context"))
            if "questions" in rec:
                qs, opts = rec["questions"], rec["options"]
                answers = rec.get("answers") or [None] * len(qs)
            else:
                qs, opts = [rec["question"]], [rec["options"]]
                answers = [rec.get("answer", rec.get("label"))]
            if not isinstance(context, str) or not (len(qs) == len(opts) == len(answers)):
                raise ValueError("needs an article and as many options and answers as questions")
            base = str(rec.get("id", where.rsplit("/", 1)[-1]))
            for q, (question, options, answer) in enumerate(zip(qs, opts, answers)):
                if not isinstance(options, list) or len(options) < 2 or not all(isinstance(o, str) for o in options):
                    raise ValueError(f"question {q}: options must be a list of at least 2 strings")
                n_options = n_options or len(options)
                if len(options) != n_options:
                    raise ValueError(f"question {q} has {len(options)} options, the first question had {n_options}")
                label = None if answer is None else _label_index(answer, len(options))
                out.append(ChoiceExample(f"{base}-{q}", context, str(question), list(options), label))
        except (KeyError, TypeError, ValueError) as exc:
            errors(where, f"{type(exc).__name__}: {exc}" if isinstance(exc, KeyError) else str(exc))
    errors.finish(len(out))
    if not out:
        raise AlbertlmError(f"{path}: no questions")
    return out


def choice_text(question: str, option: str) -> str:
    """The second segment of one choice: the option put into the blank, or after the question."""
    return question.replace("_", option) if "_" in question else f"{question} {option}"


def choice_features(examples: Sequence[ChoiceExample], tokenizer, settings: FeatureSettings) -> list[Feature]:
    """One Feature per question holding all its choices.

    Returns:
        Features with input_ids, token_type_ids, attention_mask [C, S] (the choices padded to
        their longest) and, when known, labels (int64 scalar).
    """
    contexts = tokenizer.encode_batch([e.context for e in examples])
    qa = tokenizer.encode_batch([choice_text(e.question, o) for e in examples for o in e.options])
    features, k = [], 0
    for i, ex in enumerate(examples):
        rows = []
        for _ in ex.options:
            b = qa[k][-settings.max_qa_length:]
            k += 1
            a, b = truncate_pair(contexts[i], b, settings.max_seq_length - 3)
            rows.append(pair_inputs(a, b, tokenizer.special_ids))
        S = max(len(r["input_ids"]) for r in rows)

        def stack(key: str) -> np.ndarray:  # [C, S], each choice padded with 0
            return np.stack([np.pad(r[key], (0, S - len(r[key]))) for r in rows])

        for r in rows:
            r["attention_mask"] = np.ones(len(r["input_ids"]), dtype=np.int64)
        inputs = {key: stack(key) for key in ("input_ids", "token_type_ids", "attention_mask")}
        if ex.label is not None:
            inputs["labels"] = np.int64(ex.label)
        features.append(Feature(inputs, i))
    return features


def choice_predictions(logits: np.ndarray) -> list[int]:
    """[N, C] scores → the chosen option index per question."""
    return [int(j) for j in np.asarray(logits).argmax(-1)]


def write_predictions(path: str | Path, examples: Sequence[ChoiceExample], predictions: Sequence[int]) -> None:
    """A JSON object {question id: option letter}."""
    data = {ex.guid: LETTERS[p] for ex, p in zip(examples, predictions)}
    atomic_write_text(path, json.dumps(data, ensure_ascii=False, indent=1) + "\n")
