"""The data build end to end on the built-in corpus: statistics, determinism, sharding, cursor, CLI."""

import hashlib
import json

import numpy as np
import pytest

from albertlm.data.corpus import Corpus
from albertlm.cli import main
from albertlm.data.build import BuildSettings, build_dataset
from albertlm.data.loader import PretrainingDataset, collate
from albertlm.data.stats import data_stats
from albertlm.errors import AlbertlmError
from albertlm.tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def kjv_tokenizer(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok")
    train_tokenizer(Corpus("kjv").sentences, out, vocab_size=2000)
    return out


@pytest.fixture(scope="module")
def kjv_data(kjv_tokenizer, tmp_path_factory):
    out = tmp_path_factory.mktemp("data") / "d"
    build_dataset("kjv", kjv_tokenizer, out, BuildSettings(max_seq_length=128, heldout_fraction=0.05,
                                                          workers=2), progress=False)
    return out


def _digest(directory):
    h = hashlib.sha256()
    for p in sorted(directory.glob("*.shard")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def test_statistics_match_the_recipe(kjv_data):
    s = data_stats(kjv_data, sample=4000)
    assert s["examples"] > 5000
    assert abs(s["mask_rate"] - 0.15) <= 0.005
    for n, p in {"1": 6 / 11, "2": 3 / 11, "3": 2 / 11}.items():
        assert abs(s["ngram_fractions"][n] - p) <= 0.02, (n, s["ngram_fractions"])
    assert abs(s["label_1_fraction"] - 0.5) <= 0.02
    assert abs(s["short_fraction"] - 0.1) <= 0.02
    assert 0 < s["padding_fraction"] < 0.3


def test_static_masks_statistics(kjv_tokenizer, tmp_path):
    build_dataset("kjv", kjv_tokenizer, tmp_path / "s", BuildSettings(max_seq_length=128, masking="static",
                                                                      objective="nsp"), progress=False)
    s = data_stats(tmp_path / "s")
    assert abs(s["mask_rate"] - 0.15) <= 0.005 and abs(s["label_1_fraction"] - 0.5) <= 0.02
    ds = PretrainingDataset(tmp_path / "s")
    assert ds.masking == "static"
    ex = ds.example(0)
    assert (ex["labels"] != -100).sum() > 0 and ex["input_ids"][0] == 2


def test_same_seed_same_bytes_whatever_the_workers(kjv_tokenizer, kjv_data, tmp_path):
    build_dataset("kjv", kjv_tokenizer, tmp_path / "one", BuildSettings(max_seq_length=128, heldout_fraction=0.05,
                                                                        workers=1), progress=False)
    assert _digest(tmp_path / "one") == _digest(kjv_data)
    build_dataset("kjv", kjv_tokenizer, tmp_path / "other", BuildSettings(max_seq_length=128, heldout_fraction=0.05,
                                                                          seed=1), progress=False)
    assert _digest(tmp_path / "other") != _digest(kjv_data)


def test_heldout_documents_are_not_in_training(kjv_data):
    train = PretrainingDataset(kjv_data, "train", masking="dynamic")
    held = PretrainingDataset(kjv_data, "heldout", masking="dynamic")
    assert 0 < held.num_examples < train.num_examples / 5

    def texts(ds):
        s = ds.shard(0)
        return {bytes(np.asarray(s.row("tokens", i))) for i in range(len(s))}
    assert not texts(train) & texts(held)


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_cover_an_epoch_exactly_once(kjv_data, world):
    full = PretrainingDataset(kjv_data, epochs=1)
    seen = []
    for rank in range(world):
        ds = PretrainingDataset(kjv_data, rank=rank, world_size=world, epochs=1)
        order = ds._order(0)[rank::world]
        assert len(order) == len(ds)
        seen.extend(order.tolist())
    assert sorted(seen) == list(range(full.num_examples))
    # the same example gets the same dynamic mask whatever the rank layout
    one, two = PretrainingDataset(kjv_data), PretrainingDataset(kjv_data, rank=1, world_size=2)
    first_of_rank1 = int(two._order(0)[1])
    a, b = one.example(first_of_rank1), next(iter(two))
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_cursor_resumes_exactly(kjv_data):
    ds = PretrainingDataset(kjv_data, seed=3)
    it = iter(ds)
    for _ in range(len(ds) - 5):  # cross an epoch boundary after the save
        next(it)
    state = ds.state_dict()
    expected = [next(it) for _ in range(12)]
    again = PretrainingDataset(kjv_data, seed=3)
    again.load_state_dict(state)
    got = [x for _, x in zip(range(12), again)]
    for e, g in zip(expected, got):
        assert all(np.array_equal(e[k], g[k]) for k in e)
    assert again.epoch == 1
    with pytest.raises(AlbertlmError, match="processes"):
        PretrainingDataset(kjv_data, seed=3, rank=0, world_size=2).load_state_dict(state)


def test_dynamic_masks_change_between_epochs(kjv_data):
    ds = PretrainingDataset(kjv_data)
    assert not np.array_equal(ds.example(5, epoch=0)["labels"], ds.example(5, epoch=1)["labels"])
    assert np.array_equal(ds.example(5, epoch=0)["labels"], ds.example(5, epoch=0)["labels"])


def test_collate(kjv_data):
    ds = PretrainingDataset(kjv_data, epochs=1)
    b = collate([ds.example(i) for i in range(4)])
    assert b["input_ids"].shape[0] == 4 and b["input_ids"].shape[1] % 8 == 0
    assert set(b) == {"input_ids", "token_type_ids", "attention_mask", "labels", "sentence_order_label"}
    assert (b["labels"][b["attention_mask"] == 0] == -100).all()
    assert (b["input_ids"][:, 0] == 2).all()
    one = collate([ds.example(0)])
    n = len(ds.example(0)["input_ids"])
    assert one["attention_mask"][0, :n].all() and not one["attention_mask"][0, n:].any()


def test_cli_build_and_stats(kjv_tokenizer, tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n\n".join("\n".join(f"Sentence {d} {i} of the little document here." for i in range(12))
                                  for d in range(30)))
    assert main(["data", "build", "--corpus", str(corpus), "--tokenizer", str(kjv_tokenizer), "--out",
                 str(tmp_path / "d"), "--max-seq-length", "64", "--no-progress"]) == 0
    assert "30 documents" in capsys.readouterr().out
    assert main(["data", "stats", str(tmp_path / "d"), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["examples"] > 0
    # a completed build is not overwritten; an empty corpus is a clear error
    assert main(["data", "build", "--corpus", str(corpus), "--tokenizer", str(kjv_tokenizer), "--out",
                 str(tmp_path / "d"), "--no-progress"]) == 2
    assert "already holds" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert main(["data", "build", "--corpus", str(empty), "--tokenizer", str(kjv_tokenizer), "--out",
                 str(tmp_path / "e"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "empty.txt" in err


def test_chinese_whole_word_masking(tmp_path):
    """Chinese: one piece per character, jieba words masked as a whole (albert_zh's scheme)."""
    sents = ["我们今天去北京大学参观图书馆。", "中华人民共和国成立于一九四九年。", "他喜欢在公园里跑步和读书。",
             "科学技术是第一生产力。", "这个城市的交通非常方便。", "学生们正在教室里认真学习。"]
    corpus = tmp_path / "zh.txt"
    corpus.write_text("\n\n".join("\n".join(sents[(d + k) % 6] for k in range(5)) for d in range(40)) + "\n")
    train_tokenizer(Corpus(str(corpus)).sentences, tmp_path / "tok", vocab_size=120, chinese=True)
    build_dataset(str(corpus), tmp_path / "tok", tmp_path / "d",
                  BuildSettings(max_seq_length=64, masking="static", heldout_fraction=0.0), progress=False)
    ds = PretrainingDataset(tmp_path / "d")
    shard = ds.shard(0)
    checked = 0
    for i in range(len(shard)):
        labels = ds.example(i)["labels"]
        starts = shard.row("word_start", i, "tokens_offsets").astype(bool)
        tokens = shard.row("tokens", i)
        word_id = np.cumsum(starts)
        word_id[(tokens == 2) | (tokens == 3)] = -1  # [CLS]/[SEP] belong to no word
        masked = labels != -100
        for w in np.unique(word_id[masked]):
            assert masked[word_id == w].all(), "a Chinese word was partly masked"
            checked += 1
        assert starts.sum() < (labels.size - 3)  # multi-character words exist
    assert checked > 50


def test_training_and_stats_draw_the_same_masks_from_the_build_settings(kjv_tokenizer, tmp_path, capsys):
    out = tmp_path / "d"
    build_dataset("kjv", kjv_tokenizer, out, BuildSettings(max_seq_length=64, heldout_fraction=0.05,
                                                           masked_lm_prob=0.4, max_ngram=1, max_predictions=30),
                  progress=False)
    s = data_stats(out, sample=500)
    assert abs(s["mask_rate"] - 0.4) <= 0.02 and s["ngram_fractions"] == {"1": 1.0}
    # the loader, told nothing, masks as the build says; its draws are the ones stats counted
    data = PretrainingDataset(out, "train", seed=0, shuffle=False)
    assert (data.masked_lm_prob, data.max_ngram, data.max_predictions) == (0.4, 1, 30)
    masked = sum(int((data.example(i)["labels"] != -100).sum()) for i in range(300))
    maskable = sum(len(data.example(i)["labels"]) - 3 for i in range(300))
    assert abs(masked / maskable - 0.4) <= 0.03
    assert np.array_equal(data.example(7)["labels"], data.dynamic_mask(7).labels)
    # an interrupted build (no meta.json) is refused by the loader as by the CLI
    (out / "meta.json").unlink()
    with pytest.raises(AlbertlmError, match="no meta.json"):
        PretrainingDataset(out, "train")
    assert main(["data", "stats", str(out)]) == 2 and "no meta.json" in capsys.readouterr().err


def test_stats_sample_must_be_positive(kjv_data, capsys):
    assert main(["data", "stats", str(kjv_data), "--sample", "-5"]) == 2
    assert "--sample" in capsys.readouterr().err


@pytest.mark.parametrize("bad, message", [({"masked_lm_prob": 2.5}, "masked_lm_prob"),
                                          ({"short_seq_prob": -3.0}, "short_seq_prob"),
                                          ({"max_seq_length": 70000}, "16-bit"),
                                          ({"masked_lm_prob": float("nan")}, "finite"),
                                          ({"dupe_factor": 1.5}, "integer")])
def test_build_settings_are_validated(bad, message):
    with pytest.raises(AlbertlmError, match=message):
        BuildSettings(**bad)


def test_cli_build_refuses_bad_settings_in_one_line(kjv_tokenizer, tmp_path, capsys):
    code = main(["data", "build", "--corpus", "kjv", "--tokenizer", str(kjv_tokenizer), "--out", str(tmp_path / "d"),
                 "--masked-lm-prob", "2.5"])
    assert code == 2 and "masked_lm_prob" in capsys.readouterr().err and not (tmp_path / "d").exists()


def test_shards_carry_checksums_and_a_flipped_byte_is_caught(kjv_tokenizer, tmp_path, capsys):
    out = tmp_path / "d"
    build_dataset("kjv", kjv_tokenizer, out, BuildSettings(max_seq_length=64, heldout_fraction=0.05), progress=False)
    meta = json.loads((out / "meta.json").read_text())
    assert set(meta["checksums"]) == {p.name for p in out.glob("*.shard")}
    assert main(["data", "stats", str(out), "--verify"]) == 0 and "verified" in capsys.readouterr().out
    shard = sorted(out.glob("train-*.shard"))[0]
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0xFF  # a token byte: still a well-formed shard
    shard.write_bytes(bytes(data))
    assert main(["data", "stats", str(out), "--verify"]) == 2
    assert f"{shard}: fails its sha256 check" in capsys.readouterr().err
    with pytest.raises(AlbertlmError, match="sha256"):  # small splits are verified whenever they are opened
        PretrainingDataset(out, "train")


def test_an_out_of_range_token_names_the_shard_and_example(kjv_data, monkeypatch):
    import albertlm.data.loader as loader

    monkeypatch.setattr(loader, "VERIFY_AT_LOAD_BYTES", 0)  # as for a split too large to hash at every start
    data = PretrainingDataset(kjv_data, "train", shuffle=False)
    data.vocab_size = 10  # every real id is now out of range
    with pytest.raises(AlbertlmError, match=r"train-00000.shard: example 0 holds token ids outside"):
        data.example(0)


def test_an_invalid_meta_json_is_one_line(kjv_data, tmp_path, capsys):
    import shutil

    copy = tmp_path / "d"
    shutil.copytree(kjv_data, copy)
    (copy / "meta.json").write_text("{not json")
    assert main(["data", "stats", str(copy)]) == 2 and "meta.json: not valid JSON" in capsys.readouterr().err
    (copy / "meta.json").write_text(json.dumps({"settings": {"seed": 0}}))
    with pytest.raises(AlbertlmError, match="settings lack masked_lm_prob"):
        PretrainingDataset(copy, "train")
