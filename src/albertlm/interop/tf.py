"""TensorFlow 1 checkpoints of ALBERT: explicit key tables between their variables and our modules.

Two layouts exist, told apart by their encoder scope (`detect_layout`):

- "google": google-research/albert's modeling.py (the v1/v2 releases, their TF-Hub exports, and
  brightmart/albert_zh's `*_google_zh` models). Blocks live at
  `bert/encoder/transformer/group_G/inner_group_K/`; block j of `AlbertConfig.block_schedule()` is
  group j // inner_group_num, inner group j % inner_group_num, as in `interop/hf.py`.
- "albert_zh": brightmart/albert_zh's original modeling.py. BERT's naming under one shared
  `bert/encoder/layer_shared/` scope, and a different network: the word vectors are projected by
  `bert/embeddings/word_embeddings_2` [E, H] (no bias) before H-wide position and type
  embeddings, and the MLM transform is H-wide (`AlbertConfig(embedding_layout="albert_zh")`).

TF dense kernels are [in, out] and torch's Linear weights [out, in]: a row says whether its tensor
is transposed on the way. Our fused qkv is the query, key and value kernels, each transposed,
concatenated along dim 0. TF-Hub exports hold the same variables under `module/`, stripped here.
Optimizer slots (`*/adam_m`, `*/adam_v`) and `global_step` are skipped and counted; any other
variable the table does not name is an error, as is a missing one or a wrong shape.

Reading and writing the files themselves is `interop/tf_bundle.py`; whole directories are
`albertlm/convert.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from albertlm.config import AlbertConfig, read_json_file, shape_note
from albertlm.errors import AlbertlmError, ConfigError
from albertlm.utils import check_finite

HUB_PREFIX = "module/"
"""TF-Hub exports keep every variable under this scope."""
SKIPPED_SUFFIXES = ("/adam_m", "/adam_v")
"""Optimizer slots of the official AdamWeightDecay and LAMB optimizers, one pair per variable."""
SKIPPED_NAMES = ("global_step",)
"""Training bookkeeping with no place in the network."""

# Keys of released TF config files that describe nothing our network has: BERT's pooler
# options (albert_zh's files keep them from bert_config.json) and a display hint.
class Row(NamedTuple):
    """One line of a TF key table."""

    ours: str
    """Our parameter name in AlbertForPreTraining."""
    tf: tuple[str, ...]
    """TF variable names; several (query, key, value) are concatenated along dim 0 to give ours."""
    shape: tuple[int, ...]
    """Shape of each TF variable, as the config implies."""
    transpose: bool = False
    """True for dense kernels: TF stores [in, out], torch [out, in]."""


def _dense(ours: str, tf: str, in_features: int, out_features: int) -> list[Row]:
    return [Row(f"{ours}.weight", (f"{tf}/kernel",), (in_features, out_features), transpose=True),
            Row(f"{ours}.bias", (f"{tf}/bias",), (out_features,))]


def _norm(ours: str, tf: str, width: int) -> list[Row]:
    return [Row(f"{ours}.weight", (f"{tf}/gamma",), (width,)), Row(f"{ours}.bias", (f"{tf}/beta",), (width,))]


def _qkv(ours: str, tf: str, H: int) -> list[Row]:
    """Fused [3H, H] qkv from three [H, H] kernels (transposed) and three [H] biases."""
    names = ("query", "key", "value")
    return [Row(f"{ours}.weight", tuple(f"{tf}/{n}/kernel" for n in names), (H, H), transpose=True),
            Row(f"{ours}.bias", tuple(f"{tf}/{n}/bias" for n in names), (H,))]


def _sizes(config: AlbertConfig) -> tuple[int, ...]:
    """V, E, H, I, positions, types: sizes that remember their field, for shape messages (config.shape_note)."""
    return tuple(config.size(n) for n in ("vocab_size", "embedding_size", "hidden_size", "intermediate_size",
                                          "max_position_embeddings", "type_vocab_size"))


def _heads(config: AlbertConfig) -> list[Row]:
    """Pooler, MLM transform (to W = embedding_width) with its output bias, and the SOP head."""
    H, W = config.size("hidden_size"), config.size("embedding_width")
    return [*_dense("albert.pooler", "bert/pooler/dense", H, H),
            *_dense("mlm.dense", "cls/predictions/transform/dense", H, W),
            *_norm("mlm.norm", "cls/predictions/transform/LayerNorm", W),
            Row("mlm.bias", ("cls/predictions/output_bias",), (config.size("vocab_size"),)),
            # output_weights is [2, H] already: [out, in], no transpose
            Row("sop.weight", ("cls/seq_relationship/output_weights",), (2, H)),
            Row("sop.bias", ("cls/seq_relationship/output_bias",), (2,))]


def google_rows(config: AlbertConfig) -> list[Row]:
    """The key table of google-research/albert's layout for `config`.

    TF has no `embedding_hidden_mapping_in` when E == H (the embeddings enter the encoder as they
    are); our projection is then the identity (`read_state_dict` fills it in).
    """
    if config.projects_words or config.sharing not in ("all", "none"):
        raise AlbertlmError(f"Google's TF layout cannot express {_describe(config)}")
    V, E, H, I, P, T = _sizes(config)
    rows = [Row("albert.embeddings.word.weight", ("bert/embeddings/word_embeddings",), (V, E)),
            Row("albert.embeddings.position.weight", ("bert/embeddings/position_embeddings",), (P, E)),
            Row("albert.embeddings.token_type.weight", ("bert/embeddings/token_type_embeddings",), (T, E)),
            *_norm("albert.embeddings.norm", "bert/embeddings/LayerNorm", E)]
    if E != H:
        rows += _dense("albert.project", "bert/encoder/embedding_hidden_mapping_in", E, H)
    K = config.inner_group_num
    for j in range(config.num_attention_blocks):  # == num_ffn_blocks under all / none
        tf = f"bert/encoder/transformer/group_{j // K}/inner_group_{j % K}"
        ours = f"albert.encoder.attention.{j}"
        rows += [*_qkv(f"{ours}.qkv", f"{tf}/attention_1/self", H),
                 *_dense(f"{ours}.out", f"{tf}/attention_1/output/dense", H, H),
                 *_norm(f"{ours}.norm", f"{tf}/LayerNorm", H)]
        ours = f"albert.encoder.ffn.{j}"
        rows += [*_dense(f"{ours}.up", f"{tf}/ffn_1/intermediate/dense", H, I),
                 *_dense(f"{ours}.down", f"{tf}/ffn_1/intermediate/output/dense", I, H),
                 *_norm(f"{ours}.norm", f"{tf}/LayerNorm_1", H)]
    return rows + _heads(config)


def albert_zh_rows(config: AlbertConfig) -> list[Row]:
    """The key table of brightmart/albert_zh's original layout (one shared BERT-named layer)."""
    if not config.projects_words or config.num_attention_blocks != 1 or config.num_ffn_blocks != 1:
        raise AlbertlmError(f"albert_zh's TF layout cannot express {_describe(config)}")
    V, E, H, I, P, T = _sizes(config)
    tf = "bert/encoder/layer_shared"
    return [Row("albert.embeddings.word.weight", ("bert/embeddings/word_embeddings",), (V, E)),
            Row("albert.embeddings.word_project.weight", ("bert/embeddings/word_embeddings_2",), (E, H),
                transpose=True),
            Row("albert.embeddings.position.weight", ("bert/embeddings/position_embeddings",), (P, H)),
            Row("albert.embeddings.token_type.weight", ("bert/embeddings/token_type_embeddings",), (T, H)),
            *_norm("albert.embeddings.norm", "bert/embeddings/LayerNorm", H),
            *_qkv("albert.encoder.attention.0.qkv", f"{tf}/attention/self", H),
            *_dense("albert.encoder.attention.0.out", f"{tf}/attention/output/dense", H, H),
            *_norm("albert.encoder.attention.0.norm", f"{tf}/attention/output/LayerNorm", H),
            *_dense("albert.encoder.ffn.0.up", f"{tf}/intermediate/dense", H, I),
            *_dense("albert.encoder.ffn.0.down", f"{tf}/output/dense", I, H),
            *_norm("albert.encoder.ffn.0.norm", f"{tf}/output/LayerNorm", H),
            *_heads(config)]


