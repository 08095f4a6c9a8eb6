"""What every kind of vocabulary offers the rest of albertlm.

The data build, fine-tuning, inference and the analyses use a vocabulary only through these
members, so the WordPiece `vocab.txt` of the Chinese ALBERT releases (`wordpiece.WordPieceTokenizer`)
sits beside the SentencePiece one (`spiece.Tokenizer`); `auto.load_vocabulary` picks the class. A
vocabulary that knows each piece's exact character span may also offer
`encode_batch_with_offsets(texts) -> [(ids, [(start, end)])]` (WordPiece does); question
answering uses it when present and aligns piece surfaces otherwise.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.utils import atomic_write_bytes, atomic_write_text
from albertlm.vocab import SpecialIds, pair_inputs

CONFIG_FILE = "tokenizer_config.json"
"""Every vocabulary's settings file (transformers' name), beside its vocabulary file."""


def read_config(config_file: Path) -> tuple[dict, dict]:
    """A tokenizer_config.json's fields and its "albertlm" section ({} when it has none).

    Raises:
        AlbertlmError: the file is not JSON or not a JSON object.
    """
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise AlbertlmError(f"{config_file}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except ValueError as exc:
        raise AlbertlmError(f"{config_file}: not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise AlbertlmError(f"{config_file}: expected a JSON object")
    return config, config.get("albertlm") if isinstance(config.get("albertlm"), dict) else {}


@runtime_checkable
class Vocabulary(Protocol):
    """A tokenizer and its special-token ids (albertlm.vocab.SpecialIds)."""

    chinese: bool
    """Chinese mode: one piece per CJK character, jieba word starts."""

    special_ids: SpecialIds
    """The ids of [PAD], [UNK], [CLS], [SEP], [MASK] and the reserved ids (albertlm.vocab)."""

    @property
    def vocab_size(self) -> int:
        """Number of pieces, special tokens included."""

    def normalise_text(self, text: str) -> str:
        """The text as this vocabulary normalises it before splitting it into pieces, runs of whitespace as one space."""

    def encode(self, text: str) -> np.ndarray:
        """int32 ids of one text, without [CLS] / [SEP]."""

    def encode_with_word_starts(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """(ids, bool word starts) of one text: what whole-word masking needs."""

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """`encode` for many texts."""

    def encode_batch_packed(self, texts: Sequence[str], *, word_starts: bool = True
                            ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """(ids [T], word starts [T] or None, offsets [N+1]) of many texts, packed."""

    def build_inputs(self, a: Sequence[int], b: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """`[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`: (input ids, token types)."""

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = True) -> str:
        """Text for ids."""

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        """Pieces for ids."""

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        """Ids for pieces (unknown ones: special_ids.unk)."""

    def save(self, out_dir: str | os.PathLike, *, extra: dict | None = None) -> Path:
        """Write the vocabulary's files into a model directory."""


class PieceVocabulary:
    """What both vocabulary classes share, written once on top of their own `encode_batch_packed`.

    A subclass sets `_pieces` (piece strings by id), `_word_start` (bool per piece) and
    `special_ids`, and implements `encode_batch_packed`; everything below follows from those.
    """

    _pieces: list[str]
    _word_start: np.ndarray
    special_ids: SpecialIds

    def encode_batch_packed(self, texts: Sequence[str], *, word_starts: bool = True
                            ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        raise NotImplementedError

    def _init_args(self) -> dict:
        """The keyword arguments of `__init__` that rebuild this vocabulary."""
        raise NotImplementedError

    def __getstate__(self) -> dict:  # picklable for DataLoader workers: rebuilt from its arguments
        return self._init_args()

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    @property
    def vocab_size(self) -> int:
        """Number of pieces, special tokens included."""
        return len(self._pieces)

    def __len__(self) -> int:
        return len(self._pieces)

    @property
    def word_start_table(self) -> np.ndarray:
        """bool [vocab_size]: whether a piece can begin a word (its context decides in Chinese mode)."""
        return self._word_start

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        """Pieces for ids (e.g. [2, 15] -> ["[CLS]", "▁the"])."""
        return [self._pieces[int(i)] for i in ids]

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """`encode` for many texts (one call); int32 arrays."""
        ids, _, offsets = self.encode_batch_packed(texts, word_starts=False)
        return np.split(ids, offsets[1:-1]) if len(texts) else []

    def encode_batch_with_word_starts(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """`encode_with_word_starts` for many texts (one call)."""
        if not len(texts):
            return []
        ids, starts, offsets = self.encode_batch_packed(texts)
        return list(zip(np.split(ids, offsets[1:-1]), np.split(starts, offsets[1:-1])))

    def encode(self, text: str) -> np.ndarray:
        """Token ids of one text, without [CLS]/[SEP]: int32 [num_pieces]."""
        return self.encode_batch_packed([text], word_starts=False)[0]

    def encode_with_word_starts(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """Token ids plus which of them begin a word, for whole-word masking: a whitespace-delimited
        run, each special token on its own, and in Chinese mode a jieba word.

        Returns:
            (ids int32 [num_pieces], word_start bool [num_pieces]).
        """
        ids, starts, _ = self.encode_batch_packed([text])
        return ids, starts

    def build_inputs(self, a: Sequence[int], b: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """`[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]` with token types 0 then 1.

        Returns:
            (input_ids int32 [L], token_type_ids int32 [L]).
        """
        pair = pair_inputs(np.asarray(a), None if b is None else np.asarray(b), self.special_ids)
        return pair["input_ids"].astype(np.int32), pair["token_type_ids"].astype(np.int32)

    @staticmethod
    def _write(out_dir: str | os.PathLike, vocabulary_file: str, data: bytes, config: dict) -> Path:
        """`save`'s writing: the vocabulary file and tokenizer_config.json, each atomically, into
        `out_dir`. An OSError names the file being written (`utils.atomic_path`)."""
        out = Path(out_dir)
        if out.exists() and not out.is_dir():
            raise AlbertlmError(f"{out}: exists and is not a directory")
        atomic_write_bytes(out / vocabulary_file, data)
        atomic_write_text(out / CONFIG_FILE, json.dumps(config, indent=2, ensure_ascii=False) + "\n")
        return out

    def _checked_ids(self, ids: Iterable[int]) -> list[int]:
        """ids as ints, or a ValueError naming the first one outside the vocabulary (for `decode`)."""
        ids = [int(i) for i in ids]
        if bad := [i for i in ids if not 0 <= i < self.vocab_size]:
            raise ValueError(f"token id {bad[0]} is outside the vocabulary (size {self.vocab_size})")
        return ids
