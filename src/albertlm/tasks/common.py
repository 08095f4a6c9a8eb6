"""What every task family shares: features, malformed-row accounting, file lookup, word → piece encoding.

Malformed rows (a wrong number of fields, an unknown label, a line that is not JSON, ...) are
counted and skipped, never silently: each reader ends with one `MalformedDataWarning` that names
the file, how many rows it skipped and the first few `file:line: reason`. When more than
`MAX_BAD_FRACTION` of a file's rows (and at least `MIN_BAD_TO_FAIL` rows) are malformed, or none
is usable, the file is probably in another format than the task expects, and the reader raises
`AlbertlmError` instead. Readers
take `strict=True` to raise on the first malformed row.

Tasks know no network and no torch: features are numpy arrays that the training recipe pads
(`pad_batch`) and turns into tensors.
"""

from __future__ import annotations

import gzip
import io
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.tokenizer import preprocess_text
from albertlm.vocab import CJK_RANGES, IGNORE_INDEX

MAX_BAD_FRACTION = 0.1
MIN_BAD_TO_FAIL = 5
PAD_VALUES = {"input_ids": 0, "attention_mask": 0, "token_type_ids": 0, "labels": IGNORE_INDEX}  # by input name
_META = "\u2581"
_CJK = CJK_RANGES  # split one per word, as the tokenizer's Chinese mode splits them
_WORD_RE = re.compile(r"\S+")
_CJK_WORD_RE = re.compile(f"[{_CJK}]|[^\\s{_CJK}]+")


class MalformedDataWarning(UserWarning):
    """Some rows of a data file were malformed and skipped (the message names file and lines)."""


@dataclass(frozen=True)
class FeatureSettings:
    """How examples become model inputs."""

    max_seq_length: int = 128
    """Pieces per input, [CLS]/[SEP] included."""
    doc_stride: int = 128
    """QA: pieces between the starts of two windows over a long context."""
    max_query_length: int = 64
    """QA: question pieces kept."""
    max_answer_length: int = 30
    """QA: longest predicted answer, in pieces."""
    n_best: int = 20
    """QA: start and end candidates considered per window."""
    null_threshold: float = 0.0
    """SQuAD 2.0: predict no answer when null score - best span score exceeds this."""
    max_qa_length: int = 128
    """Multiple choice: pieces of question + option kept (from the end, where the option is)."""


@dataclass
class Feature:
    """One model input built from (part of) one example."""

    inputs: dict[str, np.ndarray]
    """Model inputs and training targets: input_ids, token_type_ids [S] (or [C, S]), labels, ..."""
    example: int
    """Index of the example it was built from (long contexts give several features)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """What post-processing needs (piece → character spans, word ids, ...)."""

    def __len__(self) -> int:
        return int(self.inputs["input_ids"].shape[-1])


# ---------------------------------------------------------------------------- malformed rows
class RowErrors:
    """Counts malformed rows of one file and reports them once (see the module docstring)."""

    def __init__(self, path: str | Path, strict: bool = False, keep: int = 3):
        self.path, self.strict, self.keep = str(path), strict, keep
        self.count = 0
        self.first: list[str] = []

    def __call__(self, line: int | str, reason: str) -> None:
        """Record that row `line` (1-based line number, or a JSON path) was malformed and skipped."""
        where = f"{self.path}:{line}: {reason}"
        if self.strict:
            raise AlbertlmError(where)
        self.count += 1
        if len(self.first) < self.keep:
            self.first.append(where)

    def finish(self, good: int) -> None:
        """Warn about skipped rows, or raise when too many were malformed; `good` = rows kept."""
        if not self.count:
            return
        total = good + self.count
        if good == 0 or (self.count >= MIN_BAD_TO_FAIL and self.count > MAX_BAD_FRACTION * total):
            raise AlbertlmError(f"{self.first[0]} ({self.count:,} of {total:,} rows malformed: is this "
                                "the right file for the task?)")
        more = f" (first: {'; '.join(self.first)})"
        warnings.warn(f"{self.path}: skipped {self.count:,} malformed of {total:,} rows{more}",
                      MalformedDataWarning, stacklevel=3)


# ---------------------------------------------------------------------------- files
def open_text(path: str | Path) -> io.TextIOBase:
    """A text file as UTF-8 (a BOM is dropped); `.gz` files are decompressed on the fly."""
    path = Path(path)
    if not path.is_file():
        raise AlbertlmError(f"{path}: no such file")
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", newline="")
    return open(path, encoding="utf-8-sig", newline="")


def numbered_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its newline) for every line of a text file."""
    try:
        with open_text(path) as fh:
            for n, line in enumerate(fh, 1):
                yield n, line.rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise AlbertlmError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def find_file(data_dir: str | Path, candidates: Sequence[str], split: str) -> Path:
    """The first of `candidates` that exists in `data_dir` (a file path is returned as is)."""
    data_dir = Path(data_dir)
    if data_dir.is_file():
        return data_dir
    for name in candidates:
        if (data_dir / name).exists():
            return data_dir / name
    raise AlbertlmError(f"{data_dir}: no {split} file (looked for {', '.join(candidates)})")


# ---------------------------------------------------------------------------- encoding
def split_words(text: str, chinese: bool = False) -> list[tuple[str, int]]:
    """Words of `text` with their character offsets: whitespace runs, and each CJK character alone
    in Chinese mode (the tokenizer gives those one piece each).

    Returns:
        [(word, start char)].
    """
    pattern = _CJK_WORD_RE if chinese else _WORD_RE
    return [(m.group(), m.start()) for m in pattern.finditer(text)]


