"""Which vocabulary a directory holds, in one place: every command loads its tokenizer here.

- `spiece.model` → the SentencePiece `Tokenizer` (spiece.py);
- `vocab.txt` → the WordPiece `WordPieceTokenizer` (wordpiece.py);
- both → tokenizer_config.json must say which: its `tokenizer_class` (AlbertTokenizer* or
  BertTokenizer*) or our `albertlm.vocabulary` field ("sentencepiece" / "wordpiece").
"""

from __future__ import annotations

import os
from pathlib import Path

from albertlm.errors import AlbertlmError
from albertlm.tokenizer.base import Vocabulary, read_config
from albertlm.tokenizer.spiece import CONFIG_FILE, MODEL_FILE, Tokenizer
from albertlm.tokenizer.wordpiece import VOCAB_FILE, WordPieceTokenizer
from albertlm.utils import sha256_file

KINDS = {"sentencepiece": (MODEL_FILE, Tokenizer), "wordpiece": (VOCAB_FILE, WordPieceTokenizer)}
"""Vocabulary kind → (its file, its class)."""
TOKENIZER_FILES = (MODEL_FILE, VOCAB_FILE, CONFIG_FILE)
"""The files that make up a tokenizer in a model directory (what is copied along with the weights)."""


def vocabulary_kind(path: str | os.PathLike) -> str:
    """"sentencepiece" or "wordpiece": which vocabulary a directory (or a bare file) holds.

    Raises:
        AlbertlmError: naming the directory when it holds neither file, or both and its
            tokenizer_config.json does not say which.
    """
    path = Path(path)
    if path.is_file():
        return "wordpiece" if path.suffix == ".txt" else "sentencepiece"  # vocab.txt, vocab_chinese.txt, ...
    present = [kind for kind, (name, _) in KINDS.items() if (path / name).is_file()]
    if len(present) == 1:
        return present[0]
    if not present:
        raise AlbertlmError(f"{path}: no {MODEL_FILE} (SentencePiece) or {VOCAB_FILE} (WordPiece) for the tokenizer")
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
    if ours.get("vocabulary") in KINDS:
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
    if kind == "wordpiece":
        kwargs.pop("num_threads", None)  # tokenizers chooses its own threads
    return KINDS[kind][1].load(path, **kwargs)


def vocabulary_fingerprint(path: str | os.PathLike) -> dict:
    """What identifies a directory's vocabulary: its kind, file and the sha256 of that file.

    Returns:
        {"kind": "sentencepiece" | "wordpiece", "file": "spiece.model" | "vocab.txt", "sha256": hex}.
    """
    kind = vocabulary_kind(path)
    path = Path(path)
    file = path if path.is_file() else path / KINDS[kind][0]
    return {"kind": kind, "file": KINDS[kind][0], "sha256": sha256_file(file)}
