"""The WordPiece vocabulary (a BERT vocab.txt): ids equal transformers' BertTokenizer, special ids
from the file, word starts, saving and loading."""

import json
import pickle

import numpy as np
import pytest

from albertlm.errors import AlbertlmError
from albertlm.tokenizer.wordpiece import WordPieceTokenizer

transformers = pytest.importorskip("transformers")

# Google's layout: [PAD] 0, [unused*], [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103, <S>, <T>, text.
ENTRIES = (["[PAD]"] + [f"[unused{i}]" for i in range(1, 100)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]", "<S>", "<T>"]
           + list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789,.!?'-()\":;")
           + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
           + ["the", "The", "cat", "sat", "mat", "on", "##s", "##ing", "play", "##ed", "un", "##aff", "##able",
              "café", "cafe", "naive", "resume", "hello", "Hello", "world", "February", "2020", "1", "000"]
           + list("今天气很好我们是中国人北京大学生在学习。，！？「」")
           + ["##" + c for c in "天气好们国人京学生习"])
TEXTS = [
    "The cat sat on the mat.", "Hello, world! The cats played.", "unaffable UNAFFABLE Unaffable",
    "Café naïve résumé CAFÉ", "今天天气很好。我们是中国人！", "北京大学的学生在学习「中文」，好吗？",
    "mixed 中文 and English: 2020, 1,000", "zqxj ǅ ☃ 😀 ∑ unknownword", "a" * 100, "a" * 101 + " cat",
    "  spaces\tand\nnewlines\r\n ", "", "cat\u0000sat\u200b\ufeffmat", "the [MASK] sat on [MASK].",
    "[CLS] [SEP] [PAD] [unused5] <S>", "don't (really) \"quote\"; ok", "ﬁ Ⅻ ß İstanbul",
]


@pytest.fixture()
def vocab_dir(tmp_path):
    d = tmp_path / "wp"
    d.mkdir()
    (d / "vocab.txt").write_text("".join(e + "\n" for e in ENTRIES), encoding="utf-8")
    return d


def _with_config(d, **config):
    (d / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return d


def _references(d, **kwargs):
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    fast = transformers.BertTokenizer.from_pretrained(str(d))
    legacy = BertTokenizerLegacy(vocab_file=str(d / "vocab.txt"), **kwargs)
    return fast, legacy


@pytest.mark.parametrize("options", [{}, {"do_lower_case": False}, {"do_lower_case": True, "strip_accents": False},
                                     {"do_lower_case": False, "strip_accents": True}])
def test_ids_equal_bert_tokenizer(vocab_dir, options):
    _with_config(vocab_dir, tokenizer_class="BertTokenizer", **options)
    ours = WordPieceTokenizer.load(vocab_dir)
    fast, legacy = _references(vocab_dir, **options)
    assert ours.do_lower_case == options.get("do_lower_case", True)
    batch = ours.encode_batch(TEXTS)
    for text, ids in zip(TEXTS, batch):
        want = fast(text, add_special_tokens=False)["input_ids"]
        assert ids.tolist() == want, text
        assert legacy(text, add_special_tokens=False)["input_ids"] == want, text
        assert ours.encode(text).tolist() == want
        assert ours.convert_ids_to_tokens(ids) == fast.convert_ids_to_tokens(want)


def test_pairs_and_token_types_equal_bert_tokenizer(vocab_dir):
    ours = WordPieceTokenizer.load(vocab_dir)
    fast, legacy = _references(vocab_dir)
    for a, b in [("The cat sat.", "今天很好"), ("hello", None), ("", "world"), ("a" * 101, "unaffable")]:
        ids, types = ours.build_inputs(ours.encode(a), None if b is None else ours.encode(b))
        want = fast(a, b)
        assert ids.tolist() == want["input_ids"] and types.tolist() == want["token_type_ids"]
        assert legacy(a, b)["input_ids"] == want["input_ids"]
    assert ids[0] == 101 and ids.tolist().count(102) == 2


def test_special_ids_come_from_the_file(vocab_dir):
    tok = WordPieceTokenizer.load(vocab_dir)
    s = tok.special_ids
    assert (s.pad, s.unk, s.cls, s.sep, s.mask) == (0, 100, 101, 102, 103)
    assert set(s.reserved) == set(range(1, 100)) | {104, 105}  # [unused*], <S>, <T>
    assert tok.vocab_size == len(ENTRIES)
    assert tok.encode("[MASK]").tolist() == [103]  # literal special tokens, as transformers
    plain = WordPieceTokenizer.load(vocab_dir, parse_special_tokens=False)  # the data build: text is text
    assert 103 not in plain.encode("the [MASK]").tolist()
    assert tok.encode("a" * 101).tolist() == [100]  # over 100 characters: [UNK]
    assert tok.encode("a" * 100).tolist() == tok.convert_tokens_to_ids(["a"] + ["##a"] * 99)
    # renamed special tokens (tokenizer_config.json) are looked up by their text
    _with_config(vocab_dir, mask_token="<S>")
    assert WordPieceTokenizer.load(vocab_dir).special_ids.mask == 104


def test_word_starts_follow_continuations_and_jieba(vocab_dir):
    english = WordPieceTokenizer.load(_with_config(vocab_dir, albertlm={"chinese": False}))
    ids, starts = english.encode_with_word_starts("The cats played")
    assert english.convert_ids_to_tokens(ids) == ["the", "cat", "##s", "play", "##ed"]
    assert starts.tolist() == [True, True, False, True, False]
    chinese = WordPieceTokenizer.load(_with_config(vocab_dir, albertlm={"chinese": True}))
    ids, starts = chinese.encode_with_word_starts("北京大学生在学习 cats")
    assert chinese.convert_ids_to_tokens(ids) == ["北", "京", "大", "学", "生", "在", "学", "习", "cat", "##s"]
    # jieba: 北京 / 大学生 / 在 / 学习; "cat" starts a word, "##s" continues it
    assert starts.tolist() == [True, False, True, False, False, True, True, False, True, False]
    packed_ids, packed_starts, offsets = chinese.encode_batch_packed(["北京大学生在学习 cats", "the cat"])
    assert packed_starts[:offsets[1]].tolist() == starts.tolist() and offsets.tolist() == [0, 10, 12]


def test_chinese_mode_is_detected_from_the_vocabulary(vocab_dir, tmp_path):
    assert not WordPieceTokenizer.load(vocab_dir).chinese  # mostly Latin entries
    zh = tmp_path / "zh"
    zh.mkdir()
    (zh / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"今天气很好我们是中国人"]),
                                  encoding="utf-8")
    tok = WordPieceTokenizer.load(zh)
    assert tok.chinese and tok.special_ids.unk == 1 and tok.vocab_size == 16  # no newline at the end
    assert tok.decode(tok.encode("今天 很好")) == "今天很好"


