"""BERT checkpoints read as ALBERT: one key table from transformers' BERT names to its ALBERT names.

A BERT is an ALBERT with E = H, no cross-layer sharing (one group per layer, one inner layer each)
and an E→H projection that is the identity: the same post-LN blocks, the same embeddings summed
and normalised at width H, the same pooler and the same tied masked-LM head (dense, activation,
LayerNorm, the word table back to V plus a bias). So a BERT directory becomes an ALBERT one by
renaming its tensors into the layout of transformers' ALBERT classes and adding the identity
projection; `interop/hf.py`'s table then checks every shape and moves them to our names, as for
any ALBERT directory. The hidden states are BERT's to float rounding (tests/test_interop_bert.py
holds them to transformers' BertModel).

    BERT (transformers)                                   ALBERT (transformers)
    [bert.]embeddings.{word,position,token_type}_embeddings  albert.embeddings.* (same names)
    [bert.]embeddings.LayerNorm                          albert.embeddings.LayerNorm
    (none)                                               albert.encoder.embedding_hidden_mapping_in = I, 0
    [bert.]encoder.layer.{i}.attention.self.{query,key,value}   albert.encoder.albert_layer_groups.{i}.
                                                               albert_layers.0.attention.{query,key,value}
    [bert.]encoder.layer.{i}.attention.output.dense      ... .attention.dense
    [bert.]encoder.layer.{i}.attention.output.LayerNorm  ... .attention.LayerNorm
    [bert.]encoder.layer.{i}.intermediate.dense          ... .ffn
    [bert.]encoder.layer.{i}.output.dense                ... .ffn_output
    [bert.]encoder.layer.{i}.output.LayerNorm            ... .full_layer_layer_norm
    [bert.]pooler.dense                                  albert.pooler
    cls.predictions.transform.dense / .LayerNorm         predictions.dense / predictions.LayerNorm
    cls.predictions.bias (decoder.bias)                  predictions.bias; decoder.weight tied to the word table
    classifier, qa_outputs                               classifier, qa_outputs (same shapes)

Not carried: BERT's next-sentence head (`cls.seq_relationship`) is another task than ALBERT's
sentence-order prediction, so an imported pretraining model's SOP head starts untrained (said in
the conversion's notes). Refused in one line: configs of other model types (RoBERTa's positions
start at padding_idx + 1, ELECTRA's embeddings are narrower, ...), relative position embeddings,
decoders, and an MLM decoder that is not tied to the word table (ALBERT always ties it).
Old checkpoints' `LayerNorm.gamma` / `LayerNorm.beta` are read as weight / bias, as transformers does.
A missing or mis-shaped tensor is refused before the renaming, naming the key as the BERT file has it
(`check_bert_weights`, which reads the table backwards with `bert_key`, against the shapes of
`interop.hf.tensor_shapes`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch

from albertlm.config import AlbertConfig, shape_note
from albertlm.errors import AlbertlmError

BERT_MODEL_TYPES = ("bert",)
"""config.json `model_type` values read as BERT (Chinese BERT-wwm and RoBERTa-wwm-ext releases are "bert")."""

ARCHITECTURE_MAP = {
    "BertModel": "AlbertModel",
    "BertForPreTraining": "AlbertForPreTraining",
    "BertForMaskedLM": "AlbertForPreTraining",
    "BertLMHeadModel": None,  # a decoder: refused by the config check
    "BertForSequenceClassification": "AlbertForSequenceClassification",
    "BertForTokenClassification": "AlbertForTokenClassification",
    "BertForQuestionAnswering": "AlbertForQuestionAnswering",
    "BertForMultipleChoice": "AlbertForMultipleChoice",
    "BertForNextSentencePrediction": "AlbertModel",  # its NSP head is not carried
}
"""transformers' BERT class -> the ALBERT class an import of it writes."""

# BERT config keys that carry over under the same name and meaning.
_SAME_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
                "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id", "num_labels",
                "id2label", "problem_type")
_BERT_DEFAULTS = {"hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
                  "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02,
                  "layer_norm_eps": 1e-12, "pad_token_id": 0}
"""transformers' BertConfig defaults where they differ from AlbertConfig's (a config.json may omit them)."""

