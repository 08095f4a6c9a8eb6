"""Whole checkpoints between formats: TF1 (Google's layout, albert_zh's, TF-Hub) and Hugging Face directories,
and BERT imported as ALBERT.

`convert(src, dst, to="hf")` detects what SRC is (`detect_source`), loads it into our
AlbertForPreTraining through the key tables of `interop/tf.py` or `interop/hf.py`, and writes a
complete directory: config.json + model.safetensors + the tokenizer files (`to="hf"`), or a TF1
checkpoint in Google's layout + albert_config.json + the vocabulary (`to="tf"`). A BERT (a
transformers directory, or a sentence-transformers one of a BERT; `source_format="bert"`, or found
by its model_type) is read by `convert_bert.read_bert` and written as an ALBERT directory of the
class it maps to (a sentence-transformers one for a sentence-transformers SRC). DST is an
`outputs.OutputDir` claimed by "convert": a new or empty DST is built inside itself and filled in
place; an earlier conversion (`force`) is replaced as a whole by one built in a temporary sibling
(`utils.replace_directory`); a directory holding anything convert does not write is refused.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
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
from albertlm.outputs import MODEL_FILES, OUT_MARKER, OutputDir
from albertlm.rundir import LOCK, OWNER, RunLock
from albertlm.st_directory import MODULES_FILE, NORMALIZE_DIR, POOLING_DIR, ST_CONFIG_FILE, TRANSFORMER_CONFIG_FILE
from albertlm.tokenizer import CONFIG_FILE, MODEL_FILE, VOCAB_FILE
from albertlm.utils import (atomic_write_bytes, atomic_write_text, fsync_directory, os_error_naming,
                            replace_directory)

TF_PREFIX_NAME = "model.ckpt"
"""Prefix of the TF1 checkpoint `to="tf"` writes."""
TF_CONFIG_NAME = "albert_config.json"
SPIECE_NAMES = (MODEL_FILE, "30k-clean.model")
"""SentencePiece vocabularies: ours / transformers', and the name in Google's releases."""
WORDPIECE_NAMES = (VOCAB_FILE, "vocab_chinese.txt")
"""WordPiece vocabularies: BERT's and albert_zh's name, and Google's Chinese release."""
STAGING_PREFIX = ".albertlm-convert."
"""The directory a new or empty DST's conversion is built in, inside DST (a mount point's parent
may be another file system, or not writable)."""
CONVERT_DIRS = (POOLING_DIR, NORMALIZE_DIR)
"""The directories convert writes into DST (a sentence-transformers BERT's modules)."""
CONVERT_FILES = MODEL_FILES + (f"{TF_PREFIX_NAME}.index", f"{TF_PREFIX_NAME}.data-*-of-*", "checkpoint",
                               TF_CONFIG_NAME, f"{STAGING_PREFIX}*.tmp", MODULES_FILE, ST_CONFIG_FILE,
                               TRANSFORMER_CONFIG_FILE, *CONVERT_DIRS)
"""The names convert writes into DST (any direction); a DST holding anything else is refused."""
SOURCE_FORMATS = ("auto", "tf", "hf", "bert")
"""What SRC may be said to be (`--from`): auto detects it; bert is a BERT to import as ALBERT."""
_BOOKKEEPING = {OUT_MARKER, LOCK, OWNER}


def _held(dst: Path) -> list[str]:
    """What DST holds of a conversion: its names but the marker, the lock and a staging directory."""
    return sorted(p.name for p in dst.iterdir() if p.name not in _BOOKKEEPING and not p.name.startswith(STAGING_PREFIX))


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
    """Tensors read from the source (TF variables, a BERT file's tensors, or our parameters for an HF source)."""
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


def find_vocabulary(source: Source) -> Path | None:
    """The SentencePiece model or WordPiece vocab.txt that belongs to a source, or None.

    An HF directory's is the one `tokenizer.vocabulary_kind` names (its tokenizer_config.json says
    which when it holds both). Beside a TF checkpoint, two different vocabulary files are refused,
    naming both: the layout cannot tell which is the model's (Google's layout comes with either
    kind: SentencePiece for English, WordPiece for Chinese), nor can the size (a stray file may
    have as many entries), and the wrong one gives a model whose ids mean other text with no error
    anywhere. Copies with the same bytes (spiece.model beside 30k-clean.model) are one vocabulary.
    """
    from albertlm.tokenizer.auto import KINDS, vocabulary_kind

    if source.kind == "hf":
        if not any((source.path / name).is_file() for name, _ in KINDS.values()):
            return None
        return source.path / KINDS[vocabulary_kind(source.path)][0]
    found: list[Path] = []
    for path in (folder / name for folder in source.folders for name in SPIECE_NAMES + WORDPIECE_NAMES):
        if path.is_file() and not any(_same_bytes(path, other) for other in found):
            found.append(path)
    if len(found) > 1:
        raise AlbertlmError(f"{found[0]} and {found[1]}: two different vocabularies beside the checkpoint; "
                            "remove (or move away) the one that is not the model's and convert again")
    return found[0] if found else None