def test_save_loads_in_transformers_and_back(vocab_dir, tmp_path):
    tok = WordPieceTokenizer.load(_with_config(vocab_dir, do_lower_case=False))
    out = tok.save(tmp_path / "saved", extra={"note": 1})
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "BertTokenizer" and config["do_lower_case"] is False
    assert config["albertlm"]["note"] == 1 and (out / "vocab.txt").read_text() == (vocab_dir / "vocab.txt").read_text()
    auto = transformers.AutoTokenizer.from_pretrained(str(out))
    bert = transformers.BertTokenizer.from_pretrained(str(out))
    again = WordPieceTokenizer.load(out)
    for text in TEXTS:
        want = bert(text, add_special_tokens=False)["input_ids"]
        assert auto(text, add_special_tokens=False)["input_ids"] == want
        assert again.encode(text).tolist() == want == tok.encode(text).tolist()
    assert pickle.loads(pickle.dumps(tok)).encode("The Cat").tolist() == tok.encode("The Cat").tolist()


def test_decode_and_offsets(vocab_dir):
    tok = WordPieceTokenizer.load(vocab_dir)
    ids = tok.encode("The cats played, 今天")
    assert tok.decode(ids) == "the cats played, 今 天"  # not Chinese mode: pieces stay apart
    assert tok.decode([101, *ids, 102], skip_special_tokens=False).startswith("[CLS] the")
    [(ids, spans)] = tok.encode_batch_with_offsets(["Café played"])
    assert tok.convert_ids_to_tokens(ids) == ["cafe", "play", "##ed"] and spans == [(0, 4), (5, 9), (9, 11)]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([len(ENTRIES)])


def test_bad_vocabularies_are_refused(tmp_path):
    with pytest.raises(AlbertlmError, match="no vocab.txt"):
        WordPieceTokenizer.load(tmp_path)
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\nhello\n", encoding="utf-8")
    with pytest.raises(AlbertlmError, match=r"vocab.txt: no \[CLS\], \[SEP\], \[MASK\] entry"):
        WordPieceTokenizer.load(tmp_path)
    (tmp_path / "vocab.txt").write_bytes(b"\xff\xfe")
    with pytest.raises(AlbertlmError, match="not UTF-8"):
        WordPieceTokenizer.load(tmp_path)
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", encoding="utf-8")
    _with_config(tmp_path, do_lower_case="yes")
    with pytest.raises(AlbertlmError, match="tokenizer_config.json: field 'do_lower_case' must be true or false"):
        WordPieceTokenizer.load(tmp_path)


def test_batch_equals_single(vocab_dir):
    tok = WordPieceTokenizer.load(_with_config(vocab_dir, albertlm={"chinese": True}))
    pairs = tok.encode_batch_with_word_starts(TEXTS)
    for text, (ids, starts) in zip(TEXTS, pairs):
        one_ids, one_starts = tok.encode_with_word_starts(text)
        assert np.array_equal(ids, one_ids) and np.array_equal(starts, one_starts)


def test_load_vocabulary_picks_the_class_from_the_files(vocab_dir, tmp_path):
    from albertlm.tokenizer import load_vocabulary, vocabulary_fingerprint, vocabulary_kind

    assert isinstance(load_vocabulary(vocab_dir), WordPieceTokenizer)
    assert isinstance(load_vocabulary(vocab_dir / "vocab.txt"), WordPieceTokenizer)
    assert vocabulary_fingerprint(vocab_dir)["kind"] == "wordpiece"
    with pytest.raises(AlbertlmError, match="no spiece.model .SentencePiece. or vocab.txt"):
        load_vocabulary(tmp_path / "nothing")
    (vocab_dir / "spiece.model").write_bytes(b"not read")
    with pytest.raises(AlbertlmError, match="holds both spiece.model and vocab.txt"):
        vocabulary_kind(vocab_dir)
    _with_config(vocab_dir, tokenizer_class="BertTokenizerFast")
    assert vocabulary_kind(vocab_dir) == "wordpiece"
    _with_config(vocab_dir, tokenizer_class="AlbertTokenizer")
    assert vocabulary_kind(vocab_dir) == "sentencepiece"
    with pytest.raises(AlbertlmError, match="not a SentencePiece model"):
        load_vocabulary(vocab_dir)