LAYOUTS = {"google": google_rows, "albert_zh": albert_zh_rows}
"""Key tables by TF layout name."""


def _describe(config: AlbertConfig) -> str:
    return (f"embedding_layout={config.embedding_layout!r}, sharing={config.sharing!r}, "
            f"{config.num_attention_blocks} attention / {config.num_ffn_blocks} FFN blocks")


def key_table(config: AlbertConfig, layout: str = "google") -> list[tuple[str, list[str], bool]]:
    """[(our name, [TF names], transposed)] of one layout, for documentation and tests."""
    return [(r.ours, list(r.tf), r.transpose) for r in _layout_rows(config, layout)]


def _layout_rows(config: AlbertConfig, layout: str) -> list[Row]:
    if layout not in LAYOUTS:
        raise AlbertlmError(f"unknown TF layout {layout!r}; known: {', '.join(LAYOUTS)}")
    return LAYOUTS[layout](config)


# ---------------------------------------------------------------------------- names in a checkpoint
@dataclasses.dataclass
class TfSummary:
    """What reading a TF checkpoint found."""

    layout: str
    """"google" or "albert_zh"."""
    hub: bool
    """Whether the variables sat under TF-Hub's `module/` scope."""
    tensors: int
    """Variables mapped to our parameters."""
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)
    """Variables left out, by kind (adam_m, adam_v, global_step)."""
    filled: list[str] = dataclasses.field(default_factory=list)
    """Our parameters the checkpoint has no variable for, set to what the TF network computes."""


