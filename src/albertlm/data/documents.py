"""What every corpus reader yields and counts: `Document`, `CorpusStats` and its one-line report.

The readers themselves live in `data/corpus.py` (text files) and `data/columnar.py` (Parquet and
Arrow); both make their documents through `text_document`, so a text reads into the same
sentences whatever the file format it came in.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from albertlm.data.sentences import split_sentences

DEFAULT_MAX_LINE_CHARS = 1_000_000


@dataclass
class Document:
    """One document: its sentences in order, and where it starts (for error messages).

    Attributes:
        sentences: non-empty, stripped sentence strings.
        source: the file it came from.
        line: 1-based line number of its first line in `source` (for Parquet and Arrow files: its
            1-based row number in the file).
        corpus: index of the corpus SPEC it came from, in the order the specs were given.
    """

    sentences: list[str]
    source: str
    line: int
    corpus: int = 0

    @property
    def where(self) -> str:
        """`file:line` of the document's first line (`file:row` for a columnar file)."""
        return f"{self.source}:{self.line}"


PROBLEMS = {  # counter name -> how the report describes it
    "bad_utf8": "line(s) with invalid UTF-8",
    "long_lines": "over-long line(s) or row(s)",
    "bad_json": "unreadable JSONL record(s)",
    "null_rows": "null row(s)",
    "empty_documents": "empty document(s)",
}


@dataclass
class CorpusStats:
    """Counts of what a pass over a corpus read and skipped.

    `examples[kind]` keeps the first few `file:line` (or `file:row`) locations of each skipped kind
    (`bad_utf8`, `long_lines`, `bad_json`, `null_rows`, `empty_documents`).
    """

    files: int = 0
    documents: int = 0
    sentences: int = 0
    bad_utf8: int = 0
    long_lines: int = 0
    bad_json: int = 0
    null_rows: int = 0
    empty_documents: int = 0
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS
    examples: dict[str, list[str]] = field(default_factory=dict)
    max_examples: int = 5

    def note(self, kind: str, source: str | os.PathLike, line: int) -> None:
        """Count one skipped item of `kind` at `source:line`."""
        setattr(self, kind, getattr(self, kind) + 1)
        where = self.examples.setdefault(kind, [])
        if len(where) < self.max_examples:
            where.append(f"{source}:{line}")

    @property
    def skipped(self) -> int:
        """Total number of skipped items of every kind."""
        return sum(getattr(self, kind) for kind in PROBLEMS)


def format_corpus_stats(stats: CorpusStats, max_locations: int = 3) -> str:
    """A one-paragraph (single-line) summary of a corpus pass, naming the first bad locations.

    Args:
        stats: the counters of a finished (or interrupted) pass.
        max_locations: how many `file:line` locations to list per problem kind.
    Returns:
        e.g. "Read 3 files: 120 documents, 4,031 sentences. Skipped 2 line(s) with invalid
        UTF-8 (a.txt:5, b.txt:9)."
    """
    text = (f"Read {stats.files:,} file(s): {stats.documents:,} document(s), "
            f"{stats.sentences:,} sentence(s).")
    parts = []
    for kind, what in PROBLEMS.items():
        count = getattr(stats, kind)
        if count:
            if kind == "long_lines":
                what = f"{what} (> {stats.max_line_chars:,} characters)"
            where = stats.examples.get(kind, [])[:max_locations]
            more = ", ..." if count > len(where) else ""
            parts.append(f"{count:,} {what} ({', '.join(where)}{more})")
    if parts:
        text += " Skipped " + "; ".join(parts) + "."
    return text


def text_document(text: str, path: Path | str, line: int, stats: CorpusStats) -> Iterator[Document]:
    """The text's sentences (`split_sentences`) as one document, or nothing (counted) when it has none."""
    sentences = split_sentences(text)
    if sentences:
        yield Document(sentences, str(path), line)
    else:
        stats.note("empty_documents", path, line)