_LAYER = re.compile(r"encoder\.layer\.(\d+)\.(.+)")
_LAYER_PARTS = {
    "attention.self.query.": "attention.query.", "attention.self.key.": "attention.key.",
    "attention.self.value.": "attention.value.", "attention.output.dense.": "attention.dense.",
    "attention.output.LayerNorm.": "attention.LayerNorm.", "intermediate.dense.": "ffn.",
    "output.dense.": "ffn_output.", "output.LayerNorm.": "full_layer_layer_norm.",
}
_HEADS = {"cls.predictions.transform.dense.": "predictions.dense.",
          "cls.predictions.transform.LayerNorm.": "predictions.LayerNorm.",
          "cls.predictions.bias": "predictions.bias", "cls.predictions.decoder.bias": "predictions.decoder.bias",
          "classifier.": "classifier.", "qa_outputs.": "qa_outputs."}
_DROPPED = ("embeddings.position_ids", "embeddings.token_type_ids", "cls.seq_relationship.",
            "cls.predictions.decoder.weight")
"""Buffers derived from the config, the NSP head and the tied decoder (checked tied, then dropped)."""


def is_bert_config(data: Mapping[str, Any]) -> bool:
    """Whether a config.json's contents describe a BERT (its model_type)."""
    return data.get("model_type") in BERT_MODEL_TYPES


def albert_config_from_bert(data: Mapping[str, Any], source: str = "config.json") -> AlbertConfig:
    """The ALBERT that computes what a BERT config describes: E = H, sharing none, one inner layer.

    Args:
        data: the BERT config.json's contents.
        source: the file name the messages cite.
    Returns:
        AlbertConfig with BERT's sizes, activation, dropouts and ids; unknown BERT keys are kept in
        `extra` only when they say nothing about the network (they are dropped here: the output is
        an ALBERT config).
    Raises:
        AlbertlmError: one line naming the file and the key, for anything ALBERT cannot compute.
    """
    model_type = data.get("model_type")
    if model_type == "albert":
        raise AlbertlmError(f"{source}: model_type 'albert': already an ALBERT checkpoint, which albertlm reads as "
                            "it is; there is no BERT to import (convert it without --from bert)")
    if model_type not in BERT_MODEL_TYPES:
        raise AlbertlmError(f"{source}: model_type {model_type!r} is not BERT; albertlm imports BERT checkpoints "
                            f"(model_type {', '.join(map(repr, BERT_MODEL_TYPES))}) only")
    position = data.get("position_embedding_type", "absolute")
    if position != "absolute":
        raise AlbertlmError(f"{source}: position_embedding_type {position!r}; ALBERT has absolute positions only")
    for key in ("is_decoder", "add_cross_attention"):
        if data.get(key):
            raise AlbertlmError(f"{source}: {key} is true; ALBERT is an encoder, a BERT decoder cannot be imported")
    if data.get("pruned_heads"):
        raise AlbertlmError(f"{source}: pruned_heads is set; a BERT with pruned heads cannot be imported")
    if "hidden_size" not in data or "num_hidden_layers" not in data:
        missing = "hidden_size" if "hidden_size" not in data else "num_hidden_layers"
        raise AlbertlmError(f"{source}: no {missing}; not a BERT config")
    fields = {k: data[k] for k in _SAME_FIELDS if k in data and data[k] is not None}
    fields = {**{k: v for k, v in _BERT_DEFAULTS.items() if k not in fields}, **fields}
    fields.setdefault("vocab_size", 30522)
    fields.setdefault("num_attention_heads", 12)
    fields.setdefault("intermediate_size", 3072)
    if isinstance(data.get("classifier_dropout"), (int, float)) and not isinstance(data["classifier_dropout"], bool):
        fields["classifier_dropout_prob"] = data["classifier_dropout"]  # BERT's null means hidden_dropout_prob
    else:
        fields["classifier_dropout_prob"] = fields["hidden_dropout_prob"]
    if "id2label" in fields and isinstance(fields["id2label"], dict):
        fields["num_labels"] = len(fields["id2label"])
    # ALBERT reads bos/eos as [CLS]/[SEP]; BERT configs rarely carry them: the vocabulary sets them later.
    for ours, theirs in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id")):
        if isinstance(data.get(theirs), int):
            fields[ours] = data[theirs]
    layers = fields["num_hidden_layers"]
    fields.update(embedding_size=fields["hidden_size"], sharing="none", num_hidden_groups=layers,
                  inner_group_num=1, tie_word_embeddings=True)
    try:
        return AlbertConfig.from_dict(fields, source=source)
    except AlbertlmError as exc:
        raise AlbertlmError(str(exc) if str(exc).startswith(source) else f"{source}: {exc}") from None