def split_names(names: list[str]) -> tuple[dict[str, str], dict[str, int], bool]:
    """Sort a checkpoint's variable names into model variables and skipped ones.

    Args:
        names: every variable name in the checkpoint.
    Returns:
        ({name without `module/`: name in the file}, {skipped kind: count}, whether `module/` was stripped).
    """
    skipped: dict[str, int] = {}
    kept: list[str] = []
    for name in names:
        kind = next((s[1:] for s in SKIPPED_SUFFIXES if name.endswith(s)), None)
        base = name[len(HUB_PREFIX):] if name.startswith(HUB_PREFIX) else name
        kind = kind or (base if base in SKIPPED_NAMES else None)
        if kind:
            skipped[kind] = skipped.get(kind, 0) + 1
        else:
            kept.append(name)
    hub = bool(kept) and all(n.startswith(HUB_PREFIX) for n in kept)
    return {(n[len(HUB_PREFIX):] if hub else n): n for n in kept}, skipped, hub


def detect_layout(names: Mapping[str, Any] | list[str], source: str = "checkpoint") -> str:
    """"google" or "albert_zh" from the encoder scope of the variable names (without `module/`)."""
    if any(n.startswith("bert/encoder/transformer/") for n in names):
        return "google"
    if any(n.startswith("bert/encoder/layer_shared/") for n in names):
        return "albert_zh"
    if any(n.startswith("bert/encoder/layer_0/") for n in names):
        raise AlbertlmError(f"{source}: a BERT checkpoint (bert/encoder/layer_0/...), not ALBERT")
    raise AlbertlmError(f"{source}: no ALBERT encoder variables (bert/encoder/transformer/ or "
                        "bert/encoder/layer_shared/)")


