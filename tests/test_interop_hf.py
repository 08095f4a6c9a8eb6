"""Hugging Face interop: the key table proven by equal outputs against transformers, both directions.

Parity tests randomise every parameter (biases and LayerNorms included, so a wrong row cannot hide
behind a zero init), move the weights only through the save/load path under test, and compare in
eval mode, fp32. Run with `-s` to see the measured max abs deltas (lines starting PARITY).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from albertlm import AlbertConfig, AlbertForPreTraining, AlbertlmError, AlbertModel
from albertlm.heads import AlbertForSequenceClassification
from albertlm.interop import hf

TOL = 1e-5
TINY = dict(vocab_size=99, embedding_size=16, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
            intermediate_size=37, max_position_embeddings=64)
CONFIGS = {
    "all-shared": AlbertConfig(**TINY),
    "groups2-inner2": AlbertConfig(**{**TINY, "vocab_size": 113, "num_hidden_layers": 4,
                                      "num_hidden_groups": 2, "inner_group_num": 2}),
    "unshared-E=H": AlbertConfig(**{**TINY, "vocab_size": 128, "embedding_size": 32, "sharing": "none"}),
}


@pytest.fixture(scope="module")
def tf():
    """transformers, or skip: it is an optional dependency (the `hf` extra)."""
    return pytest.importorskip("transformers")


def randomise(module: nn.Module, seed: int, std: float = 0.1) -> nn.Module:
    """Every parameter random; LayerNorm weights around 1 so activations keep a sane scale."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            for name, p in m.named_parameters(recurse=False):
                base = 1.0 if isinstance(m, nn.LayerNorm) and name == "weight" else 0.0
                p.copy_(base + std * torch.randn(p.shape, generator=g))
    return module.eval()


def hf_config(tf, config: AlbertConfig):
    """transformers' config for `config`, without our `sharing` field (as transformers writes it)."""
    data = {k: v for k, v in config.to_dict().items() if k not in ("sharing", "embedding_layout", "model_type")}
    return tf.AlbertConfig(**data)


def make_batch(config: AlbertConfig, seed: int = 1):
    """Padded pairs with token types, MLM labels on some real tokens and SOP labels."""
    g = torch.Generator().manual_seed(seed)
    B, S = 3, 11
    ids = torch.randint(5, config.vocab_size, (B, S), generator=g)
    ids[:, 0] = 2
    mask = torch.ones(B, S, dtype=torch.long)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = 0
    types = torch.zeros(B, S, dtype=torch.long)
    types[:, 3:] = 1
    types[mask == 0] = 0
    labels = torch.full((B, S), -100)
    for b, positions in enumerate(([1, 5, 9], [2, 6], [1, 3])):
        labels[b, positions] = torch.randint(0, config.vocab_size, (len(positions),), generator=g)
    sop = torch.tensor([0, 1, 1])
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=types), labels, sop


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item()


@torch.no_grad()
def pretraining_deltas(ours: AlbertForPreTraining, theirs, config: AlbertConfig) -> dict[str, float]:
    """Max abs differences of every output of ours vs transformers' AlbertForPreTraining."""
    inputs, labels, sop = make_batch(config)
    o = ours(**inputs, output_hidden_states=True)  # no labels: dense [B, S, V] logits
    h = theirs(**inputs, output_hidden_states=True)
    # Both return the projected embeddings plus one state per executed layer call.
    assert len(o.hidden_states) == len(h.hidden_states) == 1 + config.num_layer_calls
    o_loss = ours(**inputs, labels=labels, sentence_order_label=sop).loss  # sparse MLM
    h_loss = theirs(**inputs, labels=labels, sentence_order_label=sop).loss  # dense MLM
    return {
        "prediction_logits": max_diff(o.prediction_logits, h.prediction_logits),
        "sop_logits": max_diff(o.sop_logits, h.sop_logits),
        "hidden_states": max(max_diff(a, b) for a, b in zip(o.hidden_states, h.hidden_states)),
        "pooled": max_diff(ours.albert(**inputs).pooler_output, theirs.albert(**inputs).pooler_output),
        "loss": abs(o_loss.item() - h_loss.item()),
    }


def check(deltas: dict[str, float], label: str) -> None:
    print(f"PARITY {label}: " + ", ".join(f"{k}={v:.2e}" for k, v in deltas.items()))
    assert max(deltas.values()) < TOL, deltas