def albert_architecture(data: Mapping[str, Any], bert_state_dict: Mapping[str, torch.Tensor]) -> str:
    """The ALBERT class an import writes: from config.json's `architectures`, else from the heads present."""
    names = data.get("architectures") or []
    for name in names:
        if ARCHITECTURE_MAP.get(name):
            return ARCHITECTURE_MAP[name]
    if any(k.startswith("cls.predictions.") for k in bert_state_dict):
        return "AlbertForPreTraining"
    if any(k.startswith("qa_outputs.") for k in bert_state_dict):
        return "AlbertForQuestionAnswering"
    if any(k.startswith("classifier.") for k in bert_state_dict):
        return "AlbertForSequenceClassification"  # token classification has the same key: config.json tells them apart
    return "AlbertModel"


def _legacy_norm_name(key: str) -> str:
    """`LayerNorm.gamma` / `LayerNorm.beta` (old TF-converted files) -> `.weight` / `.bias`."""
    if ".LayerNorm." in key or key.startswith("LayerNorm."):
        if key.endswith(".gamma"):
            return key[: -len("gamma")] + "weight"
        if key.endswith(".beta"):
            return key[: -len("beta")] + "bias"
    return key


def bert_to_albert_state_dict(bert_state_dict: Mapping[str, torch.Tensor], config: AlbertConfig,
                              source: str = "state dict") -> dict[str, torch.Tensor]:
    """Rename a BERT state dict (bare BertModel or under `bert.`) into transformers' ALBERT names.

    The result has the backbone under `albert.` and the identity E→H projection added; it is what
    `interop.hf.from_hf_state_dict` reads (which checks every shape against `config`).

    Args:
        bert_state_dict: {BERT name: tensor}.
        config: the ALBERT config `albert_config_from_bert` gave.
        source: the file name the messages cite.
    Returns:
        {transformers ALBERT name: tensor}.
    Raises:
        AlbertlmError: a key the table does not know, or an MLM decoder not tied to the word table.
    """
    sd = {_legacy_norm_name(k): v for k, v in bert_state_dict.items()}
    prefix = "bert." if any(k.startswith("bert.") for k in sd) else ""
    word_key = f"{prefix}embeddings.word_embeddings.weight"
    decoder = sd.get("cls.predictions.decoder.weight")
    if decoder is not None and word_key in sd and not (
            decoder.shape == sd[word_key].shape and torch.equal(decoder, sd[word_key])):
        raise AlbertlmError(f"{source}: cls.predictions.decoder.weight is not tied to the word embeddings; "
                            "ALBERT's MLM decoder always reuses the word table")
    out: dict[str, torch.Tensor] = {}
    unknown: list[str] = []
    for key, tensor in sd.items():
        rel = key[len(prefix):] if prefix and key.startswith(prefix) else key
        if rel.startswith(_DROPPED) or key.startswith(_DROPPED):
            continue
        new = _rename(rel)
        if new is None:
            unknown.append(key)
        else:
            out[new] = tensor
    if unknown:
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise AlbertlmError(f"{source}: key {unknown[0]}{more} is not part of a BERT encoder albertlm can import")
    H = config.hidden_size
    dtype = next((t.dtype for t in out.values() if t.is_floating_point()), torch.float32)
    out["albert.encoder.embedding_hidden_mapping_in.weight"] = torch.eye(H, dtype=dtype)  # E == H: BERT has none
    out["albert.encoder.embedding_hidden_mapping_in.bias"] = torch.zeros(H, dtype=dtype)
    return out