def _same_bytes(a: Path, b: Path) -> bool:
    return a.stat().st_size == b.stat().st_size and a.read_bytes() == b.read_bytes()


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
        vocabulary: spiece.model or vocab.txt to copy beside it (with the tokenizer_config.json
            `hf_tokenizer` reads, if any), byte for byte.
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
        _copy(vocabulary, dst / (MODEL_FILE if vocabulary.suffix == ".model" else VOCAB_FILE))
        options = _options_file(vocabulary)
        if options is not None:  # keeps the tokenizer's settings (lower-casing, the digit-comma rule) for the way back
            _copy(options, dst / CONFIG_FILE)
    return sorted(p.name for p in dst.iterdir() if p.is_file())


def _copy(src: Path, dst: Path) -> None:
    """Copy a file through the atomic writer, whose errors name `dst` (shutil.copyfile's name the
    source, so a full disk would blame the file being read)."""
    atomic_write_bytes(dst, src.read_bytes())


def _options_file(vocabulary: Path) -> Path | None:
    """The tokenizer_config.json that goes with a vocabulary file: the one beside it, when the
    vocabulary has its own name (an albertlm or Hugging Face directory, or one `--to tf` wrote)."""
    own_name = vocabulary.name == (MODEL_FILE if vocabulary.suffix == ".model" else VOCAB_FILE)
    beside = vocabulary.parent / CONFIG_FILE
    return beside if own_name and beside.is_file() else None


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

    options = _options_file(vocabulary)
    source = vocabulary.parent if options is not None else vocabulary
    if vocabulary.suffix != ".model":
        return WordPieceTokenizer.load(source)
    stated = options is not None and "split_digit_comma" in read_config(options)[1]
    return Tokenizer.load(source, **({} if stated else {"split_digit_comma": google}))


# ---------------------------------------------------------------------------- the conversion
def convert(src: str | os.PathLike, dst: str | os.PathLike, to: str = "hf", *, force: bool = False,
            config: str | os.PathLike | None = None, source_format: str = "auto") -> ConvertSummary:
    """Convert one checkpoint into a complete directory of the other format, or import a BERT as ALBERT.

    Args:
        src: see `detect_source`, or a BERT directory (`convert_bert`).
        dst: the directory to write; new, empty, or (with `force`) an earlier conversion, which is
            replaced as a whole. A directory holding anything convert does not write is refused.
        to: "hf" (config.json, model.safetensors, tokenizer files) or "tf" (Google's TF1 layout; not
            for a BERT, which is written as a Hugging Face ALBERT directory).
        force: replace an earlier conversion at `dst`.
        config: a TF config file for a TF source that has none beside it (TF-Hub exports).
        source_format: one of SOURCE_FORMATS; "auto" reads a directory whose config.json says
            model_type "bert" as a BERT.
    Returns:
        ConvertSummary.
    """
    from albertlm.convert_bert import is_bert_source

    if to not in ("hf", "tf"):
        raise AlbertlmError(f"--to must be hf or tf, got {to!r}")
    if source_format not in SOURCE_FORMATS:
        raise AlbertlmError(f"--from must be one of {', '.join(SOURCE_FORMATS)}, got {source_format!r}")
    if source_format == "bert" or (source_format == "auto" and is_bert_source(src)):
        if config is not None:
            raise AlbertlmError(f"--config {config}: for a TF source without a config file; a BERT's is its "
                                "config.json")
        return _convert_bert(src, dst, to, force)
    source = detect_source(src)
    if source_format != "auto" and source.kind != source_format:
        kinds = {"hf": "a Hugging Face directory", "tf": "a TF1 checkpoint"}
        raise AlbertlmError(f"{src}: {kinds[source.kind]}, not {kinds[source_format]} (--from {source_format}); "
                            "leave --from out to detect it")
    out = _output_dir(dst, [("SRC", src), *(("SRC", f) for f in source.folders), ("--config", config)], force)
    dst = out.path
    if source.kind == "hf":
        if to == "hf":
            raise AlbertlmError(f"{src}: already a Hugging Face directory; did you mean --to tf?")
        model, notes = _load_hf(source.path)
        summary = ConvertSummary("Hugging Face directory", "", 0, len(model.state_dict()), {}, dst, [], notes)
        config_file = source.path / CONFIG_NAME
    else:
        model, tf_summary = load_tf(source.path, config, source.folders)
        where = f"TF1 checkpoint, {'Google' if tf_summary.layout == 'google' else 'albert_zh'}'s layout"
        notes = [f"{name} has no TF variable (E == H): set to the identity, as TF computes"
                 for name in tf_summary.filled]
        summary = ConvertSummary(where + (" (TF-Hub, module/ stripped)" if tf_summary.hub else ""), "", 0,
                                 tf_summary.tensors, dict(tf_summary.skipped), dst, [], notes)
        config_file = Path(config) if config is not None else find_tf_config(source.folders)
    summary.architecture = describe(model.config)
    summary.parameters = model.num_parameters()
    vocabulary = find_vocabulary(source)
    tok = None
    if vocabulary is not None:  # loaded before anything is written: a corrupt or foreign vocabulary is refused
        from albertlm.tokenizer import check_matches_model

        google = source.kind == "tf" and not model.config.projects_words
        tok = check_matches_model(hf_tokenizer(vocabulary, google), model.config.vocab_size, vocabulary,
                                  config_file)
    with _Staging(out) as tmp:
        if to == "tf":
            summary.files = write_tf(model, tmp, vocabulary)
        else:
            summary.files = _write_hf(model, tmp, tok, summary.notes)
    if vocabulary is None:
        summary.notes.append(f"no vocabulary ({', '.join(SPIECE_NAMES + WORDPIECE_NAMES)}) found beside "
                             "the source: add the tokenizer files yourself")
    return summary


