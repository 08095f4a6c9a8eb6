"""Word vectors of a task's own text (train/word_vectors.py): co-occurrence, PPMI, a seeded truncated SVD,
rows scaled to the random init's std; specials and pieces without context keep their random rows."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from albertlm.errors import AlbertlmError
from albertlm.tokenizer import Tokenizer, train_tokenizer
from albertlm.train.word_vectors import (cooccurrence, fit_word_vectors, label_ratios, truncated_svd,
                                         word_vectors_from_ids, write_rows)
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


# ---------------------------------------------------------------------------- label coordinates
def test_label_ratios_lean_to_the_class_a_piece_is_seen_in():
    """Two classes: one coordinate, the add-one smoothed log-odds ratio less the prior's."""
    # piece 10 only in class-1 texts (5 times), 11 only in class 0 (once), 12 in both alike, 13 unlabelled
    ids, offsets = packed([[10, 12], [10, 12], [10], [10], [10], [11, 12], [12], [13, 10]])
    labels = np.array([1, 1, 1, 1, 1, 0, 0, -1])
    r = label_ratios(ids, offsets, labels, 20, 2)
    assert r.shape == (20, 1)
    n1, n0 = 7, 3  # occurrences of labelled pieces in each class
    prior = np.log((n1 + 1) / (n0 + 1))
    assert r[10, 0] == pytest.approx(np.log(6 / 1) - prior)  # (5 + 1) / (0 + 1): the unlabelled 10 not counted
    assert r[11, 0] == pytest.approx(np.log(1 / 2) - prior)
    assert r[12, 0] == pytest.approx(np.log(3 / 3) - prior)
    assert r[13, 0] == 0 and r[0, 0] == 0  # seen only without a label; never seen
    assert r[10, 0] > 0 > r[11, 0]


def test_label_ratios_of_several_classes_and_their_refusals():
    ids, offsets = packed([[5], [5], [6], [7]])
    r = label_ratios(ids, offsets, np.array([0, 0, 1, 2]), 10, 3)
    assert r.shape == (10, 3) and r[5].argmax() == 0 and r[6].argmax() == 1 and r[7].argmax() == 2
    for labels, classes in [(np.array([0, 1, 2]), 3), (np.array([0, 1, 2, 3]), 3), (np.array([0, 1, 1, -2]), 3),
                            (np.array([0, 0, 0, 0]), 1)]:
        with pytest.raises(AlbertlmError, match="label coordinates: 4 labels in"):
            label_ratios(ids, offsets, labels, 10, classes)


def lean_corpus(n: int = 600, seed: int = 0):
    """corpus(): class 1 when the centre piece is a twin, 0 otherwise."""
    ids, offsets = corpus(seed, n)
    centre = ids[offsets[:-1] + 4]
    return ids, offsets, np.isin(centre, TWINS).astype(np.int64)


def test_label_coordinates_take_the_last_coordinates_at_the_strongest_scale():
    ids, offsets, labels = lean_corpus()
    plain = word_vectors_from_ids(ids, offsets, V, E, STD, torch.Generator().manual_seed(0),
                                  excluded=range(NUM_SPECIAL))
    result = word_vectors_from_ids(ids, offsets, V, E, STD, torch.Generator().manual_seed(0),
                                   excluded=range(NUM_SPECIAL), labels=labels, classes=2)
    assert torch.equal(result.initialised, plain.initialised)
    filled = result.vectors[result.initialised]
    svd, lean = filled[:, :-1], filled[:, -1]
    assert svd.pow(2).mean().sqrt() == pytest.approx(STD, rel=1e-4)  # the text's part as before
    assert lean.mean().abs() < 1e-6
    assert lean.std(unbiased=False) == pytest.approx(svd.std(0, unbiased=False).max(), rel=1e-4)
    v = result.vectors[:, -1]
    assert v[TWINS[0]] > 0 and v[TWINS[1]] > 0 and v[LONER] < 0 and v[13] < 0  # the class each centre marks
    # the SVD part is the same directions as a rank E-1 factorisation: the first of them unchanged but for scale
    assert cosine(result.vectors[:, 0], plain.vectors[:, 0]) > 0.999


def test_label_coordinates_leave_at_least_half_the_table_to_the_text():
    ids, offsets, labels = lean_corpus()
    with pytest.raises(AlbertlmError, match="at most half may be labels"):
        word_vectors_from_ids(ids, offsets, V, 4, STD, torch.Generator().manual_seed(0), excluded=range(NUM_SPECIAL),
                              labels=np.arange(len(labels)) % 3, classes=3)


def test_label_coordinates_through_a_tokenizer_read_the_labelled_texts_only(tmp_path):
    r = random.Random(0)
    good, bad, neutral = "good great fine".split(), "bad awful poor".split(), "movie film plot story".split()
    labels = [r.randrange(2) for _ in range(300)]
    texts = [" ".join(r.choices((good if y else bad), k=2) + r.choices(neutral, k=6)) for y in labels]
    train_tokenizer(texts, tmp_path, vocab_size=40, log=lambda line: None)
    tok = Tokenizer.load(tmp_path)
    extra = ["awful awful awful movie"] * 50  # unlabelled: counts for the SVD only
    result = fit_word_vectors([*texts, *extra], tok, 16, STD, torch.Generator().manual_seed(0), labels=labels,
                              classes=2)
    lean = {w: float(result.vectors[tok.encode(w), -1].sum()) for w in good + bad + neutral}  # pieces are shared
    assert all(lean[w] > 0 for w in good) and all(lean[w] < 0 for w in bad)
    assert max(abs(lean[w]) for w in neutral) < min(abs(lean[w]) for w in good + bad) / 3
