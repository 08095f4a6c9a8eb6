"""Chinese mode (albert_zh style): one piece per CJK character, word starts from jieba.

Before SentencePiece sees the text, every CJK character (vocab.CJK_RANGES) is split off with
spaces, so no piece ever joins two of them. Any bare "▁" piece that only stands for those added
spaces is dropped, which leaves one piece per character. Word starts drive whole-word masking:
all characters of one jieba word are masked together.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

import numpy as np

from albertlm.vocab import CJK_RANGES, HAN_RANGES

CJK_RE = re.compile(f"([{CJK_RANGES}])")
HAN_RE = re.compile(f"[{HAN_RANGES}]")
CJK_GAP_RE = re.compile(f"(?<=[{CJK_RANGES}]) (?=[{CJK_RANGES}])")


def split_cjk(text: str) -> str:
    """Surround every CJK character with spaces, so SentencePiece keeps each one apart."""
    return CJK_RE.sub(r" \1 ", text)


def looks_chinese(texts: Iterable[str], threshold: float = 0.5) -> bool:
    """True when more than `threshold` of the non-space characters of `texts` are CJK ideographs."""
    han = total = 0
    for text in texts:
        han += len(HAN_RE.findall(text))
        total += sum(not ch.isspace() for ch in text)
    return total > 0 and han > threshold * total


@lru_cache(maxsize=1)
def jieba():
    """Import jieba on first use (its import and dictionary load take about a second), quietly."""
    import logging

    import jieba as module

    module.setLogLevel(logging.WARNING)  # it logs "Building prefix dict..." to stderr otherwise
    return module


def chinese_pieces(chunk: str, spaced: str, enc: dict, meta_id: int,
                   with_starts: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Drop the bare "▁" pieces that only stand for spaces split_cjk added; jieba word starts.

    Args:
        chunk: pre-processed text; spaced: split_cjk(chunk), what SentencePiece encoded.
        enc: SentencePiece's offset mapping of `spaced` (character offsets).
        meta_id: the id of the bare "▁" piece (-1 if the vocabulary has none).
        with_starts: also compute word starts.
    """
    ids = np.asarray(enc["ids"], dtype=np.int32)
    if ids.size == 0:
        return ids, np.zeros(0, dtype=bool) if with_starts else None
    n = len(spaced)
    codes = np.frombuffer(spaced.encode("utf-32-le"), dtype=np.uint32)
    # next_char[i]: index of the first non-space character at or after i (n if none), so a
    # piece is located by its first real character, whatever spaces its surface starts with.
    positions = np.where(codes != 32, np.arange(n), n)
    next_char = np.append(np.minimum.accumulate(positions[::-1])[::-1], n)
    spans = np.asarray(enc["offsets"], dtype=np.int64).reshape(-1, 2)
    begins, ends = np.minimum(spans[:, 0], n), np.minimum(spans[:, 1], n)
    first = next_char[begins]
    # Where split_cjk put each CJK character (the k-th one moved right by 2k + 1), and the
    # spaces it inserted on both sides of it.
    found = np.array([m.start() for m in CJK_RE.finditer(chunk)], dtype=np.int64)
    placed = found + 2 * np.arange(found.size) + 1
    is_cjk, inserted = np.zeros(n + 1, dtype=bool), np.zeros(n + 1, dtype=bool)
    is_cjk[placed] = True
    inserted[placed - 1] = inserted[placed + 1] = True
    # A bare "▁" is noise when its whitespace was all inserted by us ("门,天" -> "门 , 天"),
    # or when it is SentencePiece's leading dummy "▁" in front of a CJK character.
    counts = np.concatenate([[0], np.cumsum(inserted[:n])])
    all_inserted = (ends > begins) & (counts[ends] - counts[begins] == ends - begins)
    dummy_before_cjk = np.zeros(ids.size, dtype=bool)
    dummy_before_cjk[:-1] = (ends[:-1] == begins[:-1]) & is_cjk[first[1:]]
    bare = (ids == meta_id) & (all_inserted | dummy_before_cjk)
    ids, first = ids[~bare], first[~bare]
    if not with_starts:
        return ids, None
    # Segment the unspaced text, then space each word as split_cjk spaced the whole text
    # (it acts character by character), giving the jieba word of every character of `spaced`.
    words = [split_cjk(w) for w in jieba().lcut(chunk)]
    word_of_char = np.repeat(np.arange(len(words) + 1), [len(w) for w in words] + [1])
    if len(word_of_char) != n + 1:  # jieba returns its whole input in pieces; never expected
        raise RuntimeError("jieba segmentation does not cover the text")
    word = word_of_char[first]
    starts = np.empty(ids.size, dtype=bool)
    starts[0] = True
    starts[1:] = word[1:] != word[:-1]
    return ids, starts
