"""A model directory with a WordPiece vocab.txt (Google's special-id layout: [CLS] 101, [SEP] 102)
through finetune, evaluate, predict and fill-mask, and through the task features."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm import AlbertConfig, AlbertForPreTraining
from albertlm.cli import main
from albertlm.tasks.registry import get_task
from albertlm.tokenizer import WordPieceTokenizer, load_vocabulary
from albertlm.inference.features import feature_settings
from albertlm.train.finetune import FinetuneRecipe, finetune
from test_finetune import ANIMALS, CITIES, COLORS, FILL, NEG, PEOPLE, POS, VERBS, write_conll, write_squad, write_sst


WORDS = POS + NEG + FILL + COLORS + ANIMALS + PEOPLE + CITIES + VERBS + ["what", "which", "color", "is", "to"]
ENTRIES = (["[PAD]"] + [f"[unused{i}]" for i in range(1, 100)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
           + sorted(set(WORDS)) + list("?.-_,") + ["##s", "##ed"])


@pytest.fixture(scope="module")
def wp_model_dir(tmp_path_factory, one_thread) -> Path:
    """A random tiny AlbertForPreTraining whose tokenizer is a vocab.txt (no spiece.model)."""
    path = tmp_path_factory.mktemp("wp-pretrained")
    (path / "vocab.txt").write_text("".join(e + "\n" for e in ENTRIES), encoding="utf-8")
    config = AlbertConfig(vocab_size=len(ENTRIES), embedding_size=16, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=64, max_position_embeddings=128)
    torch.manual_seed(0)
    AlbertForPreTraining(config).save_pretrained(path)
    return path


def _finetune(task, writer, model_dir, tmp_path, steps):
    data = tmp_path / f"data-{task}"
    data.mkdir()
    writer(data, random.Random(3))
    recipe = FinetuneRecipe(lr=3e-3, batch_size=16, steps=steps, warmup_steps=5, log_every=10, eval_every=steps,
                            max_seq_length=48, doc_stride=16, eval_batch_size=32)
    results = finetune(task, model_dir, data, tmp_path / f"out-{task}", recipe, progress=False)
    return data, Path(results["out_dir"]), results


def test_task_features_use_the_vocabulary_special_ids(wp_model_dir, tmp_path):
    tok = load_vocabulary(wp_model_dir)
    assert isinstance(tok, WordPieceTokenizer) and tok.special_ids.cls == 101
    write_sst(tmp_path, random.Random(0))
    spec = get_task("sst-2")
    settings = feature_settings(FinetuneRecipe(max_seq_length=48).resolve(spec, 1),
                                AlbertConfig(vocab_size=len(ENTRIES), max_position_embeddings=128))
    features = spec.family.featurize(spec, spec.read(tmp_path, "dev")[:3], tok, ["0", "1"], settings, False)
    for f in features:
        ids = f.inputs["input_ids"].tolist()
        assert ids[0] == 101 and ids[-1] == 102 and ids.count(102) == 1 and 100 not in ids
        assert not {2, 3} & set(ids)  # nothing of the SentencePiece layout


def test_finetune_evaluate_predict_fill_mask(wp_model_dir, tmp_path, capsys):
    data, out, results = _finetune("sst-2", write_sst, wp_model_dir, tmp_path, 120)
    assert results["best"]["accuracy"] > 0.9
    assert (out / "vocab.txt").read_text() == (wp_model_dir / "vocab.txt").read_text()
    assert not (out / "spiece.model").exists()
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "BertTokenizer"
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(out))
    assert hf("the movie was great")["input_ids"][0] == 101
    assert main(["evaluate", "--model", str(out), "--data", str(data), "--json", "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["accuracy"] == pytest.approx(results["best"]["accuracy"])
    inputs = tmp_path / "in.txt"
    inputs.write_text("the movie was great fun .\nthe film was awful and boring .\n")
    assert main(["predict", "--model", str(out), str(inputs), "--device", "cpu"]) == 0
    assert [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()] == ["1", "0"]
    assert main(["fill-mask", "--model", str(wp_model_dir), "the movie was [MASK] .", "--top-k", "3",
                 "--device", "cpu"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 and printed[1].startswith("[MASK] 1:")
    filled = printed[0]
    assert filled.startswith("the movie was ") and "[MASK]" not in filled


@pytest.mark.slow
def test_squad_and_ner_on_a_wordpiece_vocabulary(wp_model_dir, tmp_path, capsys):
    _, qa_out, qa = _finetune("squad-v1.1", write_squad, wp_model_dir, tmp_path, 150)
    _, ner_out, ner = _finetune("conll2003", write_conll, wp_model_dir, tmp_path, 100)
    assert qa["best"]["f1"] > 0.5 and ner["best"]["f1"] > 0.5
    inputs = tmp_path / "in.txt"
    inputs.write_text("what color is it ?\tthe cat is red .\n")
    assert main(["predict", "--model", str(qa_out), str(inputs), "--device", "cpu"]) == 0
    assert capsys.readouterr().out.strip() in ("red", "red .", "cat is red", "is red")
    inputs.write_text("john went to paris .\n")
    assert main(["predict", "--model", str(ner_out), str(inputs), "--device", "cpu"]) == 0
    assert capsys.readouterr().out.startswith("john/")


def test_squad_piece_spans_come_from_the_vocabulary(wp_model_dir):
    from albertlm.tasks.common import encode_words

    tok = load_vocabulary(wp_model_dir)
    [(ids, spans), (ids2, spans2)] = encode_words(tok, ["Cats,", "played"], with_offsets=True)
    assert tok.convert_ids_to_tokens(ids) == ["cat", "##s", ","] and spans == [(0, 3), (3, 4), (4, 5)]
    assert tok.convert_ids_to_tokens(ids2) == ["[UNK]"] and spans2 == [(0, 6)]
    assert np.asarray(ids).dtype == np.int32
