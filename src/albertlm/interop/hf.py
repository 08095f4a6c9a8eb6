"""Hugging Face interop: one explicit, two-way key table between albertlm and transformers.

Our module names are readable (`encoder.attention.{j}.qkv`, `mlm.dense`, `sop`); transformers'
are its own (`encoder.albert_layer_groups.{g}.albert_layers.{k}.attention.query`, ...). Every
correspondence lives in `_backbone_rows` and the per-class head tables in `ARCHITECTURES`; the
tensors move through `to_hf_state_dict` / `from_hf_state_dict`, and `save_pretrained` /
`load_pretrained` read and write a transformers directory (config.json + model.safetensors).

Block numbering: our attention block j and FFN block j both live at HF group j // inner_group_num,
inner layer j % inner_group_num (`AlbertConfig.block_schedule`). Our fused qkv is HF's query, key
and value concatenated along dim 0. Sharing `attention` / `ffn` (paper Table 4) and albert_zh's
embedding layout, which transformers cannot express, are written in the same layout with a
config.json that transformers refuses.
"""

from __future__ import annotations

import dataclasses
import pickle
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn

from albertlm.config import AlbertConfig, read_json_file, shape_note
from albertlm.errors import AlbertlmError
from albertlm.utils import atomic_path, check_finite

CONFIG_NAME = "config.json"
SAFETENSORS_NAME = "model.safetensors"
SAFETENSORS_INDEX_NAME = "model.safetensors.index.json"
PYTORCH_NAME = "pytorch_model.bin"

# Non-parameter buffers old transformers versions saved; derived from the config, so dropped.
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
# First components of backbone keys, used to move them between the bare and `albert.` layouts.
_BACKBONE_TOPS = ("embeddings.", "encoder.", "pooler.")
# Heads of transformers' ALBERT classes: a class without them (AlbertModel from a pretraining or
# fine-tuned directory) drops them without a word, as transformers does.
_HF_HEADS = ("predictions.", "sop_classifier.", "classifier.", "qa_outputs.")


class Row(NamedTuple):
    """One line of the key table."""

    ours: str
    """Our parameter name."""
    hf: tuple[str, ...]
    """Transformers' names; several are concatenated along dim 0 to give ours (qkv)."""
    shape: tuple[int, ...]
    """Shape of each transformers tensor, as the config implies."""


def _linear(ours: str, hf: str, out_features: int, in_features: int) -> list[Row]:
    return [Row(f"{ours}.weight", (f"{hf}.weight",), (out_features, in_features)),
            Row(f"{ours}.bias", (f"{hf}.bias",), (out_features,))]


def _norm(ours: str, hf: str, width: int) -> list[Row]:
    return [Row(f"{ours}.weight", (f"{hf}.weight",), (width,)), Row(f"{ours}.bias", (f"{hf}.bias",), (width,))]


