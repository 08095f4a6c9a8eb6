"""Parquet, Arrow and local Hugging Face corpora (data/columnar.py): the same documents as the text
formats, the same shards, bad rows and types as one line, row-group streaming, pyarrow optional."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from albertlm.cli import main  # noqa: E402
from albertlm.data import columnar  # noqa: E402
from albertlm.data.build import BuildSettings, build_dataset  # noqa: E402
from albertlm.data.corpus import Corpus, infer_format, parse_corpus_spec  # noqa: E402
from albertlm.errors import AlbertlmError  # noqa: E402
from albertlm.tokenizer import train_tokenizer  # noqa: E402

DOCS = [[f"Document {d} sentence {i} speaks of word{(d * 7 + i) % 23} today." for i in range(1 + d % 4)]
        for d in range(48)]
TEXTS = ["\n".join(doc) for doc in DOCS]


def write_lines(path: Path, docs=DOCS) -> Path:
    path.write_text("\n\n".join("\n".join(doc) for doc in docs) + "\n")
    return path


def write_jsonl(path: Path, texts=TEXTS) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


def write_parquet(path: Path, columns: dict, row_group_size: int = 10) -> Path:
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return path


def write_arrow(path: Path, columns: dict, stream: bool = False, chunk: int = 10) -> Path:
    table = pa.table(columns)
    with pa.OSFile(str(path), "wb") as sink:
        writer = (pa.ipc.new_stream if stream else pa.ipc.new_file)(sink, table.schema)
        writer.write_table(table, max_chunksize=chunk)
        writer.close()
    return path


def docs_of(spec, **kwargs) -> list[list[str]]:
    return [d.sentences for d in Corpus(spec, **kwargs).documents()]


def _digest(directory: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(directory.glob("*.shard")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


# ---------------------------------------------------------------------------- same documents
def test_parquet_and_arrow_read_the_same_documents_as_the_text_formats(tmp_path):
    expected = docs_of(str(write_lines(tmp_path / "c.txt")))
    assert expected == DOCS
    assert docs_of(str(write_jsonl(tmp_path / "c.jsonl"))) == expected
    pqt = write_parquet(tmp_path / "c.parquet", {"id": list(range(48)), "text": TEXTS}, row_group_size=7)
    assert pq.ParquetFile(pqt).num_row_groups == 7
    assert infer_format(pqt) == "parquet" and infer_format(tmp_path / "x.arrow") == "arrow"
    for spec in (str(pqt), f"parquet:{pqt}", f"parquet:{tmp_path}/*.parquet:text", f"parquet:{tmp_path}"):
        assert docs_of(spec) == expected, spec
    for stream in (False, True):  # Arrow IPC file and stream formats
        arrow = write_arrow(tmp_path / f"s{int(stream)}.arrow", {"text": TEXTS}, stream=stream)
        assert docs_of(str(arrow)) == expected and docs_of(f"arrow:{arrow}:text") == expected
    docs = list(Corpus(str(pqt)).documents())
    assert [d.line for d in docs[:3]] == [1, 2, 3] and docs[10].where == f"{pqt}:11"  # file:row, 1-based


def test_another_column_by_spec_or_text_key(tmp_path):
    path = write_parquet(tmp_path / "c.parquet", {"text": ["Ignored."] * 3, "body": ["A one.", "B two.", "C three."]})
    assert docs_of(f"parquet:{path}:body") == [["A one."], ["B two."], ["C three."]]
    assert docs_of(str(path), text_key="body") == docs_of(f"parquet:{path}:body")
    arrow = write_arrow(tmp_path / "c.arrow", {"body": pa.array(["X y."], pa.large_string())})
    assert docs_of(f"arrow:{arrow}:body") == [["X y."]]
    cats = write_arrow(tmp_path / "d.arrow", {"text": pa.array(["P q.", "P q."]).dictionary_encode()})
    assert docs_of(str(cats)) == [["P q."], ["P q."]]  # dictionary-encoded strings are text too


def test_same_documents_give_byte_identical_shards_in_every_format(tmp_path):
    lines = write_lines(tmp_path / "c.txt")
    train_tokenizer(Corpus(str(lines)).sentences, tmp_path / "tok", vocab_size=60)
    corpora = {"lines": str(lines), "jsonl": str(write_jsonl(tmp_path / "c.jsonl")),
               "parquet": str(write_parquet(tmp_path / "c.parquet", {"text": TEXTS}, row_group_size=5)),
               "arrow": str(write_arrow(tmp_path / "c.arrow", {"text": TEXTS}, stream=True))}
    digests = {}
    for name, spec in corpora.items():
        settings = BuildSettings(max_seq_length=32, block_documents=8, heldout_fraction=0.1,
                                 workers=2 if name == "parquet" else 1)
        build_dataset(spec, tmp_path / "tok", tmp_path / name, settings, progress=False)
        digests[name] = _digest(tmp_path / name)
    assert len(set(digests.values())) == 1, digests


# ---------------------------------------------------------------------------- Hugging Face directories
def test_a_save_to_disk_directory_reads_by_split(tmp_path):
    datasets = pytest.importorskip("datasets")
    data = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": TEXTS[:30], "n": list(range(30))}),
                                 "test": datasets.Dataset.from_dict({"text": TEXTS[30:], "n": list(range(18))})})
    data.save_to_disk(str(tmp_path / "dd"))
    data["test"].save_to_disk(str(tmp_path / "one"))
    assert docs_of(f"hf:{tmp_path / 'dd'}") == DOCS[:30]  # default split: train
    assert docs_of(str(tmp_path / "dd")) == DOCS[:30]  # a save_to_disk directory given as a plain path
    assert docs_of(f"hf:{tmp_path / 'dd'}:test:text") == DOCS[30:]
    assert docs_of(f"arrow:{tmp_path / 'one'}") == DOCS[30:] == docs_of(f"hf:{tmp_path / 'one'}")
    with pytest.raises(AlbertlmError, match=r"no split 'dev' \(splits: train, test\)"):
        Corpus(f"hf:{tmp_path / 'dd'}:dev")
    with pytest.raises(AlbertlmError, match=r"column 'n' holds int64, not text"):
        list(Corpus(f"hf:{tmp_path / 'dd'}::n"))


def test_a_folder_of_parquet_files_per_split(tmp_path):
    root = tmp_path / "ds"
    (root / "data").mkdir(parents=True)
    write_parquet(root / "data" / "train-00000-of-00002.parquet", {"text": TEXTS[:20]})
    write_parquet(root / "data" / "train-00001-of-00002.parquet", {"text": TEXTS[20:40]})
    write_parquet(root / "data" / "validation-00000-of-00001.parquet", {"text": TEXTS[40:]})
    (root / "README.md").write_text("# a dataset card\n")
    assert docs_of(f"hf:{root}") == DOCS[:40]
    assert docs_of(f"hf:{root}:validation") == DOCS[40:]
    with pytest.raises(AlbertlmError, match=r"no files of split 'test' \(splits found: train, validation\)"):
        Corpus(f"hf:{root}:test")
    flat = tmp_path / "flat"  # no split names at all: one split
    flat.mkdir()
    write_parquet(flat / "part-0.parquet", {"text": TEXTS[:5]})
    assert docs_of(f"hf:{flat}") == DOCS[:5]


def test_a_dataset_that_is_not_local_is_one_line_and_never_downloaded(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AlbertlmError, match="'wikitext' is not a local directory; albertlm reads Hugging Face "
                                            "datasets offline only"):
        Corpus("hf:wikitext:train")
    assert main(["tokenizer", "train", "--input", "hf:someone/corpus", "--vocab-size", "50", "--out", "t"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hf:someone/corpus" in err and "offline" in err and not Path("t").exists()


# ---------------------------------------------------------------------------- bad rows and types
def test_null_empty_and_over_long_rows_are_skipped_with_file_row(tmp_path):
    rows = ["Fine one.", None, "   ", "x" * 50, "Fine two.", None]
    for path in (write_parquet(tmp_path / "r.parquet", {"text": rows}, row_group_size=4),
                 write_arrow(tmp_path / "r.arrow", {"text": rows}, chunk=4)):
        corpus = Corpus(str(path), max_line_chars=20)
        assert [d.sentences for d in corpus] == [["Fine one."], ["Fine two."]]
        stats = corpus.stats
        assert stats.null_rows == 2 and stats.examples["null_rows"] == [f"{path}:2", f"{path}:6"]
        assert stats.empty_documents == 1 and stats.examples["empty_documents"] == [f"{path}:3"]
        assert stats.long_lines == 1 and stats.examples["long_lines"] == [f"{path}:4"]


def test_a_column_that_is_not_text_is_one_line_naming_file_row_group_and_column(tmp_path, capsys):
    path = write_parquet(tmp_path / "n.parquet", {"text": TEXTS[:4], "score": [1.5, 2.0, 3.0, 4.0]})
    with pytest.raises(AlbertlmError, match=rf"{path}: row group 0: column 'score' holds double, not text"):
        list(Corpus(f"parquet:{path}:score"))
    arrow = write_arrow(tmp_path / "n.arrow", {"text": [[1, 2], [3]]})
    with pytest.raises(AlbertlmError, match=rf"{arrow}: record batch 0: column 'text' holds list<item: int64>"):
        list(Corpus(str(arrow)))
    with pytest.raises(AlbertlmError, match=r"no column 'body' \(columns: text, score\)"):
        list(Corpus(f"parquet:{path}:body"))
    assert main(["tokenizer", "train", "--input", f"parquet:{path}:score", "--vocab-size", "50",
                 "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "row group 0: column 'score' holds double" in err


def test_corrupt_files_are_one_line(tmp_path):
    (tmp_path / "bad.parquet").write_bytes(b"not a parquet file at all")
    with pytest.raises(AlbertlmError, match=r"bad\.parquet: cannot read as Parquet"):
        list(Corpus(str(tmp_path / "bad.parquet")))
    (tmp_path / "bad.arrow").write_bytes(b"neither an arrow file nor a stream")
    with pytest.raises(AlbertlmError, match=r"bad\.arrow: cannot read as Arrow IPC"):
        list(Corpus(str(tmp_path / "bad.arrow")))
    good = write_arrow(tmp_path / "cut.arrow", {"text": TEXTS}, stream=True, chunk=5).read_bytes()
    (tmp_path / "cut.arrow").write_bytes(good[: len(good) * 2 // 3])  # a cut-off copy
    with pytest.raises(AlbertlmError, match=r"cut\.arrow: record batch \d+: cannot read"):
        list(Corpus(str(tmp_path / "cut.arrow")))


def test_without_pyarrow_a_columnar_corpus_is_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    path = write_parquet(tmp_path / "c.parquet", {"text": TEXTS})
    lines = write_lines(tmp_path / "c.txt")
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` now raises ImportError
    with pytest.raises(AlbertlmError, match=r"needs pyarrow: pip install 'albertlm\[data\]'"):
        Corpus(str(path))
    assert docs_of(str(lines)) == DOCS  # text corpora never need it
    assert main(["tokenizer", "train", "--input", f"parquet:{path}", "--vocab-size", "50", "--out",
                 str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'albertlm[data]'" in err and not (tmp_path / "t").exists()


# ---------------------------------------------------------------------------- streaming
def test_parquet_is_read_one_row_group_at_a_time(tmp_path, monkeypatch):
    """Rows materialised never run more than one row group ahead of the documents handed out."""
    group = 10
    path = write_parquet(tmp_path / "big.parquet", {"text": [f"Row {i} here." for i in range(75)]},
                         row_group_size=group)
    read: list[int] = []
    original = pq.ParquetFile.read_row_group

    def counting(self, i, *args, **kwargs):
        table = original(self, i, *args, **kwargs)
        read.append(table.num_rows)
        return table

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counting)
    monkeypatch.setattr(pq.ParquetFile, "read", lambda *a, **k: pytest.fail("read the whole file"))
    for k, _ in enumerate(Corpus(str(path)).documents()):
        assert sum(read) <= (k // group + 1) * group, (k, read)
        assert max(read) <= group
    assert read == [10] * 7 + [5]


def test_arrow_files_are_read_batch_by_batch_without_a_memory_map(tmp_path, monkeypatch):
    path = write_arrow(tmp_path / "c.arrow", {"text": TEXTS}, chunk=10)
    monkeypatch.setattr(pa, "memory_map", lambda *a, **k: pytest.fail("memory-mapped"))
    opened = []
    original = pq.ParquetFile.__init__

    def no_map(self, *args, memory_map=False, **kwargs):
        opened.append(memory_map)
        original(self, *args, memory_map=memory_map, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "__init__", no_map)
    assert docs_of(str(path)) == DOCS
    assert docs_of(str(write_parquet(tmp_path / "c.parquet", {"text": TEXTS}))) == DOCS and opened == [False]


_PEAK_RSS_GROWTH = """
import json, sys
from albertlm.data.corpus import Corpus


