"""Whole checkpoints between formats: TF1 (Google's layout, albert_zh's, TF-Hub) and Hugging Face directories.

`convert(src, dst, to="hf")` detects what SRC is (`detect_source`), loads it into our
AlbertForPreTraining through the key tables of `interop/tf.py` or `interop/hf.py`, and writes a
complete directory: config.json + model.safetensors + the tokenizer files (`to="hf"`), or a TF1
checkpoint in Google's layout + albert_config.json + the vocabulary (`to="tf"`). The directory is
built in a temporary sibling and renamed into place; nothing but that temporary is ever deleted.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from albertlm.config import AlbertConfig
from albertlm.errors import AlbertlmError
from albertlm.interop import tf as tfmap
from albertlm.interop.hf import CONFIG_NAME, PYTORCH_NAME, SAFETENSORS_INDEX_NAME, SAFETENSORS_NAME
from albertlm.model import AlbertForPreTraining
from albertlm.tokenizer import CONFIG_FILE, MODEL_FILE, VOCAB_FILE
from albertlm.utils import atomic_write_text

TF_PREFIX_NAME = "model.ckpt"
"""Prefix of the TF1 checkpoint `to="tf"` writes."""
TF_CONFIG_NAME = "albert_config.json"
SPIECE_NAMES = (MODEL_FILE, "30k-clean.model")
"""SentencePiece vocabularies: ours / transformers', and the name in Google's releases."""
WORDPIECE_NAMES = (VOCAB_FILE, "vocab_chinese.txt")
"""WordPiece vocabularies: BERT's and albert_zh's name, and Google's Chinese release."""


@dataclasses.dataclass
class Source:
    """What `detect_source` found."""

    kind: str
    """"hf" (a transformers directory) or "tf" (a TF1 checkpoint, TF-Hub export included)."""
    path: Path
    """The HF directory, or the TF checkpoint prefix."""
    folders: tuple[Path, ...]
    """Where to look for the config file and the vocabulary, nearest first."""


@dataclasses.dataclass
class ConvertSummary:
    """What `convert` read and wrote."""

    source: str
    """The source's kind and layout, e.g. "TF1 checkpoint, Google's layout (TF-Hub module/)"."""
    architecture: str
    """The network, e.g. "AlbertForPreTraining L=12 H=768 E=128 V=30000, sharing all"."""
    parameters: int
    """Distinct parameters of the converted model."""
    tensors: int
    """Tensors read from the source (TF variables, or our parameters for an HF source)."""
    skipped: dict[str, int]
    """Source variables left out, by kind (adam_m, adam_v, global_step)."""
    dst: Path
    """The directory written."""
    files: list[str]
    """Names of the files written in it."""
    notes: list[str] = dataclasses.field(default_factory=list)
    """Anything the user must know (filled parameters, a layout transformers refuses, no vocabulary)."""

    def lines(self) -> list[str]:
        """Human-readable report, one fact a line."""
        skipped = ", ".join(f"{n} {k}" for k, n in sorted(self.skipped.items())) or "none"
        out = [f"source:       {self.source}", f"architecture: {self.architecture}",
               f"parameters:   {self.parameters:,}", f"tensors read: {self.tensors}",
               f"skipped:      {skipped}" + (" (optimizer slots and step counter: not part of the model)"
                                             if self.skipped else ""),
               f"wrote:        {self.dst} ({', '.join(self.files)})"]
        return out + [f"note:         {n}" for n in self.notes]


# ---------------------------------------------------------------------------- finding things
def detect_source(src: str | os.PathLike) -> Source:
    """Tell a Hugging Face directory from a TF1 checkpoint.

    Args:
        src: an HF directory (config.json + weights); a TF checkpoint prefix, its .index, a
            directory with a `checkpoint` state file or a single .index; or a TF-Hub export
            (variables in `variables/variables.index`).
    Returns:
        Source.
    """
    from albertlm.interop.tf_bundle import TFCheckpointError, resolve_checkpoint

    path = Path(src)
    if path.is_dir() and (path / CONFIG_NAME).is_file() and any(
            (path / n).is_file() for n in (SAFETENSORS_NAME, SAFETENSORS_INDEX_NAME, PYTORCH_NAME)):
        return Source("hf", path, (path,))
    if path.is_dir() and (path / "variables" / "variables.index").is_file():  # TF-Hub / SavedModel
        return Source("tf", path / "variables" / "variables", (path, path / "assets"))
    try:
        prefix = resolve_checkpoint(path)
    except TFCheckpointError as exc:
        raise AlbertlmError(f"{path}: neither a Hugging Face directory ({CONFIG_NAME} + {SAFETENSORS_NAME}) "
                            f"nor a TF checkpoint ({exc})") from None
    return Source("tf", prefix, (prefix.parent, prefix.parent / "assets"))


