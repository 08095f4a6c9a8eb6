import numpy as np
import pytest

from albertlm.data.bucketing import bucket_by_length, padded_tokens, restore_order, sorted_batches
from albertlm.errors import AlbertlmError


def _lengths(n=203, seed=0):
    return np.random.default_rng(seed).integers(32, 513, size=n).tolist()


@pytest.mark.parametrize("pool_batches", [1, 4, 1000])
@pytest.mark.parametrize("batch_size", [1, 8, 7])
def test_every_example_once(batch_size, pool_batches):
    lengths = _lengths()
    batches = bucket_by_length(lengths, batch_size, np.random.default_rng(1), pool_batches)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))
    assert all(1 <= len(b) <= batch_size for b in batches)
    assert all(lengths[b[i]] >= lengths[b[i + 1]] for b in batches for i in range(len(b) - 1))


def test_drop_last_drops_only_short_batches():
    lengths = _lengths(50)
    batches = bucket_by_length(lengths, 8, np.random.default_rng(1), pool_batches=2, drop_last=True)
    assert all(len(b) == 8 for b in batches)
    assert len({i for b in batches for i in b}) == 8 * len(batches) == 48  # pools of 16, 16, 16, 2


def test_deterministic_given_the_generator():
    lengths = _lengths()
    a = bucket_by_length(lengths, 8, np.random.default_rng(5), 4)
    b = bucket_by_length(lengths, 8, np.random.default_rng(5), 4)
    c = bucket_by_length(lengths, 8, np.random.default_rng(6), 4)
    assert a == b and a != c


def test_bucketing_cuts_padding():
    lengths = _lengths(512)
    random_batches = bucket_by_length(lengths, 8, np.random.default_rng(0), pool_batches=1)
    bucketed = bucket_by_length(lengths, 8, np.random.default_rng(0), pool_batches=64)
    real = sum(lengths)
    assert padded_tokens(lengths, random_batches) > 1.5 * real  # ~8/9 x 512 vs a mean of 272
    assert padded_tokens(lengths, bucketed) < 1.05 * real


def test_rejects_bad_sizes():
    with pytest.raises(AlbertlmError):
        bucket_by_length([3, 4], 0, np.random.default_rng(0))


@pytest.mark.parametrize("batch_size", [1, 3, 8, 500])
def test_sorted_batches_sort_by_length_and_restore_order_inverts_them(batch_size):
    """Inference batches: shortest first, ties in input order (the order run_features always used), every
    example once; restore_order puts per-batch results back where their examples were."""
    lengths = np.random.default_rng(2).integers(1, 9, size=203).tolist()  # many ties
    batches = sorted_batches(lengths, batch_size)
    flat = [i for b in batches for i in b]
    assert flat == sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    assert all(len(b) == batch_size for b in batches[:-1]) and 1 <= len(batches[-1]) <= batch_size
    results = [[f"example {i}" for i in b] for b in batches]
    assert restore_order(batches, results) == [f"example {i}" for i in range(len(lengths))]
    assert sorted_batches([], batch_size) == [] and restore_order([], []) == []
    with pytest.raises(AlbertlmError):
        sorted_batches([3, 4], 0)
    with pytest.raises(ValueError):
        restore_order(batches, results[:-1])
