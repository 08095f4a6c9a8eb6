"""Pretraining data and pretraining on a WordPiece vocab.txt: a tiny Chinese corpus, jieba whole-word
masking, Google's special-id layout in the shards, the vocabulary recorded and checked."""

import hashlib
import json
import random

import numpy as np
import pytest

from albertlm.data.build import BuildSettings, build_dataset
from albertlm.data.loader import PretrainingDataset, collate
from albertlm.errors import AlbertlmError
from albertlm.tokenizer import load_vocabulary
from albertlm.tokenizer.chinese import jieba

WORDS = ["北京", "大学", "学生", "学习", "中国", "人", "今天", "天气", "很", "好", "我们", "是", "在", "喜欢", "读书",
         "老师", "朋友", "一起", "吃饭", "公园", "散步", "明天", "下雨"]
CHARS = sorted({c for w in WORDS for c in w})
ENTRIES = (["[PAD]"] + [f"[unused{i}]" for i in range(1, 100)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]", "<S>", "<T>"]
           + CHARS + ["。", "，", "##天", "##学"] + list("abc"))


@pytest.fixture(scope="module")
def zh(tmp_path_factory):
    """(vocab dir, corpus path) with Google's layout: [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103."""
    root = tmp_path_factory.mktemp("zh")
    (root / "vocab").mkdir()
    (root / "vocab" / "vocab.txt").write_text("".join(e + "\n" for e in ENTRIES), encoding="utf-8")
    r = random.Random(0)
    docs = []
    for _ in range(60):
        docs.append("\n".join("".join(r.choices(WORDS, k=r.randint(4, 9))) + "。" for _ in range(r.randint(4, 8))))
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return root / "vocab", root / "corpus.txt"


@pytest.fixture(scope="module")
def zh_data(zh, tmp_path_factory):
    vocab, corpus = zh
    out = tmp_path_factory.mktemp("zh-data") / "d"
    meta = build_dataset(str(corpus), vocab, out, BuildSettings(max_seq_length=32, heldout_fraction=0.1),
                         progress=False)
    return out, meta


def test_vocabulary_is_chinese_and_google_laid_out(zh):
    tok = load_vocabulary(zh[0])
    assert tok.chinese and tok.special_ids.cls == 101 and tok.special_ids.mask == 103
    assert set(tok.special_ids.reserved) == set(range(1, 100)) | {104, 105}


def test_meta_records_the_vocabulary(zh, zh_data):
    vocab, _ = zh
    out, meta = zh_data
    recorded = json.loads((out / "meta.json").read_text())["tokenizer"]
    assert recorded["kind"] == "wordpiece" and recorded["file"] == "vocab.txt" and recorded["chinese"]
    assert recorded["sha256"] == hashlib.sha256((vocab / "vocab.txt").read_bytes()).hexdigest()
    assert recorded["special_ids"]["cls"] == 101 and recorded["special_ids"]["reserved"] == [[1, 100], [104, 106]]
    assert PretrainingDataset(out).special_ids == load_vocabulary(vocab).special_ids


def test_examples_carry_the_vocabulary_ids_and_jieba_word_starts(zh, zh_data):
    tok = load_vocabulary(zh[0])
    out, _ = zh_data
    ds = PretrainingDataset(out, shuffle=False)
    shard, reserved = ds.shard(0), set(tok.special_ids.reserved) | {100}
    drawn = []
    for i in range(min(200, ds.num_examples)):
        tokens = shard.row("tokens", i).astype(np.int64)
        assert tokens[0] == 101 and tokens[-1] == 102 and np.count_nonzero(tokens == 102) == 2
        assert not {0, 2, 3, 4} & set(tokens.tolist())  # no SentencePiece-layout ids
        ex = ds.example(i)
        predicted = ex["labels"] != -100
        assert not predicted[tokens == 101].any() and not predicted[tokens == 102].any()
        shown = ex["input_ids"][predicted]
        drawn += shown[(shown != 103) & (shown != ex["labels"][predicted])].tolist()
    assert drawn and not reserved & set(drawn) and min(drawn) >= 106  # random replacements are real text
    batch = collate([ds.example(0), ds.example(1)], pad_to_multiple=64, special=ds.special_ids)
    assert (batch["attention_mask"] == 0).any() and batch["input_ids"][batch["attention_mask"] == 0].eq(0).all()
    from albertlm.vocab import SpecialIds

    odd = collate([ds.example(0), ds.example(1)], pad_to_multiple=64, special=SpecialIds(pad=7, unk=1, cls=2, sep=3, mask=4))
    assert (odd["attention_mask"] == 0).any() and odd["input_ids"][odd["attention_mask"] == 0].eq(7).all()
    # word starts: every character of a jieba word but the first continues it
    ids, starts = tok.encode_with_word_starts("北京大学学生在公园散步")
    words = jieba().lcut("北京大学学生在公园散步")
    expected = [k == 0 for w in words for k in range(len(w))]
    assert starts.tolist() == expected and len(ids) == len(expected)


