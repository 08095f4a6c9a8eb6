"""Whole-word n-gram masking for the MLM objective, vectorised with numpy, explicit rng only.

Paper §4.1 (and the official `create_masked_lm_predictions`): masked spans are n-grams of whole
words, n <= 3 with p(n) ∝ 1/n (6/11, 3/11, 2/11); 15% of the tokens are predicted, at most
max_predictions per sequence (20 at length 512); each predicted token becomes [MASK] 80% of the
time, a random token 10% and stays unchanged 10%, decided per token. [CLS], [SEP] and padding are
never masked. A word is a piece flagged in `word_start` followed by its continuation pieces (for
Chinese, the characters of one jieba word: albert_zh whole-word masking).

How spans are chosen, and why it differs from the official loop:
  The official code draws an n for every candidate start, visits the starts in a shuffled order and
  drops any n-gram that overlaps one already taken. Long n-grams overlap more often, so the spans
  actually masked are shorter than p(n) says; its overlap check was also partly a no-op, and n came
  from the *global* numpy RNG, so a seed did not reproduce the masks (docs/design-notes.md). Here each segment
  (a run of maskable tokens between [CLS]/[SEP]) is tiled left to right into consecutive n-grams
  with n drawn from p(n), so the tiles are disjoint by construction and follow p(n); the tiles are
  visited in a random order and taken while they fit the budget. A tile that would exceed the
  remaining budget is shortened to the whole words that still fit, or skipped if none does, and
  later tiles are tried (the official code likewise tries shorter n-grams, then skips). A tile at
  the end of a segment may also hold fewer than n words (the official code truncates at the end of
  the sequence). `span_n` reports the drawn n of each masked span and `span_words` the words it
  actually covers, so the drawn n follow p(n) while the budget is met exactly.

Budget: min(max_predictions, max(1, round(masked_lm_prob * num_maskable))), where num_maskable
excludes [CLS], [SEP] and padding (the official code counted [CLS]/[SEP] in the length).

This module is numpy only: the data pipeline imports neither torch nor the model.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.vocab import IGNORE_INDEX, SPIECE_IDS, SpecialIds


class MaskResult(NamedTuple):
    """Masking of one sequence.

    Attributes:
        input_ids: int32 [L], the tokens with the chosen positions replaced (80/10/10).
        labels: int32 [L], the original token at predicted positions, IGNORE_INDEX (-100) elsewhere.
        span_n: int8 [num_spans], the n drawn for each masked span (statistics).
        span_words: int8 [num_spans], the words each span covers (< span_n when the span was cut
            at a segment end or to fit the budget).
    """

    input_ids: np.ndarray
    labels: np.ndarray
    span_n: np.ndarray
    span_words: np.ndarray


def ngram_probs(max_ngram: int = 3) -> np.ndarray:
    """p(n) ∝ 1/n for n = 1..max_ngram (paper §4.1: 6/11, 3/11, 2/11 for max_ngram 3).

    Returns:
        float64 [max_ngram], summing to 1.
    """
    p = 1.0 / np.arange(1, max_ngram + 1)
    return p / p.sum()


def mask_budget(num_maskable: int, masked_lm_prob: float, max_predictions: int) -> int:
    """min(max_predictions, max(1, round(masked_lm_prob * num_maskable))); 0 if nothing maskable.

    Rounds half up (the official Python 3 round() rounds half to even; the difference is one token
    at exact halves).
    """
    if num_maskable <= 0 or masked_lm_prob <= 0 or max_predictions <= 0:
        return 0
    return int(min(max_predictions, max(1, np.floor(masked_lm_prob * num_maskable + 0.5))))


def _choose_spans(tokens, word_start, rng, cdf, budget, special):
    """Pick disjoint whole-word n-gram spans of one sequence within the token budget.

    One function on purpose (longer than our 60 lines): the tiling, the random visiting order and
    the budget fitting described in the module docstring share one sequence's state, and read in
    that order as the docstring tells them.

    Args:
        tokens: int32 [L] (no padding beyond L is looked at).
        word_start: bool [L].
        rng: numpy Generator.
        cdf: float64 [max_ngram], cumulative p(n) with cdf[-1] == 1.
        budget: the most tokens to cover.
        special: the vocabulary's SpecialIds ([CLS], [SEP] and padding are never masked).

    Returns:
        (tok_start int64 [k], tok_end int64 [k], span_n int8 [k], span_words int8 [k]) for the
        k chosen spans, sorted by position; spans cover tokens [tok_start, tok_end).
    """
    empty = np.zeros(0, np.int64)
    maskable = _maskable(tokens, special)
    prev = np.empty_like(maskable)
    prev[0] = False
    prev[1:] = maskable[:-1]
    # A maskable piece right after [CLS]/[SEP] starts a word even if unflagged (a fragment left by
    # front truncation), so no word ever reaches across a separator.
    is_start = maskable & (word_start | ~prev)
    starts = np.flatnonzero(is_start)
    num_words = len(starts)
    if num_words == 0 or budget <= 0:
        return empty, empty, empty.astype(np.int8), empty.astype(np.int8)
    word_id = np.cumsum(is_start) - 1
    word_len = np.bincount(word_id[maskable], minlength=num_words)  # pieces per word
    ends = starts + word_len

    # Segments = runs of words between separators; tile each one left to right with n-grams.
    seg_first = ~prev[starts]  # word opens a segment
    seg_id = np.cumsum(seg_first) - 1
    first_word = np.flatnonzero(seg_first)
    seg_words = np.diff(np.append(first_word, num_words))
    n = np.searchsorted(cdf, rng.random(num_words), side="right") + 1  # one draw per word slot
    offset = np.concatenate(([0], np.cumsum(n)[:-1]))  # exclusive prefix sum of the draws
    f = first_word[seg_id]
    local = offset - offset[f]  # tile start, in words from the segment's first word
    room = seg_words[seg_id] - local
    valid = room > 0  # the slots that start a tile (a prefix of each segment's slots)
    tile_first = (f + local)[valid]
    tile_n = n[valid]
    tile_words = np.minimum(tile_n, room[valid])
    tile_start = starts[tile_first]
    tile_end = ends[tile_first + tile_words - 1]
    size = tile_end - tile_start

    # Visit the tiles in a random order and take them while they fit (a vectorised prefix). Then,
    # as the official code does, a tile that would exceed the budget is shortened to the whole
    # words that still fit ("trying shorter ngrams"), or skipped when not even its first word fits,
    # and later tiles are tried, until the budget is spent (at most `budget` more steps).
    # Shortening rather than skipping matters for p(n): the tile that crosses the budget is
    # size-biased (long n-grams cross more often), so dropping it would skew the masked spans'
    # drawn n towards 1; whether a tile can be shortened depends only on its first word, not on n.
    order = rng.permutation(len(size))
    cum = np.cumsum(size[order])
    k = int(np.searchsorted(cum, budget, side="right"))
    taken = list(order[:k])
    left = budget - (int(cum[k - 1]) if k else 0)
    first_size = word_len[tile_first]
    pos = k
    while left > 0 and pos < len(order):
        fits = np.flatnonzero(first_size[order[pos:]] <= left)
        if len(fits) == 0:
            break
        j = order[pos + fits[0]]
        pos += int(fits[0]) + 1
        w0 = tile_first[j]
        within = ends[w0:w0 + tile_words[j]] - tile_start[j]  # tokens up to each word's end
        keep = int(np.searchsorted(within, left, side="right"))  # >= 1: the first word fits
        tile_words[j] = keep
        tile_end[j] = ends[w0 + keep - 1]
        left -= int(tile_end[j] - tile_start[j])
        taken.append(j)
    taken = np.sort(np.asarray(taken, dtype=np.int64))
    return (tile_start[taken], tile_end[taken], tile_n[taken].astype(np.int8),
            tile_words[taken].astype(np.int8))


def _maskable(tokens, special):
    """bool [L]: not [CLS], [SEP] or padding."""
    return (tokens != special.pad) & (tokens != special.cls) & (tokens != special.sep)


def _apply(tokens, tok_start, tok_end, rng, vocab_size, special):
    """80% [MASK] / 10% random token / 10% unchanged, per token (paper §4.1).

    The random token is never a special or reserved id (`SpecialIds.draw_replacements`).

    Returns:
        (input_ids int32 [L], labels int32 [L]).
    """
    length = len(tokens)
    delta = np.zeros(length + 1, np.int32)
    delta[tok_start] += 1  # spans are disjoint, so starts (and ends) are distinct indices
    delta[tok_end] -= 1
    positions = np.flatnonzero(np.cumsum(delta[:-1]) > 0)
    input_ids = tokens.astype(np.int32, copy=True)
    labels = np.full(length, IGNORE_INDEX, np.int32)
    labels[positions] = tokens[positions]
    u = rng.random(len(positions))
    random_ids = special.draw_replacements(vocab_size, len(positions), rng)
    replaced = np.where(u < 0.8, special.mask, np.where(u < 0.9, random_ids, tokens[positions]))
    input_ids[positions] = replaced
    return input_ids, labels


def _check(vocab_size, max_ngram, special):
    """Validate the arguments; return the cumulative p(n) used to draw n."""
    if vocab_size <= special.mask or not len(special.replacement_ids(vocab_size)):
        raise AlbertlmError(f"vocab_size {vocab_size} leaves no id that is not special "
                            f"(special and reserved ids: {len(special.excluded)})")
    if max_ngram < 1:
        raise AlbertlmError(f"max_ngram must be >= 1, got {max_ngram}")
    cdf = np.cumsum(ngram_probs(max_ngram))
    cdf[-1] = 1.0  # so a draw in [0, 1) never falls past the last n
    return cdf


def _mask_row(tokens, word_start, rng, cdf, vocab_size, masked_lm_prob, max_predictions, special):
    """Mask one non-empty sequence: tokens int [L], word_start bool [L] -> MaskResult."""
    num_maskable = int(np.count_nonzero(_maskable(tokens, special)))
    budget = mask_budget(num_maskable, masked_lm_prob, max_predictions)
    start, end, span_n, span_words = _choose_spans(tokens, word_start, rng, cdf, budget, special)
    input_ids, labels = _apply(tokens, start, end, rng, vocab_size, special)
    return MaskResult(input_ids, labels, span_n, span_words)


def mask_instance(
    tokens: np.ndarray,
    word_start: np.ndarray,
    rng: np.random.Generator,
    vocab_size: int,
    masked_lm_prob: float = 0.15,
    max_predictions: int = 20,
    max_ngram: int = 3,
    special: SpecialIds = SPIECE_IDS,
) -> MaskResult:
    """Whole-word n-gram masking of one sequence.

    Args:
        tokens: int [L], e.g. `[CLS] A [SEP] B [SEP]` (padding is never masked).
        word_start: bool [L], True at the first piece of each whole word.
        rng: the only source of randomness.
        vocab_size: V; random replacements are uniform over the ids below V that are not
            special or reserved (ids 5..V-1 for ALBERT's SentencePiece layout).
        masked_lm_prob: fraction of maskable tokens to predict (0.15).
        max_predictions: the most predicted tokens per sequence (20 at length 512 in the paper).
        max_ngram: largest n of an n-gram span (3).
        special: the vocabulary's SpecialIds ([CLS], [SEP], [MASK], padding, never-drawn ids).

    Returns:
        MaskResult(input_ids int32 [L], labels int32 [L], span_n int8 [k], span_words int8 [k]).
    """
    cdf = _check(vocab_size, max_ngram, special)
    tokens = np.asarray(tokens)
    word_start = np.asarray(word_start, dtype=bool)
    if tokens.shape != word_start.shape or tokens.ndim != 1:
        raise AlbertlmError(
            f"tokens {tokens.shape} and word_start {word_start.shape} must be equal 1-d")
    if len(tokens) == 0:
        empty = np.zeros(0, np.int8)
        return MaskResult(np.zeros(0, np.int32), np.zeros(0, np.int32), empty, empty)
    return _mask_row(tokens, word_start, rng, cdf, vocab_size, masked_lm_prob, max_predictions, special)
