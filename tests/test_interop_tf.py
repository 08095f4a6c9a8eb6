"""TF1 ALBERT checkpoints: the key tables (Google's and albert_zh's layouts) proven by equal outputs
against a numpy re-implementation of each TF network that reads the variables by their literal names,
the refusals, the fixtures written by real TensorFlow, the TF writer and `albertlm convert`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm.config import AlbertConfig
from albertlm.errors import AlbertlmError, ConfigError
from albertlm.interop import tf as tfmap
from albertlm.convert import convert, detect_source, load_tf
from albertlm.model import AlbertForPreTraining

TINY = dict(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=4, num_attention_heads=2,
            intermediate_size=24, max_position_embeddings=20, hidden_act="gelu_new")
CONFIGS = {
    "google": AlbertConfig(**TINY),
    "google-G2K2": AlbertConfig(**{**TINY, "num_hidden_groups": 2, "inner_group_num": 2}),
    "google-none": AlbertConfig(**{**TINY, "sharing": "none"}),
    "google-E=H": AlbertConfig(**{**TINY, "embedding_size": 16}),
    "albert_zh": AlbertConfig(**{**TINY, "embedding_layout": "albert_zh"}),
}


def random_variables(config: AlbertConfig, layout: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 values for every variable the table names; LayerNorm gammas around 1."""
    rng = np.random.default_rng(seed)
    out = {}
    for _, names, _ in tfmap.key_table(config, layout):
        for name in names:
            shape = next(r.shape for r in tfmap.LAYOUTS[layout](config) if name in r.tf)
            base = 1.0 if name.endswith("/gamma") else 0.0
            out[name] = (base + 0.2 * rng.standard_normal(shape)).astype(np.float32)
    return out


# ---------------------------------------------------------------------------- the TF networks in numpy
def _ln(x, v, scope, eps=1e-12):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * v[f"{scope}/gamma"] + v[f"{scope}/beta"]