def _backbone_rows(config: AlbertConfig, pooler: bool) -> list[Row]:
    """The backbone's rows, names relative to the backbone on both sides."""
    # Sizes that remember their field, so that a shape check can name it (config.shape_note)
    V, E, H, I, W = (config.size(n) for n in ("vocab_size", "embedding_size", "hidden_size",
                                              "intermediate_size", "embedding_width"))  # W: E, or H in albert_zh's
    rows = [Row("embeddings.word.weight", ("embeddings.word_embeddings.weight",), (V, E))]
    if config.projects_words:  # albert_zh: no such tensor in transformers; our name echoes the TF one
        rows.append(Row("embeddings.word_project.weight", ("embeddings.word_embeddings_2.weight",), (H, E)))
    rows += [
        Row("embeddings.position.weight", ("embeddings.position_embeddings.weight",),
            (config.size("max_position_embeddings"), W)),
        Row("embeddings.token_type.weight", ("embeddings.token_type_embeddings.weight",),
            (config.size("type_vocab_size"), W)),
        *_norm("embeddings.norm", "embeddings.LayerNorm", W),
    ]
    if not config.projects_words:
        rows += _linear("project", "encoder.embedding_hidden_mapping_in", H, E)
    K = config.inner_group_num

    def layer(j: int) -> str:  # block j -> HF group j // K, inner layer j % K
        return f"encoder.albert_layer_groups.{j // K}.albert_layers.{j % K}."

    for j in range(config.num_attention_blocks):
        hf = layer(j) + "attention."
        for p, shape in (("weight", (H, H)), ("bias", (H,))):
            qkv = tuple(f"{hf}{n}.{p}" for n in ("query", "key", "value"))  # our rows: [query; key; value]
            rows.append(Row(f"encoder.attention.{j}.qkv.{p}", qkv, shape))
        rows += _linear(f"encoder.attention.{j}.out", hf + "dense", H, H)
        rows += _norm(f"encoder.attention.{j}.norm", hf + "LayerNorm", H)
    for j in range(config.num_ffn_blocks):
        rows += _linear(f"encoder.ffn.{j}.up", layer(j) + "ffn", I, H)
        rows += _linear(f"encoder.ffn.{j}.down", layer(j) + "ffn_output", H, I)
        rows += _norm(f"encoder.ffn.{j}.norm", layer(j) + "full_layer_layer_norm", H)
    if pooler:
        rows += _linear("pooler", "pooler", H, H)
    return rows


def _pretraining_heads(config: AlbertConfig) -> list[Row]:
    W, H = config.size("embedding_width"), config.size("hidden_size")
    # The decoder is tied to the word table and its bias to predictions.bias: no rows for it.
    return [*_linear("mlm.dense", "predictions.dense", W, H), *_norm("mlm.norm", "predictions.LayerNorm", W),
            Row("mlm.bias", ("predictions.bias",), (config.size("vocab_size"),)),
            *_linear("sop", "sop_classifier.classifier", 2, H)]


@dataclasses.dataclass(frozen=True)
class Architecture:
    """Where one model class keeps its backbone, and the rows of its heads (full names)."""

    ours_prefix: str
    """The backbone's prefix in our state dict."""
    hf_prefix: str
    """The backbone's prefix in transformers' state dict (a bare AlbertModel has none)."""
    heads: Callable[[AlbertConfig], list[Row]] = lambda config: []
    """The head rows, e.g. `_linear("classifier", "classifier", num_labels, H)` for a classifier."""


def _classifier(config: AlbertConfig) -> list[Row]:
    return _linear("classifier", "classifier", config.size("num_labels"), config.size("hidden_size"))


# Keyed by class name, identical here and in transformers.
ARCHITECTURES: dict[str, Architecture] = {
    "AlbertModel": Architecture("", ""),
    "AlbertForPreTraining": Architecture("albert.", "albert.", _pretraining_heads),
    # Fine-tuning heads (heads.py); token classification and QA have no pooler.
    "AlbertForSequenceClassification": Architecture("albert.", "albert.", _classifier),
    "AlbertForTokenClassification": Architecture("albert.", "albert.", _classifier),
    "AlbertForQuestionAnswering": Architecture(
        "albert.", "albert.",
        lambda c: _linear("qa_outputs", "qa_outputs", c.size("num_labels"), c.size("hidden_size"))),
    "AlbertForMultipleChoice": Architecture(
        "albert.", "albert.", lambda c: _linear("classifier", "classifier", 1, c.size("hidden_size"))),
}


def _rows(config: AlbertConfig, arch: str, pooler: bool) -> tuple[list[Row], list[Row]]:
    """(required rows, optional rows) of `arch` with full names; pooler and heads are optional."""
    spec = _spec(arch)
    backbone = [Row(spec.ours_prefix + r.ours, tuple(spec.hf_prefix + n for n in r.hf), r.shape)
                for r in _backbone_rows(config, pooler)]
    is_pooler = [r.ours.startswith(spec.ours_prefix + "pooler.") for r in backbone]
    required = [r for r, p in zip(backbone, is_pooler) if not p]
    return required, [r for r, p in zip(backbone, is_pooler) if p] + spec.heads(config)


