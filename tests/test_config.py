import json

import pytest

from albertlm.config import PRESETS, AlbertConfig, get_preset
from albertlm.errors import ConfigError


def test_defaults_follow_transformers():
    c = AlbertConfig()
    assert (c.vocab_size, c.embedding_size, c.hidden_size, c.num_hidden_layers) == (30000, 128, 4096, 12)
    assert (c.num_attention_heads, c.intermediate_size, c.hidden_act) == (64, 16384, "gelu_new")
    assert (c.pad_token_id, c.bos_token_id, c.eos_token_id, c.layer_norm_eps) == (0, 2, 3, 1e-12)
    assert c.sharing == "all"


def test_frozen():
    with pytest.raises(Exception):
        PRESETS["test"].hidden_size = 64  # type: ignore[misc]


@pytest.mark.parametrize("name", list(PRESETS))
def test_json_round_trip(tmp_path, name):
    c = PRESETS[name]
    c.to_json_file(tmp_path / "config.json")
    assert AlbertConfig.from_json_file(tmp_path / "config.json") == c


def test_tf_leftovers_and_unknown_keys(tmp_path):
    data = PRESETS["test"].to_dict()
    data.update(down_scale_factor=1, gap_size=0, net_structure_type=0, num_memory_blocks=0,
                transformers_version="5.24.0", custom_thing=7)
    c = AlbertConfig.from_dict(data)
    assert c == PRESETS["test"]
    assert c.extra == {"custom_thing": 7}
    assert "down_scale_factor" not in c.to_dict() and c.to_dict()["custom_thing"] == 7


def test_hf_dict_without_sharing_infers_it():
    base = PRESETS["bert-base"].to_dict()
    del base["sharing"]
    assert AlbertConfig.from_dict(base).sharing == "none"
    base = PRESETS["albert-base"].to_dict()
    del base["sharing"]
    assert AlbertConfig.from_dict(base).sharing == "all"


def test_labels_round_trip():
    c = get_preset("test", num_labels=3, id2label={0: "neg", 1: "neu", 2: "pos"})
    again = AlbertConfig.from_dict(json.loads(json.dumps(c.to_dict())))
    assert again.id2label == {0: "neg", 1: "neu", 2: "pos"} and again.num_labels == 3