def test_cli_data_build_takes_a_vocab_txt_directory(zh, tmp_path, capsys):
    from albertlm.cli import main

    vocab, corpus = zh
    assert main(["data", "build", "--corpus", str(corpus), "--tokenizer", str(vocab), "--out", str(tmp_path / "d"),
                 "--max-seq-length", "32", "--no-progress"]) == 0
    assert json.loads((tmp_path / "d" / "meta.json").read_text())["tokenizer"]["kind"] == "wordpiece"


@pytest.mark.slow
def test_pretrain_with_a_recipe_tokenizer(zh, tmp_path):
    from albertlm.train.pretrain import PretrainRecipe, pretrain

    vocab, corpus = zh
    recipe = PretrainRecipe().with_settings(preset="test", corpus=str(corpus), tokenizer=str(vocab), max_seq_length=32,
                            batch_size=8, steps=6, warmup_steps=1, lr=0.01, eval_every=6, eval_examples=16,
                            log_every=1, checkpoint_every=6, heldout_fraction=0.1, precision="fp32",
                            curriculum_steps=0, workers=1)
    summary = pretrain(recipe, tmp_path / "run", progress=False)
    model = tmp_path / "run" / "model"
    assert (model / "vocab.txt").read_bytes() == (vocab / "vocab.txt").read_bytes()
    assert not (model / "spiece.model").exists()
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(model))  # a bare vocab.txt got its BertTokenizer config
    assert hf("北京")["input_ids"] == [101, *load_vocabulary(vocab).encode("北京").tolist(), 102]
    assert json.loads((model / "config.json").read_text())["vocab_size"] == len(ENTRIES)
    assert np.isfinite(summary["eval"]["mlm_all_loss"])
    # another vocabulary under the same run is refused, naming the stage
    other = tmp_path / "other"
    other.mkdir()
    (other / "vocab.txt").write_text((vocab / "vocab.txt").read_text() + "xyz\n", encoding="utf-8")
    from albertlm.train.stages import check_stages

    with pytest.raises(AlbertlmError, match="tokenizer/"):
        check_stages(recipe.with_settings(tokenizer=str(other)), tmp_path / "run")


def test_a_data_build_from_another_vocabulary_is_refused(zh, zh_data, tmp_path):
    import shutil

    from albertlm.train.pretrain import PretrainRecipe
    from albertlm.train.stages import check_stages

    vocab, corpus = zh
    run = tmp_path / "run"
    shutil.copytree(zh_data[0], run / "data")
    (run / "tokenizer").mkdir(parents=True)
    (run / "tokenizer" / "vocab.txt").write_text(vocab.joinpath("vocab.txt").read_text() + "xyz\n", encoding="utf-8")
    recipe = PretrainRecipe().with_settings(preset="test", corpus=str(corpus), max_seq_length=32, heldout_fraction=0.1,
                            curriculum_steps=0, curriculum_seq_length=None, seed=0)
    with pytest.raises(AlbertlmError, match=r"data/ \(built with another vocabulary than tokenizer/ holds\)"):
        check_stages(recipe, run)
    shutil.copyfile(vocab / "vocab.txt", run / "tokenizer" / "vocab.txt")
    check_stages(recipe, run)  # the same vocabulary: accepted


def test_switching_between_a_copied_and_a_trained_tokenizer_is_refused(zh, tmp_path):
    from albertlm.train.pretrain import PretrainRecipe
    from albertlm.train.stages import STAGE_FILE, _tokenizer_stage, check_stages

    vocab, corpus = zh
    run = tmp_path / "run"
    (run / "tokenizer").mkdir(parents=True)
    given = PretrainRecipe(preset="test", corpus=str(corpus), tokenizer=str(vocab))
    (run / "tokenizer" / STAGE_FILE).write_text(json.dumps(_tokenizer_stage(given)))
    (run / "tokenizer" / "vocab.txt").write_bytes((vocab / "vocab.txt").read_bytes())
    check_stages(given, run)
    with pytest.raises(AlbertlmError, match="source: saved 'copied', now 'trained'"):
        check_stages(PretrainRecipe(preset="test", corpus=str(corpus)), run)