def tensor_shapes(config: AlbertConfig, arch: str = "AlbertForPreTraining",
                  pooler: bool = True) -> dict[str, tuple[int, ...]]:
    """{transformers name: shape} of every tensor a file of `arch` holds under `config` (its pooler and
    heads included, the tied decoder not): what an importer of another layout checks its file against."""
    required, optional = _rows(config, arch, pooler)
    return {name: row.shape for row in required + optional for name in row.hf}


def key_table(config: AlbertConfig, arch: str = "AlbertForPreTraining",
              pooler: bool = True) -> list[tuple[str, list[str]]]:
    """The two-way key table of one model class.

    Args:
        config: the model's shape (decides the number of blocks and groups).
        arch: class name, a key of ARCHITECTURES.
        pooler: whether the backbone has a pooler.
    Returns:
        [(our name, [transformers names])]; several names are concatenated along dim 0.
    """
    required, optional = _rows(config, arch, pooler)
    return [(r.ours, list(r.hf)) for r in required + optional]


def _spec(arch: str) -> Architecture:
    if arch not in ARCHITECTURES:
        raise AlbertlmError(f"no Hugging Face key table for {arch!r}; known: {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[arch]


def _arch_of(cls: type) -> str:
    """The registered class name of `cls` or its nearest registered base class."""
    for klass in cls.__mro__:
        if klass.__name__ in ARCHITECTURES:
            return klass.__name__
    raise AlbertlmError(f"no Hugging Face key table for {cls.__name__}; known: {', '.join(ARCHITECTURES)}")


def _one_line(where: str, what: str, keys: list[str]) -> str:
    more = f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""
    return f"{where}: {what} {keys[0]}{more}"


# ---------------------------------------------------------------------------- state dicts
def to_hf_state_dict(model_or_state_dict: nn.Module | Mapping[str, torch.Tensor],
                     config: AlbertConfig | None = None, arch: str | None = None) -> dict[str, torch.Tensor]:
    """Rename our weights to transformers' keys (the prefix follows the class: none for AlbertModel).

    Args:
        model_or_state_dict: one of our models, or its state dict.
        config: the model's config; defaults to `model.config`.
        arch: class name; defaults to the model's class, or the one whose keys the state dict has.
    Returns:
        {transformers name: tensor}, every tensor contiguous and owning its memory where it was
        split out of a fused one (safetensors refuses tensors that share storage).
    """
    if isinstance(model_or_state_dict, nn.Module):
        config = config or model_or_state_dict.config
        arch = arch or _arch_of(type(model_or_state_dict))
        sd = model_or_state_dict.state_dict()
    else:
        sd = dict(model_or_state_dict)
        if config is None:
            raise AlbertlmError("to_hf_state_dict: a state dict needs its config")
    arch = arch or _infer_arch(sd, config)
    pooler = f"{_spec(arch).ours_prefix}pooler.weight" in sd
    required, optional = _rows(config, arch, pooler)
    out: dict[str, torch.Tensor] = {}
    for row in required + optional:
        if row.ours not in sd:
            raise AlbertlmError(f"state dict: missing key {row.ours} for {arch}")
        tensor = sd[row.ours].detach()
        expected = (len(row.hf) * row.shape[0], *row.shape[1:])
        if tuple(tensor.shape) != expected:
            raise AlbertlmError(f"state dict: {row.ours} has shape {list(tensor.shape)}, "
                                f"the config implies {list(expected)}")
        if len(row.hf) == 1:
            out[row.hf[0]] = tensor.contiguous()
        else:  # the chunks are views of one storage: clone each
            out.update((name, piece.clone(memory_format=torch.contiguous_format))
                       for name, piece in zip(row.hf, tensor.chunk(len(row.hf))))
    unexpected = sorted(set(sd) - {r.ours for r in required + optional})
    if unexpected:
        raise AlbertlmError(_one_line("state dict", f"key with no Hugging Face name for {arch}:", unexpected))
    return out


def _infer_arch(sd: Mapping[str, torch.Tensor], config: AlbertConfig) -> str:
    for arch in ARCHITECTURES:
        for pooler in (True, False):
            if set(sd) == {r.ours for group in _rows(config, arch, pooler) for r in group}:
                return arch
    raise AlbertlmError("to_hf_state_dict: the keys match no known model class; pass arch=")


def _normalise_hf_keys(hf_state_dict: Mapping[str, torch.Tensor], hf_prefix: str) -> dict[str, torch.Tensor]:
    """The file's keys with the backbone under `hf_prefix`, id buffers and the tied decoder dropped."""
    file_prefix = "albert." if any(k.startswith("albert.") for k in hf_state_dict) else ""
    sd: dict[str, torch.Tensor] = {}
    for key, tensor in hf_state_dict.items():
        rel = key[len(file_prefix):] if key.startswith(file_prefix) else None
        if rel is not None and rel.startswith(_BACKBONE_TOPS):
            key = hf_prefix + rel
        sd[key] = tensor
    for name in _BUFFERS:
        sd.pop(hf_prefix + name, None)
    sd.pop("predictions.decoder.weight", None)  # tied to the word table, as transformers re-ties it
    decoder_bias = sd.pop("predictions.decoder.bias", None)
    if decoder_bias is not None:
        sd.setdefault("predictions.bias", decoder_bias)
    return sd


def _check_rows(sd: Mapping[str, torch.Tensor], rows: list[Row], source: str) -> list[str]:
    """Check the shape and dtype of every tensor of `rows` that `sd` holds; returns the names it lacks."""
    absent: list[str] = []
    for row in rows:
        for name in row.hf:
            if name not in sd:
                absent.append(name)
                continue
            shape = tuple(sd[name].shape)
            if shape != row.shape:
                raise AlbertlmError(f"{source}: {name} has shape {list(shape)}, the config implies "
                                    f"{list(row.shape)}{shape_note(row.shape, shape)}")
            if not sd[name].is_floating_point():
                raise AlbertlmError(f"{source}: {name} has dtype {str(sd[name].dtype).removeprefix('torch.')}; "
                                    "a weight must be floating point")
    return absent


def _take_rows(sd: Mapping[str, torch.Tensor], required: list[Row], optional: list[Row],
               source: str) -> tuple[dict[str, torch.Tensor], list[str], list[str]]:
    """Our tensors for every table row present, shape-checked; returns (tensors, missing, missing optional)."""
    missing, missing_optional = _check_rows(sd, required, source), _check_rows(sd, optional, source)
    out: dict[str, torch.Tensor] = {}
    for row in required + optional:
        parts = [sd[n] for n in row.hf if n in sd]
        if len(parts) == len(row.hf):
            out[row.ours] = torch.cat(parts) if len(parts) > 1 else parts[0]
    return out, missing, missing_optional


def _check_before_building(hf_state_dict: Mapping[str, torch.Tensor], config: AlbertConfig,
                           arch: str, strict: bool, source: str) -> None:
    """What `from_hf_state_dict` refuses, checked before a model of `config` takes any memory.

    Every tensor's shape and dtype against the config (a pooler too, which the class may lack: it
    must still be [H, H]), and, when `strict`, every backbone key present. A config that overstates
    a size within AlbertConfig's bounds (hidden_size 65536 over a 32-wide file, 1000 unshared
    layers over 3) is refused naming the file and the field instead of allocating gigabytes.
    """
    sd = _normalise_hf_keys(hf_state_dict, _spec(arch).hf_prefix)
    required, optional = _rows(config, arch, pooler=True)
    missing = _check_rows(sd, required, source)
    _check_rows(sd, optional, source)
    if strict:
        _report_key_problems(source, True, missing, [], [])


def _report_key_problems(source: str, strict: bool, missing: list[str], unexpected: list[str],
                         missing_optional: list[str]) -> None:
    """Raise (strict) or warn for missing and unknown keys; always only warn for missing heads."""
    for keys, what in ((missing, "missing key"), (unexpected, "unexpected key")):
        if keys and strict:
            raise AlbertlmError(_one_line(source, what, keys) + " (pass strict=False to load anyway)")
        if keys:
            warnings.warn(_one_line(source, what, keys), stacklevel=3)
    if missing_optional:  # a handful of head keys: name them all
        what = ("no SOP head, as in Google's released checkpoints" if
                all(k.startswith("sop_classifier.") for k in missing_optional) else "no weights for the heads")
        warnings.warn(f"{source}: {what} ({', '.join(missing_optional)}); left randomly initialised, "
                      "train before trusting their outputs", stacklevel=3)


def from_hf_state_dict(hf_state_dict: Mapping[str, torch.Tensor], config: AlbertConfig,
                       arch: str = "AlbertForPreTraining", pooler: bool = True, strict: bool = True,
                       source: str = "state dict") -> dict[str, torch.Tensor]:
    """Rename transformers' weights to ours, checking every shape against the config.

    The backbone may come bare (an AlbertModel file) or under `albert.` (any head class): it is
    moved to where `arch` keeps it. Dropped without a word: position/token-type id buffers, the
    tied decoder (`predictions.decoder.bias` stands in for a missing `predictions.bias`), and the
    heads or pooler of other classes (loading an AlbertModel from a pretraining or fine-tuned
    directory).

    Args:
        hf_state_dict: {transformers name: tensor}.
        config: the target model's config.
        arch: the target class name.
        pooler: whether the target backbone has a pooler.
        strict: if True, a missing backbone key or an unknown key raises; if False they warn.
            Missing heads or pooler always only warn: they keep their random initialisation
            (Google's released checkpoints carry no SOP head).
        source: the file name the messages cite.
    Returns:
        {our name: tensor} for every row present in the file.
    Raises:
        AlbertlmError: a shape that disagrees with the config (always), missing or unknown keys.
    """
    spec = _spec(arch)
    sd = _normalise_hf_keys(hf_state_dict, spec.hf_prefix)
    required, optional = _rows(config, arch, pooler)
    out, missing, missing_optional = _take_rows(sd, required, optional, source)
    known = {n for r in required + optional for n in r.hf}
    known |= {f"{spec.hf_prefix}pooler.weight", f"{spec.hf_prefix}pooler.bias"}  # a pooler we lack
    foreign = tuple(h for h in _HF_HEADS if not any(n.startswith(h) for n in known))  # other classes' heads
    unexpected = sorted(k for k in sd if k not in known and not k.startswith(foreign))
    _report_key_problems(source, strict, missing, unexpected, missing_optional)
    return out


# ---------------------------------------------------------------------------- files
def load_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors on the CPU, every float one checked finite.

    Raises:
        AlbertlmError: one line naming the file (and the tensor) when it cannot be read or a tensor
            holds NaN or infinity.
    """
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(path), device="cpu")
    except Exception as exc:  # SafetensorError, OSError: report the file, keep the cause
        raise AlbertlmError(f"{path}: cannot read safetensors ({str(exc).splitlines()[0]})") from exc
    for name, tensor in tensors.items():
        check_finite(tensor, name, str(path))
    return tensors


def read_hf_weights(path: str | Path) -> tuple[dict[str, torch.Tensor], str]:
    """Read a directory's weights: model.safetensors, a sharded index, or a legacy pytorch_model.bin.

    Args:
        path: the directory.
    Returns:
        ({transformers name: tensor} on the CPU, the file the messages should cite).
    """
    path = Path(path)
    if (path / SAFETENSORS_NAME).is_file():
        return load_safetensors(path / SAFETENSORS_NAME), str(path / SAFETENSORS_NAME)
    index = path / SAFETENSORS_INDEX_NAME
    if index.is_file():
        sd: dict[str, torch.Tensor] = {}
        for shard in _shard_names(index):
            sd.update(load_safetensors(path / shard))
        return sd, str(index)
    legacy = path / PYTORCH_NAME
    if legacy.is_file():
        try:  # a pickle: weights_only refuses anything but tensors and plain containers
            sd = torch.load(legacy, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise AlbertlmError(f"{legacy}: cannot read ({reason})") from exc
        if not isinstance(sd, dict):
            raise AlbertlmError(f"{legacy}: expected a state dict, found {type(sd).__name__}")
        for name, tensor in sd.items():
            if not isinstance(tensor, torch.Tensor):
                raise AlbertlmError(f"{legacy}: {name} is a {type(tensor).__name__}, not a tensor")
            check_finite(tensor, name, str(legacy))
        return sd, str(legacy)
    raise AlbertlmError(f"{path}: no {SAFETENSORS_NAME}, {SAFETENSORS_INDEX_NAME} or {PYTORCH_NAME}")


def weight_names(path: str | Path) -> tuple[set[str], str]:
    """The tensor names of a directory's weights without loading them (a model.safetensors' header, a
    sharded index's weight_map; a legacy pytorch_model.bin is read whole), and the file messages cite.

    Raises:
        AlbertlmError: as `read_hf_weights`, for a directory without weights or an unreadable file.
    """
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    single = path / SAFETENSORS_NAME
    if single.is_file():
        try:
            with safe_open(str(single), framework="pt") as fh:
                return set(fh.keys()), str(single)
        except (SafetensorError, OSError):
            pass  # read_hf_weights reports it in one line
    index = path / SAFETENSORS_INDEX_NAME
    if not single.is_file() and index.is_file():
        _shard_names(index)  # the same checks as loading
        return set(read_json_file(index)["weight_map"]), str(index)
    weights, source = read_hf_weights(path)
    return set(weights), source


def _shard_names(index: Path) -> list[str]:
    """The shard files a safetensors index names, sorted; each must be a file name beside the index."""
    data = read_json_file(index)  # one line naming it: unreadable, not UTF-8, not JSON
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise AlbertlmError(f"{index}: not a safetensors index (weight_map must map tensor names to shard files)")
    shards = list(dict.fromkeys(weight_map.values()))
    for shard in shards:  # the index names files beside it, nothing else
        if not isinstance(shard, str) or shard in ("", ".", "..") or Path(shard).name != shard:
            raise AlbertlmError(f"{index}: shard name {shard!r} is not a file name")
    return sorted(shards)


def load_pretrained(cls: type, path: str | Path, *, config: AlbertConfig | None = None,
                    strict: bool = True, **model_kwargs):
    """Build `cls` from a directory written by our `save_pretrained` or by transformers.

    Args:
        cls: AlbertModel, AlbertForPreTraining or another registered class.
        path: directory with config.json and weights (see `read_hf_weights`).
        config: use this instead of the directory's config.json.
        strict: see `from_hf_state_dict`; heads the files lack only warn either way.
        **model_kwargs: passed to `cls(config, ...)`, e.g. add_pooling_layer=False.
    Returns:
        The model in eval mode (as transformers returns it), on the CPU.
    """
    path = Path(path)
    if not path.is_dir():
        raise AlbertlmError(f"{path}: not a directory (expected {CONFIG_NAME} and {SAFETENSORS_NAME})")
    config = config or AlbertConfig.from_json_file(path / CONFIG_NAME)
    arch = _arch_of(cls)
    hf_sd, source = read_hf_weights(path)
    _check_before_building(hf_sd, config, arch, strict, source)  # before the model takes any memory
    model = cls(config, **model_kwargs)
    pooler = f"{_spec(arch).ours_prefix}pooler.weight" in model.state_dict()
    ours = from_hf_state_dict(hf_sd, config, arch, pooler=pooler, strict=strict, source=source)
    result = model.load_state_dict(ours, strict=False)
    if result.unexpected_keys:  # the table and the model disagree: a bug here, not in the file
        raise AlbertlmError(_one_line(source, "the key table names a parameter the model lacks:",
                                      result.unexpected_keys))
    return model.eval()


def load_state_into(model: nn.Module, path: str | Path) -> None:
    """Load a saved directory's weights into an existing model, all keys required (training resume).

    The directory's config.json must describe the same network as `model.config`.
    """
    path = Path(path)
    config = AlbertConfig.from_json_file(path / CONFIG_NAME)
    if config.replace(extra={}) != model.config.replace(extra={}):
        raise AlbertlmError(f"{path / CONFIG_NAME}: describes another network than the model being resumed")
    arch = _arch_of(type(model))
    pooler = f"{_spec(arch).ours_prefix}pooler.weight" in model.state_dict()
    hf_sd, source = read_hf_weights(path)
    ours = from_hf_state_dict(hf_sd, config, arch, pooler=pooler, strict=True, source=source)
    missing, unexpected = model.load_state_dict(ours, strict=False)
    if missing or unexpected:
        raise AlbertlmError(_one_line(source, "does not hold the complete model:", [*missing, *unexpected]))


def transformers_can_load(config: AlbertConfig) -> bool:
    """Whether transformers' ALBERT classes can express this network (not partial sharing, albert_zh or a
    mean-pooled head)."""
    return _refusal(config, "AlbertModel") is None


def _refusal(config: AlbertConfig, arch: str) -> str | None:
    """The message transformers should show for a network it cannot express, or None if it can.

    A mean-pooled head (`classifier_pooling="mean"`) would load there without complaint and classify
    the pooler's [CLS] vector instead: a silently wrong model, so it is refused like the others."""
    if config.projects_words:
        what = f"embedding_layout={config.embedding_layout!r}"
    elif config.sharing in ("attention", "ffn"):
        what = f"sharing={config.sharing!r}"
    elif config.classifier_pooling != "cls":
        what = f"classifier_pooling={config.classifier_pooling!r}"
    else:
        return None
    return f"albertlm: {what} cannot be expressed by transformers; load this checkpoint with albertlm.{arch}.from_pretrained"