def _find(folders: tuple[Path, ...], names: tuple[str, ...]) -> Path | None:
    for folder in folders:
        for name in names:
            if (folder / name).is_file():
                return folder / name
    return None


def find_tf_config(folders: tuple[Path, ...]) -> Path:
    """albert_config.json, or the one albert_config*.json (albert_zh's names), nearest folder first."""
    for folder in folders:
        if (folder / TF_CONFIG_NAME).is_file():
            return folder / TF_CONFIG_NAME
        found = sorted(folder.glob("albert_config*.json")) if folder.is_dir() else []
        if len(found) == 1:
            return found[0]
        if found:
            raise AlbertlmError(f"{folder}: several config files ({', '.join(p.name for p in found)}); "
                                "pass the one that fits with --config")
    raise AlbertlmError(f"{folders[0]}: no {TF_CONFIG_NAME} beside the checkpoint (TF-Hub exports carry "
                        "none); pass --config")


def find_vocabulary(folders: tuple[Path, ...]) -> Path | None:
    """The SentencePiece model or WordPiece vocab.txt beside a checkpoint, or None."""
    return _find(folders, SPIECE_NAMES) or _find(folders, WORDPIECE_NAMES)


# ---------------------------------------------------------------------------- loading
class _LazyTensors(Mapping):
    """A TF checkpoint as a mapping that reads a tensor only when asked (optimizer slots never are)."""

    def __init__(self, reader):
        self.reader = reader
        self._names = list(reader.names())

    def __getitem__(self, name: str) -> np.ndarray:
        return self.reader.read(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def load_tf(prefix: str | os.PathLike, config: AlbertConfig | str | os.PathLike | None = None,
            folders: tuple[Path, ...] | None = None) -> tuple[AlbertForPreTraining, tfmap.TfSummary]:
    """Build our AlbertForPreTraining from a TF1 checkpoint in Google's or albert_zh's layout.

    Args:
        prefix: the checkpoint prefix (see `interop.tf_bundle.resolve_checkpoint`).
        config: an AlbertConfig, a TF config file to read, or None to find one in `folders`.
        folders: where to look for the config file; defaults to the prefix's folder.
    Returns:
        (the model in eval mode, TfSummary).
    """
    from albertlm.interop.tf_bundle import BundleReader

    prefix = Path(prefix)
    tensors = _LazyTensors(BundleReader(prefix))
    names, _, _ = tfmap.split_names(list(tensors))
    layout = tfmap.detect_layout(names, str(prefix))
    if not isinstance(config, AlbertConfig):
        path = Path(config) if config is not None else find_tf_config(folders or (prefix.parent,))
        config = tfmap.read_tf_config(path, layout)
    state_dict, summary = tfmap.read_state_dict(tensors, config, source=f"{prefix}.index")
    model = AlbertForPreTraining(config)
    model.load_state_dict(state_dict, strict=True)
    return model.eval(), summary


def _load_hf(path: Path) -> tuple[AlbertForPreTraining, list[str]]:
    """An HF directory's pretraining model, with the loader's warnings (a missing SOP head) as notes.

    A directory without the MLM head (a fine-tuned or bare model) is refused: Google's TF layout
    holds pretraining models, and random heads written as if trained would be a silent wrong result.
    """
    from albertlm.interop.hf import from_hf_state_dict, read_hf_weights

    config = AlbertConfig.from_json_file(path / CONFIG_NAME)
    hf_sd, source = read_hf_weights(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = from_hf_state_dict(hf_sd, config, "AlbertForPreTraining", source=source)
    if "mlm.dense.weight" not in ours:
        raise AlbertlmError(f"{source}: no MLM head (predictions.*), so not a pretraining model; Google's TF "
                            "layout holds pretraining models only")
    model = AlbertForPreTraining(config)
    model.load_state_dict(ours, strict=False)
    return model.eval(), [str(w.message) for w in caught]


# ---------------------------------------------------------------------------- writing
def write_tf(model: AlbertForPreTraining, dst: str | os.PathLike, vocabulary: Path | None = None) -> list[str]:
    """Write a TF1 checkpoint in Google's layout, albert_config.json and the vocabulary into `dst`.

    Args:
        model: our pretraining model (sharing all/none, Google's embedding layout).
        dst: an existing directory.
        vocabulary: spiece.model or vocab.txt to copy beside it, if any.
    Returns:
        The names of the files written.
    """
    from albertlm.interop.tf_bundle import write_checkpoint

    dst = Path(dst)
    variables = tfmap.write_state_dict(model.state_dict(), model.config)
    config_json = json.dumps(tfmap.tf_config_dict(model.config), indent=2) + "\n"
    write_checkpoint(dst / TF_PREFIX_NAME, variables)
    atomic_write_text(dst / TF_CONFIG_NAME, config_json)
    if vocabulary is not None:
        shutil.copyfile(vocabulary, dst / (MODEL_FILE if vocabulary.suffix == ".model" else VOCAB_FILE))
        options = vocabulary.parent / CONFIG_FILE
        if options.is_file():  # keeps the tokenizer's settings (lower-casing, the digit-comma rule) for the way back
            shutil.copyfile(options, dst / CONFIG_FILE)
    return sorted(p.name for p in dst.iterdir() if p.is_file())


def hf_tokenizer(vocabulary: Path, google: bool = False):
    """The tokenizer a TF checkpoint's vocabulary file stands for, ready to `save` as transformers reads it.

    The source's own tokenizer_config.json, when it sits beside a `spiece.model` or `vocab.txt`
    (an albertlm or Hugging Face directory, or a TF directory `convert --to tf` wrote), keeps its
    settings: lower-casing, accents, renamed special tokens, Chinese mode. Without one,
    SentencePiece takes ALBERT's defaults and WordPiece BertTokenizer's (lower-cased, as both Chinese
    releases were trained). Google's digit-comma rule (`albertlm.split_digit_comma`) is turned on
    for Google's checkpoints (`google`), which were trained with it, unless the source's
    tokenizer_config.json says otherwise.
    """
    from albertlm.tokenizer import Tokenizer
    from albertlm.tokenizer.base import read_config
    from albertlm.tokenizer.wordpiece import WordPieceTokenizer

    spiece = vocabulary.suffix == ".model"
    beside = vocabulary.parent / CONFIG_FILE
    own_name = vocabulary.name == (MODEL_FILE if spiece else VOCAB_FILE)
    source = vocabulary.parent if own_name and beside.is_file() else vocabulary
    if not spiece:
        return WordPieceTokenizer.load(source)
    stated = source == vocabulary.parent and "split_digit_comma" in read_config(beside)[1]
    return Tokenizer.load(source, **({} if stated else {"split_digit_comma": google}))


# ---------------------------------------------------------------------------- the conversion
def convert(src: str | os.PathLike, dst: str | os.PathLike, to: str = "hf", *, force: bool = False,
            config: str | os.PathLike | None = None) -> ConvertSummary:
    """Convert one checkpoint into a complete directory of the other format.

    Args:
        src: see `detect_source`.
        dst: the directory to write; must not exist or be empty unless `force` (then files of the
            same names are replaced and others are left alone).
        to: "hf" (config.json, model.safetensors, tokenizer files) or "tf" (Google's TF1 layout).
        force: write into a non-empty `dst`.
        config: a TF config file for a TF source that has none beside it (TF-Hub exports).
    Returns:
        ConvertSummary.
    """
    if to not in ("hf", "tf"):
        raise AlbertlmError(f"--to must be hf or tf, got {to!r}")
    source = detect_source(src)
    dst = Path(dst)
    if dst.resolve() in (Path(src).resolve(), source.folders[0].resolve()):
        raise AlbertlmError(f"{dst}: is the source's own directory; choose another destination")
    if dst.exists() and (not dst.is_dir() or (any(dst.iterdir()) and not force)):
        raise AlbertlmError(f"{dst}: exists and is not an empty directory (pass --force to write into it)")
    if source.kind == "hf":
        if to == "hf":
            raise AlbertlmError(f"{src}: already a Hugging Face directory; did you mean --to tf?")
        model, notes = _load_hf(source.path)
        summary = ConvertSummary("Hugging Face directory", "", 0, len(model.state_dict()), {}, dst, [], notes)
    else:
        model, tf_summary = load_tf(source.path, config, source.folders)
        where = f"TF1 checkpoint, {'Google' if tf_summary.layout == 'google' else 'albert_zh'}'s layout"
        notes = [f"{name} has no TF variable (E == H): set to the identity, as TF computes"
                 for name in tf_summary.filled]
        summary = ConvertSummary(where + (" (TF-Hub, module/ stripped)" if tf_summary.hub else ""), "", 0,
                                 tf_summary.tensors, dict(tf_summary.skipped), dst, [], notes)
    summary.architecture = describe(model.config)
    summary.parameters = model.num_parameters()
    vocabulary = find_vocabulary(source.folders)
    with _staging(dst) as tmp:
        if to == "tf":
            summary.files = write_tf(model, tmp, vocabulary)
        else:
            google = source.kind == "tf" and not model.config.projects_words
            summary.files = _write_hf(model, tmp, vocabulary, summary.notes, google)
    if vocabulary is None:
        summary.notes.append(f"no vocabulary ({', '.join(SPIECE_NAMES + WORDPIECE_NAMES)}) found beside "
                             "the source: add the tokenizer files yourself")
    return summary


def _write_hf(model: AlbertForPreTraining, tmp: Path, vocabulary: Path | None, notes: list[str],
              google: bool) -> list[str]:
    from albertlm.interop.hf import transformers_can_load

    tok = hf_tokenizer(vocabulary, google) if vocabulary is not None else None
    if tok is not None and vocabulary.suffix != ".model":  # config.json's pad/bos/eos from the vocabulary
        if tok.vocab_size != model.config.vocab_size:
            raise AlbertlmError(f"{vocabulary}: {tok.vocab_size} lines but the model has vocab_size "
                                f"{model.config.vocab_size}")
        ids = tok.special_ids
        model.config = model.config.replace(pad_token_id=ids.pad, bos_token_id=ids.cls, eos_token_id=ids.sep)
    model.save_pretrained(tmp)
    if tok is not None:
        tok.save(tmp)
        if getattr(tok, "split_digit_comma", False):
            notes.append("Google's digit-comma rule is on (albertlm.split_digit_comma in tokenizer_config.json): "
                         "albertlm splits '7,' as Google's tokenizer did; transformers' AlbertTokenizer does not")
    if not transformers_can_load(model.config):
        notes.append(f"transformers cannot express embedding_layout={model.config.embedding_layout!r}: "
                     "load this directory with albertlm (AlbertForPreTraining.from_pretrained, "
                     "albertlm finetune --model)")
    return sorted(p.name for p in tmp.iterdir())


def describe(config: AlbertConfig) -> str:
    """One line naming the network's shape."""
    layout = "" if config.embedding_layout == "albert" else f", embedding_layout {config.embedding_layout}"
    return (f"AlbertForPreTraining L={config.num_hidden_layers} H={config.hidden_size} "
            f"E={config.embedding_size} V={config.vocab_size} heads={config.num_attention_heads} "
            f"I={config.intermediate_size}, sharing {config.sharing} ({config.num_hidden_groups} group(s) x "
            f"{config.inner_group_num} inner){layout}")


class _staging:
    """Build a directory in a temporary sibling of `dst`, then move it into place.

    A fresh `dst` is one rename; an existing one (empty, or non-empty with --force) receives each
    file by rename. On any error only the temporary directory is removed.
    """

    def __init__(self, dst: Path):
        self.dst = dst

    def __enter__(self) -> Path:
        self.dst.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.dst.name}.", suffix=".tmp", dir=self.dst.parent))
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                if not self.dst.exists():
                    os.replace(self.tmp, self.dst)
                    return
                for item in self.tmp.iterdir():
                    if (self.dst / item.name).is_dir():
                        raise AlbertlmError(f"{self.dst / item.name}: a directory where a file is to be written")
                    os.replace(item, self.dst / item.name)
        finally:
            if self.tmp.exists():
                shutil.rmtree(self.tmp)