def _convert_bert(src: str | os.PathLike, dst: str | os.PathLike, to: str, force: bool) -> ConvertSummary:
    """A BERT (`convert_bert.read_bert`) written as an ALBERT directory: DST claimed and staged as for
    any conversion, the model through save_pretrained, a sentence-transformers SRC's modules beside it."""
    from albertlm.convert_bert import read_bert

    if to != "hf":
        raise AlbertlmError(f"--to {to}: a BERT is imported as a Hugging Face ALBERT directory; convert that "
                            "directory with --to tf afterwards (a pretraining model's)")
    out = _output_dir(dst, [("SRC", src)], force)
    bert = read_bert(src)  # everything checked before DST is touched
    summary = ConvertSummary(bert.description, describe(bert.model.config, bert.arch), bert.model.num_parameters(),
                             bert.tensors, {}, out.path, [], bert.notes)
    with _Staging(out) as tmp:
        _write_hf(bert.model, tmp, bert.tokenizer, summary.notes)
        bert.write_modules(tmp)
        summary.files = sorted(p.name for p in tmp.iterdir() if p.name not in _BOOKKEEPING)
    if bert.tokenizer is None:
        summary.notes.append("no vocabulary (vocab.txt, tokenizer.json) in the source: add the tokenizer files "
                             "yourself")
    return summary


def _output_dir(dst: str | os.PathLike, inputs: list, force: bool) -> OutputDir:
    """DST checked before any work: `OutputDir`'s rules, then an earlier conversion only with `force`,
    and no directory where convert writes a file (replacing DST would delete what it holds)."""
    out = OutputDir(dst, "convert", CONVERT_FILES, flag="DST", inputs=inputs)
    held = _held(out.path) if out.path.is_dir() else []
    if held and not force:
        raise AlbertlmError(f"DST {dst}: holds an earlier conversion ({', '.join(held[:3])}"
                            f"{', ...' if len(held) > 3 else ''}); pass --force to replace it")
    if held and os.path.ismount(out.path):
        raise AlbertlmError(f"DST {dst}: a mount point holding an earlier conversion; --force replaces DST as a "
                            "whole, which cannot be done to a mount point: remove its files (convert then fills "
                            "it in place) or choose another DST")
    for name in held:
        if name not in CONVERT_DIRS and (out.path / name).is_dir() and not (out.path / name).is_symlink():
            raise AlbertlmError(f"{out.path / name}: a directory where convert writes a file (DST is replaced "
                                "as a whole); nothing was changed: move it away or choose another DST")
    return out