def save_pretrained(model: nn.Module, path: str | Path, state_dict: Mapping[str, torch.Tensor] | None = None) -> None:
    """Write config.json and model.safetensors that transformers' class of the same name loads.

    Sharing `attention` or `ffn` keeps the same key layout (block j at group j, inner layer 0) and
    our `sharing` field; albert_zh's embedding layout adds `embeddings.word_embeddings_2.weight`,
    drops `encoder.embedding_hidden_mapping_in` and keeps our `embedding_layout` field; a mean-pooled
    head has no pooler tensors and keeps our `classifier_pooling` field.
    transformers has no such models, so config.json also carries a `layer_types`
    list whose entries are a message: transformers' strict config validation rejects it and shows
    the message, rather than loading a wrong network. Our reader ignores `layer_types`.
    transformers sizes its SOP head by `num_labels`: a pretraining config with num_labels != 2
    loads here but not there.

    Args:
        model: one of our models.
        path: the directory (created if missing); existing files of the same names are replaced atomically.
        state_dict: save these tensors (our names) instead of the model's own, e.g. a full state
            dict gathered from FSDP shards.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config: AlbertConfig = model.config
    arch = _arch_of(type(model))
    source = model if state_dict is None else state_dict
    tensors = {k: v.cpu() for k, v in to_hf_state_dict(source, config, arch).items()}
    extra = {**config.extra, "architectures": [arch]}
    refusal = _refusal(config, arch)
    if refusal is not None:
        extra["layer_types"] = [refusal] * config.num_hidden_layers
    from safetensors.torch import save_file

    with atomic_path(path / SAFETENSORS_NAME) as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})
    dataclasses.replace(config, extra=extra).to_json_file(path / CONFIG_NAME)
