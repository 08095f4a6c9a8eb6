"""Weighted corpus mixtures and exact deduplication (data/mixture.py), alone and through the build."""

from __future__ import annotations

import hashlib
import json
import tracemalloc
from pathlib import Path

import pytest

from albertlm.cli import main
from albertlm.data.build import BuildSettings, build_dataset
from albertlm.data.corpus import Corpus, parse_corpus_spec
from albertlm.data.documents import Document
from albertlm.data.mixture import DEDUP_BYTES_PER_DOCUMENT, Deduplicator, interleave
from albertlm.errors import AlbertlmError
from albertlm.tokenizer import preprocess_text, train_tokenizer
from albertlm.tokenizer.wordpiece import WordPieceTokenizer


def write_docs(path: Path, docs: list[str]) -> Path:
    """One document per line (the `docs` format, by name)."""
    path.write_text("".join(d + "\n" for d in docs))
    return path


def source_docs(tag: str, n: int) -> list[str]:
    return [f"Source {tag} document {i} tells of word{i % 17}. It ends here." for i in range(n)]


def _digest(directory: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(directory.glob("*.shard")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok")
    corpus = write_docs(out / "c.txt", source_docs("a", 40) + source_docs("b", 40))
    train_tokenizer(Corpus(f"docs:{corpus}").sentences, out / "tok", vocab_size=46)
    return out / "tok"


# ---------------------------------------------------------------------------- mixtures
def test_weights_are_document_shares_at_every_point_and_the_mixture_stops_at_the_first_empty_source(tmp_path):
    sizes, weights = {"a": 300, "b": 5000, "c": 5000}, {"a": 1, "b": 2.5, "c": 0.5}
    specs = [f"docs:{write_docs(tmp_path / f'{k}.txt', source_docs(k, n))}@{weights[k]}" for k, n in sizes.items()]
    corpus = Corpus(specs)
    order = [doc.corpus for doc in corpus.documents()]
    total = sum(weights.values())
    counts = [0, 0, 0]
    for n, source in enumerate(order, 1):  # within one document of the weights at every point, not only the end
        counts[source] += 1
        assert all(abs(c - n * w / total) <= 1 for c, w in zip(counts, weights.values())), (n, counts)
    assert all(abs(c / len(order) - w / total) <= 0.01 for c, w in zip(counts, weights.values()))
    # a ran out first (300 documents at a share of 1/4): the whole mixture stops there, nothing is repeated
    assert order.count(0) == 300 and abs(len(order) - 300 * total) <= 2
    assert [s.read_to_end for s in corpus.sources] == [True, False, False]
    assert [s.documents for s in corpus.sources] == [order.count(i) for i in range(3)]
    assert order == [doc.corpus for doc in corpus.documents()]  # the same on every pass
    texts = [d.sentences[0] for d in corpus.documents() if d.corpus == 1]
    assert texts == [s.split(". ")[0] + "." for s in source_docs("b", len(texts))]  # each source read in order


def test_interleave_is_exact_for_integer_weights():
    streams = [iter([Document([f"{k}{i}"], "x", 1, k) for i in range(100)]) for k in range(2)]
    got = [d.corpus for d in interleave(streams, [1, 3])]
    assert got[:8] == [1, 0, 1, 1, 1, 0, 1, 1]  # the heavier source first; one in four from source 0
    assert got.count(1) == 100 and got.count(0) == 34  # source 1 ran out at its 101st draw: the pass ends


def test_weights_are_all_or_nothing_and_positive(tmp_path):
    a = write_docs(tmp_path / "a.txt", ["One."])
    with pytest.raises(AlbertlmError, match=r"has no weight while others have one"):
        Corpus([f"{a}@2", str(a)])
    for bad in ("0", "-1", "inf", "nan"):
        with pytest.raises(AlbertlmError, match="weight after '@' must be a positive number"):
            parse_corpus_spec(f"{a}@{bad}")
    assert parse_corpus_spec(f"{a}@2.5").weight == 2.5 and parse_corpus_spec("kjv@3").builtin
    odd = write_docs(tmp_path / "odd@2", ["Named with an at."])  # an existing path is taken literally
    assert parse_corpus_spec(str(odd)).weight is None


def test_a_mixture_build_reports_each_sources_share_and_is_identical_whatever_the_workers(tok, tmp_path, capsys):
    a = write_docs(tmp_path / "a.txt", source_docs("a", 60))
    b = write_docs(tmp_path / "b.txt", [d + " More words follow in b." for d in source_docs("b", 600)])
    args = ["data", "build", "--corpus", f"docs:{a}@1", "--corpus", f"docs:{b}@3", "--tokenizer", str(tok),
            "--max-seq-length", "32", "--block-documents", "16", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "one"), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert f"source docs:{a}@1: 60 documents (24.9%, weight 25.0%)" in out and "not read to its end" in out
    assert f"the mixture stopped when docs:{a}@1 ran out" in out
    assert main([*args, "--out", str(tmp_path / "two"), "--workers", "2"]) == 0
    assert _digest(tmp_path / "one") == _digest(tmp_path / "two")
    capsys.readouterr()
    assert main(["data", "stats", str(tmp_path / "one"), "--json"]) == 0
    sources = json.loads(capsys.readouterr().out)["sources"]
    assert [s["spec"] for s in sources] == [f"docs:{a}@1", f"docs:{b}@3"]
    for s, w in zip(sources, (0.25, 0.75)):
        assert s["weight_share"] == w and abs(s["document_share"] - w) <= 0.01
    assert sources[1]["token_share"] > sources[1]["document_share"]  # b's documents are longer
    assert main(["data", "stats", str(tmp_path / "one")]) == 0
    assert "corpus (whole build)" in capsys.readouterr().out
    meta = json.loads((tmp_path / "one" / "meta.json").read_text())
    assert meta["corpus"] == [f"docs:{a}@1", f"docs:{b}@3"] and meta["mixture"] == "weighted"
    assert sum(s["text_tokens"] for s in meta["sources"]) == meta["text_tokens"]


# ---------------------------------------------------------------------------- deduplication
def _corpus_with_repeats(tmp_path: Path) -> tuple[list[str], list[Path]]:
    """Two files with known repeats: exact, re-spaced, re-cased, and across the files."""
    unique = [f"Unique document number {i} about topic{i % 9}. Second sentence {i}." for i in range(120)]
    first = unique[:80] + [unique[3], unique[3], "  " + unique[10].replace(" ", "\t  ") + " ", unique[20].upper()]
    second = unique[80:] + [unique[0], unique[85], unique[119]]
    return unique, [write_docs(tmp_path / "one.txt", first), write_docs(tmp_path / "two.txt", second)]


def test_dedup_drops_every_exact_repeat_and_no_unique_document(tmp_path):
    unique, files = _corpus_with_repeats(tmp_path)
    corpus = Corpus([f"docs:{f}" for f in files], dedup=lambda t: preprocess_text(t))
    kept = [" ".join(d.sentences) for d in corpus.documents()]
    assert kept == unique  # each first occurrence kept, in order
    assert [(s.documents, s.duplicates) for s in corpus.sources] == [(80, 4), (40, 3)]
    cased = Corpus([f"docs:{f}" for f in files], dedup=lambda t: preprocess_text(t, do_lower_case=False))
    assert len(list(cased.documents())) == 121  # a cased vocabulary keeps the upper-cased copy apart
    assert len(list(Corpus([f"docs:{f}" for f in files]).documents())) == 127  # no dedup: everything


def test_dedup_uses_the_vocabularys_own_normalisation(tok):
    from albertlm.tokenizer import load_vocabulary

    spiece = load_vocabulary(tok)
    assert spiece.normalise_text("  Café\t``quoted''  ") == preprocess_text("  Café\t``quoted''  ") == 'cafe "quoted"'
    wordpiece = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "cafe"])
    assert wordpiece.normalise_text("  Café\t\n Ok ") == "cafe ok"
    assert WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                              do_lower_case=False).normalise_text("A  b") == "A b"


