"""A tokenizer.json as a vocabulary (what transformers 5 saves instead of spiece.model / vocab.txt): ids equal
transformers' for the same file, special ids by name, and it is chosen only when neither of the other files is
there."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest

from albertlm.errors import AlbertlmError
from albertlm.tokenizer import (Tokenizer, TokenizerJsonVocabulary, WordPieceTokenizer, load_vocabulary,
                                train_tokenizer, vocabulary_kind)
from test_wordpiece import ENTRIES, TEXTS

transformers = pytest.importorskip("transformers")

WORDS = "the cat dog sat ran on a mat far away good bad film plot very quite".split()


def saved_by_transformers(source, out):
    """`AutoTokenizer.from_pretrained(source).save_pretrained(out)`: a tokenizer.json, no spiece.model / vocab.txt."""
    hf = transformers.AutoTokenizer.from_pretrained(str(source))
    hf.save_pretrained(str(out))
    for name in ("spiece.model", "vocab.txt"):
        (out / name).unlink(missing_ok=True)
    return hf


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tj")
    r = random.Random(0)
    train_tokenizer([" ".join(r.choices(WORDS, k=10)) for _ in range(300)], root / "sp", vocab_size=60,
                    log=lambda m: None)
    WordPieceTokenizer(ENTRIES).save(root / "wp")
    return {kind: (root / kind, saved_by_transformers(root / kind, root / f"{kind}-json")) for kind in ("sp", "wp")}


@pytest.mark.parametrize("kind", ["sp", "wp"])
def test_ids_equal_transformers_for_the_same_file(dirs, kind, tmp_path):
    source, hf = dirs[kind]
    path = source.parent / f"{kind}-json"
    assert vocabulary_kind(path) == "tokenizer-json"
    vocabulary = load_vocabulary(path)
    assert isinstance(vocabulary, TokenizerJsonVocabulary)
    original = (Tokenizer if kind == "sp" else WordPieceTokenizer).load(source)
    assert vocabulary.special_ids.cls == original.special_ids.cls and vocabulary.vocab_size == original.vocab_size
    texts = TEXTS + ["the cat sat on a mat", "Good FILM, bad plot."]
    for text, ids in zip(texts, vocabulary.encode_batch(texts)):
        assert vocabulary.build_inputs(ids)[0].tolist() == hf(text)["input_ids"], text
    again = pickle.loads(pickle.dumps(vocabulary))  # DataLoader workers rebuild it
    assert [a.tolist() for a in again.encode_batch(texts)] == [a.tolist() for a in vocabulary.encode_batch(texts)]
    vocabulary.save(tmp_path / "copy")
    copy = load_vocabulary(tmp_path / "copy")
    assert copy.special_ids == vocabulary.special_ids
    assert np.array_equal(copy.encode(texts[0]), vocabulary.encode(texts[0]))


def test_word_starts_and_literal_special_tokens(dirs):
    sp = load_vocabulary(dirs["sp"][0].parent / "sp-json")
    ids, starts = sp.encode_with_word_starts("the cat [MASK] sat")
    assert sp.special_ids.mask in ids.tolist() and starts[0] and starts.sum() == 4
    as_text = load_vocabulary(dirs["sp"][0].parent / "sp-json", parse_special_tokens=False)
    assert sp.special_ids.mask not in as_text.encode("the cat [MASK] sat").tolist()
    wp = load_vocabulary(dirs["wp"][0].parent / "wp-json")
    ids, starts = wp.encode_with_word_starts("the cats played")
    assert [p.startswith("##") for p in wp.convert_ids_to_tokens(ids)] == (~starts).tolist()
    assert set(range(1, 100)) <= set(wp.special_ids.reserved)  # [unused1] ... as in vocab.txt


def test_the_other_files_come_first(dirs, tmp_path):
    source, _ = dirs["sp"]
    both = tmp_path / "both"
    both.mkdir()
    for name in ("spiece.model", "tokenizer_config.json"):
        (both / name).write_bytes((source / name).read_bytes())
    (both / "tokenizer.json").write_bytes((source.parent / "sp-json" / "tokenizer.json").read_bytes())
    assert vocabulary_kind(both) == "sentencepiece"  # transformers' Hub layout: spiece.model and tokenizer.json
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "tokenizer.json").write_text("{not json")
    with pytest.raises(AlbertlmError, match="tokenizer.json: not a tokenizers file"):
        load_vocabulary(tmp_path / "broken")
    (tmp_path / "none").mkdir()
    with pytest.raises(AlbertlmError, match="no spiece.model .SentencePiece. or vocab.txt .WordPiece. for the "
                                            "tokenizer, nor a tokenizer.json"):
        load_vocabulary(tmp_path / "none")


def test_a_pretraining_recipe_copies_the_file(dirs, tmp_path):
    from albertlm.train.stages import copy_tokenizer

    source = dirs["wp"][0].parent / "wp-json"
    copy_tokenizer(source, tmp_path / "tokenizer")
    copied = load_vocabulary(tmp_path / "tokenizer")
    assert isinstance(copied, TokenizerJsonVocabulary)
    assert copied.encode("the cats played").tolist() == load_vocabulary(source).encode("the cats played").tolist()
