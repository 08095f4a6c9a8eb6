import numpy as np
import pytest

from albertlm.data.bucketing import bucket_by_length, padded_tokens
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