def _piece_offsets(pieces: Sequence[str], word: str, prepared: str) -> list[tuple[int, int]] | None:
    """Character spans of a word's pieces inside the word, or None when they cannot be aligned.

    Exact when pre-processing kept the word's length (lower-casing ASCII, most text): each piece
    covers as many characters as its surface (without the leading "▁"); a single <unk> covers what
    the known pieces leave over.
    """
    if len(prepared) != len(word):
        return None
    lengths = [None if p == "<unk>" else len(p.lstrip(_META)) for p in pieces]
    unknown = [i for i, n in enumerate(lengths) if n is None]
    known = sum(n for n in lengths if n is not None)
    if len(unknown) > 1 or known > len(word) or (not unknown and known != len(word)):
        return None
    if unknown:
        lengths[unknown[0]] = len(word) - known
    spans, pos = [], 0
    for n in lengths:
        spans.append((pos, pos + n))
        pos += n
    return spans


def encode_words(tokenizer, words: Sequence[str], with_offsets: bool = False
                 ) -> list[tuple[np.ndarray, list[tuple[int, int]] | None]]:
    """Encode each word on its own (one batched tokenizer call); every word gets at least one piece.

    SentencePiece and WordPiece never join pieces across whitespace, so encoding words one by one
    gives the same pieces as encoding the whole text; it also tells which word each piece belongs to.
    Piece spans come from the vocabulary when it knows them exactly (`encode_batch_with_offsets`,
    WordPiece), else from the pieces' surfaces.

    Args:
        tokenizer: an albertlm vocabulary (encode_batch, convert_ids_to_tokens, special_ids).
        words: the words.
        with_offsets: also return each piece's character span inside its word.
    Returns:
        [(ids int32 [n >= 1], [(start, end)] per piece or None)] per word; a word that encodes to
        nothing (a control character) becomes one <unk>. Spans that cannot be aligned exactly
        (pre-processing changed the word's length) cover the whole word.
    """
    # Words repeat a lot (a Chinese NER corpus is ~2M characters of ~5k kinds): encode each kind once.
    unique = list(dict.fromkeys(words))
    done: dict[str, tuple[np.ndarray, list[tuple[int, int]] | None]] = {}
    exact = getattr(tokenizer, "encode_batch_with_offsets", None) if with_offsets else None
    if exact is not None:
        encoded = exact(unique) if unique else []
    else:
        encoded = [(ids, None) for ids in (tokenizer.encode_batch(unique) if unique else [])]
    for word, (ids, spans) in zip(unique, encoded):
        if len(ids) == 0:
            ids, spans = np.array([tokenizer.special_ids.unk], dtype=np.int32), None
        if with_offsets and spans is None:
            prepared = preprocess_text(word, do_lower_case=getattr(tokenizer, "do_lower_case", True),
                                       keep_accents=getattr(tokenizer, "keep_accents", False))
            spans = _piece_offsets(tokenizer.convert_ids_to_tokens(ids), word, prepared)
            if spans is None:
                spans = [(0, len(word))] * len(ids)
        done[word] = (np.asarray(ids, dtype=np.int32), spans)
    return [done[w] for w in words]


def truncate_pair(a: np.ndarray, b: np.ndarray | None, max_pieces: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Trim the longer of two piece sequences, one piece at a time from its end, until they fit
    (BERT/ALBERT's `_truncate_seq_pair`)."""
    la, lb = len(a), 0 if b is None else len(b)
    while la + lb > max_pieces:
        if la >= lb:
            la -= 1
        else:
            lb -= 1
    return a[:la], (None if b is None else b[:lb])


def pad_batch(features: Sequence[Feature]) -> dict[str, np.ndarray]:
    """Stack features into one batch, padding the last axis of sequence arrays to the longest.

    input_ids / token_type_ids pad with 0, integer labels (token tags) with -100; an
    attention_mask (1 = token) is added. Float label vectors (multi-label) are stacked as they are.

    Returns:
        {name: array [B, ...]}.
    """
    length = max(len(f) for f in features)
    out: dict[str, np.ndarray] = {}
    names = list(features[0].inputs)
    for name in names:
        arrays = [f.inputs[name] for f in features]
        if arrays[0].ndim == 0:
            out[name] = np.stack(arrays)
            continue
        # Sequence arrays pad to the batch's length; a float `labels` vector (multi-label
        # targets, [num_labels]) is not a sequence and has the same length in every feature.
        is_sequence = name in PAD_VALUES and not (name == "labels" and arrays[0].dtype.kind == "f")
        target = length if is_sequence else max(a.shape[-1] for a in arrays)
        padded = [np.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, target - a.shape[-1])],
                         constant_values=PAD_VALUES.get(name, 0)) for a in arrays]
        out[name] = np.stack(padded)
    # A feature that pads internally (the choices of a multiple-choice question) brings its own mask.
    mask = [f.inputs.get("attention_mask", np.ones(f.inputs["input_ids"].shape, dtype=np.int64)) for f in features]
    out["attention_mask"] = np.stack([np.pad(m, [(0, 0)] * (m.ndim - 1) + [(0, length - m.shape[-1])])
                                      for m in mask])
    return out
