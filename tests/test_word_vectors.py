"""Word vectors of a task's own text (train/word_vectors.py): co-occurrence, PPMI, a seeded truncated SVD,
rows scaled to the random init's std; specials and pieces without context keep their random rows."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from albertlm.errors import AlbertlmError
from albertlm.tokenizer import Tokenizer, train_tokenizer
from albertlm.train.word_vectors import (cooccurrence, fit_word_vectors, truncated_svd, word_vectors_from_ids,
                                         write_rows)
from albertlm.vocab import NUM_SPECIAL

V, E, STD = 60, 8, 0.02
TWINS, LONER = (10, 11), 12
"""10 and 11 always appear in the same contexts (pieces 20..29); 12 in others (30..39)."""
UNSEEN = 50
"""A piece no text holds."""


def packed(texts: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(ids [T], offsets [N+1]) of some texts of piece ids."""
    offsets = np.cumsum([0] + [len(t) for t in texts])
    return np.array([i for t in texts for i in t], dtype=np.int64), offsets


def corpus(seed: int = 0, n: int = 600) -> tuple[np.ndarray, np.ndarray]:
    """Texts of 7 pieces: a centre piece among context pieces of its group, with a special token at each end."""
    r = random.Random(seed)
    texts = []
    for _ in range(n):
        centre = r.choice([*TWINS, LONER, 13])
        group = range(20, 30) if centre in TWINS else range(30, 40)
        context = r.choices(group, k=6)
        texts.append([2, *context[:3], centre, *context[3:], 3])  # [CLS] ... [SEP]: excluded from every pair
    return packed(texts)


def vectors(seed: int = 0, **kw):
    ids, offsets = corpus()
    return word_vectors_from_ids(ids, offsets, V, E, STD, torch.Generator().manual_seed(seed),
                                 excluded=range(NUM_SPECIAL), **kw)


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(a @ b / (a.norm() * b.norm()))


def test_pieces_of_the_same_contexts_get_close_vectors():
    result = vectors()
    v = result.vectors
    assert cosine(v[TWINS[0]], v[TWINS[1]]) > 0.9
    assert cosine(v[TWINS[0]], v[LONER]) < 0.3 and cosine(v[TWINS[1]], v[LONER]) < 0.3
    assert cosine(v[LONER], v[13]) > 0.9  # the other pair sharing contexts


def test_the_rows_get_the_init_std_and_the_others_keep_theirs():
    result = vectors()
    mask = result.initialised
    assert not mask[:NUM_SPECIAL].any() and not mask[UNSEEN]  # specials, and a piece never seen
    assert mask[[*TWINS, LONER, 13, *range(20, 40)]].all() and int(mask.sum()) == 24
    assert result.share == pytest.approx(24 / V)
    filled = result.vectors[mask]
    assert filled.mean(0).abs().max() < 1e-6  # each coordinate centred
    assert filled.pow(2).mean().sqrt() == pytest.approx(STD, rel=1e-4)  # the init's std
    assert not result.vectors[~mask].any()
    table = torch.nn.init.normal_(torch.empty(V, E), std=STD, generator=torch.Generator().manual_seed(5))
    before = table.clone()
    write_rows(table, result)
    assert torch.equal(table[~mask], before[~mask]) and torch.equal(table[mask], filled)
    with pytest.raises(AlbertlmError, match=r"the table is \(60, 4\)"):
        write_rows(torch.zeros(V, 4), result)


def test_deterministic_with_the_seed():
    a, b = vectors(seed=3), vectors(seed=3)
    assert torch.equal(a.vectors, b.vectors) and torch.equal(a.initialised, b.initialised)
    assert a.pairs == b.pairs > 0


def test_the_svd_matches_the_exact_one():
    g = torch.Generator().manual_seed(0)
    A = torch.randn(40, 30, generator=g) @ torch.diag(torch.linspace(3, 0.1, 30)) @ torch.randn(30, 30, generator=g)
    U, S = truncated_svd(A.to_sparse().coalesce(), 5, torch.Generator().manual_seed(1))
    exact = torch.linalg.svd(A)
    assert torch.allclose(S, exact.S[:5], rtol=1e-4)
    assert torch.allclose((U.T @ exact.U[:, :5]).abs(), torch.eye(5), atol=1e-3)  # the same directions
    assert (U[U.abs().argmax(0), torch.arange(5)] > 0).all()  # each column's sign fixed


def test_counts_are_symmetric_weighted_by_distance_and_stay_inside_a_text():
    ids, offsets = packed([[5, 6, 7], [8, 5]])
    rows, cols, values = cooccurrence(ids, offsets, 10, window=2)
    m = np.zeros((10, 10))
    m[rows, cols] = values
    assert np.allclose(m, m.T)
    assert m[5, 6] == 1 and m[5, 7] == 0.5 and m[6, 7] == 1 and m[8, 5] == 1
    assert m[7, 8] == 0  # 7 ends the first text, 8 starts the second
    rows, _, _ = cooccurrence(ids, offsets, 10, window=2, excluded=[5])
    assert 5 not in rows


@pytest.mark.parametrize("texts", [[], [[7], [8], [9]], [[2, 7, 3]], [[7, 7, 7]]],
                         ids=["empty", "one-piece texts", "only specials beside it", "one piece alone"])
def test_too_little_text_is_refused(texts):
    ids, offsets = packed(texts)
    with pytest.raises(AlbertlmError, match=r"word vectors: the text gives [01] piece\(s\) a context within 5 "
                                            r"pieces \(at least 2 are needed\); it is too small"):
        word_vectors_from_ids(ids, offsets, V, E, STD, torch.Generator().manual_seed(0), excluded=range(NUM_SPECIAL))


def test_a_wider_table_than_the_vocabulary_pads_with_zero_directions():
    ids, offsets = corpus()
    result = word_vectors_from_ids(ids, offsets, 40, 48, STD, torch.Generator().manual_seed(0),
                                   excluded=range(NUM_SPECIAL))
    assert result.vectors.shape == (40, 48) and not result.vectors[:, 40:].any()
    assert result.vectors[result.initialised].pow(2).mean().sqrt() == pytest.approx(STD, rel=1e-4)


def test_from_texts_through_a_tokenizer(tmp_path):
    r = random.Random(0)
    words = "good great fine bad awful poor movie film plot story".split()
    texts = [" ".join(r.choices(words, k=8)) for _ in range(300)]
    train_tokenizer(texts, tmp_path, vocab_size=40, log=lambda line: None)
    tok = Tokenizer.load(tmp_path)
    result = fit_word_vectors(texts, tok, 16, STD, torch.Generator().manual_seed(0))
    assert result.vectors.shape == (tok.vocab_size, 16) and result.seconds > 0
    assert not result.initialised[list(tok.special_ids.excluded)].any()
    assert result.initialised[tok.encode("good movie")].all()
