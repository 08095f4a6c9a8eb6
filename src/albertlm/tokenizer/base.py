"""What every kind of vocabulary offers the rest of albertlm.

The data build, fine-tuning, inference and the analyses use a vocabulary only through these
members, so the WordPiece `vocab.txt` of the Chinese ALBERT releases (`wordpiece.WordPieceTokenizer`)
sits beside the SentencePiece one (`spiece.Tokenizer`); `auto.load_vocabulary` picks the class. A
vocabulary that knows each piece's exact character span may also offer
`encode_batch_with_offsets(texts) -> [(ids, [(start, end)])]` (WordPiece does); question
answering uses it when present and aligns piece surfaces otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from albertlm.vocab import SpecialIds


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
