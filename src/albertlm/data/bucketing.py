"""Length bucketing: batches of similar lengths, so that padding each batch to its longest wastes little.

A batch of sequences drawn uniformly from 32..512 tokens and padded to its longest computes about
8/9 x 512 positions per sequence where the mean sequence has 272 real tokens: nearly half of the
work is padding. Grouping examples of similar length into the same batch removes most of it
(fairseq's and transformers' `group_by_length` do the same).

The recipe: shuffle all examples, cut the shuffled order into pools of `pool_batches` batches,
sort each pool by length, cut it into batches, then shuffle the order of the batches. Larger
pools waste less padding but make batches less random; the final shuffle keeps long and short
batches from arriving in order. Every example is used exactly once per epoch, and the result is
a pure function of the lengths, the sizes and the generator.

Inference needs no randomness: `sorted_batches` sorts every example by length (shortest first,
ties in input order) and cuts that order into batches, and `restore_order` puts the per-batch
results back in input order, so the same inputs always form the same batches
(`albertlm.inference.run.run_features`).

An alternative that needs no change to the batches is the model's unpadded path
(`AlbertModel.forward(..., unpad=True)`), which skips padding inside any batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np

from albertlm.errors import AlbertlmError

T = TypeVar("T")


def bucket_by_length(lengths: Sequence[int], batch_size: int, rng: np.random.Generator,
                     pool_batches: int = 50, drop_last: bool = False) -> list[list[int]]:
    """Batches of example indices, each holding examples of similar length.

    Args:
        lengths: lengths[i] is the number of real tokens of example i.
        batch_size: examples per batch.
        rng: the generator every random choice draws from (shuffle, then batch order).
        pool_batches: batches per sorting pool; 1 gives plain random batches, a pool as large as
            the data set sorts everything.
        drop_last: drop the last, smaller batch of each pool instead of keeping it.
    Returns:
        A list of batches (lists of indices into `lengths`); every index appears exactly once
        (unless dropped by `drop_last`). Within a batch, indices are ordered longest first.
    """
    if batch_size < 1 or pool_batches < 1:
        raise AlbertlmError(f"batch_size and pool_batches must be positive, got {batch_size} and {pool_batches}")
    lengths = np.asarray(lengths, dtype=np.int64)
    order = rng.permutation(len(lengths))
    pool = batch_size * pool_batches
    batches: list[list[int]] = []
    for start in range(0, len(order), pool):
        chunk = order[start:start + pool]
        # Stable sort, longest first: ties keep their shuffled order.
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        for b in range(0, len(chunk), batch_size):
            batch = chunk[b:b + batch_size]
            if drop_last and len(batch) < batch_size:
                continue
            batches.append(batch.tolist())
    return [batches[i] for i in rng.permutation(len(batches))]


def padded_tokens(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> int:
    """Positions computed when each batch is padded to its longest example: sum of len(batch) x max length."""
    return sum(len(b) * max(lengths[i] for i in b) for b in batches if len(b))


def sorted_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Batches of example indices for inference: all examples sorted by length, then cut in order.

    Args:
        lengths: lengths[i] is the number of real tokens of example i.
        batch_size: examples per batch (the last batch may be smaller).
    Returns:
        Batches of indices into `lengths`, shortest examples first; a stable sort, so examples of equal
        length keep their input order. Every index appears exactly once.
    """
    if batch_size < 1:
        raise AlbertlmError(f"batch_size must be positive, got {batch_size}")
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return [order[k:k + batch_size] for k in range(0, len(order), batch_size)]


def restore_order(batches: Sequence[Sequence[int]], results: Sequence[Sequence[T]]) -> list[T]:
    """Per-batch results back in example order.

    Args:
        batches: the batches of example indices (e.g. `sorted_batches`), covering 0 .. n-1 once each.
        results: results[b][k] belongs to example batches[b][k].
    Returns:
        The n results, the i-th belonging to example i.
    """
    out: list = [None] * sum(len(b) for b in batches)
    for idx, values in zip(batches, results, strict=True):
        for i, value in zip(idx, values, strict=True):
            out[i] = value
    return out