# ---------------------------------------------------------------------------- TF -> ours
def read_state_dict(tensors: Mapping[str, np.ndarray], config: AlbertConfig,
                    source: str = "checkpoint") -> tuple[dict[str, torch.Tensor], TfSummary]:
    """Rename a TF checkpoint's variables to our AlbertForPreTraining parameters.

    Args:
        tensors: {TF variable name: array}, as read from the checkpoint (with or without `module/`).
        config: the network's shape; its `embedding_layout` must match the checkpoint's layout.
        source: the file the messages cite.
    Returns:
        ({our name: float tensor}, TfSummary).
    Raises:
        AlbertlmError: an unknown variable, a missing one, or a shape the config does not imply,
            each naming the variable.
    """
    names, skipped, hub = split_names(list(tensors))
    layout = detect_layout(names, source)
    if (layout == "albert_zh") != config.projects_words:
        raise AlbertlmError(f"{source}: a {layout} checkpoint, but the config says "
                            f"embedding_layout={config.embedding_layout!r}")
    rows = _layout_rows(config, layout)
    known = {n for r in rows for n in r.tf}
    unknown = sorted(set(names) - known)
    if unknown:
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise AlbertlmError(f"{source}: unknown variable {names[unknown[0]]}{more}")
    out: dict[str, torch.Tensor] = {}
    for row in rows:
        parts = []
        for name in row.tf:
            if name not in names:
                raise AlbertlmError(f"{source}: missing variable {(HUB_PREFIX if hub else '') + name}")
            parts.append(_weight(tensors[names[name]], names[name], row, source))
        out[row.ours] = torch.cat(parts) if len(parts) > 1 else parts[0]
    summary = TfSummary(layout, hub, len(known), skipped)
    if layout == "google" and config.embedding_size == config.hidden_size:
        # TF runs no projection when E == H: ours is the identity, which computes the same
        out["albert.project.weight"] = torch.eye(config.hidden_size)
        out["albert.project.bias"] = torch.zeros(config.hidden_size)
        summary.filled = ["albert.project.weight", "albert.project.bias"]
    return out, summary


def _weight(value: np.ndarray, name: str, row: Row, source: str) -> torch.Tensor:
    """One variable as a torch tensor in our layout, its shape, dtype and values checked."""
    array = np.asarray(value)
    shape = tuple(array.shape)
    if shape != row.shape:
        raise AlbertlmError(f"{source}: variable {name} has shape {list(shape)}, the config implies "
                            f"{list(row.shape)}{shape_note(row.shape, shape)}")
    if array.dtype.kind != "f":  # an int32 entry would load as huge floats into the parameter
        raise AlbertlmError(f"{source}: variable {name} has dtype {array.dtype}; a weight must be floating point")
    tensor = torch.from_numpy(np.ascontiguousarray(array.T if row.transpose else array))
    check_finite(tensor, name, source, what="variable")
    return tensor


# ---------------------------------------------------------------------------- ours -> TF
def write_state_dict(state_dict: Mapping[str, torch.Tensor], config: AlbertConfig) -> dict[str, np.ndarray]:
    """Our AlbertForPreTraining parameters as TF variables in Google's layout.

    Args:
        state_dict: {our name: tensor} of an AlbertForPreTraining.
        config: its config; sharing `attention`/`ffn` and albert_zh's layout are refused.
    Returns:
        {TF variable name: float32 array}.
    """
    if config.projects_words or config.sharing not in ("all", "none"):
        raise AlbertlmError(f"Google's TF layout cannot express {_describe(config)}; keep it as an "
                            "albertlm directory (save_pretrained)")
    rows = google_rows(config)
    expected = {r.ours for r in rows}
    if config.embedding_size == config.hidden_size:
        _check_identity(state_dict, config)
        expected |= {"albert.project.weight", "albert.project.bias"}
    unexpected = sorted(set(state_dict) - expected)
    if unexpected:
        raise AlbertlmError(f"Google's TF layout has no name for {unexpected[0]}"
                            + (f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else "")
                            + "; only pretraining models (AlbertForPreTraining) can be written")
    out: dict[str, np.ndarray] = {}
    for row in rows:
        if row.ours not in state_dict:
            raise AlbertlmError(f"state dict: missing {row.ours}")
        tensor = state_dict[row.ours].detach().cpu().float()
        for name, part in zip(row.tf, tensor.chunk(len(row.tf))):
            array = part.numpy()
            out[name] = np.ascontiguousarray(array.T if row.transpose else array)
            if out[name].shape != row.shape:
                raise AlbertlmError(f"state dict: {row.ours} gives {name} the shape {list(out[name].shape)}, "
                                    f"the config implies {list(row.shape)}")
    return out


