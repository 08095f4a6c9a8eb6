"""Text normalisation before a vocabulary sees the text: the official ALBERT pre-processing.

One normaliser, `normalise`, serves both paths:

- `preprocess_text` normalises one text and collapses its whitespace;
- `preprocess_batch` normalises many texts in a single pass over one joined string (C speed
  instead of a Python call per text).

The normaliser turns `` and '' into ", decomposes with NFKD and drops combining marks unless
accents are kept, lower-cases unless cased, and maps the few whitespace characters that
str.split() takes but SentencePiece does not to a space (docs/design-notes.md, "Tokenizer").
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

# Characters str.split() takes for whitespace but SentencePiece's normaliser does not.
_ODD_SPACE_RE = re.compile("[\x0b\x1c-\x1f\x85]")
_SEPARATOR = "\x00"  # survives NFKD and lower(), and keeps `` from forming across two texts


@lru_cache(maxsize=1)
def _combining_marks() -> dict[int, None]:
    """str.translate table deleting every combining character (the official accent strip)."""
    return {cp: None for cp in range(0x110000) if unicodedata.combining(chr(cp))}


def normalise(text: str, *, do_lower_case: bool = True, keep_accents: bool = False) -> str:
    """Quotes, accents, case and odd spaces; runs of whitespace are left as they are."""
    if ("`" in text and "``" in text) or "''" in text:
        text = text.replace("``", '"').replace("''", '"')
    if not keep_accents and not text.isascii():  # ASCII has nothing to decompose: skip the work
        text = unicodedata.normalize("NFKD", text).translate(_combining_marks())
    if do_lower_case:
        text = text.lower()
    odd = any(c in text for c in "\x0b\x1c\x1d\x1e\x1f") if text.isascii() else _ODD_SPACE_RE.search(text)
    return _ODD_SPACE_RE.sub(" ", text) if odd else text


def preprocess_text(text: str, *, do_lower_case: bool = True, keep_accents: bool = False) -> str:
    """The official ALBERT text normalisation of one text, with single spaces between words.

    Args:
        text: raw text.
        do_lower_case: lower-case (the paper's models are uncased).
        keep_accents: keep accents; otherwise NFKD and drop combining marks ("café" -> "cafe").
    """
    return " ".join(normalise(text, do_lower_case=do_lower_case, keep_accents=keep_accents).split())


def preprocess_batch(texts: Sequence[str], *, do_lower_case: bool = True, keep_accents: bool = False) -> list[str]:
    """`normalise` of many texts, done on one joined string.

    Whitespace runs are left for the vocabulary (SentencePiece treats every run as one space and
    trims both ends), so its ids equal those of `preprocess_text`'s output (tested).
    """
    big = _SEPARATOR.join(texts)
    if big.count(_SEPARATOR) != max(len(texts) - 1, 0):  # a text holds the separator itself
        return [normalise(t, do_lower_case=do_lower_case, keep_accents=keep_accents) for t in texts]
    return normalise(big, do_lower_case=do_lower_case, keep_accents=keep_accents).split(_SEPARATOR) if texts else []
