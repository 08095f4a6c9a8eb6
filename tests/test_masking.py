"""Whole-word n-gram masking: determinism, invariants and the paper's statistics."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from albertlm.data import instances as instances_module
from albertlm.data import masking as masking_module
from albertlm.data.instances import create_block_instances
from albertlm.data.masking import mask_budget, mask_instance, ngram_probs
from albertlm.vocab import CLS_ID, IGNORE_INDEX, MASK_ID, PAD_ID, SEP_ID

V = 1000


def _documents(seed, num_docs=40):
    """A few hundred sentences per document, 3-24 words of 1-3 pieces, ids below V."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(num_docs):
        doc = []
        for _ in range(rng.integers(100, 300)):
            pieces = rng.integers(1, 4, size=int(rng.integers(3, 25)))
            ws = np.zeros(int(pieces.sum()), bool)
            ws[np.concatenate(([0], np.cumsum(pieces)[:-1]))] = True
            doc.append((rng.integers(5, V, size=len(ws)).astype(np.int32), ws))
        docs.append(doc)
    return docs


@pytest.fixture(scope="module")
def instances():
    out = list(create_block_instances(_documents(0), rng=np.random.default_rng(1), max_seq_length=128))
    return out[:2000]


@pytest.fixture(scope="module")
def masked(instances):
    """Every instance masked once, with a budget that max_predictions does not bind."""
    rng = np.random.default_rng(2)
    return [mask_instance(i.tokens, i.word_start, rng, V, max_predictions=1000) for i in instances]


def _words(tokens, word_start):
    """Word index of every maskable token (-1 at [CLS]/[SEP]/pad), computed the slow, obvious way."""
    out, current = np.full(len(tokens), -1), -1
    for p, (t, w) in enumerate(zip(tokens, word_start)):
        if t in (CLS_ID, SEP_ID, PAD_ID):
            continue
        if w or out[p - 1] == -1:
            current += 1
        out[p] = current
    return out


def test_deterministic(instances):
    def run(seed):
        rng = np.random.default_rng(seed)
        outs = [mask_instance(i.tokens, i.word_start, rng, V) for i in instances[:200]]
        return b"".join(o.input_ids.tobytes() + o.labels.tobytes() + o.span_n.tobytes() for o in outs)

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_never_touches_the_global_rng(instances, monkeypatch):
    """The official bug: n came from np.random. Any use of the global RNG now raises."""
    for name in ("random", "rand", "randint", "choice", "shuffle", "permutation", "seed"):
        monkeypatch.setattr(np.random, name, lambda *a, **k: pytest.fail("global numpy RNG used"))
    rng = np.random.default_rng(0)
    for inst in instances[:50]:
        mask_instance(inst.tokens, inst.word_start, rng, V)
    list(create_block_instances(_documents(1, 3), rng=rng, max_seq_length=64, objective="nsp"))


def test_invariants(instances, masked):
    exact = 0
    for inst, out in zip(instances, masked):
        tokens = inst.tokens
        predicted = out.labels != IGNORE_INDEX
        special = np.isin(tokens, [CLS_ID, SEP_ID, PAD_ID])
        assert out.input_ids.dtype == np.int32 and out.labels.dtype == np.int32
        assert not predicted[special].any()  # never [CLS]/[SEP]/padding
        assert np.array_equal(out.labels[predicted], tokens[predicted])  # labels = originals
        assert np.array_equal(out.input_ids[~predicted], tokens[~predicted])
        replaced = out.input_ids[predicted]
        assert ((replaced == MASK_ID) | (replaced >= 5)).all() and (replaced < V).all()
        # Whole words: a word is predicted entirely or not at all.
        words = _words(tokens, inst.word_start)
        hit = np.unique(words[predicted])
        assert np.array_equal(predicted, np.isin(words, hit) & (words >= 0))
        # Spans are disjoint: the words they cover add up to the words predicted.
        assert int(out.span_words.sum()) == len(hit)
        assert (out.span_words >= 1).all() and (out.span_words <= out.span_n).all()
        # The budget is a hard cap (max_predictions), met exactly unless no remaining word fits.
        budget = mask_budget(np.count_nonzero(~special), 0.15, 1000)
        assert np.count_nonzero(predicted) <= budget
        exact += np.count_nonzero(predicted) == budget
    assert exact / len(masked) > 0.98