def _write_hf(model: AlbertForPreTraining, tmp: Path, tok, notes: list[str]) -> list[str]:
    from albertlm.interop.hf import transformers_can_load
    from albertlm.tokenizer import WordPieceTokenizer
    from albertlm.tokenizer.tokenizer_json import TokenizerJsonVocabulary

    if isinstance(tok, (WordPieceTokenizer, TokenizerJsonVocabulary)):  # config.json's pad/bos/eos from the vocabulary
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
    return sorted(p.name for p in tmp.iterdir() if p.name not in _BOOKKEEPING)


def _move_in(tmp: Path, dst: Path) -> None:
    """Move a finished conversion's files from `tmp` into `dst`, which holds none, the config file
    last (with it, the directory reads as a checkpoint), then flush `dst` and remove `tmp`."""
    for name in sorted(os.listdir(tmp), key=lambda n: (n in (CONFIG_NAME, TF_CONFIG_NAME), n)):
        os.replace(tmp / name, dst / name)
    fsync_directory(dst)
    os.rmdir(tmp)


def describe(config: AlbertConfig, arch: str = "AlbertForPreTraining") -> str:
    """One line naming the network's class and shape."""
    layout = "" if config.embedding_layout == "albert" else f", embedding_layout {config.embedding_layout}"
    return (f"{arch} L={config.num_hidden_layers} H={config.hidden_size} "
            f"E={config.embedding_size} V={config.vocab_size} heads={config.num_attention_heads} "
            f"I={config.intermediate_size}, sharing {config.sharing} ({config.num_hidden_groups} group(s) x "
            f"{config.inner_group_num} inner){layout}")


class _Staging:
    """Claim DST, build the output in a temporary directory, then put it in place.

    DST is claimed first (`OutputDir.claim`: created, marked, locked), and stays locked throughout.
    A DST that holds no earlier conversion (new, or empty) is built in a staging directory inside
    itself, then its files are moved in, config last: the user's directory stays (its inode and
    mode), and a mount point, which cannot be renamed, works. An earlier conversion (`--force`) is
    replaced as a whole: the new one is built in a temporary sibling with DST's mode and, once
    finished, the marker and a lock of its own; `utils.replace_directory` swaps it in, so DST holds
    the earlier conversion or the new one, never a mix. On any error only the temporary is
    removed, with a DST this run created (still empty); an OSError names the file's place in DST
    rather than in the temporary.
    """

    def __init__(self, out: OutputDir):
        self.out = out
        self.dst = Path(os.path.realpath(out.path))  # a link to a directory: write where it points

    def __enter__(self) -> Path:
        self.created = not os.path.lexists(self.dst)
        self.held = self.out.claim()
        try:
            for stale in self.dst.glob(f"{STAGING_PREFIX}*.tmp"):  # a killed run's: ours, and DST is locked
                if stale.is_dir() and not stale.is_symlink():
                    shutil.rmtree(stale)
            self.in_place = not _held(self.dst)
            if self.in_place:
                self.tmp = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, suffix=".tmp", dir=self.dst))
            else:
                self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.dst.name}.", suffix=".tmp", dir=self.dst.parent))
                os.chmod(self.tmp, stat.S_IMODE(self.dst.stat().st_mode))  # mkdtemp's 0700 would lock others out
        except BaseException:
            self._release()
            raise
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None and self.in_place:
                _move_in(self.tmp, self.dst)
            elif exc_type is None:
                shutil.copyfile(self.dst / OUT_MARKER, self.tmp / OUT_MARKER)
                with RunLock(self.tmp, hint="choose another DST"):
                    replace_directory(self.tmp, self.dst)
        except OSError as error:
            exc = error
        finally:
            if self.tmp.exists():
                shutil.rmtree(self.tmp)
            self._release(failed=exc is not None)
        if isinstance(exc, OSError):
            raise self._named(exc) from None

    def _release(self, failed: bool = True) -> None:
        try:  # removed while still locked: once released, a second convert may claim it
            if failed and self.created and self.dst.is_dir() and {p.name for p in self.dst.iterdir()} <= _BOOKKEEPING:
                shutil.rmtree(self.dst)  # only our marker and lock: the directory this run created
        finally:
            self.held.__exit__(None, None, None)

    def _named(self, exc: OSError) -> OSError:
        """The error with paths inside the temporary moved to DST, and DST named when it named nothing."""
        def final(name):
            if not isinstance(name, str) or not Path(name).is_relative_to(self.tmp):
                return name
            return str(self.out.path / Path(name).relative_to(self.tmp))
        return os_error_naming(exc, final(exc.filename) or self.out.path, final(exc.filename2))