# ---------------------------------------------------------------------------- the table itself
@pytest.mark.parametrize("name", CONFIGS)
def test_key_table_matches_transformers_names(tf, name):
    config = CONFIGS[name]
    ours = AlbertForPreTraining(config)
    theirs = tf.AlbertForPreTraining(hf_config(tf, config))
    table = hf.key_table(config)
    assert sorted(o for o, _ in table) == sorted(ours.state_dict())  # every parameter, once
    tied = {"predictions.decoder.weight", "predictions.decoder.bias"}
    assert sorted(n for _, names in table for n in names) == sorted(set(theirs.state_dict()) - tied)


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("cls", [AlbertForPreTraining, AlbertModel])
def test_state_dict_round_trip_is_exact(name, cls):
    config = CONFIGS[name]
    model = randomise(cls(config), seed=3)
    hf_sd = hf.to_hf_state_dict(model)
    assert all(k.startswith("albert.") for k in hf_sd if "albert_layer" in k) == (cls is AlbertForPreTraining)
    back = hf.from_hf_state_dict(hf_sd, config, arch=cls.__name__)
    assert back.keys() == model.state_dict().keys()
    assert all(torch.equal(back[k], v) for k, v in model.state_dict().items())
    # From a bare state dict the class is inferred from the keys.
    assert hf.to_hf_state_dict(model.state_dict(), config).keys() == hf_sd.keys()


# ---------------------------------------------------------------------------- parity, both directions
@pytest.mark.parametrize("name", CONFIGS)
def test_ours_to_transformers(tf, tmp_path, name):
    config = CONFIGS[name]
    ours = randomise(AlbertForPreTraining(config), seed=10)
    ours.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["AlbertForPreTraining"]
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert f.metadata() == {"format": "pt"}
        assert not any(k.startswith("predictions.decoder") for k in f.keys())  # tied: omitted as HF does
    theirs, info = tf.AlbertForPreTraining.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")), info
    check(pretraining_deltas(ours, theirs.eval(), config), f"{name} ours->HF")