def peak_rss():  # this process's own high-water mark (ru_maxrss would start at its parent's, kept across exec)
    status = open("/proc/self/status").read()
    return int(status.split("VmHWM:")[1].split()[0]) * 1024


docs = Corpus(sys.argv[1]).documents()
next(docs)  # pyarrow imported, the first row group (batch) read
before = peak_rss()
count = 1 + sum(1 for _ in docs)
print(json.dumps({"documents": count, "growth_bytes": peak_rss() - before}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_a_pass_over_many_row_groups_keeps_peak_memory_near_one_row_group(tmp_path, fmt):
    """Peak RSS of a fresh process grows by far less than the file while it reads 100 row groups
    (a memory-mapped read grew by the whole file: its pages stay resident once touched)."""
    import subprocess

    if not Path("/proc/self/status").is_file():
        pytest.skip("reads its peak RSS from /proc/self/status (Linux)")
    words = [f"w{i}" for i in range(50)]
    schema = pa.schema([("text", pa.string())])
    path = tmp_path / f"big.{fmt}"
    groups, rows = 100, 400
    writer = (pq.ParquetWriter(str(path), schema, compression="none", use_dictionary=False) if fmt == "parquet"
              else pa.ipc.new_stream(str(path), schema))
    for g in range(groups):
        texts = [f"Row {g}-{r}: " + " ".join(words[(g * 7 + r * 3 + k) % 50] for k in range(250)) + "."
                 for r in range(rows)]
        writer.write_table(pa.table({"text": texts}, schema=schema))
    writer.close()
    size = path.stat().st_size
    assert size > 35e6
    done = subprocess.run([sys.executable, "-c", _PEAK_RSS_GROWTH, f"{fmt}:{path}"], capture_output=True,
                          text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["documents"] == groups * rows
    assert result["growth_bytes"] < size / 3, (result, size)


# ---------------------------------------------------------------------------- spec syntax
def test_columnar_spec_syntax(tmp_path):
    s = parse_corpus_spec("parquet:wiki/*.parquet:body")
    assert (s.source, s.format, s.text_key, s.split) == ("wiki/*.parquet", "parquet", "body", None)
    assert parse_corpus_spec("parquet:wiki/*.parquet").text_key == "text"
    assert parse_corpus_spec("arrow:dump", text_key="content").text_key == "content"
    (tmp_path / "imdb").mkdir()
    s = parse_corpus_spec(f"hf:{tmp_path / 'imdb'}:test:review")
    assert (s.source, s.format, s.split, s.text_key) == (str(tmp_path / "imdb"), "hf", "test", "review")
    s = parse_corpus_spec(f"hf:{tmp_path / 'imdb'}::review")
    assert (s.split, s.text_key) == (None, "review")
    assert parse_corpus_spec("hf:absent:validation").split == "validation"
    assert columnar.INSTALL_HINT == "pip install 'albertlm[data]'"
    with pytest.raises(AlbertlmError, match="empty column name"):
        parse_corpus_spec("parquet:x.parquet:")
    with pytest.raises(AlbertlmError, match=r"hf:DIR\[:SPLIT\[:COLUMN\]\]"):
        parse_corpus_spec(f"hf:{tmp_path / 'imdb'}:a:b:c")
