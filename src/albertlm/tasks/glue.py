"""Sentence and sentence-pair classification / regression: GLUE, the Chinese sets, generic tables.

Readers turn a file into `TextExample`s through a `Columns` spec (names for files with a header,
0-based indices for files without one):

    GLUE TSV       SST-2, CoLA (no header: source, label, original judgement, sentence), MRPC
                   (UTF-8 BOM), STS-B (float score), RTE, QNLI, MNLI, QQP, WNLI; read with quoting
                   off, as the files contain unbalanced quotes
    Chinese        ChnSentiCorp (TSV `label, text_a`), LCQMC and AFQMC (TSV without header, or CLUE
                   JSON lines), TNEWS (TSV `sentence, label_desc`, or CLUE JSON lines; labels.json)
    generic        .tsv/.txt, .csv (quoted fields may span lines), .jsonl/.json with named columns;
                   a JSON list label means multi-label

Features are `[CLS] A [SEP] (B [SEP])` with the longer text trimmed first; predictions are written
as GLUE's submission TSV (`index<TAB>prediction`).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.tasks.common import Feature, FeatureSettings, RowErrors, numbered_lines, open_text, truncate_pair
from albertlm.utils import atomic_write_text
from albertlm.vocab import pair_inputs

Label = str | float | list[str] | None


@dataclass
class TextExample:
    """One sentence (pair) and its label."""

    guid: str
    """Identifier: the file's index column, or split-line."""
    text_a: str
    """First (or only) text."""
    text_b: str | None = None
    """Second text of a pair."""
    label: Label = None
    """Class name (str), target (float, regression), class names (list, multi-label) or None (test)."""


@dataclass(frozen=True)
class Columns:
    """Where a table keeps its fields: header names, or 0-based indices when `header` is False."""

    text_a: str | int
    """Column of the first text."""
    text_b: str | int | None = None
    """Column of the second text, for pairs."""
    label: str | int | None = "label"
    """Column of the label (absent in test files: then examples have no label)."""
    header: bool = True
    """The first line names the columns."""
    guid: str | int | None = None
    """Column with an example id (default: the line number)."""


# ---------------------------------------------------------------------------- readers
def _convert_label(raw: Any, kind: str, labels: Sequence[str] | None) -> Label:
    """The label in its type; raises ValueError with a reason for the malformed-row report."""
    if kind == "regression":
        value = float(raw)
        if not np.isfinite(value):
            raise ValueError(f"label {raw!r} is not a finite number")
        return value
    if kind == "multi_label_classification":
        values = raw if isinstance(raw, list) else [v for v in str(raw).split(",") if v.strip()]
        values = [str(v).strip() for v in values]
        unknown = [v for v in values if labels is not None and v not in labels]
        if unknown:
            raise ValueError(f"unknown label {unknown[0]!r}")
        return values
    value = str(raw).strip()
    if labels is not None and value not in labels:
        shown = ", ".join(labels[:8]) + (", ..." if len(labels) > 8 else "")
        raise ValueError(f"unknown label {value!r} (expected one of {shown})")
    return value