def test_statistics(instances, masked):
    """Mask rate 15%, 80/10/10 per token, drawn n-gram lengths 6/11, 3/11, 2/11.

    The n-gram measure is the n drawn for each masked span. A span cut short by the end of a
    segment or by the budget keeps its drawn n (span_words says how many words it covered); counting
    only uncut spans would under-count long n-grams, which are the ones that get cut.
    """
    maskable = sum(np.count_nonzero(~np.isin(i.tokens, [CLS_ID, SEP_ID])) for i in instances)
    predicted = sum(np.count_nonzero(o.labels != IGNORE_INDEX) for o in masked)
    assert abs(predicted / maskable - 0.15) < 0.005

    kinds = np.zeros(3)
    for inst, out in zip(instances, masked):
        sel = out.labels != IGNORE_INDEX
        new, old = out.input_ids[sel], inst.tokens[sel]
        kinds += [np.sum(new == MASK_ID), np.sum((new != MASK_ID) & (new != old)), np.sum(new == old)]
    kinds /= kinds.sum()
    # "random" that happens to draw the original token (1 in V - 5) counts as kept
    assert np.allclose(kinds, [0.8, 0.1, 0.1], atol=0.02)

    span_n = np.concatenate([o.span_n for o in masked])
    freq = np.bincount(span_n, minlength=4)[1:] / len(span_n)
    assert len(span_n) > 10000
    assert np.allclose(freq, [6 / 11, 3 / 11, 2 / 11], atol=0.02)
    assert np.allclose(ngram_probs(3), [6 / 11, 3 / 11, 2 / 11])


def test_max_predictions_and_max_ngram(instances):
    rng = np.random.default_rng(3)
    for inst in instances[:300]:
        out = mask_instance(inst.tokens, inst.word_start, rng, V, max_predictions=5, max_ngram=1)
        assert np.count_nonzero(out.labels != IGNORE_INDEX) <= 5
        assert (out.span_n == 1).all() and (out.span_words == 1).all()
    assert mask_budget(0, 0.15, 20) == 0
    assert mask_budget(3, 0.15, 20) == 1  # max(1, ...)
    assert mask_budget(509, 0.15, 20) == 20 and mask_budget(100, 0.15, 20) == 15


def test_word_never_crosses_a_separator():
    """An unflagged piece right after [SEP] (a front-truncated word fragment) is its own word."""
    tokens = np.array([CLS_ID, 10, 11, SEP_ID, 12, 13, SEP_ID], np.int32)
    word_start = np.array([0, 1, 0, 0, 0, 0, 0], bool)
    seen = set()
    for seed in range(200):
        out = mask_instance(tokens, word_start, np.random.default_rng(seed), V, masked_lm_prob=0.5)
        pred = tuple(np.flatnonzero(out.labels != IGNORE_INDEX))
        assert pred in {(1, 2), (4, 5)}  # budget 2: exactly one of the two words
        seen.add(pred)
    assert len(seen) == 2


def test_pipeline_is_numpy_only():
    """The data modules import neither torch nor the model."""
    for module in (instances_module, masking_module):
        tree = ast.parse(Path(module.__file__).read_text())
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                names.add(node.module or "")
        assert not any(n.split(".")[0] == "torch" or n.startswith("albertlm.model") for n in names)


def test_masking_uses_the_vocabulary_special_ids():
    # A BERT vocab.txt layout: [PAD] 0, [unused*] 1-99, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103.
    from albertlm.vocab import SpecialIds

    special = SpecialIds(pad=0, unk=100, cls=101, sep=102, mask=103, reserved=tuple(range(1, 100)))
    rng = np.random.default_rng(0)
    drawn = []
    for _ in range(300):
        body = rng.integers(104, 200, size=20)
        tokens = np.concatenate([[101], body[:9], [102], body[9:], [102], [0, 0]]).astype(np.int32)
        starts = np.ones(len(tokens), bool)
        m = mask_instance(tokens, starts, rng, vocab_size=200, masked_lm_prob=0.5, max_predictions=20,
                          special=special)
        predicted = m.labels != IGNORE_INDEX
        assert not predicted[[0, 10, 22, 23, 24]].any()  # [CLS], [SEP], [PAD] never masked
        new = m.input_ids[predicted]
        drawn += new[(new != 103) & (new != m.labels[predicted])].tolist()
        assert ((new == 103) | (new >= 104)).all()
    assert len(drawn) > 100 and min(drawn) >= 104
