"""Corpus readers (data/corpus.py): formats, compression, globs, kjv, bad input, splitting."""

from __future__ import annotations

import ast
import gzip
import json
from pathlib import Path

import pytest

from albertlm.data import corpus as corpus_mod
from albertlm.data.corpus import (
    Corpus, CorpusStats, format_corpus_stats, infer_format, is_heldout, parse_corpus_spec,
)
from albertlm.data.sentences import split_sentences
from albertlm.errors import AlbertlmError

OFFICIAL = "First sentence of doc one.\nSecond sentence.\n\n\nDoc two only line.\n"


def write(path: Path, text: str | bytes) -> Path:
    """Write text (UTF-8) or bytes, compressing by the file's suffix (.gz, .zst)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    elif path.name.endswith(".zst"):
        import zstandard

        data = zstandard.ZstdCompressor().compress(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def docs_of(spec, **kwargs) -> list[list[str]]:
    return [d.sentences for d in Corpus(spec, **kwargs).documents()]


# ---------------------------------------------------------------------------- formats
@pytest.mark.parametrize("suffix", ["", ".gz", ".zst"])
def test_lines_format(tmp_path, suffix):
    path = write(tmp_path / f"c.txt{suffix}", OFFICIAL)
    docs = list(Corpus(str(path)).documents())
    assert [d.sentences for d in docs] == [["First sentence of doc one.", "Second sentence."], ["Doc two only line."]]
    assert [d.line for d in docs] == [1, 5] and docs[1].where == f"{path}:5"


@pytest.mark.parametrize("suffix", ["", ".gz", ".zst"])
def test_docs_format(tmp_path, suffix):
    path = write(tmp_path / f"d.txt{suffix}", "Mr. Smith came. He left!\n我来了。你呢？\n")
    for spec in (f"docs:{path}", f"{path}:docs"):
        assert docs_of(spec) == [["Mr. Smith came.", "He left!"], ["我来了。", "你呢？"]]


@pytest.mark.parametrize("suffix", ["", ".gz", ".zst"])
def test_jsonl_format_and_key(tmp_path, suffix):
    rows = [{"text": "One. Two.", "body": "Alpha beta."}, {"text": "Three.\n\nFour.", "body": "Gamma."}]
    path = write(tmp_path / f"r.jsonl{suffix}", "".join(json.dumps(r) + "\n" for r in rows))
    assert infer_format(path) == "jsonl"
    assert docs_of(str(path)) == [["One.", "Two."], ["Three.", "Four."]]
    assert docs_of(f"jsonl=body:{path}") == [["Alpha beta."], ["Gamma."]]
    assert docs_of(str(path), text_key="body") == [["Alpha beta."], ["Gamma."]]


def test_jsonl_bad_records_reported(tmp_path):
    path = write(tmp_path / "r.jsonl", '{"text": "Fine."}\nnot json\n[1, 2]\n{"other": 1}\n\n{"text": "  "}\n')
    corpus = Corpus(str(path))
    assert [d.sentences for d in corpus] == [["Fine."]]
    stats = corpus.stats
    assert stats.bad_json == 3 and stats.examples["bad_json"] == [f"{path}:2", f"{path}:3", f"{path}:4"]
    assert stats.empty_documents == 1 and stats.examples["empty_documents"] == [f"{path}:6"]


def test_format_inference_and_spec_parsing(tmp_path):
    assert infer_format("a/b.JSONL.gz") == "jsonl" and infer_format("x.json.zst") == "jsonl"
    assert infer_format("x.txt.gz") == "lines" and infer_format("x") == "lines"
    assert parse_corpus_spec("kjv").builtin
    s = parse_corpus_spec("jsonl=body:data/*.jsonl.zst")
    assert (s.source, s.format, s.text_key) == ("data/*.jsonl.zst", "jsonl", "body")
    s = parse_corpus_spec("x.txt:docs")
    assert (s.source, s.format) == ("x.txt", "docs")
    assert parse_corpus_spec("xml:foo").format is None  # not a format: taken as a path
    weird = write(tmp_path / "lines:odd.txt", "A.\n")  # an existing path is taken literally
    assert parse_corpus_spec(str(weird)).source == str(weird)
    with pytest.raises(AlbertlmError):
        parse_corpus_spec("  ")


def test_globs_and_directories_sorted(tmp_path):
    for name in ["b.txt", "a.txt", "sub/c.txt.gz", ".hidden.txt"]:
        write(tmp_path / "d" / name, f"From {name}.\n")
    expected = [["From a.txt."], ["From b.txt."], ["From sub/c.txt.gz."]]
    assert docs_of(str(tmp_path / "d")) == expected
    assert docs_of(str(tmp_path / "d" / "**" / "*.txt*")) == expected
    assert docs_of(str(tmp_path / "d" / "*.txt")) == expected[:2]
    # several specs, in the order given
    assert docs_of([str(tmp_path / "d" / "b.txt"), str(tmp_path / "d" / "a.txt")]) == [expected[1], expected[0]]


def test_corpus_is_reiterable(tmp_path):
    corpus = Corpus(str(write(tmp_path / "c.txt", OFFICIAL)))
    assert list(corpus.sentences()) == list(corpus.sentences())
    assert corpus.stats.documents == 2 and corpus.stats.sentences == 3


# ---------------------------------------------------------------------------- kjv
def test_kjv_builtin_corpus():
    docs = list(Corpus("kjv").documents())
    assert len(docs) == 1189  # chapters of the King James Bible
    assert docs[0].sentences[0] == "In the beginning God created the heaven and the earth."
    assert len(docs[0].sentences) == 31  # Genesis 1 has 31 verses
    assert sum(len(d.sentences) for d in docs) == 31103
    assert docs[-1].sentences[-1] == "The grace of our Lord Jesus Christ be with you all. Amen."
    assert docs[0].source.endswith("kjv.jsonl") and docs[0].line == 1


# ---------------------------------------------------------------------------- bad input
def test_bad_utf8_empty_docs_long_lines_reported(tmp_path):
    data = (b"Good one.\n\xff\xfe broken\nAlso good.\n\n"
            b"\xc3\x28\n\n"  # a document whose only line is invalid: an empty document
            + b"x" * 50 + b"\n"  # over max_line_chars=20 (characters)
            + b"Tail.\n\n" + b"y" * 500 + b"\nEnd.\n")  # far over: drained by the byte limit
    path = write(tmp_path / "bad.txt", data)
    corpus = Corpus(str(path), max_line_chars=20)
    docs = [d.sentences for d in corpus]
    assert docs == [["Good one.", "Also good."], ["Tail."], ["End."]]
    stats = corpus.stats
    assert stats.bad_utf8 == 2 and stats.examples["bad_utf8"] == [f"{path}:2", f"{path}:5"]
    assert stats.long_lines == 2 and stats.examples["long_lines"] == [f"{path}:7", f"{path}:10"]
    assert stats.empty_documents == 1 and stats.examples["empty_documents"] == [f"{path}:5"]
    report = format_corpus_stats(stats)
    assert "\n" not in report and f"{path}:2" in report and "invalid UTF-8" in report
    assert "over-long" in report and "(> 20 characters)" in report and "empty document" in report


def test_docs_format_counts_empty_lines(tmp_path):
    path = write(tmp_path / "d.txt", "One doc.\n\n   \nAnother.\n")
    corpus = Corpus(f"docs:{path}")
    assert len(list(corpus)) == 2 and corpus.stats.empty_documents == 2


def test_no_match_and_no_documents_are_errors(tmp_path):
    with pytest.raises(AlbertlmError, match="no file matches"):
        Corpus(str(tmp_path / "missing" / "*.txt"))
    with pytest.raises(AlbertlmError, match="nope.txt"):
        Corpus("nope.txt")
    empty = write(tmp_path / "empty.txt", "\n\n  \n")
    with pytest.raises(AlbertlmError, match=r"empty\.txt.*no documents found"):
        list(Corpus(str(empty)).documents())
    (tmp_path / "emptydir").mkdir()
    with pytest.raises(AlbertlmError, match="no file matches"):
        Corpus(str(tmp_path / "emptydir"))


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_truncated_or_corrupt_compressed_file_is_a_user_error(tmp_path, suffix):
    text = "".join(f"Line {i * i} here.\n" for i in range(5000))
    data = write(tmp_path / f"full.txt{suffix}", text).read_bytes()
    cut = tmp_path / f"c.txt{suffix}"
    cut.write_bytes(data[: len(data) // 2])  # a cut-off download
    with pytest.raises(AlbertlmError, match=rf"c\.txt\{suffix}:\d+: cannot read"):
        list(Corpus(str(cut)).documents())
    garbage = tmp_path / f"g.txt{suffix}"
    garbage.write_bytes(b"not compressed at all\n" * 10)
    with pytest.raises(AlbertlmError, match=r"g\.txt.*:1: cannot read"):
        list(Corpus(str(garbage)).documents())
    assert len(list(Corpus(str(tmp_path / f"full.txt{suffix}")).documents())) == 1
    if suffix == ".gz":  # a corrupt deflate block inside a well-formed gzip header (zlib.error)
        bad = bytearray(data)
        for k in range(12, 20):
            bad[k] ^= 0xA5
        (tmp_path / "d.txt.gz").write_bytes(bytes(bad))
        with pytest.raises(AlbertlmError, match=r"d\.txt\.gz:\d+: cannot read"):
            list(Corpus(str(tmp_path / "d.txt.gz")).documents())


def test_stats_format_clean_corpus():
    stats = CorpusStats(files=2, documents=3, sentences=10)
    assert format_corpus_stats(stats) == "Read 2 file(s): 3 document(s), 10 sentence(s)."


# ---------------------------------------------------------------------------- splitting
def test_split_sentences_english():
    text = ('Mr. Smith went to Washington. He arrived at 3.30 p.m. on Monday! Did he? Yes. '
            'She said, "Stop." Then she left. The U.S. Army is big. E.g. this one. '
            'J. K. Rowling wrote it. Pi is 3.14 exactly. Wait... what? Done')
    assert split_sentences(text) == [
        "Mr. Smith went to Washington.", "He arrived at 3.30 p.m. on Monday!", "Did he?", "Yes.",
        'She said, "Stop."', "Then she left.", "The U.S. Army is big.", "E.g. this one.",
        "J. K. Rowling wrote it.", "Pi is 3.14 exactly.", "Wait... what?", "Done"]
    assert split_sentences("Line one\nline two.  \n\n") == ["Line one", "line two."]
    assert split_sentences("   ") == []


def test_split_sentences_chinese():
    text = "我爱北京。天安门上太阳升！你好吗？他说：“走吧。”然后……我们走了。最后一句"
    assert split_sentences(text) == ["我爱北京。", "天安门上太阳升！", "你好吗？", "他说：“走吧。”",
                                     "然后……", "我们走了。", "最后一句"]


# ---------------------------------------------------------------------------- held-out split
def test_heldout_split_is_deterministic_and_seeded():
    held = [i for i in range(400) if is_heldout(i, 0.1, seed=3)]
    assert 20 <= len(held) <= 60
    assert held == [i for i in range(400) if is_heldout(i, 0.1, seed=3)]
    assert held != [i for i in range(400) if is_heldout(i, 0.1, seed=4)]
    assert not any(is_heldout(i, 0.0, 0) for i in range(100))


def test_data_pipeline_does_not_import_the_model():
    """The corpus reader and the tokenizer import neither the model nor training code, and the tokenizer
    imports nothing from the data pipeline (no cycle): checked on the modules' own imports."""
    import albertlm.tokenizer as tok_mod

    files = [Path(corpus_mod.__file__), *sorted(Path(tok_mod.__file__).parent.glob("*.py"))]
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not any(n.startswith(("torch", "albertlm.model", "albertlm.train")) for n in names), names
        if path.parent.name == "tokenizer":
            assert not any(n.startswith("albertlm.data") for n in names), (path, names)
