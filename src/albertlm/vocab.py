"""The vocabulary facts every part of albertlm shares, defined once.

Special-token ids belong to a vocabulary: `SpecialIds`, which every tokenizer exposes as
`special_ids` and every user of [CLS], [SEP], [MASK], padding or <unk> takes from it. ALBERT's
SentencePiece vocabularies (docs/design-notes.md, "Tokenizer") put them first: `<pad>` 0, `<unk>` 1,
`[CLS]` 2, `[SEP]` 3, `[MASK]` 4 (`SPIECE_IDS`, also the module constants PAD_ID ... MASK_ID and
the defaults wherever no vocabulary is at hand); a BERT WordPiece vocab.txt puts them wherever the
file lists them ([PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103 in Google's files).

IGNORE_INDEX marks a label position no loss or metric scores (PyTorch's cross-entropy default, as
transformers uses). The CJK ranges say which characters Chinese mode splits off one per piece: the
ideograph blocks of BERT's `_is_chinese_char`, plus CJK and full-width punctuation.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from albertlm.errors import AlbertlmError

PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN = "<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN)  # position = id
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIAL_TOKENS))
NUM_SPECIAL = len(SPECIAL_TOKENS)

IGNORE_INDEX = -100

HAN_RANGES = ("\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002a6df\U0002a700-\U0002ceaf"
              "\U0002f800-\U0002fa1f")
"""CJK ideographs, as regular-expression character-class ranges (language detection)."""
CJK_RANGES = HAN_RANGES + "\u3001-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65"
"""Ideographs plus CJK and full-width punctuation: what Chinese mode splits off one per piece."""




@dataclass(frozen=True)
class SpecialIds:
    """The ids of one vocabulary's special tokens, and which ids are never text.

    Attributes:
        pad, unk, cls, sep, mask: the ids of padding, the unknown piece, [CLS], [SEP], [MASK].
        reserved: further ids no text ever encodes to (BERT's `[unused*]` slots and the like).
            Random replacement during masking never draws these nor the five above.
    """

    pad: int = PAD_ID
    unk: int = UNK_ID
    cls: int = CLS_ID
    sep: int = SEP_ID
    mask: int = MASK_ID
    reserved: tuple[int, ...] = ()

    @cached_property  # read for every masked sequence; BERT layouts reserve ~1,000 ids
    def excluded(self) -> tuple[int, ...]:
        """Sorted ids that are never a random replacement: the five specials plus `reserved`."""
        return tuple(sorted({self.pad, self.unk, self.cls, self.sep, self.mask, *self.reserved}))

    @cached_property
    def _excluded_from_zero(self) -> bool:
        """Whether the excluded ids are exactly 0..k-1 (ALBERT's layout)."""
        return self.excluded == tuple(range(len(self.excluded)))

    def replacement_ids(self, vocab_size: int) -> np.ndarray:
        """int32 [n]: the ids random replacement draws from (every id below vocab_size not excluded)."""
        return _replacement_ids(self.excluded, int(vocab_size))

    def draw_replacements(self, vocab_size: int, n: int, rng: np.random.Generator) -> np.ndarray:
        """n uniform draws from `replacement_ids(vocab_size)`, int32 [n].

        When the excluded ids are 0..k-1 (ALBERT's layout) this is one `rng.integers(k, V)` call, the
        same draw as before special ids became a property of the vocabulary.
        """
        if self._excluded_from_zero:
            return rng.integers(len(self.excluded), vocab_size, size=n, dtype=np.int32)
        pool = self.replacement_ids(vocab_size)
        return pool[rng.integers(0, len(pool), size=n)]

    def to_json(self) -> dict:
        """A JSON object (reserved ids as [start, end) ranges, compact for BERT's ~1,000 slots)."""
        ranges: list[list[int]] = []
        for i in sorted(set(self.reserved)):
            if ranges and ranges[-1][1] == i:
                ranges[-1][1] = i + 1
            else:
                ranges.append([i, i + 1])
        return {"pad": self.pad, "unk": self.unk, "cls": self.cls, "sep": self.sep, "mask": self.mask,
                "reserved": ranges}

    @classmethod
    def from_json(cls, value: dict | None, where: str = "special_ids") -> SpecialIds:
        """Read `to_json`'s object back; None (a file written before this existed) gives SPIECE_IDS.

        Raises:
            AlbertlmError: naming `where` and the field, when a value is not a non-negative integer.
        """
        if value is None:
            return SPIECE_IDS
        fields = {}
        for name in ("pad", "unk", "cls", "sep", "mask"):
            v = value.get(name) if isinstance(value, dict) else None
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise AlbertlmError(f"{where}: field {name!r} must be a non-negative integer, got {v!r}")
            fields[name] = v
        reserved: list[int] = []
        for r in value.get("reserved", []):
            if (not isinstance(r, list) or len(r) != 2 or not all(isinstance(x, int) for x in r)
                    or not 0 <= r[0] <= r[1]):
                raise AlbertlmError(f"{where}: field 'reserved' holds {r!r}, not a [start, end) range")
            reserved.extend(range(r[0], r[1]))
        return cls(**fields, reserved=tuple(reserved))


@lru_cache(maxsize=16)
def _replacement_ids(excluded: tuple[int, ...], vocab_size: int) -> np.ndarray:
    keep = np.ones(vocab_size, dtype=bool)
    keep[[i for i in excluded if i < vocab_size]] = False
    pool = np.flatnonzero(keep).astype(np.int32)
    pool.flags.writeable = False  # shared by every caller through the cache
    return pool


SPIECE_IDS = SpecialIds()
"""ALBERT's SentencePiece layout: <pad> 0, <unk> 1, [CLS] 2, [SEP] 3, [MASK] 4, nothing reserved."""


def pair_inputs(a: np.ndarray, b: np.ndarray | None, special: SpecialIds = SPIECE_IDS) -> dict[str, np.ndarray]:
    """`[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`, token type 0 through the first [SEP] and 1 after.

    Args:
        a, b: piece ids of the segments (b None: a single segment).
        special: the vocabulary's special ids (its [CLS] and [SEP]).
    Returns:
        {"input_ids": int64 [S], "token_type_ids": int64 [S]}.
    """
    a = np.asarray(a, dtype=np.int64)
    parts = [np.array([special.cls]), a, np.array([special.sep])]
    types = [np.zeros(len(a) + 2, dtype=np.int64)]
    if b is not None:
        b = np.asarray(b, dtype=np.int64)
        parts += [b, np.array([special.sep])]
        types.append(np.ones(len(b) + 1, dtype=np.int64))
    return {"input_ids": np.concatenate(parts).astype(np.int64), "token_type_ids": np.concatenate(types)}
