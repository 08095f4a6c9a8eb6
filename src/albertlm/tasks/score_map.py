"""A sentence embedder's score scale: a monotone map from the cosine of two texts' vectors to a graded
task's scores (STS-B's 0-5), fitted on the training pairs.

A bi-encoder trained with CoSENT learns only the order of its cosines, not their values, so the cosine
ranks pairs well (Spearman) but is not linear in the gold score (Pearson is lower). Isotonic regression
of the training scores on the training cosines (pool adjacent violators) gives the score that the order
alone implies; between its knots the map is linear, so it is strictly increasing and keeps the order,
and beyond the first and last knot it holds the end scores. Measured on STS-B (docs/transfer.md run 24).

The map lives in the embedder's config.json, under `albertlm_embedding.score_map` =
{"cosine": [...], "score": [...], "pairs": N}; `albertlm embed DIR --evaluate` scores it beside the
cosines. It is read back through `ScoreMap.from_record`, which refuses anything malformed in one line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from albertlm.errors import AlbertlmError

SCORE_MAP_KEY = "score_map"
"""Where the map sits inside config.json's embedding record (pooling.EMBEDDING_KEY)."""
MAX_KNOTS = 256
"""The most knots a fitted map keeps (adjacent isotonic blocks are pooled down to this many)."""
MAX_RECORD_KNOTS = 100_000
"""The most knots a map read from a file may have."""


@dataclass(frozen=True)
class ScoreMap:
    """Piecewise-linear, strictly increasing cosine -> score."""

    cosine: tuple[float, ...]
    """Knot cosines, strictly increasing."""
    score: tuple[float, ...]
    """Knot scores, strictly increasing."""
    pairs: int
    """How many training pairs it was fitted on."""

    def __call__(self, cosines: Sequence[float] | np.ndarray) -> np.ndarray:
        """The scores of [N] cosines (the end scores outside the knots)."""
        return np.interp(np.asarray(cosines, dtype=np.float64), self.cosine, self.score)

    def record(self) -> dict[str, Any]:
        """The JSON form config.json keeps."""
        return {"cosine": list(self.cosine), "score": list(self.score), "pairs": self.pairs}

    @classmethod
    def from_record(cls, record: Any, where: str) -> ScoreMap:
        """The map of a config record.

        Raises:
            AlbertlmError: one line naming `where`: not a mapping of two equally long lists of at least 2 and
                at most MAX_RECORD_KNOTS finite numbers, both strictly increasing.
        """
        if not isinstance(record, dict) or not isinstance(record.get("cosine"), list) \
                or not isinstance(record.get("score"), list):
            raise AlbertlmError(f"{where}: {SCORE_MAP_KEY} must hold the lists 'cosine' and 'score'")
        xs, ys = record["cosine"], record["score"]
        if len(xs) != len(ys) or not 2 <= len(xs) <= MAX_RECORD_KNOTS:
            raise AlbertlmError(f"{where}: {SCORE_MAP_KEY}.cosine and .score must be equally long, 2 to "
                                f"{MAX_RECORD_KNOTS:,} knots (got {len(xs)} and {len(ys)})")
        for name, values in (("cosine", xs), ("score", ys)):
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
                raise AlbertlmError(f"{where}: {SCORE_MAP_KEY}.{name} must hold finite numbers")
            if any(b <= a for a, b in zip(values, values[1:])):
                raise AlbertlmError(f"{where}: {SCORE_MAP_KEY}.{name} must be strictly increasing")
        pairs = record.get("pairs", 0)
        if not isinstance(pairs, int) or isinstance(pairs, bool) or pairs < 0:
            raise AlbertlmError(f"{where}: {SCORE_MAP_KEY}.pairs must be a count, got {pairs!r}")
        return cls(tuple(float(x) for x in xs), tuple(float(y) for y in ys), pairs)


def isotonic_blocks(cosines: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pool adjacent violators: the blocks of the least-squares non-decreasing fit of scores on cosines,
    with equal fitted values pooled too, so the block values strictly increase.

    Returns:
        (block mean cosine, block mean score, block size), each [K], in cosine order.
    """
    xs, inverse, counts = np.unique(cosines, return_inverse=True, return_counts=True)  # equal cosines: one point
    sums = np.bincount(inverse, weights=scores, minlength=len(xs))
    score_sum: list[float] = []
    cosine_sum: list[float] = []
    size: list[float] = []
    for x, total, n in zip(xs, sums, counts):
        s, c, w = float(total), float(x) * n, float(n)
        while score_sum and score_sum[-1] / size[-1] >= s / w:  # the last block is not below: pool them
            s, c, w = s + score_sum.pop(), c + cosine_sum.pop(), w + size.pop()
        score_sum.append(s)
        cosine_sum.append(c)
        size.append(w)
    w = np.asarray(size)
    return np.asarray(cosine_sum) / w, np.asarray(score_sum) / w, w


def fit_score_map(cosines: Sequence[float] | np.ndarray, scores: Sequence[float] | np.ndarray,
                  max_knots: int = MAX_KNOTS) -> ScoreMap | None:
    """Fit the map on training pairs.

    Args:
        cosines: [N] the embedder's cosines of the training pairs.
        scores: [N] their gold scores.
        max_knots: the most knots kept; more isotonic blocks are pooled in runs of equal size.
    Returns:
        The ScoreMap, or None where the scores do not rise with the cosine at all (one block).
    Raises:
        AlbertlmError: unequal lengths, non-finite values, or max_knots under 2.
    """
    x = np.asarray(cosines, dtype=np.float64)
    y = np.asarray(scores, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise AlbertlmError(f"a score map needs one score per cosine (got {x.shape} and {y.shape})")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise AlbertlmError("a score map needs finite cosines and scores")
    if max_knots < 2:
        raise AlbertlmError(f"max_knots must be at least 2, got {max_knots}")
    bx, by, bw = isotonic_blocks(x, y)
    if len(bx) > max_knots:  # pool runs of adjacent blocks: weighted means of increasing runs still increase
        groups = np.array_split(np.arange(len(bx)), max_knots)
        bx, by = (np.array([np.average(v[g], weights=bw[g]) for g in groups]) for v in (bx, by))
    if len(bx) < 2:
        return None
    return ScoreMap(tuple(float(v) for v in bx), tuple(float(v) for v in by), int(len(x)))