def _check_identity(state_dict: Mapping[str, torch.Tensor], config: AlbertConfig) -> None:
    """With E == H, TF has no projection: ours must be the identity to be left out."""
    weight, bias = state_dict.get("albert.project.weight"), state_dict.get("albert.project.bias")
    if weight is None or bias is None:
        return
    if not (torch.equal(weight.detach().cpu(), torch.eye(config.hidden_size, dtype=weight.dtype))
            and not bias.detach().abs().any()):
        raise AlbertlmError("Google's TF layout runs no E→H projection when embedding_size == hidden_size, "
                            "and this model's projection is not the identity")


# ---------------------------------------------------------------------------- config files
def config_from_tf(data: dict[str, Any], layout: str = "google", source: str = "albert_config.json") -> AlbertConfig:
    """An AlbertConfig from Google's `albert_config.json` or one of albert_zh's config files.

    TF's "gelu" is GELU in its tanh form in both codebases, transformers' "gelu_new". albert_zh's
    files carry BERT's pooler options (ignored) and `ln_type`: "postln" is ALBERT's network,
    "preln" (its xxlarge) a pre-LayerNorm one we do not implement and refuse.

    Args:
        data: the parsed JSON object.
        layout: the checkpoint's layout ("google" or "albert_zh"), which sets `embedding_layout`.
        source: the file the messages cite.
    Returns:
        The config, validated.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a JSON object, got {type(data).__name__}")
    data = dict(data)  # the caller's dict stays as it is
    ln_type = data.pop("ln_type", None)
    if ln_type not in (None, "postln"):
        raise ConfigError(f"{source}: ln_type {ln_type!r} is a pre-LayerNorm network albertlm does not "
                          "implement; only 'postln' (ALBERT's) converts")
    if data.pop("layers_to_keep", []):  # Google's files carry it empty; a subset would be another network
        raise ConfigError(f"{source}: layers_to_keep is not empty; albertlm converts whole models only")
    if data.get("down_scale_factor", 1) != 1:
        raise ConfigError(f"{source}: down_scale_factor {data['down_scale_factor']!r} is not 1; "
                          "no released model uses another")
    if data.get("hidden_act") == "gelu":
        data["hidden_act"] = "gelu_new"
    if layout == "albert_zh":
        data["embedding_layout"] = "albert_zh"
    if "embedding_size" not in data:
        data["embedding_size"] = data.get("hidden_size", AlbertConfig.hidden_size)  # BERT-shaped: E == H
    return AlbertConfig.from_dict(data, source=source)


def read_tf_config(path: str | Path, layout: str = "google") -> AlbertConfig:
    """Read a TF-era config file (see `config_from_tf`); errors name the file."""
    return config_from_tf(read_json_file(path), layout, source=str(path))


def tf_config_dict(config: AlbertConfig) -> dict[str, Any]:
    """Google's albert_config.json for `config` (the keys its modeling.AlbertConfig reads)."""
    # TF's activations by name: its "gelu" is the tanh form; it has no erf GELU or SiLU
    act = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu_fast": "gelu", "relu": "relu",
           "tanh": "tanh"}.get(config.hidden_act)
    if act is None:
        raise AlbertlmError(f"Google's TF code has no activation {config.hidden_act!r} "
                            "(it knows gelu in its tanh form, relu and tanh)")
    return {"vocab_size": config.vocab_size, "embedding_size": config.embedding_size,
            "hidden_size": config.hidden_size, "num_hidden_layers": config.num_hidden_layers,
            "num_hidden_groups": config.num_hidden_groups, "num_attention_heads": config.num_attention_heads,
            "intermediate_size": config.intermediate_size, "inner_group_num": config.inner_group_num,
            "down_scale_factor": 1, "hidden_act": act, "hidden_dropout_prob": config.hidden_dropout_prob,
            "attention_probs_dropout_prob": config.attention_probs_dropout_prob,
            "max_position_embeddings": config.max_position_embeddings,
            "type_vocab_size": config.type_vocab_size, "initializer_range": config.initializer_range}
