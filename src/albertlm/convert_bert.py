"""A BERT read as our ALBERT, for `albertlm convert --from bert` (written out by convert.py).

SRC is a transformers BERT directory (BertModel or a BertFor* class: config.json with model_type
"bert", model.safetensors or a legacy pytorch_model.bin, vocab.txt and/or tokenizer.json), Chinese
BERT-wwm and RoBERTa-wwm releases included (they are model_type "bert" with a CJK vocab.txt), or a
sentence-transformers directory whose Transformer module is such a BERT (at "" or a subfolder).

`read_bert` checks everything before convert.py writes anything: the config through
`interop.bert.albert_config_from_bert` (E = H, sharing none), every tensor the ALBERT class needs
against the BERT file (`interop.bert.check_bert_weights`, refusals naming the BERT key), the
renaming (`interop.bert.bert_to_albert_state_dict`) and `interop.hf.from_hf_state_dict`'s shape
checks, then loads the weights into our model class, so that `save_pretrained` writes them through
the same key table as every ALBERT directory. The tokenizer is the one transformers' BertTokenizer
builds: the entries of vocab.txt, or of the WordPiece tokenizer.json transformers 5 saves instead,
with tokenizer_config.json's settings (BertTokenizer rebuilds tokenizer.json's normaliser from them,
do_lower_case true when they say nothing); it is written as vocab.txt + tokenizer_config.json, which
every transformers release reads alike. A vocab.txt and a tokenizer.json with different entries are
refused (transformers 5 reads the one, older releases the other).

Carried: every encoder tensor, the pooler, the MLM head (its decoder is the word table in both),
classification, token-classification, span-QA and multiple-choice heads with their labels, and a
sentence-transformers directory's pooling, Normalize, max_seq_length, do_lower_case and prompts.
Not carried, each said in the conversion's notes: the next-sentence head (ALBERT's SOP head starts
untrained), the pooler of a BertForMaskedLM (it has none). Refused in one line: see
`interop.bert` (other model types, relative positions, decoders, an untied MLM decoder), missing or
mis-shaped tensors, and sentence-transformers modules other than Transformer, Pooling, Normalize.
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from pathlib import Path

from torch import nn

from albertlm.config import AlbertConfig, read_json_file
from albertlm.errors import AlbertlmError
from albertlm.heads import HEADS
from albertlm.interop.bert import (albert_architecture, albert_config_from_bert, bert_to_albert_state_dict,
                                   check_bert_weights, is_bert_config)
from albertlm.interop.hf import CONFIG_NAME, from_hf_state_dict, read_hf_weights
from albertlm.model import AlbertForPreTraining, AlbertModel
from albertlm.st_directory import (MODULES_FILE, NORMALIZE_DIR, ST_CONFIG_FILE, SentenceTransformersLayout,
                                   export_length, is_sentence_transformers, read_sentence_transformers,
                                   write_modules)

CLASSES: dict[str, type[nn.Module]] = {"AlbertModel": AlbertModel, "AlbertForPreTraining": AlbertForPreTraining,
                                       **HEADS}
"""The ALBERT class an import builds, by the name `interop.bert.albert_architecture` gives."""


@dataclasses.dataclass
class BertImport:
    """What `read_bert` read: our model with the BERT's weights, its tokenizer, and what to tell the user."""

    model: nn.Module
    """Our model class of `arch`, in eval mode, every tensor the BERT file holds for it loaded."""
    arch: str
    """The ALBERT class written (config.json's architectures)."""
    tokenizer: object | None
    """The vocabulary (WordPiece or tokenizer.json), checked against vocab_size; None when SRC has none."""
    tensors: int
    """Tensors in the BERT file."""
    description: str
    """The source, e.g. "BERT (transformers BertForSequenceClassification, model.safetensors)"."""
    notes: list[str]
    """What was not carried, or chosen."""
    layout: SentenceTransformersLayout | None = None
    """A sentence-transformers SRC's modules; None for a plain transformers directory."""
    settings: dict = dataclasses.field(default_factory=dict)
    """A sentence-transformers SRC's config_sentence_transformers.json (prompts, similarity function)."""

    def write_modules(self, out: Path) -> None:
        """A sentence-transformers SRC's module files beside the model written in `out` (nothing otherwise)."""
        if self.layout is None:
            return
        config = self.model.config
        write_modules(out, config.hidden_size, self.layout.pooling, self.layout.normalize,
                      export_length(config, self.layout.max_seq_length), do_lower_case=self.layout.do_lower_case,
                      settings=self.settings)


def _read_bert_config(path: Path) -> AlbertConfig:
    data = read_json_file(path)
    if not isinstance(data, dict):
        raise AlbertlmError(f"{path}: expected a JSON object")
    return albert_config_from_bert(data, str(path))


