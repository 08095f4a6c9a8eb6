"""Parquet and Arrow corpora, and local Hugging Face dataset directories, read through pyarrow.

One row is one document: the text in its column (default "text") is split into sentences as the
`docs` format splits a line (`documents.text_document`). Nothing is held whole:

- a Parquet file is read one row group at a time (`ParquetFile.read_row_group`); only that row
  group's column is decoded, and it is turned into Python strings `_PY_ROWS` rows at a time;
- an Arrow IPC file (file or stream format, as `datasets.save_to_disk` writes) is read one record
  batch at a time.

Both are read through ordinary buffered reads, not memory maps: the pages of a mapped file stay in
the process's resident set once touched, so a pass over a mapped 40 MB file grew peak RSS by 40 MB,
against 8 MB read row group by row group (`tests/test_columnar.py`, the memory test).

A column that is not text (strings) is an `AlbertlmError` naming the file, row group (or record
batch) and column; a missing column names the columns the file has. Null rows are counted as
`null_rows`, empty ones as `empty_documents`, rows over `max_line_chars` as `long_lines`, each with
its `file:row` (1-based row number in the file). pyarrow is optional (`pip install 'albertlm[data]'`)
and imported only when a columnar file is read; nothing here ever reaches the network.

Hugging Face directories (`hf:DIR[:SPLIT[:COLUMN]]`, `hf_files`):
    DIR/dataset_dict.json + DIR/SPLIT/state.json     `DatasetDict.save_to_disk`
    DIR/state.json                                   `Dataset.save_to_disk` (one split)
    any other DIR                                    Parquet / Arrow files below it; a file belongs
                                                     to split S when a folder is named S or its
                                                     name holds S between - _ . / (train-00000-of-00002.parquet,
                                                     data/test.parquet, imdb-train.arrow)
The default split is "train" (or the only one there is).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from albertlm.data.documents import CorpusStats, Document, text_document
from albertlm.errors import AlbertlmError

COLUMNAR_SUFFIXES = {".parquet": "parquet", ".arrow": "arrow"}
INSTALL_HINT = "pip install 'albertlm[data]'"
KNOWN_SPLITS = ("train", "validation", "valid", "dev", "test", "eval")
DEFAULT_SPLIT = "train"
_PY_ROWS = 1024  # rows turned into Python strings at once


def pyarrow(what: str):
    """The pyarrow module (with .parquet and .ipc loaded), or a one-line error naming the extra to install.

    Args:
        what: what needs it, for the message (e.g. "corpus 'parquet:x/*.parquet'").
    """
    try:
        import pyarrow as pa
        import pyarrow.ipc  # noqa: F401 - loads pa.ipc
        import pyarrow.parquet  # noqa: F401 - loads pa.parquet
    except ImportError:
        raise AlbertlmError(f"{what}: reading Parquet and Arrow files needs pyarrow: {INSTALL_HINT}") from None
    return pa


# ------------------------------------------------------------------------------ the readers
def parquet_documents(path: Path, stats: CorpusStats, max_chars: int, column: str) -> Iterator[Document]:
    """One document per row of `column`, read one row group at a time.

    Args:
        path: a Parquet file.
        stats: counters of the pass (null, empty and over-long rows are noted there).
        max_chars: rows longer than this are skipped (`long_lines`).
        column: the text column.
    Returns:
        an iterator of Documents whose `line` is the 1-based row number in the file.
    """
    pa = pyarrow(str(path))
    try:
        parquet = pa.parquet.ParquetFile(str(path), memory_map=False)  # module docstring: RSS
    except (pa.ArrowException, OSError) as exc:
        raise AlbertlmError(f"{path}: cannot read as Parquet: {_one_line(exc)}") from None
    _check_has_column(parquet.schema_arrow.names, column, path)
    row = 0
    for group in range(parquet.num_row_groups):
        try:
            values = parquet.read_row_group(group, columns=[column]).column(0)
        except (pa.ArrowException, OSError) as exc:
            raise AlbertlmError(f"{path}: row group {group}: cannot read: {_one_line(exc)}") from None
        values = _text_values(pa, values, path, f"row group {group}", column)
        yield from _row_documents(values, path, row, stats, max_chars)
        row += len(values)
        del values  # the next row group is read with this one released


def arrow_documents(path: Path, stats: CorpusStats, max_chars: int, column: str) -> Iterator[Document]:
    """One document per row of `column` of an Arrow IPC file (file or stream format), one record
    batch at a time.

    Args and Returns: as `parquet_documents`.
    """
    pa = pyarrow(str(path))
    try:
        source = pa.OSFile(str(path))  # buffered reads, not a memory map (module docstring)
    except (pa.ArrowException, OSError) as exc:
        raise AlbertlmError(f"{path}: cannot read: {_one_line(exc)}") from None
    with source:
        try:
            reader = pa.ipc.open_file(source)
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
        except pa.ArrowInvalid:  # not the file format: the stream format (what save_to_disk writes)
            source.seek(0)
            try:
                reader = pa.ipc.open_stream(source)
            except (pa.ArrowException, OSError) as exc:
                raise AlbertlmError(f"{path}: cannot read as Arrow IPC: {_one_line(exc)}") from None
            batches = iter(reader)
        _check_has_column(reader.schema.names, column, path)
        row, index = 0, 0
        while True:
            try:
                batch = next(batches, None)
            except (pa.ArrowException, OSError) as exc:
                raise AlbertlmError(f"{path}: record batch {index}: cannot read: {_one_line(exc)}") from None
            if batch is None:
                return
            values = _text_values(pa, batch.column(column), path, f"record batch {index}", column)
            del batch
            yield from _row_documents(values, path, row, stats, max_chars)
            row, index = row + len(values), index + 1


def _check_has_column(names: list[str], column: str, path: Path) -> None:
    if column not in names:
        raise AlbertlmError(f"{path}: no column {column!r} (columns: {', '.join(names) or 'none'}); "
                            "name the text column as the spec's last part, e.g. parquet:FILES:COLUMN")


def _text_values(pa, values, path: Path, where: str, column: str):
    """The column as an array of strings, or a one-line error naming file, place and column."""
    kind = values.type
    if pa.types.is_dictionary(kind) and _is_text(pa, kind.value_type):
        return values.cast(kind.value_type)
    if not _is_text(pa, kind):
        raise AlbertlmError(f"{path}: {where}: column {column!r} holds {kind}, not text (strings)")
    return values


def _is_text(pa, kind) -> bool:
    view = getattr(pa.types, "is_string_view", None)
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or bool(view and view(kind))


def _row_documents(values, path: Path, first_row: int, stats: CorpusStats, max_chars: int) -> Iterator[Document]:
    """Documents of an array of strings whose first element is row `first_row` (0-based) of the file."""
    for start in range(0, len(values), _PY_ROWS):
        for k, text in enumerate(values.slice(start, _PY_ROWS).to_pylist()):
            row = first_row + start + k + 1
            if text is None:
                stats.note("null_rows", path, row)
            elif len(text) > max_chars:
                stats.note("long_lines", path, row)
            else:
                yield from text_document(text, path, row, stats)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


# ------------------------------------------------------------------------- which files to read
def is_saved_dataset(directory: Path) -> bool:
    """Whether a directory is a `datasets.save_to_disk` output (a Dataset or a DatasetDict)."""
    return (directory / "dataset_dict.json").is_file() or (directory / "state.json").is_file()


def saved_dataset_files(directory: Path, what: str) -> list[Path]:
    """The Arrow files of a `Dataset.save_to_disk` directory, in the order its state.json lists them."""
    state = _read_json(directory / "state.json", what)
    entries = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("filename"), str)
                                                for e in entries):
        raise AlbertlmError(f"{what}: {directory / 'state.json'}: no list of data files (_data_files)")
    files = [directory / e["filename"] for e in entries]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise AlbertlmError(f"{what}: {directory / 'state.json'} lists {missing[0]}, which does not exist")
    return files


def hf_files(directory: Path, split: str | None, what: str) -> list[Path]:
    """The Parquet / Arrow files of one split of a local Hugging Face dataset directory (module docstring).

    Args:
        directory: the dataset's directory; it must exist (nothing is downloaded).
        split: the split, or None for "train" (or the only split there is).
        what: the spec, for messages.
    Returns:
        a non-empty, sorted list of files.
    """
    if not directory.is_dir():
        raise AlbertlmError(
            f"{what}: {str(directory)!r} is not a local directory; albertlm reads Hugging Face datasets offline "
            "only: save it first (datasets.load_dataset(NAME).save_to_disk(DIR), or download the dataset's "
            "Parquet files into DIR) and give hf:DIR")
    if (directory / "dataset_dict.json").is_file():
        splits = _read_json(directory / "dataset_dict.json", what).get("splits")
        if not isinstance(splits, list) or not all(isinstance(s, str) for s in splits):
            raise AlbertlmError(f"{what}: {directory / 'dataset_dict.json'}: no list of splits")
        return saved_dataset_files(directory / _choose_split(splits, split, directory, what), what)
    if (directory / "state.json").is_file():
        saved = _read_json(directory / "state.json", what).get("_split")
        if split is not None and split != saved:
            raise AlbertlmError(f"{what}: {directory} holds one saved Dataset (split {saved!r}), not a split "
                                f"{split!r}; leave the split out")
        return saved_dataset_files(directory, what)
    files = sorted(p for p in directory.rglob("*") if p.suffix in COLUMNAR_SUFFIXES and p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(directory).parts))
    if not files:
        raise AlbertlmError(f"{what}: {directory} holds no .parquet or .arrow file (nor a save_to_disk layout)")
    found = [s for s in KNOWN_SPLITS if any(_in_split(p.relative_to(directory), s) for p in files)]
    if split is None and not found:
        return files  # no split names at all: one split
    chosen = _choose_split(found, split, directory, what) if split is None else split
    picked = [p for p in files if _in_split(p.relative_to(directory), chosen)]
    if not picked:
        raise AlbertlmError(f"{what}: {directory} has no files of split {chosen!r} "
                            f"(splits found: {', '.join(found) or 'none'})")
    return picked


def _choose_split(splits: list[str], split: str | None, directory: Path, what: str) -> str:
    """The split asked for, else "train", else the only split there is."""
    if split is not None:
        if split not in splits:
            raise AlbertlmError(f"{what}: {directory} has no split {split!r} (splits: {', '.join(splits)})")
        return split
    if DEFAULT_SPLIT in splits:
        return DEFAULT_SPLIT
    if len(splits) == 1:
        return splits[0]
    raise AlbertlmError(f"{what}: {directory} has no {DEFAULT_SPLIT!r} split; name one of {', '.join(splits)} "
                        "(hf:DIR:SPLIT)")


def _in_split(relative: Path, split: str) -> bool:
    return re.search(rf"(^|[-_./]){re.escape(split)}($|[-_./])", relative.as_posix()) is not None


def _read_json(path: Path, what: str) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AlbertlmError(f"{what}: {path}: unreadable ({_one_line(exc)})") from None
    if not isinstance(value, dict):
        raise AlbertlmError(f"{what}: {path}: not a JSON object")
    return value
