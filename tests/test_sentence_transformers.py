"""sentence-transformers directories both ways, proven by equal vectors against sentence-transformers itself:
our export read by `SentenceTransformer(dir)`, and a directory `SentenceTransformer.save` wrote read by
`albertlm embed`, for every pooling mode both have (cls, mean, max), with a SentencePiece and a WordPiece
vocabulary. Weights are random at a scale where a wrong pooling, token or truncation shows. Run with -s to see the
measured max abs differences (lines starting PARITY). Skipped without sentence-transformers (the `dev` extra)."""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm import AlbertConfig, AlbertlmError, AlbertModel
from albertlm.cli import main
from albertlm.inference.embed import EmbedSettings, load_embedder
from albertlm.st_directory import read_sentence_transformers, write_sentence_transformers
from albertlm.tokenizer import Tokenizer, WordPieceTokenizer, train_tokenizer
from test_interop_hf import randomise
from test_wordpiece import ENTRIES

st = pytest.importorskip("sentence_transformers")

TOL = 1e-5
WORDS = "the cat dog sat ran on a mat far away good bad film plot very quite".split()
TEXTS = ["The cat sat on the mat.", "", "a dog ran far away, very far away, on and on and on and on " * 2,
         "good film", "Bad plot!", "the"]
LENGTH = 16  # the long text is cut: truncation must agree too
TINY = dict(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64)


def st_modules():
    """(Transformer, Pooling, Normalize) from sentence-transformers 6's module paths, or older releases'."""
    try:
        from sentence_transformers.base.modules import Normalize, Transformer
        from sentence_transformers.sentence_transformer.modules import Pooling
    except ImportError:
        from sentence_transformers.models import Normalize, Pooling, Transformer
    return Transformer, Pooling, Normalize


def save_backbone(path: Path, vocab_size: int, **ids) -> Path:
    torch.manual_seed(0)
    randomise(AlbertModel(AlbertConfig(vocab_size=vocab_size, **TINY, **ids)), seed=1).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def vocab_dirs(tmp_path_factory, one_thread) -> dict[str, Path]:
    """A random AlbertModel directory per vocabulary kind."""
    sp = tmp_path_factory.mktemp("sp")
    r = random.Random(0)
    train_tokenizer([" ".join(r.choices(WORDS, k=10)) for _ in range(300)], sp, vocab_size=60, log=lambda m: None)
    save_backbone(sp, Tokenizer.load(sp).vocab_size)
    wp = tmp_path_factory.mktemp("wp")
    WordPieceTokenizer(ENTRIES).save(wp)
    special = WordPieceTokenizer.load(wp).special_ids
    save_backbone(wp, len(ENTRIES), pad_token_id=special.pad, bos_token_id=special.cls, eos_token_id=special.sep)
    return {"sentencepiece": sp, "wordpiece": wp}


def st_encode(path: Path) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = st.SentenceTransformer(str(path), device="cpu")
    return model.encode(TEXTS, convert_to_numpy=True, show_progress_bar=False)


def ours(path: Path, **settings) -> np.ndarray:
    return load_embedder(path, EmbedSettings(device="cpu", **settings)).encode(TEXTS)


@pytest.mark.parametrize("vocabulary", ["sentencepiece", "wordpiece"])
@pytest.mark.parametrize("pooling", ["cls", "mean", "max"])
def test_our_export_loads_in_sentence_transformers(vocab_dirs, vocabulary, pooling, tmp_path):
    source, out = vocab_dirs[vocabulary], tmp_path / "st"
    normalize = pooling != "max"
    report = write_sentence_transformers(source, out, pooling, normalize, max_seq_length=LENGTH)
    assert {"modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling",
            "config.json", "model.safetensors", "tokenizer_config.json"} <= set(report["files"])
    assert ("2_Normalize" in report["files"]) == normalize
    theirs = st_encode(out)
    direct = ours(source, pooling=pooling, normalize=normalize, max_seq_length=LENGTH)
    assert theirs.shape == (len(TEXTS), 32)
    print(f"PARITY export {vocabulary} {pooling}: {np.abs(theirs - direct).max():.1e}")
    assert np.abs(theirs - direct).max() < TOL
    assert np.abs(ours(out) - direct).max() < TOL  # our export read back with its own pooling and length
    assert not np.allclose(direct, ours(source, pooling=pooling, normalize=normalize), atol=TOL)  # the cut shows