def _rows_tsv(path: Path, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    for n, line in numbered_lines(path):
        if line.strip():
            yield n, line.split(delimiter)


def _rows_csv(path: Path) -> Iterator[tuple[int, list[str]]]:
    with open_text(path) as fh:
        reader = csv.reader(fh)
        try:
            for row in reader:
                if any(cell.strip() for cell in row):
                    yield reader.line_num, row
        except csv.Error as exc:
            raise AlbertlmError(f"{path}:{reader.line_num}: CSV error: {exc}") from None


def _header_index(path: Path, n: int, fields: list[str], columns: Columns) -> dict[str, int]:
    """{column name: position} from a header row; every named text or id column must be there."""
    index = {name.strip(): i for i, name in enumerate(fields)}
    for name in (columns.text_a, columns.text_b, columns.guid):
        if name is not None and name not in index:
            raise AlbertlmError(f"{path}:{n}: no column {name!r} in the header ({', '.join(index)})")
    return index


def _positions(columns: Columns, index: dict[str, int]) -> tuple[int | None, ...]:
    """The field positions of (text_a, text_b, label, guid): by header name, or given as numbers."""
    def col(spec: str | int | None) -> int | None:
        if spec is None:
            return None
        return index.get(spec) if columns.header else int(spec)

    return col(columns.text_a), col(columns.text_b), col(columns.label), col(columns.guid)


def _row_example(fields: list[str], n: int, positions: tuple[int | None, ...], width: int | None, kind: str,
                 labels: Sequence[str] | None, split: str) -> TextExample:
    """One row as an example; raises ValueError (the row's complaint) for a malformed row."""
    ia, ib, il, ig = positions
    needed = 1 + max(i for i in positions if i is not None)
    if (width is not None and len(fields) != width) or len(fields) < needed:
        raise ValueError(f"expected {width or needed} fields, found {len(fields)}")
    text_a = fields[ia].strip()
    text_b = fields[ib].strip() if ib is not None else None
    if not text_a or (ib is not None and not text_b):
        raise ValueError("empty text")
    label = _convert_label(fields[il], kind, labels) if il is not None else None
    guid = fields[ig].strip() if ig is not None else f"{split}-{n}"
    return TextExample(guid, text_a, text_b, label)


def read_table(path: str | Path, columns: Columns, *, kind: str = "single_label_classification",
               labels: Sequence[str] | None = None, split: str = "train", strict: bool = False,
               transform: Callable[[TextExample], TextExample] | None = None) -> list[TextExample]:
    """Read a TSV/CSV/JSON-lines table into examples; malformed rows are counted and skipped.

    Args:
        path: the file; `.csv` is parsed as CSV, `.jsonl`/`.json` as JSON lines (or one JSON
            list), anything else as tab-separated with quoting off.
        columns: where the fields are.
        kind: single_label_classification, multi_label_classification or regression.
        labels: the allowed class names (None: any).
        split: used in generated ids.
        strict: raise on the first malformed row.
        transform: applied to every example (e.g. to map label codes to names).
    Returns:
        The examples in file order.
    Raises:
        AlbertlmError: missing file or column, or too many malformed rows (see tasks/common.py).
    """
    path = Path(path)
    if path.suffix in (".jsonl", ".json"):
        return _read_json_lines(path, columns, kind, labels, split, strict, transform)
    errors = RowErrors(path, strict)
    rows = _rows_csv(path) if path.suffix == ".csv" else _rows_tsv(path, "\t")
    index: dict[str, int] = {}
    width = positions = None
    examples: list[TextExample] = []
    for n, fields in rows:
        if columns.header and width is None:
            index, width = _header_index(path, n, fields, columns), len(fields)
            continue
        if positions is None:
            positions = _positions(columns, index)
        try:
            ex = _row_example(fields, n, positions, width, kind, labels, split)
        except ValueError as exc:
            errors(n, str(exc))
            continue
        examples.append(transform(ex) if transform else ex)
    errors.finish(len(examples))
    if not examples:
        raise AlbertlmError(f"{path}: no examples")
    return examples


def _read_json_lines(path: Path, columns: Columns, kind: str, labels: Sequence[str] | None, split: str,
                     strict: bool, transform) -> list[TextExample]:
    errors = RowErrors(path, strict)
    records: list[tuple[int, Any]] = []
    lines = list(numbered_lines(path))
    first = next((line for _, line in lines if line.strip()), "")
    if first.lstrip().startswith("["):  # one JSON list instead of JSON lines
        try:
            records = list(enumerate(json.loads("\n".join(line for _, line in lines)), 1))
        except json.JSONDecodeError as exc:
            raise AlbertlmError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    else:
        for n, line in lines:
            if not line.strip():
                continue
            try:
                records.append((n, json.loads(line)))
            except json.JSONDecodeError as exc:
                errors(n, f"invalid JSON ({exc.msg})")
    examples = []
    for n, rec in records:
        if not isinstance(rec, dict):
            errors(n, "expected a JSON object")
            continue
        text_a = rec.get(columns.text_a)
        text_b = rec.get(columns.text_b) if columns.text_b is not None else None
        if not isinstance(text_a, str) or not text_a.strip() or (columns.text_b is not None and
                                                                (not isinstance(text_b, str) or not text_b.strip())):
            pair = f"/{columns.text_b!r}" if columns.text_b else ""
            errors(n, f"missing or empty text field {columns.text_a!r}{pair}")
            continue
        label = None
        if columns.label is not None and columns.label in rec:
            try:
                label = _convert_label(rec[columns.label], kind, labels)
            except (ValueError, TypeError) as exc:
                errors(n, str(exc))
                continue
        guid = str(rec.get(columns.guid if columns.guid is not None else "id", f"{split}-{n}"))
        ex = TextExample(guid, text_a.strip(), text_b.strip() if text_b is not None else None, label)
        examples.append(transform(ex) if transform else ex)
    errors.finish(len(examples))
    if not examples:
        raise AlbertlmError(f"{path}: no examples")
    return examples


def read_tnews_labels(path: str | Path) -> list[str]:
    """TNEWS's labels.json (JSON lines `{"label": "100", "label_desc": "news_story"}`): the names, in code order."""
    out = []
    for n, line in numbered_lines(path):
        if line.strip():
            try:
                out.append(json.loads(line)["label_desc"])
            except (json.JSONDecodeError, KeyError, TypeError):
                raise AlbertlmError(f"{path}:{n}: expected {{\"label\": ..., \"label_desc\": ...}}") from None
    return out


# ---------------------------------------------------------------------------- features
def classification_features(examples: Sequence[TextExample], tokenizer, labels: Sequence[str] | None,
                            kind: str, settings: FeatureSettings) -> list[Feature]:
    """`[CLS] A [SEP] (B [SEP])` per example, longest text trimmed first.

    Args:
        examples: the examples.
        tokenizer: an albertlm Tokenizer.
        labels: class names (their order gives the ids); None for regression.
        kind: single_label_classification, multi_label_classification or regression.
        settings: max_seq_length.
    Returns:
        One Feature per example: input_ids, token_type_ids [S] and, when labelled, labels
        (int64 scalar, float32 scalar, or float32 [num_labels] 0/1 for multi-label).
    """
    label2id = {name: i for i, name in enumerate(labels or [])}
    a_ids = tokenizer.encode_batch([e.text_a for e in examples])
    pairs = [i for i, e in enumerate(examples) if e.text_b is not None]
    b_ids = dict(zip(pairs, tokenizer.encode_batch([examples[i].text_b for i in pairs])))
    features = []
    for i, ex in enumerate(examples):
        b = b_ids.get(i)
        a, b = truncate_pair(a_ids[i], b, settings.max_seq_length - (3 if b is not None else 2))
        inputs = pair_inputs(a, b, tokenizer.special_ids)
        if ex.label is not None:
            if kind == "regression":
                inputs["labels"] = np.float32(ex.label)
            elif kind == "multi_label_classification":
                vec = np.zeros(len(label2id), dtype=np.float32)
                vec[[label2id[name] for name in ex.label]] = 1.0
                inputs["labels"] = vec
            else:
                inputs["labels"] = np.int64(label2id[ex.label])
        features.append(Feature(inputs, i))
    return features


def classification_predictions(logits: np.ndarray, labels: Sequence[str] | None, kind: str) -> list[Label]:
    """Model outputs → predicted labels.

    Args:
        logits: [N, num_labels] ([N, 1] for regression), one row per example.
        labels: class names by id.
        kind: the problem type.
    Returns:
        Class names (argmax), floats (regression) or lists of names with sigmoid > 0.5.
    """
    if kind == "regression":
        return [float(x) for x in logits.reshape(len(logits), -1)[:, 0]]
    if kind == "multi_label_classification":
        return [[labels[j] for j in np.flatnonzero(row > 0.0)] for row in logits]  # sigmoid > 0.5
    return [labels[j] for j in logits.argmax(-1)]


def write_predictions(path: str | Path, examples: Sequence[TextExample], predictions: Sequence[Label]) -> None:
    """GLUE's submission format: `index<TAB>prediction`, one row per example, with a header."""
    lines = ["index\tprediction"]
    for i, pred in enumerate(predictions):
        value = ",".join(pred) if isinstance(pred, list) else (f"{pred:.4f}" if isinstance(pred, float) else pred)
        lines.append(f"{i}\t{value}")
    atomic_write_text(path, "\n".join(lines) + "\n")