def _rename(rel: str) -> str | None:
    """One BERT name (without `bert.`) -> transformers' ALBERT name, or None if the table lacks it."""
    if rel.startswith("embeddings."):
        return "albert." + rel
    if rel.startswith("pooler.dense."):
        return "albert.pooler." + rel[len("pooler.dense."):]
    match = _LAYER.fullmatch(rel)
    if match:
        index, rest = match.groups()
        for theirs, ours in _LAYER_PARTS.items():
            if rest.startswith(theirs) and rest[len(theirs):] in ("weight", "bias"):
                return f"albert.encoder.albert_layer_groups.{index}.albert_layers.0.{ours}{rest[len(theirs):]}"
        return None
    for theirs, ours in _HEADS.items():
        if rel == theirs or (theirs.endswith(".") and rel.startswith(theirs) and rel[len(theirs):] in ("weight", "bias")):
            return ours + rel[len(theirs):] if theirs.endswith(".") else ours
    return None


_ALBERT_LAYER = re.compile(r"encoder\.albert_layer_groups\.(\d+)\.albert_layers\.0\.(.+)")
_NOT_FROM_BERT = ("encoder.embedding_hidden_mapping_in.", "sop_classifier.")
"""transformers' ALBERT tensors no BERT tensor becomes: the identity projection (added) and the SOP head."""


def bert_key(albert_key: str, prefix: str = "bert.") -> str | None:
    """The BERT name an ALBERT tensor is read from: the table read backwards, for messages that name the
    user's file. None for the tensors BERT has none of (`_NOT_FROM_BERT`).

    Args:
        albert_key: a transformers ALBERT name, under `albert.` or bare (an AlbertModel's).
        prefix: the BERT file's backbone prefix: "bert." (any head class) or "" (a bare BertModel).
    """
    rel = albert_key.removeprefix("albert.")
    if rel.startswith(_NOT_FROM_BERT) or albert_key.startswith(_NOT_FROM_BERT):
        return None
    if rel.startswith("embeddings."):
        return prefix + rel
    if rel.startswith("pooler."):
        return f"{prefix}pooler.dense.{rel[len('pooler.'):]}"
    match = _ALBERT_LAYER.fullmatch(rel)
    if match:
        index, rest = match.groups()
        for theirs, ours in _LAYER_PARTS.items():
            if rest.startswith(ours):
                return f"{prefix}encoder.layer.{index}.{theirs}{rest[len(ours):]}"
        return None
    for theirs, ours in _HEADS.items():
        if albert_key == ours or (ours.endswith(".") and albert_key.startswith(ours)):
            return theirs + albert_key[len(ours):]
    return None


def check_bert_weights(bert_state_dict: Mapping[str, torch.Tensor], config: AlbertConfig, arch: str,
                       pooler: bool, source: str = "state dict") -> None:
    """Every tensor an import as `arch` reads is in the BERT file, with the shape the config implies.

    Checked before anything is renamed, so that a refusal names the key as the file has it (old
    files' `LayerNorm.gamma` included) rather than its ALBERT name.

    Args:
        bert_state_dict: {BERT name: tensor}.
        config: the ALBERT config `albert_config_from_bert` gave.
        arch: the ALBERT class the import writes (a key of `interop.hf.ARCHITECTURES`).
        pooler: whether the pooler is read (False: the class has none, or the file has none and the
            import says the pooler starts untrained).
        source: the file name the messages cite.
    Raises:
        AlbertlmError: one line naming the file and the first key missing or mis-shaped.
    """
    from albertlm.interop.hf import tensor_shapes

    names = {_legacy_norm_name(k): k for k in bert_state_dict}
    prefix = "bert." if any(k.startswith("bert.") for k in names) else ""
    for albert_name, shape in tensor_shapes(config, arch, pooler).items():
        name = bert_key(albert_name, prefix)
        if name == "cls.predictions.bias" and name not in names:
            name = "cls.predictions.decoder.bias"  # older files keep the MLM bias under the decoder only
        if name is None:
            continue
        if name not in names:
            raise AlbertlmError(f"{source}: missing key {name}; an import as {arch} (config.json's "
                                f"architectures) needs it")
        found = tuple(bert_state_dict[names[name]].shape)
        if found != tuple(shape):
            note = shape_note(shape, found).replace("embedding_size=", "hidden_size=")  # E is H here
            raise AlbertlmError(f"{source}: {names[name]} has shape {list(found)}, config.json implies "
                                f"{list(shape)}{note.replace('embedding_width=', 'hidden_size=')}")
