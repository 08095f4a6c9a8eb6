"""SentencePiece tokenizer (tokenizer.py): ALBERT ids, HF parity, word starts, Chinese mode, CLI."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from albertlm.cli import main
from albertlm.data.corpus import Corpus
from albertlm.errors import AlbertlmError
from albertlm.tokenizer import (
    CLS_ID, MASK_ID, PAD_ID, SEP_ID, SPECIAL_TOKENS, UNK_ID, Tokenizer, looks_chinese, preprocess_text,
    split_cjk, train_tokenizer,
)

EXTRA = [  # accents, quotes, odd whitespace, digits: things the pre-processing must handle
    "Café au lait, naïve Zoë and the résumé of Ångström.",
    "He said ``hello'' and ''goodbye'' to the crème brûlée.",
    "Prices rose 3.5% to 1,234 dollars in 2019; the U.S. economy grew.",
    "Über-cool façade: São Paulo, Kraków, Málaga and Zürich.",
]
PARITY = [
    "In the beginning God created the heaven and the earth.",
    "  Café\tau   LAIT,\nnaïve Zoë  ",
    "He said ``hello'' and ''goodbye''.",
    "Über 3,000 résumés — São Paulo!",
    "x y\u00a0z\u3000w",
    "",
]


def english_sentences() -> list[str]:
    """The first 20 chapters of the KJV plus a few accented sentences (fast to train on)."""
    out = []
    for i, doc in enumerate(Corpus("kjv").documents()):
        if i == 20:
            break
        out.extend(doc.sentences)
    return out + EXTRA * 20


@pytest.fixture(scope="module")
def english_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok_en")
    train_tokenizer(english_sentences(), out, vocab_size=300, log=lambda m: None)
    return out


@pytest.fixture(scope="module")
def tok(english_dir):
    return Tokenizer.load(english_dir)


ZH = ["我爱北京天安门，天安门上太阳升。", "伟大领袖毛主席，指引我们向前进。", "今天天气很好，我们一起去公园散步吧！",
      "机器学习是人工智能的一个分支。", "他说：“我们明天去上海。”", "ALBERT模型在中文任务上表现很好。"]


@pytest.fixture(scope="module")
def zh_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok_zh")
    notes = []
    # Chinese mode detected, not forced; 200 is more than this corpus supports (about 80).
    result = train_tokenizer(ZH * 20, out, vocab_size=200, log=notes.append)
    assert result.chinese and any("Chinese mode" in n for n in notes)
    assert json.loads((out / "tokenizer_config.json").read_text())["albertlm"]["chinese"] is True
    return out


# ---------------------------------------------------------------------------- ids and files
def test_special_ids_and_files(english_dir, tok):
    assert (PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID) == (0, 1, 2, 3, 4)
    assert tok.convert_ids_to_tokens(range(5)) == ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    assert tok.convert_tokens_to_ids(SPECIAL_TOKENS) == [0, 1, 2, 3, 4]
    assert tok.vocab_size == len(tok) == 300
    config = json.loads((english_dir / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "AlbertTokenizer" and config["do_lower_case"] is True
    assert config["keep_accents"] is False and config["albertlm"]["chinese"] is False
    ids, types = tok.build_inputs([10, 11], [12])
    assert ids.tolist() == [CLS_ID, 10, 11, SEP_ID, 12, SEP_ID] and types.tolist() == [0, 0, 0, 0, 1, 1]


def test_literal_special_tokens_are_recognised(tok, english_dir):
    ids, starts = tok.encode_with_word_starts("a[MASK]b [SEP] <unk>")
    pieces = tok.convert_ids_to_tokens(ids)
    assert pieces[1] == "[MASK]" and ids.tolist()[-2:] == [SEP_ID, UNK_ID]
    assert starts[[1, len(ids) - 2, len(ids) - 1]].all() and starts[2]  # "b" starts a word again
    assert tok.decode(ids, skip_special_tokens=False).count("[MASK]") == 1
    plain = Tokenizer.load(english_dir, parse_special_tokens=False)  # the official ALBERT behaviour
    ids = plain.encode("a[MASK]b [SEP] <unk>")
    assert MASK_ID not in ids and SEP_ID not in ids and ids.tolist() == plain._sp.encode("a[mask]b [sep] <unk>")


def test_hf_albert_tokenizer_parity(english_dir, tok, tmp_path):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AlbertTokenizer.from_pretrained(str(english_dir))
    texts = PARITY + EXTRA + english_sentences()[:50] + ["the [MASK] of <unk> [CLS]"]
    for text, ids in zip(texts, tok.encode_batch(texts)):
        assert ids.tolist() == hf(text, add_special_tokens=False)["input_ids"], text
    assert hf("the earth")["input_ids"][0] == CLS_ID and hf("the earth")["input_ids"][-1] == SEP_ID
    assert type(transformers.AutoTokenizer.from_pretrained(str(english_dir))).__name__ == "AlbertTokenizer"
    # A cased, accent-keeping vocabulary: the switches travel through tokenizer_config.json.
    cased_dir = tmp_path / "cased"
    train_tokenizer(english_sentences(), cased_dir, vocab_size=300, do_lower_case=False, keep_accents=True,
                    log=lambda m: None)
    cased, hf_cased = Tokenizer.load(cased_dir), transformers.AlbertTokenizer.from_pretrained(str(cased_dir))
    assert hf_cased.do_lower_case is False and hf_cased.keep_accents is True
    for text in PARITY + EXTRA:
        assert cased.encode(text).tolist() == hf_cased(text, add_special_tokens=False)["input_ids"], text


# ---------------------------------------------------------------------------- training errors
def test_oversize_vocab_falls_back_or_fails_strict(tmp_path):
    sentences = ["the cat sat on the mat", "a dog ate the hat", "cats and dogs"] * 10
    notes = []
    result = train_tokenizer(sentences, tmp_path / "t", vocab_size=5000, log=notes.append)
    assert result.requested_vocab_size == 5000 and 5 < result.vocab_size < 5000
    assert Tokenizer.load(tmp_path / "t").vocab_size == result.vocab_size
    assert len(notes) == 1 and "too large" in notes[0] and f"{result.vocab_size:,}" in notes[0]
    with pytest.raises(AlbertlmError, match=f"at most {result.vocab_size:,}"):
        train_tokenizer(sentences, tmp_path / "s", vocab_size=5000, strict=True, log=notes.append)
    with pytest.raises(AlbertlmError, match="too small"):
        train_tokenizer(sentences, tmp_path / "u", vocab_size=8, log=notes.append)
    with pytest.raises(AlbertlmError, match="no training text"):
        train_tokenizer(["", "   "], tmp_path / "e", vocab_size=50, log=notes.append)


def test_corpus_sentences_sampling_cap_and_determinism(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join(english_sentences()[:400]) + "\n")
    notes = []
    for name in ("a", "b"):  # a corpus is read by albertlm.data.corpus, then handed over as sentences
        result = train_tokenizer(Corpus(str(corpus)).sentences, tmp_path / name, vocab_size=200,
                                 input_sentence_size=150, seed=5, log=notes.append)
        assert result.sentences == 400 and not result.chinese
    assert notes == ["notice: SentencePiece sampled 150 of 400 sentences (raise input_sentence_size to use more)"] * 2
    assert (tmp_path / "a" / "spiece.model").read_bytes() == (tmp_path / "b" / "spiece.model").read_bytes()
    with pytest.raises(AlbertlmError, match="not the string"):  # a SPEC string is not a list of sentences
        train_tokenizer(str(corpus), tmp_path / "s", vocab_size=200)
    one_shot = iter(["the cat sat on the mat", "a dog ate the hat"] * 10)
    with pytest.raises(AlbertlmError, match="one-shot iterator"):  # the oversize retry needs a second pass
        train_tokenizer(one_shot, tmp_path / "o", vocab_size=5000, log=notes.append)


def test_corpus_errors_are_not_mangled_by_sentencepiece(tmp_path):
    def broken():
        yield from ["some text here"] * 50
        raise AlbertlmError("bad.txt:7: cannot read")

    with pytest.raises(AlbertlmError, match="bad.txt:7"):
        train_tokenizer(broken, tmp_path / "t", vocab_size=40, log=lambda m: None)


# ---------------------------------------------------------------------------- pre-processing
def test_preprocess_switches():
    text = "  Café  ``Naïve''\tÅNGSTRÖM "
    assert preprocess_text(text) == 'cafe "naive" angstrom'
    assert preprocess_text(text, do_lower_case=False) == 'Cafe "Naive" ANGSTROM'
    assert preprocess_text(text, keep_accents=True) == 'café "naïve" ångström'
    assert preprocess_text(text, do_lower_case=False, keep_accents=True) == 'Café "Naïve" ÅNGSTRÖM'


def test_lowercase_and_accent_switches_change_ids(tok, tmp_path):
    assert tok.encode("THE Earth").tolist() == tok.encode("the earth").tolist()
    assert tok.encode("café").tolist() == tok.encode("cafe").tolist()
    cased = train_tokenizer(english_sentences(), tmp_path / "c", vocab_size=300, do_lower_case=False,
                            keep_accents=True, log=lambda m: None)
    cased = Tokenizer.load(cased.out_dir)
    assert cased.encode("THE Earth").tolist() != cased.encode("the earth").tolist()
    assert cased.encode("café").tolist() != cased.encode("cafe").tolist()
    assert "é" in "".join(cased.convert_ids_to_tokens(cased.encode("café")))


def test_batched_fast_path_equals_official_per_text_path(tok, english_dir):
    odd = ["\ta\x0bb\x1cc\x85d  e\u2028f\n", "\x00nul\x00 inside", "ΣΑΣ İstanbul ß", "a ¨b"]
    texts = PARITY + EXTRA + odd + english_sentences()[:200]
    for text, ids in zip(texts, tok.encode_batch(texts)):
        assert ids.dtype == np.int32
        assert ids.tolist() == tok._sp.encode(preprocess_text(text)), repr(text)
    ids, starts, offsets = tok.encode_batch_packed(texts)
    assert offsets[0] == 0 and offsets[-1] == len(ids) == len(starts) and len(offsets) == len(texts) + 1
    assert ids.flags.writeable
    public = Tokenizer.load(english_dir)
    assert tok._buffers.__name__ == "fast"  # sentencepiece 0.2.x: the private buffer path is in use
    public._buffers = lambda texts, threads: [np.asarray(a, np.int32).tobytes() for a in public._sp.encode(texts)]
    assert public.encode_batch_packed(texts)[0].tolist() == ids.tolist()  # as with the public API
    assert tok.encode_batch([]) == [] and tok.encode("").size == 0


# ---------------------------------------------------------------------------- word starts
def test_word_starts_mark_first_piece_of_each_word(tok):
    for text in english_sentences()[:100] + EXTRA + ["unbelievably disproportionate zzzqqq words"]:
        ids, starts = tok.encode_with_word_starts(text)
        pieces = tok.convert_ids_to_tokens(ids)
        assert starts.dtype == bool and starts.shape == ids.shape
        assert starts.sum() == len(preprocess_text(text).split()), text
        assert all(s == p.startswith("▁") for s, p in zip(starts, pieces))
    batch = tok.encode_batch_with_word_starts(EXTRA)
    for text, (ids, starts) in zip(EXTRA, batch):
        single = tok.encode_with_word_starts(text)
        assert ids.tolist() == single[0].tolist() and starts.tolist() == single[1].tolist()


def test_decode_roundtrip_and_pickle(tok):
    text = "And God said, Let there be light: and there was light."
    assert tok.decode(tok.encode(text)) == preprocess_text(text)
    assert tok.decode([CLS_ID, *tok.encode("the earth"), SEP_ID]) == "the earth"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([10**6])
    clone = pickle.loads(pickle.dumps(tok))
    assert clone.encode(text).tolist() == tok.encode(text).tolist()


def test_load_errors(tmp_path, english_dir):
    with pytest.raises(AlbertlmError, match="no spiece.model"):
        Tokenizer.load(tmp_path)
    (tmp_path / "spiece.model").write_bytes(b"not a model")
    with pytest.raises(AlbertlmError, match="not a SentencePiece model"):
        Tokenizer.load(tmp_path)
    (tmp_path / "spiece.model").write_bytes((english_dir / "spiece.model").read_bytes())
    (tmp_path / "tokenizer_config.json").write_text("{broken")
    with pytest.raises(AlbertlmError, match="tokenizer_config.json: not valid JSON"):
        Tokenizer.load(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": "yes"}')
    with pytest.raises(AlbertlmError, match="'do_lower_case' must be true or false"):
        Tokenizer.load(tmp_path)
    (tmp_path / "tokenizer_config.json").unlink()
    assert Tokenizer.load(tmp_path / "spiece.model").do_lower_case  # ALBERT's defaults


def test_model_with_other_special_ids_is_rejected(tmp_path):
    import io

    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(["hello world foo bar"] * 20), model_writer=model,
                                   vocab_size=15, minloglevel=2)  # default ids: <unk>=0 <s>=1 </s>=2
    with pytest.raises(AlbertlmError, match="not ALBERT's"):
        Tokenizer(model.getvalue())


# ---------------------------------------------------------------------------- Chinese mode
def test_chinese_one_piece_per_cjk_character(zh_dir):
    tok = Tokenizer.load(zh_dir)
    assert tok.chinese and split_cjk("中a文") == " 中 a 文 "
    assert looks_chinese(ZH) and not looks_chinese(["plain English text", "中"])
    for text in ZH + ["我们明天去北京。"]:
        pieces = tok.convert_ids_to_tokens(tok.encode(text))
        cjk = [p for p in pieces if any("\u4e00" <= ch <= "\u9fff" for ch in p)]
        assert all(sum("\u4e00" <= ch <= "\u9fff" for ch in p) == 1 for p in cjk), pieces
        assert len(cjk) == sum("\u4e00" <= ch <= "\u9fff" for ch in text)
        # Bare "▁" pieces for the spaces split_cjk added are dropped; only a leading one before
        # a Latin word ("ALBERT模型") stays, as in English text.
        assert [i for i, p in enumerate(pieces) if p == "▁"] in ([], [0])
    pieces = tok.convert_ids_to_tokens(tok.encode("天安门，天安门"))  # "，" becomes "," (NFKD)
    assert pieces == ["天", "安", "门", ",", "天", "安", "门"]
    assert tok.decode(tok.encode("我爱北京天安门")) == "我爱北京天安门"


def test_chinese_word_starts_follow_jieba(zh_dir):
    import jieba

    tok = Tokenizer.load(zh_dir)
    text = "我爱北京天安门"
    assert jieba.lcut(text) == ["我", "爱", "北京", "天安门"]
    ids, starts = tok.encode_with_word_starts(text)
    assert starts.tolist() == [True, True, True, False, True, False, False]
    assert tok.encode(text).tolist() == ids.tolist()
    for text in ZH:
        ids, starts = tok.encode_with_word_starts(text)
        words = [w for w in jieba.lcut(preprocess_text(text)) if w.strip()]
        assert starts.sum() == len(words), (text, words)
    ids, starts = tok.encode_with_word_starts("我们[MASK]去上海")
    assert ids.tolist()[2] == MASK_ID and starts.tolist() == [True, False, True, True, True, False]


# ---------------------------------------------------------------------------- CLI
def test_cli_tokenizer_train_end_to_end(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(english_sentences()[i:i + 5]) for i in range(0, 300, 5)) + "\n")
    out = tmp_path / "tok"
    assert main(["tokenizer", "train", "--input", str(corpus), "--vocab-size", "150", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "150 pieces" in captured.out and "Read 1 file(s)" in captured.err
    assert Tokenizer.load(out).vocab_size == 150
    assert main(["tokenizer", "train", "--input", str(corpus), "--vocab-size", "90000", "--out",
                 str(tmp_path / "big")]) == 0
    assert "retraining with the largest size" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--input", "no/such/*.txt", "--vocab-size", "100"], "no file matches"),
    (["--input", "CORPUS", "--vocab-size", "90000", "--strict"], "too large for this corpus"),
    (["--input", "CORPUS", "--vocab-size", "3"], "vocab_size must be"),
])
def test_cli_tokenizer_errors_exit_2_with_one_line(tmp_path, capsys, argv, message):
    corpus = tmp_path / "c.txt"
    corpus.write_text("one small sentence here\n\nand another one there\n")
    argv = [str(corpus) if a == "CORPUS" else a for a in argv]
    assert main(["tokenizer", "train", *argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("albertlm tokenizer: error:") and message in err[0]