@pytest.mark.parametrize("name", CONFIGS)
def test_transformers_to_ours(tf, tmp_path, name):
    config = CONFIGS[name]
    torch.manual_seed(20)
    theirs = randomise(tf.AlbertForPreTraining(hf_config(tf, config)), seed=20)
    theirs.save_pretrained(tmp_path)
    assert "sharing" not in json.loads((tmp_path / "config.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a complete HF directory loads silently
        ours = AlbertForPreTraining.from_pretrained(tmp_path)
    assert ours.config.sharing == config.sharing and not ours.training
    check(pretraining_deltas(ours, theirs, config), f"{name} HF->ours")


@torch.no_grad()
def backbone_deltas(ours: AlbertModel, theirs, config: AlbertConfig) -> dict[str, float]:
    inputs, _, _ = make_batch(config)
    o, h = ours(**inputs, output_hidden_states=True), theirs(**inputs, output_hidden_states=True)
    assert len(o.hidden_states) == len(h.hidden_states) == 1 + config.num_layer_calls
    deltas = {"last_hidden_state": max_diff(o.last_hidden_state, h.last_hidden_state),
              "hidden_states": max(max_diff(a, b) for a, b in zip(o.hidden_states, h.hidden_states))}
    if o.pooler_output is not None or h.pooler_output is not None:
        deltas["pooled"] = max_diff(o.pooler_output, h.pooler_output)
    return deltas


@pytest.mark.parametrize("pooler", [True, False])
def test_bare_model_both_ways(tf, tmp_path, pooler):
    config = CONFIGS["groups2-inner2"]
    ours = randomise(AlbertModel(config, add_pooling_layer=pooler), seed=30)
    ours.save_pretrained(tmp_path / "ours")
    keys = set(load_file(str(tmp_path / "ours" / "model.safetensors")))
    assert not any(k.startswith("albert.") for k in keys) and ("pooler.weight" in keys) == pooler
    theirs, info = tf.AlbertModel.from_pretrained(tmp_path / "ours", add_pooling_layer=pooler,
                                                  output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    check(backbone_deltas(ours, theirs.eval(), config), f"bare pooler={pooler} ours->HF")

    theirs = randomise(tf.AlbertModel(hf_config(tf, config), add_pooling_layer=pooler), seed=31)
    theirs.save_pretrained(tmp_path / "hf")
    ours = AlbertModel.from_pretrained(tmp_path / "hf", add_pooling_layer=pooler)
    check(backbone_deltas(ours, theirs, config), f"bare pooler={pooler} HF->ours")


def test_bare_model_from_pretraining_dir_and_back(tmp_path):
    config = CONFIGS["all-shared"]
    full = randomise(AlbertForPreTraining(config), seed=40)
    full.save_pretrained(tmp_path / "full")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # dropping the heads is the point: no warning
        bare = AlbertModel.from_pretrained(tmp_path / "full")
    assert all(torch.equal(v, full.albert.state_dict()[k]) for k, v in bare.state_dict().items())

    bare.save_pretrained(tmp_path / "bare")
    heads = r"no weights for the heads \(predictions\.dense\.weight, .*, sop_classifier\.classifier\.bias\)"
    with pytest.warns(UserWarning, match=heads):
        again = AlbertForPreTraining.from_pretrained(tmp_path / "bare")
    assert all(torch.equal(v, bare.state_dict()[k]) for k, v in again.albert.state_dict().items())


def test_backbone_from_a_fine_tuned_transformers_dir(tf, tmp_path):
    config = CONFIGS["all-shared"]
    theirs = randomise(tf.AlbertForSequenceClassification(hf_config(tf, config)), seed=45)
    theirs.save_pretrained(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # classifier.* belongs to another class: dropped silently
        bare = AlbertModel.from_pretrained(tmp_path)
    check(backbone_deltas(bare, theirs.albert, config), "bare from HF sequence classification")
    with pytest.warns(UserWarning, match="no weights for the heads"):  # pooler kept, MLM/SOP fresh
        full = AlbertForPreTraining.from_pretrained(tmp_path)
    assert torch.equal(full.albert.pooler.weight, theirs.albert.pooler.weight)


# ---------------------------------------------------------------------------- older and partial files
def test_legacy_pytorch_bin_with_buffers_and_tied_decoder(tmp_path):
    config = CONFIGS["groups2-inner2"]
    model = randomise(AlbertForPreTraining(config), seed=50)
    sd = hf.to_hf_state_dict(model)
    # What old transformers wrote: id buffers, the tied decoder, and sometimes only decoder.bias.
    sd["albert.embeddings.position_ids"] = torch.arange(config.max_position_embeddings)[None]
    sd["predictions.decoder.weight"] = sd["albert.embeddings.word_embeddings.weight"]
    sd["predictions.decoder.bias"] = sd.pop("predictions.bias")
    torch.save(sd, tmp_path / "pytorch_model.bin")
    config.to_json_file(tmp_path / "config.json")
    loaded = AlbertForPreTraining.from_pretrained(tmp_path)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in loaded.state_dict().items())


def test_legacy_pickle_with_code_is_refused(tmp_path):
    CONFIGS["all-shared"].to_json_file(tmp_path / "config.json")
    torch.save({"x": AlbertConfig()}, tmp_path / "pytorch_model.bin")  # not weights: needs unpickling code
    with pytest.raises(AlbertlmError, match="pytorch_model.bin: cannot read"):
        AlbertForPreTraining.from_pretrained(tmp_path)


def test_sharded_safetensors(tmp_path):
    config = CONFIGS["all-shared"]
    model = randomise(AlbertForPreTraining(config), seed=55)
    sd = hf.to_hf_state_dict(model)
    names = sorted(sd)
    shards = {"model-00001-of-00002.safetensors": names[:10], "model-00002-of-00002.safetensors": names[10:]}
    for file, keys in shards.items():
        save_file({k: sd[k] for k in keys}, str(tmp_path / file), metadata={"format": "pt"})
    weight_map = {k: file for file, keys in shards.items() for k in keys}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config.to_json_file(tmp_path / "config.json")
    loaded = AlbertForPreTraining.from_pretrained(tmp_path)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in loaded.state_dict().items())



@pytest.mark.parametrize("index, message", [
    (b'{"weight_map": {"a": "\xff"}}', r"model.safetensors.index.json: not UTF-8 text \(byte 0xff at offset 22\)$"),
    (b'{"weight_map": {"a": 3}}', r"model.safetensors.index.json: shard name 3 is not a file name$"),
    (b'{"weight_map": {"a": ""}}', r"model.safetensors.index.json: shard name '' is not a file name$"),
    (b'{"weight_map": {"a": "../x.safetensors"}}', r"shard name '../x.safetensors' is not a file name$"),
    (b'{"weight_map": [1]}', r"model.safetensors.index.json: not a safetensors index \(weight_map must map "
                             r"tensor names to shard files\)$"),
    (b'[]', r"model.safetensors.index.json: not a safetensors index \(weight_map must map"),
])
def test_a_broken_shard_index_is_one_line_naming_it(tmp_path, index, message):
    CONFIGS["all-shared"].to_json_file(tmp_path / "config.json")
    (tmp_path / "model.safetensors.index.json").write_bytes(index)
    with pytest.raises(AlbertlmError, match=message):
        AlbertForPreTraining.from_pretrained(tmp_path)


def test_a_pytorch_model_bin_entry_that_is_not_a_tensor_is_refused_naming_it(tmp_path):
    config = CONFIGS["all-shared"]
    sd = hf.to_hf_state_dict(randomise(AlbertForPreTraining(config), seed=56))
    torch.save({**sd, "predictions.bias": [0.0] * config.vocab_size}, tmp_path / "pytorch_model.bin")
    config.to_json_file(tmp_path / "config.json")
    with pytest.raises(AlbertlmError, match=r"pytorch_model.bin: predictions.bias is a list, not a tensor$"):
        AlbertForPreTraining.from_pretrained(tmp_path)

def test_missing_sop_head_warns_and_stays_random(tmp_path):
    config = CONFIGS["all-shared"]
    model = randomise(AlbertForPreTraining(config), seed=60)
    model.save_pretrained(tmp_path)
    path = tmp_path / "model.safetensors"
    sd = {k: v for k, v in load_file(str(path)).items() if not k.startswith("sop_classifier.")}
    save_file(sd, str(path), metadata={"format": "pt"})  # as Google's released checkpoints
    with pytest.warns(UserWarning, match="no SOP head"):
        loaded = AlbertForPreTraining.from_pretrained(tmp_path)
    assert torch.equal(loaded.mlm.bias, model.mlm.bias)
    assert not torch.equal(loaded.sop.weight, model.sop.weight)  # fresh init, not the saved head


def test_shape_mismatch_names_file_and_key(tmp_path):
    AlbertForPreTraining(CONFIGS["all-shared"]).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    data["intermediate_size"] = 38
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(AlbertlmError) as err:
        AlbertForPreTraining.from_pretrained(tmp_path)
    message = str(err.value)
    key = "albert.encoder.albert_layer_groups.0.albert_layers.0.ffn.weight"
    assert f"model.safetensors: {key} has shape [37, 32], the config implies [38, 32]" in message
    assert "\n" not in message


def test_missing_and_unexpected_keys(tmp_path):
    AlbertForPreTraining(CONFIGS["all-shared"]).save_pretrained(tmp_path)
    path = tmp_path / "model.safetensors"
    sd = load_file(str(path))
    del sd["albert.encoder.albert_layer_groups.0.albert_layers.0.attention.key.bias"]
    sd["albert.encoder.something_new"] = torch.zeros(1)
    save_file(sd, str(path), metadata={"format": "pt"})
    with pytest.raises(AlbertlmError, match=r"model\.safetensors: missing key albert\.encoder\.albert_layer_groups"
                                            r"\.0\.albert_layers\.0\.attention\.key\.bias"):
        AlbertForPreTraining.from_pretrained(tmp_path)
    with pytest.warns(UserWarning) as record:
        AlbertForPreTraining.from_pretrained(tmp_path, strict=False)
    text = " | ".join(str(w.message) for w in record)
    assert "missing key" in text and "unexpected key albert.encoder.something_new" in text


def test_no_weights_file(tmp_path):
    CONFIGS["all-shared"].to_json_file(tmp_path / "config.json")
    with pytest.raises(AlbertlmError, match="no model.safetensors"):
        AlbertModel.from_pretrained(tmp_path)


# ---------------------------------------------------------------------------- sharing HF cannot express
@pytest.mark.parametrize("sharing", ["attention", "ffn"])
def test_partial_sharing_round_trip_and_transformers_refuses(tf, tmp_path, sharing):
    config = AlbertConfig(**{**TINY, "num_hidden_layers": 4, "sharing": sharing})
    model = randomise(AlbertForPreTraining(config), seed=70)
    model.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    assert data["sharing"] == sharing and len(data["layer_types"]) == 4
    keys = set(load_file(str(tmp_path / "model.safetensors")))
    # Block j sits at group j, inner layer 0: one copy of the shared half, one per layer of the other.
    shared, per_layer = (".attention.query.weight", ".ffn.weight")[::1 if sharing == "attention" else -1]
    assert sum(k.endswith(shared) for k in keys) == 1 and sum(k.endswith(per_layer) for k in keys) == 4
    assert f"albert.encoder.albert_layer_groups.3.albert_layers.0{per_layer}" in keys

    loaded = AlbertForPreTraining.from_pretrained(tmp_path)
    assert loaded.config == config
    inputs, labels, sop = make_batch(config)
    with torch.no_grad():
        a = model(**inputs, labels=labels, sentence_order_label=sop, output_hidden_states=True)
        b = loaded(**inputs, labels=labels, sentence_order_label=sop, output_hidden_states=True)
    assert torch.equal(a.prediction_logits, b.prediction_logits) and torch.equal(a.loss, b.loss)
    assert all(torch.equal(x, y) for x, y in zip(a.hidden_states, b.hidden_states))

    with pytest.raises(Exception) as err:
        tf.AlbertForPreTraining.from_pretrained(tmp_path)
    assert "albertlm" in str(err.value) and sharing in str(err.value)


def test_albert_zh_layout_round_trip_and_transformers_refuses(tf, tmp_path):
    config = AlbertConfig(**{**TINY, "embedding_layout": "albert_zh"})
    model = randomise(AlbertForPreTraining(config), seed=71)
    model.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    assert data["embedding_layout"] == "albert_zh" and "layer_types" in data
    keys = set(load_file(str(tmp_path / "model.safetensors")))
    assert "albert.embeddings.word_embeddings_2.weight" in keys
    assert not any("embedding_hidden_mapping_in" in k for k in keys)

    loaded = AlbertForPreTraining.from_pretrained(tmp_path)
    assert loaded.config == config
    inputs, labels, sop = make_batch(config)
    with torch.no_grad():
        a = model(**inputs, labels=labels, sentence_order_label=sop)
        b = loaded(**inputs, labels=labels, sentence_order_label=sop)
    assert torch.equal(a.prediction_logits, b.prediction_logits) and torch.equal(a.sop_logits, b.sop_logits)

    with pytest.raises(Exception) as err:
        tf.AlbertForPreTraining.from_pretrained(tmp_path)
    assert "albertlm" in str(err.value) and "albert_zh" in str(err.value)


class _BuildProbe(AlbertForSequenceClassification):
    """A classifier that counts the instances built (the loader reads it with its base class's key table)."""

    built = 0

    def __init__(self, config, **kwargs):
        super().__init__(config, **kwargs)
        type(self).built += 1


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory):
    """A saved AlbertForSequenceClassification of TINY's shape."""
    path = tmp_path_factory.mktemp("classifier")
    _BuildProbe(AlbertConfig(**TINY)).save_pretrained(path)
    return path


def _with_config(src, dst, **changes):
    """A copy of a saved directory whose config.json has fields changed (None deletes one)."""
    import shutil

    shutil.copytree(src, dst)
    data = json.loads((dst / "config.json").read_text())
    data.update(changes)
    (dst / "config.json").write_text(json.dumps({k: v for k, v in data.items() if v is not None}))
    return dst


@pytest.mark.parametrize("changes, key, note", [
    (dict(vocab_size=1_000_000), "albert.embeddings.word_embeddings.weight", "[1000000, 16] (vocab_size=1000000)"),
    (dict(intermediate_size=200_000), "albert.encoder.albert_layer_groups.0.albert_layers.0.ffn.weight",
     "[200000, 32] (intermediate_size=200000)"),
    (dict(max_position_embeddings=1_000_000), "albert.embeddings.position_embeddings.weight",
     "[1000000, 16] (max_position_embeddings=1000000)"),
    (dict(hidden_size=65536), "albert.encoder.embedding_hidden_mapping_in.weight", "[65536, 16] (hidden_size=65536)"),
    (dict(num_labels=100_000, id2label=None, label2id=None), "classifier.weight", "[100000, 32] (num_labels=100000)"),
])
def test_a_config_overstating_a_size_is_refused_before_the_model_is_built(classifier_dir, tmp_path, changes, key, note):
    # Sizes within the config's bounds but not the file's: building first would allocate gigabytes.
    path = _with_config(classifier_dir, tmp_path / "m", **changes)
    _BuildProbe.built = 0
    with pytest.raises(AlbertlmError) as err:
        _BuildProbe.from_pretrained(path)
    message = str(err.value)
    assert f"model.safetensors: {key} has shape [" in message and message.endswith(f"the config implies {note}")
    assert _BuildProbe.built == 0  # refused before any memory went to a model


def test_layers_missing_from_the_file_are_refused_before_the_model_is_built(classifier_dir, tmp_path):
    path = _with_config(classifier_dir, tmp_path / "m", num_hidden_layers=1000, num_hidden_groups=1000,
                        sharing="none")
    _BuildProbe.built = 0
    with pytest.raises(AlbertlmError, match=r"model.safetensors: missing key albert.encoder.albert_layer_groups.1."
                                            r"albert_layers.0.attention.query.weight \(and \d+ more\)"):
        _BuildProbe.from_pretrained(path)
    assert _BuildProbe.built == 0


def test_non_finite_or_integer_weights_are_refused_naming_file_and_tensor(classifier_dir, tmp_path):
    import shutil

    path = Path(shutil.copytree(classifier_dir, tmp_path / "m"))
    weights = load_file(str(path / "model.safetensors"))
    key = "albert.encoder.albert_layer_groups.0.albert_layers.0.ffn.bias"
    save_file({**weights, key: torch.full((37,), float("inf"))}, str(path / "model.safetensors"))
    with pytest.raises(AlbertlmError, match=rf"^{path / 'model.safetensors'}: tensor {key} holds 37 NaN or "
                                            r"infinite values \(of 37\); refusing"):
        _BuildProbe.from_pretrained(path)
    save_file({**weights, key: torch.zeros(37, dtype=torch.int64)}, str(path / "model.safetensors"))
    with pytest.raises(AlbertlmError, match=rf"model.safetensors: {key} has dtype int64; a weight must be floating"):
        _BuildProbe.from_pretrained(path)
    # the same in one shard of a sharded checkpoint
    (path / "model.safetensors").unlink()
    save_file({k: v for k, v in weights.items() if k != key}, str(path / "a.safetensors"))
    save_file({key: torch.full((37,), float("nan"))}, str(path / "b.safetensors"))
    index = {"weight_map": {**{k: "a.safetensors" for k in weights if k != key}, key: "b.safetensors"}}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(AlbertlmError, match=rf"b.safetensors: tensor {key} holds 37 NaN"):
        _BuildProbe.from_pretrained(path)



def test_the_finiteness_check_reads_a_clean_tensor_once_without_a_mask(monkeypatch):
    # A clean tensor costs one summation (0.1 s for albert-xxlarge's 235M float32 values on one core),
    # not an isfinite mask of its size (1.5 s and as many bytes as it has values)
    from albertlm.utils import check_finite

    masks = []
    isfinite = torch.isfinite
    monkeypatch.setattr(torch, "isfinite", lambda t: masks.append(t.numel()) or isfinite(t))
    check_finite(torch.randn(1000, 100), "w", "f.safetensors")
    assert max(masks) == 1


@pytest.mark.parametrize("values, dtype", [([3e38, 3e38, -1.0], torch.float32),  # the float32 sum overflows
                                           ([6e4] * 4, torch.float16), ([3e38] * 4, torch.bfloat16),
                                           ([1.7e308, 1.7e308], torch.float64)])
def test_finite_values_whose_sum_overflows_pass(values, dtype):
    from albertlm.utils import check_finite

    check_finite(torch.tensor(values, dtype=dtype), "w", "f.safetensors")


@pytest.mark.parametrize("values, dtype, bad", [([float("inf"), float("-inf"), 1.0], torch.float32, 2),
                                                ([float("nan"), 0.0], torch.float16, 1),
                                                ([1.0, float("inf")], torch.bfloat16, 1),
                                                ([3e38, 3e38, float("nan")], torch.float32, 1)])
def test_any_nan_or_infinity_is_counted_and_refused(values, dtype, bad):
    from albertlm.utils import check_finite

    with pytest.raises(AlbertlmError, match=rf"^f.safetensors: tensor w holds {bad} NaN or infinite values "
                                            rf"\(of {len(values)}\)"):
        check_finite(torch.tensor(values, dtype=dtype), "w", "f.safetensors")

def test_a_config_json_that_is_not_utf8_is_one_line(classifier_dir, tmp_path):
    import shutil

    path = Path(shutil.copytree(classifier_dir, tmp_path / "m"))
    (path / "config.json").write_bytes(b'{"vocab_size": 1000, "x": "\xff"}')
    with pytest.raises(AlbertlmError, match=r"config.json: not UTF-8 text \(byte 0xff at offset 27\)$"):
        _BuildProbe.from_pretrained(path)