@pytest.mark.parametrize("changes, field", [
    (dict(hidden_size=30), "num_attention_heads"),
    (dict(num_hidden_groups=2), "num_hidden_groups"),  # 2 does not divide 3 layers
    (dict(num_hidden_groups=4), "num_hidden_groups"),
    (dict(vocab_size=0), "vocab_size"),
    (dict(intermediate_size=-1), "intermediate_size"),
    (dict(hidden_act="gelu_wrong"), "hidden_act"),
    (dict(sharing="half"), "sharing"),
    (dict(sharing="attention", num_hidden_groups=3), "sharing"),
    (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob"),
    (dict(pad_token_id=500), "pad_token_id"),
])
def test_validation_names_the_field(changes, field):
    with pytest.raises(ConfigError, match=field):
        AlbertConfig(**{**_test_kwargs(), **changes})


def _test_kwargs():
    c = PRESETS["test"]
    return dict(vocab_size=c.vocab_size, embedding_size=c.embedding_size, hidden_size=c.hidden_size,
                num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
                intermediate_size=c.intermediate_size, max_position_embeddings=c.max_position_embeddings)


def test_bad_json_names_the_file(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{not json")
    with pytest.raises(ConfigError, match="config.json"):
        AlbertConfig.from_json_file(p)
    p.write_text(json.dumps({"hidden_size": 30, "num_attention_heads": 4}))
    with pytest.raises(ConfigError, match="config.json.*hidden_size"):
        AlbertConfig.from_json_file(p)


def test_block_schedule():
    c = get_preset("test", num_hidden_layers=4)
    assert c.block_schedule() == [(0, 0)] * 4
    assert c.replace(sharing="none").block_schedule() == [(i, i) for i in range(4)]
    assert c.replace(sharing="attention").block_schedule() == [(0, i) for i in range(4)]
    assert c.replace(sharing="ffn").block_schedule() == [(i, 0) for i in range(4)]
    # HF's group scheme: layer i uses group int(i / (L / G)) and runs its inner layers in order.
    g = c.replace(num_hidden_groups=2, inner_group_num=2)
    assert g.block_schedule() == [(0, 0), (1, 1), (0, 0), (1, 1), (2, 2), (3, 3), (2, 2), (3, 3)]
    assert g.num_layer_calls == 8 and g.num_attention_blocks == 4


def test_presets_shapes():
    assert get_preset("albert-xxlarge").num_attention_heads == 64
    assert get_preset("bert-xlarge").embedding_size == 2048
    assert get_preset("bert-large").num_hidden_groups == 24
    with pytest.raises(ConfigError, match="unknown preset"):
        get_preset("albert-huge")


def test_embedding_layout_is_validated_and_written(tmp_path):
    config = AlbertConfig(embedding_layout="albert_zh", vocab_size=100, hidden_size=64,
                          num_attention_heads=4, intermediate_size=128)
    assert config.embedding_width == 64 and config.projects_words
    assert AlbertConfig().embedding_width == 128 and not AlbertConfig().projects_words
    config.to_json_file(tmp_path / "config.json")
    assert AlbertConfig.from_json_file(tmp_path / "config.json") == config
    with pytest.raises(ConfigError, match="embedding_layout 'zh' is unknown"):
        AlbertConfig(embedding_layout="zh")


# ---------------------------------------------------------------------------- numbers that must not travel
@pytest.mark.parametrize("field", ["layer_norm_eps", "initializer_range", "hidden_dropout_prob",
                                   "attention_probs_dropout_prob", "classifier_dropout_prob"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_float_fields_are_refused_naming_file_and_field(field, value):
    data = {**PRESETS["test"].to_dict(), field: value}
    with pytest.raises(ConfigError, match=rf"^x/config.json: {field} must be a finite number, got -?(nan|inf)$"):
        AlbertConfig.from_dict(data, source="x/config.json")


@pytest.mark.parametrize("field, value", [("layer_norm_eps", 0), ("layer_norm_eps", -1e-12),
                                          ("initializer_range", 0.0)])
def test_float_fields_must_be_positive(field, value):
    with pytest.raises(ConfigError, match=f"{field} must be a finite positive number, got {value}"):
        AlbertConfig(**{**_test_kwargs(), field: value})


@pytest.mark.parametrize("field, value", [("pad_token_id", True), ("bos_token_id", False), ("vocab_size", True),
                                          ("num_labels", True), ("layer_norm_eps", True)])
def test_booleans_are_not_numbers(field, value):
    data = {**PRESETS["test"].to_dict(), field: value}
    with pytest.raises(ConfigError, match=rf"^c.json: {field} must be an? (integer|finite number), got {value}$"):
        AlbertConfig.from_dict(data, source="c.json")


def test_tie_word_embeddings_must_be_a_boolean():
    with pytest.raises(ConfigError, match="tie_word_embeddings must be true or false, got 1"):
        AlbertConfig(**_test_kwargs(), tie_word_embeddings=1)


@pytest.mark.parametrize("field, value", [("num_hidden_layers", 10**9), ("num_hidden_layers", 1025),
                                          ("intermediate_size", 10**11), ("max_position_embeddings", 10**11),
                                          ("num_labels", 10**10), ("hidden_size", 32_000_000),
                                          ("vocab_size", 10**11), ("inner_group_num", 2000)])
def test_absurd_sizes_are_refused_at_once(field, value):
    # Each of these once became a multi-terabyte allocation, or a minute-long loop in block_schedule.
    changes = {field: value}
    if field == "inner_group_num":
        changes["num_hidden_layers"] = 1
    with pytest.raises(ConfigError, match=rf"^{field} {value} is above albertlm's limit of \d+; no real model"):
        AlbertConfig(**{**_test_kwargs(), **changes})


def test_layer_applications_are_bounded():
    with pytest.raises(ConfigError, match="num_hidden_layers x inner_group_num = 2048 layer applications is "
                                          "above albertlm's limit of 1024"):
        AlbertConfig(**{**_test_kwargs(), "num_hidden_layers": 1024, "inner_group_num": 2})
    big = AlbertConfig(**{**_test_kwargs(), "num_hidden_layers": 1024, "sharing": "none"})
    assert len(big.block_schedule()) == 1024  # the limit itself is allowed


def test_config_file_read_errors_are_one_line_naming_the_file(tmp_path):
    folder = tmp_path / "config.json"
    folder.mkdir()
    with pytest.raises(ConfigError, match=rf"^{folder}: is a directory, not a config file$"):
        AlbertConfig.from_json_file(folder)
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"vocab_size": 1000, "x": "\xff"}')
    with pytest.raises(ConfigError, match=rf"^{latin}: not UTF-8 text \(byte 0xff at offset 27\)$"):
        AlbertConfig.from_json_file(latin)
    nan = tmp_path / "nan.json"
    nan.write_text(json.dumps({**PRESETS["test"].to_dict(), "layer_norm_eps": float("nan")}))
    assert "NaN" in nan.read_text()  # json writes (and reads) NaN, so the config must refuse it
    with pytest.raises(ConfigError, match=rf"^{nan}: layer_norm_eps must be a finite number, got nan$"):
        AlbertConfig.from_json_file(nan)


@pytest.mark.parametrize("value", ["foo", 3, "Regression"])
def test_an_unknown_problem_type_is_refused_naming_file_and_field(value):
    # transformers accepts only these three; anything else once reached predict as a traceback
    data = {**PRESETS["test"].to_dict(), "problem_type": value}
    with pytest.raises(ConfigError, match=rf"^x/config.json: problem_type {value!r} is unknown; choose one of "
                                          "regression, single_label_classification, multi_label_classification$"):
        AlbertConfig.from_dict(data, source="x/config.json")


def test_the_problem_types_transformers_writes_are_read():
    for value in ("regression", "single_label_classification", "multi_label_classification", None):
        num_labels = 1 if value == "regression" else 2
        data = {**PRESETS["test"].replace(num_labels=num_labels).to_dict(), "problem_type": value}
        assert AlbertConfig.from_dict(data).problem_type == value


@pytest.mark.parametrize("changes", [{"num_labels": 3, "id2label": {"0": "a", "1": "b"}},
                                     {"id2label": {"0": "a", "2": "b"}},
                                     {"id2label": {"1": "a", "2": "b"}}])
def test_id2label_must_name_every_id_below_num_labels(changes):
    # a label name per output: evaluate and predict look up id2label[i] for every i < num_labels
    data = {k: v for k, v in PRESETS["test"].to_dict().items() if k not in ("id2label", "label2id")}
    with pytest.raises(ConfigError, match=r"^c.json: id2label must name the ids 0 to \d+ \(num_labels=\d\), "
                                          r"got ids \[\d, \d\]$"):
        AlbertConfig.from_dict({**data, **changes}, source="c.json")


def test_quoted_layer_counts_are_refused_in_one_line():
    # equal strings once reached the sharing inference's `L > 1` (a TypeError traceback)
    with pytest.raises(ConfigError, match=r"^c.json: num_hidden_layers must be an integer, got '2'$"):
        AlbertConfig.from_dict({"num_hidden_layers": "2", "num_hidden_groups": "2"}, source="c.json")