def _transformer_dir(path: Path) -> Path:
    """SRC, or where a sentence-transformers SRC keeps its Transformer (modules.json's Transformer entry;
    not checked here: `read_sentence_transformers` does that)."""
    if not is_sentence_transformers(path):
        return path
    try:
        modules = json.loads((path / MODULES_FILE).read_text(encoding="utf-8"))
        entry = next(m for m in modules if str(m.get("type", "")).endswith(".Transformer"))
        return path / str(entry.get("path", ""))
    except (OSError, ValueError, TypeError, AttributeError, StopIteration):
        return path


def is_bert_source(src: str | Path) -> bool:
    """Whether SRC is a BERT to import: its config.json (or its sentence-transformers Transformer's) says
    model_type "bert". Anything unreadable is no BERT here; the other readers say what is wrong with it."""
    config_file = _transformer_dir(Path(src)) / CONFIG_NAME
    try:
        data = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and is_bert_config(data)


def read_bert(src: str | Path) -> BertImport:
    """Read a BERT directory (transformers or sentence-transformers) as our ALBERT model and its tokenizer.

    Args:
        src: the directory (see the module docstring).
    Returns:
        BertImport; nothing is written.
    Raises:
        AlbertlmError: one line naming the file (and the key or field) for anything not imported.
    """
    path = Path(src)
    if not path.is_dir():
        raise AlbertlmError(f"{path}: not a directory; --from bert reads a transformers BERT directory "
                            "(config.json + weights) or a sentence-transformers directory of one")
    layout = read_sentence_transformers(path, _read_bert_config) if is_sentence_transformers(path) else None
    model_dir = layout.model_dir if layout is not None else path
    config_file = model_dir / CONFIG_NAME
    if not config_file.is_file():
        raise AlbertlmError(f"{path}: no {CONFIG_NAME}; --from bert reads a transformers BERT directory "
                            "(config.json + weights) or a sentence-transformers directory of one")
    data = read_json_file(config_file)
    if not isinstance(data, dict):
        raise AlbertlmError(f"{config_file}: expected a JSON object")
    config = albert_config_from_bert(data, str(config_file))
    weights, source = read_hf_weights(model_dir)
    arch = "AlbertModel" if layout is not None else albert_architecture(data, weights)  # ST runs the bare model
    notes = [f"a BERT is an ALBERT with E = H = {config.hidden_size}, sharing none ({config.num_hidden_layers} "
             "groups of one layer) and the identity as its E->H projection (BERT has none)"]
    if not data.get("architectures") and layout is None:
        notes.append(f"{config_file} names no architectures: read as {arch}, from the heads in the weights")
    model = _load(weights, data, config, arch, source, config_file, notes)
    tokenizer = _tokenizer(model_dir, config, config_file, notes)
    where = Path(source).name
    if layout is None:
        bert_class = next(iter(data.get("architectures") or []), "BERT")
        description = f"BERT (transformers {bert_class}, {where})"
    else:
        module = model_dir.relative_to(path).as_posix() if model_dir != path else ""
        description = f"sentence-transformers directory, BERT Transformer at {module!r} ({where})"
        notes.append(f"sentence-transformers: pooling {layout.pooling}, {'' if layout.normalize else 'no '}Normalize, "
                     f"max_seq_length {export_length(config, layout.max_seq_length)} carried")
        if layout.normalize and not (path / NORMALIZE_DIR).is_dir():
            notes.append(f"{path / MODULES_FILE} lists {NORMALIZE_DIR}, which has no folder (sentence-transformers "
                         "needs none): written with one")
    settings = read_json_file(path / ST_CONFIG_FILE) if layout is not None and (path / ST_CONFIG_FILE).is_file() else {}
    return BertImport(model.eval(), arch, tokenizer, len(weights), description, notes, layout,
                      settings if isinstance(settings, dict) else {})