def test_dedup_build_counts_repeats_per_source_and_is_identical_whatever_the_workers(tok, tmp_path):
    _, files = _corpus_with_repeats(tmp_path)
    specs = [f"docs:{f}" for f in files]
    metas = {}
    for workers in (1, 2):
        metas[workers] = build_dataset(specs, tok, tmp_path / f"w{workers}",
                                       BuildSettings(max_seq_length=32, dedup=True, workers=workers,
                                                     block_documents=8), progress=False)
    assert _digest(tmp_path / "w1") == _digest(tmp_path / "w2")
    meta = metas[1]
    assert meta["documents"] == 120 and meta["duplicates"] == 7
    assert [(s["documents"], s["duplicates"]) for s in meta["sources"]] == [(80, 4), (40, 3)]
    build_dataset(specs, tok, tmp_path / "all", BuildSettings(max_seq_length=32, block_documents=8), progress=False)
    assert json.loads((tmp_path / "all" / "meta.json").read_text())["documents"] == 127


def test_the_seen_set_costs_what_the_docs_state():
    n = 60_000  # past 50,000, where the stated cost holds
    docs = [Document([f"document {i}"], "x", 1) for i in range(n)]
    dedup = Deduplicator(str)
    tracemalloc.start()
    try:
        for doc in docs:
            dedup.is_repeat(doc)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(dedup.seen) == n and held / n <= DEDUP_BYTES_PER_DOCUMENT