@pytest.mark.parametrize("vocabulary", ["sentencepiece", "wordpiece"])
@pytest.mark.parametrize("pooling", ["cls", "mean", "max"])
def test_a_directory_sentence_transformers_saved_embeds_alike(vocab_dirs, vocabulary, pooling, tmp_path, capsys):
    Transformer, Pooling, Normalize = st_modules()
    normalize = pooling == "mean"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformer = Transformer(str(vocab_dirs[vocabulary]), max_seq_length=LENGTH)
        modules = [transformer, Pooling(32, pooling_mode=pooling)] + ([Normalize()] if normalize else [])
        model = st.SentenceTransformer(modules=modules, device="cpu")
        model.save(str(tmp_path / "saved"), create_model_card=False)
    layout = read_sentence_transformers(tmp_path / "saved")
    assert (layout.pooling, layout.normalize, layout.max_seq_length) == (pooling, normalize, LENGTH)
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    rc = main(["embed", str(tmp_path / "saved"), "--input", str(tmp_path / "in.txt"), "--output",
               str(tmp_path / "v.npy"), "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    theirs = model.encode(TEXTS, convert_to_numpy=True, show_progress_bar=False)
    print(f"PARITY saved {vocabulary} {pooling}: {np.abs(np.load(tmp_path / 'v.npy') - theirs).max():.1e}")
    assert np.abs(np.load(tmp_path / "v.npy") - theirs).max() < TOL


def test_pooler_and_other_modules_are_refused_in_one_line(vocab_dirs, tmp_path):
    source = vocab_dirs["sentencepiece"]
    with pytest.raises(AlbertlmError, match="'pooler' .* has no sentence-transformers module") as exc:
        write_sentence_transformers(source, tmp_path / "out", "pooler")
    assert "\n" not in str(exc.value) and not (tmp_path / "out").exists()
    write_sentence_transformers(source, tmp_path / "st", "mean", normalize=True)
    modules = json.loads((tmp_path / "st" / "modules.json").read_text())
    dense = [*modules, {"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"}]
    (tmp_path / "st" / "modules.json").write_text(json.dumps(dense))
    with pytest.raises(AlbertlmError, match="module 3 is sentence_transformers.models.Dense"):
        read_sentence_transformers(tmp_path / "st")
    (tmp_path / "st" / "modules.json").write_text(json.dumps(modules))
    pooling_file = tmp_path / "st" / "1_Pooling" / "config.json"
    pooling_file.write_text(json.dumps({"embedding_dimension": 32, "pooling_mode": "weightedmean"}))
    with pytest.raises(AlbertlmError, match="1_Pooling/config.json: pooling \\['weightedmean'\\]"):
        read_sentence_transformers(tmp_path / "st")
    pooling_file.write_text(json.dumps({"embedding_dimension": 64, "pooling_mode": "mean"}))
    with pytest.raises(AlbertlmError, match="the pooled width is 64, but the model's hidden_size is 32"):
        read_sentence_transformers(tmp_path / "st")


def test_a_new_export_replaces_an_earlier_one_and_nothing_else(vocab_dirs, tmp_path):
    source, out = vocab_dirs["sentencepiece"], tmp_path / "st"
    write_sentence_transformers(source, out, "mean", normalize=True)
    write_sentence_transformers(source, out, "cls", normalize=False)
    assert not (out / "2_Normalize").exists()  # the earlier export's Normalize does not linger
    layout = read_sentence_transformers(out)
    assert (layout.pooling, layout.normalize) == ("cls", False)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(AlbertlmError, match="holds files albertlm did not write"):
        write_sentence_transformers(source, tmp_path / "mine", "mean")
    with pytest.raises(AlbertlmError, match="overwrite its own input"):
        write_sentence_transformers(source, source, "mean")