def _load(weights: dict, data: dict, config: AlbertConfig, arch: str, source: str, config_file: Path,
          notes: list[str]) -> nn.Module:
    """Our `arch` with the BERT's tensors: every one checked, renamed, then loaded through the ALBERT key table."""
    prefix = "bert." if any(k.startswith("bert.") for k in weights) else ""
    file_pooler = f"{prefix}pooler.dense.weight" in weights
    model = AlbertModel(config, add_pooling_layer=file_pooler) if arch == "AlbertModel" else CLASSES[arch](config)
    class_pooler = any(k.endswith("pooler.weight") for k in model.state_dict())
    pooler = class_pooler and (file_pooler or arch != "AlbertForPreTraining")  # a head with a pooler needs it
    if arch == "AlbertForPreTraining":
        if data.get("tie_word_embeddings") is False and "cls.predictions.decoder.weight" not in weights:
            raise AlbertlmError(f"{config_file}: tie_word_embeddings is false and {source} holds no "
                                "cls.predictions.decoder.weight; ALBERT's MLM decoder is always the word table")
        notes.append("BERT's next-sentence head is not ALBERT's sentence-order head: the SOP head starts untrained")
        if not file_pooler:
            notes.append(f"{source} has no pooler (a BertForMaskedLM has none): the pooler starts untrained too")
    elif any(k.startswith("cls.seq_relationship.") for k in weights):
        notes.append("the next-sentence head (cls.seq_relationship) is not carried: ALBERT has none")
    check_bert_weights(weights, config, arch, pooler, source)
    renamed = bert_to_albert_state_dict(weights, config, source)
    with warnings.catch_warnings():  # the SOP head (and a pooler the file lacks): in the notes above
        warnings.simplefilter("ignore")
        ours = from_hf_state_dict(renamed, config, arch, pooler=pooler, strict=True, source=source)
    result = model.load_state_dict(ours, strict=False)
    untrained = ("sop.",) + (() if pooler or not class_pooler else ("albert.pooler.",))
    left = [k for k in result.missing_keys if not k.startswith(untrained)]
    if left or result.unexpected_keys:  # the tables and the model disagree: a bug here, not in the file
        raise AlbertlmError(f"{source}: the import leaves {(left or result.unexpected_keys)[0]} unset")
    return model


def _tokenizer(model_dir: Path, config: AlbertConfig, config_file: Path, notes: list[str]):
    """The BERT's tokenizer as transformers' BertTokenizer builds it: the entries of vocab.txt, or of a
    WordPiece tokenizer.json, with tokenizer_config.json's settings (`WordPieceTokenizer.load`,
    `tokenizer_json.bert_wordpiece`); written as vocab.txt, which every transformers release reads alike. A
    tokenizer.json that is not WordPiece, or a tokenizer class other than BERT's, is kept as it is."""
    from albertlm.tokenizer import WordPieceTokenizer, check_matches_model
    from albertlm.tokenizer.base import read_config
    from albertlm.tokenizer.tokenizer_json import JSON_FILE, TokenizerJsonVocabulary, bert_wordpiece
    from albertlm.tokenizer.wordpiece import VOCAB_FILE

    options = model_dir / "tokenizer_config.json"
    named = str(read_config(options)[0].get("tokenizer_class") or "") if options.is_file() else ""
    json_file, vocab_file = model_dir / JSON_FILE, model_dir / VOCAB_FILE
    wordpiece = _is_wordpiece(json_file)
    if vocab_file.is_file():
        tokenizer = WordPieceTokenizer.load(model_dir)
        if wordpiece and not _same_entries(tokenizer, bert_wordpiece(model_dir)):
            raise AlbertlmError(f"{vocab_file} and {json_file} hold different entries (transformers 5 reads the "
                                "second, older releases the first): remove the one that is not the model's")
    elif wordpiece and (not named or named.startswith("Bert")):
        tokenizer = bert_wordpiece(model_dir)
        notes.append(f"{JSON_FILE} read as BertTokenizer reads it (tokenizer_config.json's settings over the "
                     f"file's normaliser): written as {VOCAB_FILE}")
    elif json_file.is_file():
        tokenizer = TokenizerJsonVocabulary.load(model_dir)
    else:
        return None
    source = vocab_file if vocab_file.is_file() else json_file
    return check_matches_model(tokenizer, config.vocab_size, source, config_file)


def _is_wordpiece(json_file: Path) -> bool:
    """Whether a tokenizer.json holds a WordPiece model (an unreadable one is left to its reader's message)."""
    try:
        return (json.loads(json_file.read_text(encoding="utf-8")).get("model") or {}).get("type") == "WordPiece"
    except (OSError, ValueError, AttributeError):
        return False


def _same_entries(vocab_txt, tokenizer_json) -> bool:
    """Whether two WordPiece vocabularies give every piece the same id (an id a repeated line left unused
    is a GAP_ENTRY on the tokenizer.json side, and the repeated piece's earlier line on the other)."""
    from albertlm.tokenizer.tokenizer_json import GAP_ENTRY

    gap = re.compile(re.escape(GAP_ENTRY).replace(r"\{\}", r"\d+"))
    pieces = sorted({*vocab_txt.convert_ids_to_tokens(range(vocab_txt.vocab_size)),
                     *(p for p in tokenizer_json.convert_ids_to_tokens(range(tokenizer_json.vocab_size))
                       if not gap.fullmatch(p))})
    return (vocab_txt.vocab_size == tokenizer_json.vocab_size
            and vocab_txt.convert_tokens_to_ids(pieces) == tokenizer_json.convert_tokens_to_ids(pieces))