def _dense(x, v, scope):
    return x @ v[f"{scope}/kernel"] + v[f"{scope}/bias"]  # TF kernels are [in, out]


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def _attention(x, v, scope, heads):
    B, S, H = x.shape
    q, k, w = (_dense(x, v, f"{scope}/{n}").reshape(B, S, heads, -1).transpose(0, 2, 1, 3)
               for n in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(H // heads)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ w).transpose(0, 2, 1, 3).reshape(B, S, H)


def tf_network(v: dict, config: AlbertConfig, layout: str, ids: np.ndarray, types: np.ndarray):
    """(MLM logits [B, S, V], SOP logits [B, 2]) as the official TF code computes them (float64)."""
    v = {k: a.astype(np.float64) for k, a in v.items()}
    S = ids.shape[1]
    x = v["bert/embeddings/word_embeddings"][ids]
    if layout == "albert_zh":
        x = x @ v["bert/embeddings/word_embeddings_2"]  # [E, H], no bias
    x = x + v["bert/embeddings/position_embeddings"][:S] + v["bert/embeddings/token_type_embeddings"][types]
    x = _ln(x, v, "bert/embeddings/LayerNorm")
    heads, L = config.num_attention_heads, config.num_hidden_layers
    if layout == "google":
        if "bert/encoder/embedding_hidden_mapping_in/kernel" in v:
            x = _dense(x, v, "bert/encoder/embedding_hidden_mapping_in")
        for i in range(L):
            group = int(i / L * config.num_hidden_groups)  # TF's own formula
            for k in range(config.inner_group_num):
                s = f"bert/encoder/transformer/group_{group}/inner_group_{k}"
                a = _dense(_attention(x, v, f"{s}/attention_1/self", heads), v, f"{s}/attention_1/output/dense")
                x = _ln(a + x, v, f"{s}/LayerNorm")
                f = _dense(_gelu(_dense(x, v, f"{s}/ffn_1/intermediate/dense")), v,
                           f"{s}/ffn_1/intermediate/output/dense")
                x = _ln(f + x, v, f"{s}/LayerNorm_1")
    else:
        s = "bert/encoder/layer_shared"
        for _ in range(L):
            a = _dense(_attention(x, v, f"{s}/attention/self", heads), v, f"{s}/attention/output/dense")
            x = _ln(a + x, v, f"{s}/attention/output/LayerNorm")
            f = _dense(_gelu(_dense(x, v, f"{s}/intermediate/dense")), v, f"{s}/output/dense")
            x = _ln(f + x, v, f"{s}/output/LayerNorm")
    pooled = np.tanh(_dense(x[:, 0], v, "bert/pooler/dense"))
    t = _ln(_gelu(_dense(x, v, "cls/predictions/transform/dense")), v, "cls/predictions/transform/LayerNorm")
    if layout == "albert_zh":
        t = t @ v["bert/embeddings/word_embeddings_2"].T  # back to E
    mlm = t @ v["bert/embeddings/word_embeddings"].T + v["cls/predictions/output_bias"]
    sop = pooled @ v["cls/seq_relationship/output_weights"].T + v["cls/seq_relationship/output_bias"]
    return mlm, sop


def ours_from(variables: dict, config: AlbertConfig) -> AlbertForPreTraining:
    sd, _ = tfmap.read_state_dict(variables, config)
    model = AlbertForPreTraining(config)
    model.load_state_dict(sd, strict=True)
    return model.eval()


def batch(config: AlbertConfig, seed: int = 3):
    rng = np.random.default_rng(seed)
    return rng.integers(0, config.vocab_size, (2, 9)), rng.integers(0, 2, (2, 9))


# ---------------------------------------------------------------------------- the key tables
@pytest.mark.parametrize("name", CONFIGS)
def test_table_computes_the_tf_network(name):
    config = CONFIGS[name]
    layout = "albert_zh" if config.projects_words else "google"
    variables = random_variables(config, layout)
    ids, types = batch(config)
    want_mlm, want_sop = tf_network(variables, config, layout, ids, types)
    with torch.no_grad():
        out = ours_from(variables, config)(torch.from_numpy(ids), token_type_ids=torch.from_numpy(types))
    np.testing.assert_allclose(out.prediction_logits.numpy(), want_mlm, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(out.sop_logits.numpy(), want_sop, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", CONFIGS)
def test_every_parameter_has_exactly_one_row_and_writing_inverts_reading(name):
    config = CONFIGS[name]
    layout = "albert_zh" if config.projects_words else "google"
    variables = random_variables(config, layout)
    sd, summary = tfmap.read_state_dict(variables, config)
    model_keys = set(AlbertForPreTraining(config).state_dict())
    assert set(sd) == model_keys and summary.tensors == len(variables)
    if layout == "google":
        back = tfmap.write_state_dict(sd, config)
        assert set(back) == set(variables)
        assert all(np.array_equal(back[k], variables[k]) for k in variables)


def test_rows_transpose_kernels_only():
    for ours, names, transposed in tfmap.key_table(CONFIGS["google"]):
        assert transposed == names[0].endswith("/kernel"), ours
    zh = {ours: t for ours, _, t in tfmap.key_table(CONFIGS["albert_zh"], "albert_zh")}
    assert zh["albert.embeddings.word_project.weight"] and not zh["sop.weight"]


def test_groups_follow_the_block_schedule():
    config = CONFIGS["google-G2K2"]
    table = {ours: names for ours, names, _ in tfmap.key_table(config)}
    # block j = group j // K, inner group j % K (K = 2)
    assert table["albert.encoder.ffn.3.up.weight"] == ["bert/encoder/transformer/group_1/inner_group_1/ffn_1/intermediate/dense/kernel"]
    assert table["albert.encoder.attention.1.norm.weight"] == ["bert/encoder/transformer/group_0/inner_group_1/LayerNorm/gamma"]


def test_hub_prefix_stripped_and_optimizer_slots_counted():
    config = CONFIGS["google"]
    variables = random_variables(config, "google")
    hub = {f"module/{k}": a for k, a in variables.items()}
    for k, a in variables.items():
        hub[f"module/{k}/adam_m"] = a
        hub[f"module/{k}/adam_v"] = a
    hub["global_step"] = np.array(7, dtype=np.int64)
    sd, summary = tfmap.read_state_dict(hub, config)
    assert summary.hub and summary.layout == "google"
    assert summary.skipped == {"adam_m": len(variables), "adam_v": len(variables), "global_step": 1}
    assert torch.equal(sd["mlm.bias"], torch.from_numpy(variables["cls/predictions/output_bias"]))


def test_equal_widths_fill_the_identity_projection():
    config = CONFIGS["google-E=H"]
    variables = random_variables(config, "google")
    assert not any("embedding_hidden_mapping_in" in k for k in variables)
    sd, summary = tfmap.read_state_dict(variables, config)
    assert torch.equal(sd["albert.project.weight"], torch.eye(16)) and summary.filled
    sd["albert.project.bias"] = sd["albert.project.bias"] + 1
    with pytest.raises(AlbertlmError, match="not the identity"):
        tfmap.write_state_dict(sd, config)


# ---------------------------------------------------------------------------- bad inputs
def test_unknown_variable_is_named():
    variables = random_variables(CONFIGS["google"], "google")
    variables["bert/encoder/transformer/group_0/inner_group_0/extra/kernel"] = np.zeros(3, np.float32)
    with pytest.raises(AlbertlmError, match=r"^ckpt: unknown variable bert/encoder/transformer/group_0/"
                                            r"inner_group_0/extra/kernel$"):
        tfmap.read_state_dict(variables, CONFIGS["google"], source="ckpt")


def test_missing_variable_is_named():
    variables = random_variables(CONFIGS["google"], "google")
    del variables["cls/seq_relationship/output_bias"]
    with pytest.raises(AlbertlmError, match="^ckpt: missing variable cls/seq_relationship/output_bias$"):
        tfmap.read_state_dict(variables, CONFIGS["google"], source="ckpt")


def test_wrong_shape_names_variable_expected_and_found():
    variables = random_variables(CONFIGS["google"], "google")
    variables["bert/pooler/dense/kernel"] = np.zeros((16, 15), np.float32)
    with pytest.raises(AlbertlmError, match=r"^ckpt: variable bert/pooler/dense/kernel has shape \[16, 15\], "
                                            r"the config implies \[16, 16\] \(hidden_size=16\)$"):
        tfmap.read_state_dict(variables, CONFIGS["google"], source="ckpt")


def test_layout_and_config_must_agree():
    variables = random_variables(CONFIGS["albert_zh"], "albert_zh")
    with pytest.raises(AlbertlmError, match="albert_zh checkpoint, but the config says embedding_layout='albert'"):
        tfmap.read_state_dict(variables, CONFIGS["google"])
    with pytest.raises(AlbertlmError, match="a BERT checkpoint"):
        tfmap.detect_layout(["bert/encoder/layer_0/attention/self/query/kernel"])


@pytest.mark.parametrize("change", [{"sharing": "attention"}, {"embedding_layout": "albert_zh"}])
def test_writing_refuses_what_google_layout_cannot_express(change):
    config = AlbertConfig(**{**TINY, **change})
    with pytest.raises(AlbertlmError, match="Google's TF layout cannot express"):
        tfmap.write_state_dict(AlbertForPreTraining(config).state_dict(), config)


# ---------------------------------------------------------------------------- config files
def test_google_config_file():
    data = {"vocab_size": 30000, "embedding_size": 128, "hidden_size": 768, "num_hidden_layers": 12,
            "num_hidden_groups": 1, "num_attention_heads": 12, "intermediate_size": 3072, "inner_group_num": 1,
            "down_scale_factor": 1, "hidden_act": "gelu", "gap_size": 0, "net_structure_type": 0,
            "num_memory_blocks": 0, "hidden_dropout_prob": 0, "attention_probs_dropout_prob": 0,
            "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02}
    config = tfmap.config_from_tf(data)
    assert config.hidden_act == "gelu_new" and config.sharing == "all" and not config.extra
    assert tfmap.config_from_tf(tfmap.tf_config_dict(config)) == config


def test_albert_zh_config_files():
    tiny = {"attention_probs_dropout_prob": 0.0, "directionality": "bidi", "hidden_act": "gelu",
            "hidden_dropout_prob": 0.0, "hidden_size": 312, "embedding_size": 128, "initializer_range": 0.02,
            "intermediate_size": 1248, "max_position_embeddings": 512, "num_attention_heads": 12,
            "num_hidden_layers": 4, "pooler_fc_size": 768, "pooler_num_attention_heads": 12,
            "pooler_num_fc_layers": 3, "pooler_size_per_head": 128, "pooler_type": "first_token_transform",
            "type_vocab_size": 2, "vocab_size": 21128, "ln_type": "postln"}
    config = tfmap.config_from_tf(tiny, "albert_zh")
    assert config.embedding_layout == "albert_zh" and config.embedding_width == 312 and not config.extra
    with pytest.raises(ConfigError, match="ln_type 'preln'"):
        tfmap.config_from_tf({**tiny, "ln_type": "preln"}, "albert_zh", source="zh.json")


# ---------------------------------------------------------------------------- fixtures written by TensorFlow
FIXTURES = Path(__file__).parent / "fixtures" / "tf"
MODEL_FIXTURES = ["google", "tfhub", "training", "groups", "albert_zh"]


def _fixture_values(name: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / name / "values.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("name", MODEL_FIXTURES)
def test_every_fixture_tensor_lands_in_its_parameter(name):
    source = detect_source(FIXTURES / name)
    model, summary = load_tf(source.path, folders=source.folders)
    values = _fixture_values(name)
    prefix = "module/" if summary.hub else ""
    params = model.state_dict()
    layout = "albert_zh" if model.config.projects_words else "google"
    assert summary.layout == layout and summary.hub == (name == "tfhub")
    seen = set()
    for row in tfmap.LAYOUTS[layout](model.config):
        parts = params[row.ours].chunk(len(row.tf))
        for tf_name, part in zip(row.tf, parts):
            want = values[prefix + tf_name]
            np.testing.assert_array_equal(part.numpy().T if row.transpose else part.numpy(), want)
            seen.add(prefix + tf_name)
    skipped = set(values) - seen
    assert all(n.endswith(("/adam_m", "/adam_v")) or n == "global_step" for n in skipped)
    assert sum(summary.skipped.values()) == len(skipped) == (97 - 32 if name == "training" else 0)


def test_groups_fixture_config():
    model, _ = load_tf(detect_source(FIXTURES / "groups").path)
    config = model.config
    assert (config.num_hidden_layers, config.num_hidden_groups, config.inner_group_num) == (4, 2, 2)
    assert config.num_attention_blocks == 4 and not config.extra  # layers_to_keep: [] dropped


@pytest.mark.parametrize("name", ["google", "tfhub", "groups"])
def test_converted_logits_equal_in_transformers(name, tmp_path):
    transformers = pytest.importorskip("transformers")
    dst = tmp_path / "hf"
    convert(FIXTURES / name, dst)
    source = detect_source(FIXTURES / name)
    direct, _ = load_tf(source.path, folders=source.folders)
    ours = AlbertForPreTraining.from_pretrained(dst)
    theirs = transformers.AlbertForPreTraining.from_pretrained(dst).eval()
    config = ours.config
    ids, types = (torch.from_numpy(a) for a in batch(config))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    with torch.no_grad():
        a = ours(ids, attention_mask=mask, token_type_ids=types)
        b = theirs(input_ids=ids, attention_mask=mask, token_type_ids=types)
        c = direct(ids, attention_mask=mask, token_type_ids=types)
    torch.testing.assert_close(a.prediction_logits, b.prediction_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.sop_logits, b.sop_logits, atol=1e-5, rtol=1e-5)
    assert torch.equal(a.prediction_logits, c.prediction_logits) and torch.equal(a.sop_logits, c.sop_logits)


@pytest.mark.parametrize("name", ["google", "training", "groups", "tfhub"])
def test_tf_round_trip_is_byte_for_byte(name, tmp_path):
    from albertlm.interop.tf_bundle import BundleReader

    summary = convert(FIXTURES / name, tmp_path / "tf", to="tf")
    assert "model.ckpt.index" in summary.files and "albert_config.json" in summary.files
    before = BundleReader(detect_source(FIXTURES / name).path)
    after = BundleReader(tmp_path / "tf" / "model.ckpt")
    kept = {n[len("module/"):] if n.startswith("module/") else n: n for n in before.names()
            if not n.endswith(("/adam_m", "/adam_v")) and n != "global_step"}
    assert sorted(after.names()) == sorted(kept)
    for name_after, name_before in kept.items():
        assert after.dtype(name_after) == before.dtype(name_before) == "float32"
        assert after.read(name_after).tobytes() == before.read(name_before).tobytes(), name_after
    # and through a Hugging Face directory: TF -> HF -> TF
    convert(FIXTURES / name, tmp_path / "hf")
    convert(tmp_path / "hf", tmp_path / "tf2", to="tf")
    again = BundleReader(tmp_path / "tf2" / "model.ckpt")
    assert all(again.read(n).tobytes() == after.read(n).tobytes() for n in after.names())


# ---------------------------------------------------------------------------- the command
def _cli_error(capsys, *argv) -> str:
    from albertlm.cli import main

    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    return err


def _broken_checkpoint(tmp_path: Path, change) -> Path:
    from albertlm.interop.tf_bundle import write_checkpoint

    variables = _fixture_values("google")
    change(variables)
    d = tmp_path / "broken"
    d.mkdir(parents=True)
    write_checkpoint(d / "model.ckpt-1", variables)
    (d / "albert_config.json").write_text((FIXTURES / "google" / "albert_config.json").read_text())
    return d


def test_cli_bad_inputs_are_one_line_errors(tmp_path, capsys):
    d = _broken_checkpoint(tmp_path, lambda v: v.update({"bert/encoder/extra/kernel": np.zeros(2, np.float32)}))
    assert "unknown variable bert/encoder/extra/kernel" in _cli_error(capsys, "convert", str(d), str(tmp_path / "a"))
    d = _broken_checkpoint(tmp_path / "m", lambda v: v.pop("bert/pooler/dense/bias"))
    assert "missing variable bert/pooler/dense/bias" in _cli_error(capsys, "convert", str(d), str(tmp_path / "b"))
    d = _broken_checkpoint(tmp_path / "s", lambda v: v.update({"cls/predictions/output_bias": np.zeros(98, np.float32)}))
    err = _cli_error(capsys, "convert", str(d), str(tmp_path / "c"))
    assert "variable cls/predictions/output_bias has shape [98], the config implies [99]" in err
    assert not list(tmp_path.glob(".*"))  # no temporary left behind
    # albert_zh's layout has no place in Google's TF layout
    convert(FIXTURES / "albert_zh", tmp_path / "zh")
    assert "Google's TF layout cannot express embedding_layout='albert_zh'" in _cli_error(
        capsys, "convert", str(tmp_path / "zh"), str(tmp_path / "zh-tf"), "--to", "tf")
    # a destination holding files convert did not write is refused, and nothing in it is touched
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    assert "did not write (keep.txt)" in _cli_error(capsys, "convert", str(FIXTURES / "google"), str(tmp_path / "full"))
    assert "nor a TF checkpoint" in _cli_error(capsys, "convert", str(tmp_path / "full"), str(tmp_path / "x"))


def _google_copy(tmp_path: Path, **config_changes) -> Path:
    """A scratch copy of the google fixture with fields of albert_config.json changed."""
    import json
    import shutil

    src = Path(shutil.copytree(FIXTURES / "google", tmp_path / "src"))
    data = json.loads((src / "albert_config.json").read_text())
    (src / "albert_config.json").write_text(json.dumps({**data, **config_changes}))
    return src


@pytest.mark.parametrize("changes, message", [
    (dict(layer_norm_eps=float("nan")), "layer_norm_eps must be a finite number, got nan"),
    (dict(layer_norm_eps=float("inf")), "layer_norm_eps must be a finite number, got inf"),
    (dict(pad_token_id=True), "pad_token_id must be an integer, got True"),
    (dict(num_hidden_layers=10**9), "num_hidden_layers 1000000000 is above albertlm's limit of 1024"),
])
def test_convert_refuses_a_non_finite_bool_or_absurd_tf_config(tmp_path, capsys, changes, message):
    # These once converted with exit 0 (a NaN epsilon written to config.json, `"pad_token_id": true`)
    # or ran 40 s into a MemoryError (10^9 layers).
    src = _google_copy(tmp_path, **changes)
    err = _cli_error(capsys, "convert", str(src), str(tmp_path / "out"))
    assert f"{src / 'albert_config.json'}: {message}" in err
    assert not (tmp_path / "out").exists()


def test_a_tf_config_that_is_a_directory_or_not_utf8_is_one_line(tmp_path, capsys):
    (tmp_path / "cfg").mkdir()
    err = _cli_error(capsys, "convert", str(FIXTURES / "google"), str(tmp_path / "out"), "--config", str(tmp_path / "cfg"))
    assert f"{tmp_path / 'cfg'}: is a directory, not a config file" in err
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"x": "\xff"}')
    with pytest.raises(ConfigError, match=r"latin.json: not UTF-8 text \(byte 0xff at offset 7\)$"):
        tfmap.read_tf_config(latin)


def _relabel_dtype(index: Path, name: bytes, code: int) -> None:
    """Give one entry of a TF index another dtype code, keeping its tensor CRC (block CRCs stay valid)."""
    from albertlm.interop.sstable import build_table, read_table

    rows = read_table(index.read_bytes(), index.name)
    assert all(value.startswith(b"\x08\x01") for key, value in rows if key == name)  # field 1 = DT_FLOAT
    index.write_bytes(build_table([(k, bytes([8, code]) + v[2:] if k == name else v) for k, v in rows]))


def test_nan_weights_with_a_valid_checksum_are_refused_naming_the_variable(tmp_path, capsys):
    def poison(variables):
        variables["bert/embeddings/word_embeddings"] = np.full_like(variables["bert/embeddings/word_embeddings"], np.nan)

    d = _broken_checkpoint(tmp_path, poison)  # written by our writer: every CRC is valid
    err = _cli_error(capsys, "convert", str(d), str(tmp_path / "out"))
    assert ("model.ckpt-1.index: variable bert/embeddings/word_embeddings holds 1584 NaN or infinite values "
            "(of 1584)") in err
    assert not (tmp_path / "out").exists()


def test_a_float_weight_relabelled_as_int32_is_refused_naming_the_variable(tmp_path, capsys):
    import shutil

    src = Path(shutil.copytree(FIXTURES / "google", tmp_path / "src"))
    _relabel_dtype(src / "model.ckpt-best.index", b"bert/embeddings/word_embeddings", 3)  # DT_INT32
    err = _cli_error(capsys, "convert", str(src), str(tmp_path / "out"))
    assert ("model.ckpt-best.index: variable bert/embeddings/word_embeddings has dtype int32; a weight must be "
            "floating point") in err


def test_force_replaces_an_earlier_conversion_and_never_other_files(tmp_path, capsys):
    from albertlm.cli import main

    convert(FIXTURES / "google", tmp_path / "out")
    assert main(["convert", str(FIXTURES / "training"), str(tmp_path / "out"), "--force"]) == 0
    printed = capsys.readouterr().out
    assert "32 adam_m, 32 adam_v, 1 global_step" in printed and "parameters:   11,786" in printed
    assert not (tmp_path / "out" / "spiece.model").exists()  # replaced as a whole: the training fixture has none
    (tmp_path / "out" / "keep.txt").write_text("mine")
    assert main(["convert", str(FIXTURES / "training"), str(tmp_path / "out"), "--force"]) == 2
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine" and (tmp_path / "out" / "model.safetensors").is_file()


def test_albert_zh_exported_to_hf_is_refused_by_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    summary = convert(FIXTURES / "albert_zh", tmp_path / "zh")
    assert any("transformers cannot express" in n for n in summary.notes)
    with pytest.raises(Exception) as err:
        transformers.AlbertForPreTraining.from_pretrained(tmp_path / "zh")
    assert "albert_zh" in str(err.value) and "albertlm" in str(err.value)


def test_tfhub_saved_model_layout_needs_a_config(tmp_path, capsys):
    import shutil

    from albertlm.cli import main

    hub = tmp_path / "hub"
    (hub / "variables").mkdir(parents=True)
    (hub / "saved_model.pb").write_bytes(b"")
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copyfile(FIXTURES / "tfhub" / f"model.ckpt{suffix}", hub / "variables" / f"variables{suffix}")
    assert "no albert_config.json beside the checkpoint" in _cli_error(capsys, "convert", str(hub), str(tmp_path / "a"))
    assert main(["convert", str(hub), str(tmp_path / "b"), "--config", str(FIXTURES / "tfhub" / "albert_config.json")]) == 0
    assert "TF-Hub, module/ stripped" in capsys.readouterr().out


# ---------------------------------------------------------------------------- end to end: convert, then fine-tune
def _finetune(tmp_path: Path, capsys, model: Path, task: str, rows: list[str], header: str) -> str:
    from albertlm.cli import main

    data = tmp_path / "data"
    data.mkdir()
    for split, part in (("train", rows[:24]), ("dev", rows[24:])):
        (data / f"{split}.tsv").write_text("\n".join([header, *part]) + "\n", encoding="utf-8")
    code = main(["finetune", "--task", task, "--model", str(model), "--data", str(data), "--out", str(tmp_path / "ft"),
                 "--steps", "3", "--batch-size", "8", "--max-seq-length", "32", "--no-progress", "--device", "cpu"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert (tmp_path / "ft" / "model.safetensors").is_file()
    return printed


def test_end_to_end_google_checkpoint_to_sst2(tmp_path, capsys):
    from albertlm.cli import main

    assert main(["convert", str(FIXTURES / "google"), str(tmp_path / "model")]) == 0
    capsys.readouterr()
    words = ("good", "bad")
    rows = [f"the film was {words[i % 2]} and the plot was {words[i % 2]} .\t{1 - i % 2}" for i in range(32)]
    printed = _finetune(tmp_path, capsys, tmp_path / "model", "sst-2", rows, "sentence\tlabel")
    assert "accuracy *" in printed and "3 steps" in printed and "loads in transformers" in printed


def test_hf_source_without_mlm_head_is_refused_for_tf(tmp_path, capsys):
    from albertlm.heads import AlbertForSequenceClassification

    AlbertForSequenceClassification(CONFIGS["google"]).save_pretrained(tmp_path / "clf")
    err = _cli_error(capsys, "convert", str(tmp_path / "clf"), str(tmp_path / "tf"), "--to", "tf")
    assert "no MLM head" in err and not (tmp_path / "tf").exists()
    with pytest.raises(ConfigError, match="layers_to_keep is not empty"):
        tfmap.config_from_tf({**tfmap.tf_config_dict(CONFIGS["google"]), "layers_to_keep": [0]})


def test_converted_tokenizers_load_in_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    from albertlm.tokenizer import Tokenizer

    convert(FIXTURES / "google", tmp_path / "g")
    theirs = transformers.AlbertTokenizer.from_pretrained(tmp_path / "g")
    text = "the cat sat near the river"
    assert theirs(text)["input_ids"][1:-1] == Tokenizer.load(tmp_path / "g").encode(text).tolist()
    convert(FIXTURES / "albert_zh", tmp_path / "zh")
    bert = transformers.BertTokenizer.from_pretrained(tmp_path / "zh")
    vocab = (FIXTURES / "albert_zh" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert bert.cls_token_id == vocab.index("[CLS]") and bert.vocab_size == len(vocab)
    config = AlbertConfig.from_json_file(tmp_path / "zh" / "config.json")
    assert (config.pad_token_id, config.bos_token_id, config.eos_token_id) == (
        vocab.index("[PAD]"), vocab.index("[CLS]"), vocab.index("[SEP]"))


def test_end_to_end_albert_zh_checkpoint_to_chnsenticorp(tmp_path, capsys):
    from albertlm.cli import main

    assert main(["convert", str(FIXTURES / "albert_zh"), str(tmp_path / "model")]) == 0
    assert "embedding_layout albert_zh" in capsys.readouterr().out
    words = ("好", "不")
    rows = [f"{1 - i % 2}\t这个{words[i % 2]}是我的，在中国{words[i % 2]}大" for i in range(32)]
    printed = _finetune(tmp_path, capsys, tmp_path / "model", "chnsenticorp", rows, "label\ttext_a")
    assert "accuracy *" in printed and "3 steps" in printed and "loads in albertlm only" in printed


def test_converted_albert_zh_fine_tunes_as_a_classifier(tmp_path):
    from albertlm.heads import AlbertForSequenceClassification

    convert(FIXTURES / "albert_zh", tmp_path / "zh")
    model = AlbertForSequenceClassification.from_pretrained(tmp_path / "zh").train()
    values = _fixture_values("albert_zh")
    word_project = model.albert.embeddings.word_project.weight
    np.testing.assert_array_equal(word_project.detach().numpy().T, values["bert/embeddings/word_embeddings_2"])
    ids = torch.randint(0, model.config.vocab_size, (4, 10))
    labels = torch.tensor([0, 1, 0, 1])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for _ in range(5):
        loss = model(ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        assert word_project.grad is not None and word_project.grad.abs().sum() > 0
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_google_digit_comma_rule_on_for_google_checkpoints_and_kept_through_tf(tmp_path):
    from albertlm.tokenizer import Tokenizer

    summary = convert(FIXTURES / "google", tmp_path / "g")
    assert Tokenizer.load(tmp_path / "g").split_digit_comma and any("digit-comma" in n for n in summary.notes)
    # an albertlm tokenizer that says the rule is off keeps it off, through TF and back
    Tokenizer.load(tmp_path / "g", split_digit_comma=False).save(tmp_path / "g")
    convert(tmp_path / "g", tmp_path / "tf", to="tf")
    assert (tmp_path / "tf" / "tokenizer_config.json").is_file()
    convert(tmp_path / "tf", tmp_path / "back")
    assert not Tokenizer.load(tmp_path / "back").split_digit_comma
    # albert_zh's WordPiece vocabulary has no such rule
    convert(FIXTURES / "albert_zh", tmp_path / "zh")
    assert "split_digit_comma" not in (tmp_path / "zh" / "tokenizer_config.json").read_text()


def test_wordpiece_settings_survive_tf_and_back(tmp_path):
    """A cased WordPiece model taken to TF and back keeps its casing (and so its ids)."""
    from albertlm.tokenizer.wordpiece import WordPieceTokenizer

    convert(FIXTURES / "google", tmp_path / "hf")
    size = AlbertConfig.from_json_file(tmp_path / "hf" / "config.json").vocab_size
    words = ["Hello", "hello", "He", "##llo", "中", "国"]
    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, *(f"[unused{i}]" for i in range(size - 11))]
    for name in ("spiece.model", "tokenizer_config.json"):
        (tmp_path / "hf" / name).unlink()
    cased = WordPieceTokenizer(pieces, do_lower_case=False)
    cased.save(tmp_path / "hf")
    convert(tmp_path / "hf", tmp_path / "tf", to="tf")
    convert(tmp_path / "tf", tmp_path / "back")
    back = WordPieceTokenizer.load(tmp_path / "back")
    assert not back.do_lower_case
    assert back.encode("Hello 中国").tolist() == cased.encode("Hello 中国").tolist()
