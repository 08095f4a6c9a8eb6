"""Which vocabulary a directory holds, in one place: every command loads its tokenizer here.

- `spiece.model` → the SentencePiece `Tokenizer` (spiece.py);
- `vocab.txt` → the WordPiece `WordPieceTokenizer` (wordpiece.py);
- both → tokenizer_config.json must say which: its `tokenizer_class` (AlbertTokenizer* or
  BertTokenizer*) or our `albertlm.vocabulary` field ("sentencepiece" / "wordpiece");
- neither, but a `tokenizer.json` → `TokenizerJsonVocabulary` (tokenizer_json.py): what transformers 5
  and sentence-transformers save in their place.

A model directory's tokenizer is loaded with `load_model_vocabulary`, which also holds it to the
model: its size must be config.json's vocab_size (`check_matches_model`).
"""

from __future__ import annotations

import os
from pathlib import Path

from albertlm.errors import AlbertlmError
from albertlm.tokenizer.base import Vocabulary, read_config
from albertlm.tokenizer.spiece import CONFIG_FILE, MODEL_FILE, Tokenizer
from albertlm.tokenizer.tokenizer_json import JSON_FILE, TokenizerJsonVocabulary
from albertlm.tokenizer.wordpiece import VOCAB_FILE, WordPieceTokenizer
from albertlm.utils import sha256_file

KINDS = {"sentencepiece": (MODEL_FILE, Tokenizer), "wordpiece": (VOCAB_FILE, WordPieceTokenizer)}
"""Vocabulary kind → (its file, its class)."""
FALLBACK_KIND = "tokenizer-json"
"""The kind of a directory with neither file of KINDS but a tokenizer.json."""
_ALL_KINDS = {**KINDS, FALLBACK_KIND: (JSON_FILE, TokenizerJsonVocabulary)}
TOKENIZER_FILES = (MODEL_FILE, VOCAB_FILE, JSON_FILE, CONFIG_FILE)
"""The files that make up a tokenizer in a model directory (what is copied along with the weights)."""


def vocabulary_kind(path: str | os.PathLike) -> str:
    """"sentencepiece", "wordpiece" or "tokenizer-json": which vocabulary a directory (or a bare file) holds.

    Raises:
        AlbertlmError: naming the directory when it holds no vocabulary file, or both of KINDS and its
            tokenizer_config.json does not say which.
    """
    path = Path(path)
    if path.is_file():  # vocab.txt, vocab_chinese.txt, ...; tokenizer.json; spiece.model, 30k-clean.model, ...
        return {".txt": "wordpiece", ".json": FALLBACK_KIND}.get(path.suffix, "sentencepiece")
    present = [kind for kind, (name, _) in KINDS.items() if (path / name).is_file()]
    if len(present) == 1:
        return present[0]
    if not present and (path / JSON_FILE).is_file():
        return FALLBACK_KIND
    if not present:
        raise AlbertlmError(f"{path}: no {MODEL_FILE} (SentencePiece) or {VOCAB_FILE} (WordPiece) for the "
                            f"tokenizer, nor a {JSON_FILE}")
    said = _declared_kind(path / CONFIG_FILE)
    if said is None:
        raise AlbertlmError(f"{path}: holds both {MODEL_FILE} and {VOCAB_FILE}; set \"tokenizer_class\" "
                            f"(AlbertTokenizer or BertTokenizer) in {CONFIG_FILE} to say which to use")
    return said


def _declared_kind(config_file: Path) -> str | None:
    try:
        config, ours = read_config(config_file)
    except (OSError, AlbertlmError):  # missing or unreadable: the caller says the kind is undeclared
        return None
    if ours.get("vocabulary") in KINDS:  # (a tokenizer.json is never chosen over these two)
        return ours["vocabulary"]
    name = str(config.get("tokenizer_class") or "")
    if name.startswith("Albert"):
        return "sentencepiece"
    if name.startswith("Bert"):
        return "wordpiece"
    return None


def load_vocabulary(path: str | os.PathLike, **kwargs) -> Vocabulary:
    """The tokenizer of a directory (or a bare spiece.model / vocab.txt), whichever kind it holds.

    Keyword arguments (parse_special_tokens, num_threads for SentencePiece, ...) go to the class's
    `load`; those a kind does not take are dropped.
    """
    kind = vocabulary_kind(path)
    if kind != "sentencepiece":
        kwargs.pop("num_threads", None)  # tokenizers chooses its own threads
    return _ALL_KINDS[kind][1].load(path, **kwargs)


def load_model_vocabulary(model_dir: str | os.PathLike, **kwargs) -> Vocabulary:
    """The tokenizer of a model directory, checked against the model's config.json (`check_matches_model`).

    Raises:
        AlbertlmError: see `load_vocabulary`, `AlbertConfig.from_json_file` and `check_matches_model`.
    """
    from albertlm.config import AlbertConfig

    vocabulary = load_vocabulary(model_dir, **kwargs)
    config_file = Path(model_dir) / "config.json"
    return check_matches_model(vocabulary, AlbertConfig.from_json_file(config_file).vocab_size,
                               Path(model_dir) / vocabulary_file(vocabulary), config_file)


def check_matches_model(vocabulary: Vocabulary, vocab_size: int, vocab_file: str | os.PathLike,
                        config_file: str | os.PathLike) -> Vocabulary:
    """Refuse a vocabulary whose size is not the model's vocab_size; returns it unchanged.

    A shorter vocabulary cannot produce the model's last ids (characters it lacks become [UNK]); a
    longer one produces ids the model has no row for. Either is another model's vocabulary.

    Args:
        vocabulary: the loaded tokenizer.
        vocab_size: the model's rows (config.json's vocab_size).
        vocab_file, config_file: the two files, for the message.
    Raises:
        AlbertlmError: naming both files and both sizes.
    """
    if vocabulary.vocab_size != vocab_size:
        unit = "lines" if isinstance(vocabulary, WordPieceTokenizer) else "pieces"
        raise AlbertlmError(f"{vocab_file}: {vocabulary.vocab_size} {unit}, but {config_file} has vocab_size "
                            f"{vocab_size}; the vocabulary must be the one the model was trained with")
    return vocabulary


def vocabulary_file(vocabulary: Vocabulary) -> str:
    """The file name a loaded vocabulary lives in (spiece.model or vocab.txt)."""
    return next(name for name, cls in _ALL_KINDS.values() if isinstance(vocabulary, cls))


def vocabulary_fingerprint(path: str | os.PathLike) -> dict:
    """What identifies a directory's vocabulary: its kind, file and the sha256 of that file.

    Returns:
        {"kind": "sentencepiece" | "wordpiece" | "tokenizer-json", "file": "spiece.model" | "vocab.txt" |
        "tokenizer.json", "sha256": hex}.
    """
    kind = vocabulary_kind(path)
    path = Path(path)
    file = path if path.is_file() else path / _ALL_KINDS[kind][0]
    return {"kind": kind, "file": _ALL_KINDS[kind][0], "sha256": sha256_file(file)}
