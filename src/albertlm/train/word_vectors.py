"""Word vectors from the task's own text, to start the E-wide word table of a random ALBERT.

A random model's word table (V x E, N(0, initializer_range)) knows nothing about its pieces; the
fine-tuning text already says which pieces occur in the same contexts. Count-based vectors
(Levy, Goldberg & Dagan 2015, "Improving distributional similarity with lessons learned from word
embeddings") take seconds to compute from it:

  1. the training texts as piece ids (the run's own tokenizer);
  2. co-occurrence counts in a symmetric window of `window` pieces, each pair weighted
     1/distance, never across two texts; special tokens take part in no pair;
  3. positive PMI with context-distribution smoothing (context counts raised to alpha = 0.75),
     shifted by log k (k = 1: plain PPMI);
  4. a rank-E truncated SVD by randomized subspace iteration (Halko, Martinsson & Tropp 2011),
     drawn from an explicit generator; the vectors are U * sqrt(S) (Levy et al.'s eigenvalue
     weighting p = 0.5);
  5. centred per coordinate, then scaled by one factor to the init's std (initializer_range), so
     the model's first layer sees inputs of the scale it was initialised for. One factor, not one
     per coordinate: that keeps sqrt(S)'s ranking of the directions.

Pieces without a positive-PMI context (never seen, only alone, or only beside pieces that are
everywhere) and the special tokens keep their random rows.

Label coordinates (optional, `labels`): for a single-text classification task the training labels say
which class each piece leans to, as Naive Bayes reads them. K of the E coordinates (K = 1 for two classes,
else one per class) then carry each piece's smoothed log-ratio instead of the K weakest SVD directions:

  r_c(w) = log((n_wc + 1) / (n_w + C)) - log((N_c + 1) / (N + C)),

n_wc the occurrences of piece w in texts of class c, n_w = sum_c n_wc, N_c and N the same over all
pieces (add-one smoothing: a piece seen once leans little, a piece seen often in one class leans
far). Two classes give the one coordinate r_1 - r_0, the log-odds ratio. Each label coordinate is
centred and scaled to the std of the strongest SVD coordinate, so that it enters the model as strongly
as the text's main direction does. They are the start of the word table, trained like every other
weight: the model that comes out is a plain ALBERT, with no counts kept beside it.

Knows no model: it returns a table and the rows it fills (`write_rows` copies them into a word-embedding
table).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from albertlm.errors import AlbertlmError

DEFAULT_WINDOW = 5
"""Pieces on each side of a piece that count as its context."""
CONTEXT_ALPHA = 0.75
"""Context-distribution smoothing: P_alpha(c) is proportional to count(c) ** alpha (Levy et al. 2015, §3.2)."""
OVERSAMPLE = 10
"""Extra random directions of the subspace iteration beyond the rank asked for."""
POWER_ITERATIONS = 4
"""Subspace (power) iterations: enough for PPMI's slowly decaying spectrum at rank 128."""


class TooLittleText(AlbertlmError):
    """The text gives fewer than two pieces a context: there is nothing to learn vectors from."""


@dataclass(frozen=True)
class WordVectors:
    """What `fit_word_vectors` computed."""

    vectors: torch.Tensor
    """float32 [V, E]: the new rows (zero where `initialised` is False)."""
    initialised: torch.Tensor
    """bool [V]: the rows to write; special tokens and pieces without a positive-PMI context are False."""
    pairs: int
    """Distinct (piece, context) pairs with a positive PMI: the matrix's nonzero entries."""
    seconds: float
    """Wall time of the whole computation, encoding the texts included when it did."""

    @property
    def share(self) -> float:
        """Share of the vocabulary's rows initialised."""
        return float(self.initialised.float().mean())


def cooccurrence(ids: np.ndarray, offsets: np.ndarray, vocab_size: int, window: int,
                 excluded: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Symmetric co-occurrence counts of a packed corpus, as a sparse matrix's coordinates.

    Args:
        ids: int [T], every text's piece ids one after the other.
        offsets: int [N+1]: text i is ids[offsets[i]:offsets[i+1]].
        vocab_size: V.
        window: the largest distance between two pieces that counts; a pair d apart adds 1/d.
        excluded: ids that take part in no pair (special tokens).
    Returns:
        (rows, cols, values) of the V x V matrix M = C + C^T, C counting each pair (earlier piece,
        later piece) once; every (row, col) appears once.
    """
    ids = np.asarray(ids, dtype=np.int64)
    lengths = np.diff(np.asarray(offsets, dtype=np.int64))
    text = np.repeat(np.arange(len(lengths)), lengths)  # [T]: the text each position belongs to
    ordinary = np.ones(vocab_size, dtype=bool)
    ordinary[list(excluded)] = False
    keys, weights = [], []
    for d in range(1, window + 1):
        a, b = ids[:-d], ids[d:]  # every pair d apart
        keep = (text[:-d] == text[d:]) & ordinary[a] & ordinary[b]
        a, b = a[keep], b[keep]
        keys.append(np.minimum(a, b) * vocab_size + np.maximum(a, b))  # unordered: counted once, mirrored below
        weights.append(np.full(len(a), 1.0 / d))
    key = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    unique, inverse = np.unique(key, return_inverse=True)
    counts = np.bincount(inverse, weights=np.concatenate(weights) if weights else None, minlength=len(unique))
    lo, hi = unique // vocab_size, unique % vocab_size
    off = lo != hi
    rows = np.concatenate([lo, hi[off]])
    cols = np.concatenate([hi, lo[off]])
    values = np.concatenate([np.where(off, counts, 2 * counts), counts[off]])  # a piece beside itself: both ways
    return rows, cols, values


def ppmi(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, vocab_size: int, alpha: float = CONTEXT_ALPHA,
         shift: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shifted positive PMI of a symmetric co-occurrence matrix, on its nonzero entries.

    PMI(w, c) = log(P(w, c) / (P(w) P_alpha(c))) with P(w, c) = M_wc / total, P(w) = count(w) / total and
    P_alpha(c) = count(c)^alpha / sum_c' count(c')^alpha; an entry is kept where PMI - log(shift) > 0.

    Args:
        rows, cols, values: the matrix (`cooccurrence`).
        vocab_size: V.
        alpha: context-distribution smoothing.
        shift: k of the shift log k (Levy et al.'s negative samples; 1 = none).
    Returns:
        (rows, cols, values) of the entries that stay positive.
    """
    if not len(values):
        return rows, cols, values
    counts = np.bincount(rows, weights=values, minlength=vocab_size)  # [V]; symmetric: rows = columns
    total = counts.sum()
    smoothed = counts ** alpha
    p_context = smoothed / smoothed.sum()
    pmi = np.log(values / total) - np.log(counts[rows] / total) - np.log(p_context[cols]) - math.log(shift)
    keep = pmi > 0
    return rows[keep], cols[keep], pmi[keep]


def truncated_svd(matrix: torch.Tensor, rank: int, generator: torch.Generator,
                  oversample: int = OVERSAMPLE, iterations: int = POWER_ITERATIONS
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """The leading `rank` left singular vectors and values of a (sparse) matrix by randomized subspace
    iteration (Halko et al. 2011, Algorithm 4.4), its random start drawn from `generator`.

    torch.svd_lowrank would do the same but draws from torch's global generator.

    Args:
        matrix: [m, n], sparse COO or dense, float32.
        rank: how many singular pairs (at most min(m, n)).
        generator: the random start's.
    Returns:
        (U [m, rank], S [rank]), S descending; each column's sign is fixed (its largest entry in
        absolute value is positive), so the result does not depend on the solver's sign choices.
    """
    m, n = matrix.shape
    q = min(rank + oversample, m, n)
    transpose = matrix.t().coalesce() if matrix.is_sparse else matrix.t()
    Q, _ = torch.linalg.qr(matrix @ torch.randn(n, q, generator=generator, dtype=matrix.dtype))  # [m, q]
    for _ in range(iterations):
        Z, _ = torch.linalg.qr(transpose @ Q)  # [n, q]
        Q, _ = torch.linalg.qr(matrix @ Z)  # [m, q]
    B = (transpose @ Q).t()  # [q, n] = Q^T A
    Ub, S, _ = torch.linalg.svd(B, full_matrices=False)  # Ub [q, q]
    U = (Q @ Ub)[:, :rank]  # [m, rank]
    peak = U.abs().argmax(0)  # [rank]
    U = U * torch.sign(U[peak, torch.arange(U.shape[1])])  # sign of each column's largest entry -> +
    return U, S[:rank]


def label_ratios(ids: np.ndarray, offsets: np.ndarray, labels: np.ndarray, vocab_size: int, classes: int
                 ) -> np.ndarray:
    """Each piece's smoothed log-ratio per class (the module docstring's r_c(w)).

    Args:
        ids, offsets: the corpus (`cooccurrence`).
        labels: int [N], the class id of each text, in [0, classes), or -1 for a text without a label
            (unlabelled text: it counts for nothing here).
        vocab_size: V.
        classes: C, at least 2.
    Returns:
        float64 [V, K]: K = 1 (r_1 - r_0) for two classes, else K = C (r_c); 0 for a piece never seen.
    """
    labels = np.asarray(labels, dtype=np.int64)
    lengths = np.diff(np.asarray(offsets, dtype=np.int64))
    if len(labels) != len(lengths) or classes < 2 or (len(labels) and (labels.min() < -1 or labels.max() >= classes)):
        raise AlbertlmError(f"label coordinates: {len(lengths)} labels in [0, {classes}) (or -1: none) are needed, "
                            f"one per text; got {len(labels)}")
    label_of = np.repeat(labels, lengths)  # [T]
    keep = label_of >= 0
    piece_class = label_of[keep] + classes * np.asarray(ids, dtype=np.int64)[keep]
    counts = np.bincount(piece_class, minlength=vocab_size * classes).reshape(vocab_size, classes).astype(np.float64)
    seen = counts.sum(1) > 0
    totals = counts.sum(0)
    prior = np.log((totals + 1) / (totals.sum() + classes))  # [C]
    ratios = np.log((counts + 1) / (counts.sum(1, keepdims=True) + classes)) - prior
    ratios[~seen] = 0.0
    return ratios[:, 1:] - ratios[:, :1] if classes == 2 else ratios


def word_vectors_from_ids(ids: np.ndarray, offsets: np.ndarray, vocab_size: int, dim: int, std: float,
                          generator: torch.Generator, *, excluded: Sequence[int] = (), window: int = DEFAULT_WINDOW,
                          alpha: float = CONTEXT_ALPHA, shift: float = 1.0, labels: np.ndarray | None = None,
                          classes: int = 0) -> WordVectors:
    """PPMI-SVD vectors of a packed corpus, scaled to a random init's std.

    Args:
        ids, offsets: the corpus (`cooccurrence`).
        vocab_size, dim: V and E of the table to fill.
        std: the init's std (config.initializer_range): the filled rows get mean 0 per coordinate
            and this std over all their SVD coordinates' entries.
        generator: the SVD's random start (the only random choice).
        excluded: ids never counted and never filled (special tokens).
        window, alpha, shift: as in `cooccurrence` and `ppmi`.
        labels, classes: the class id of each text and the number of classes, for label coordinates
            (the module docstring; `label_ratios`); None: the SVD fills all E coordinates.
    Returns:
        WordVectors.
    Raises:
        AlbertlmError: fewer than two pieces share a window with another piece (an empty or
            one-word text): there is nothing to factorise.
    """
    start = time.perf_counter()
    if window < 1 or not std > 0 or dim < 1:
        raise AlbertlmError(f"word vectors: window and dim must be positive and std above 0, got window={window}, "
                            f"dim={dim}, std={std}")
    rows, cols, values = ppmi(*cooccurrence(ids, offsets, vocab_size, window, excluded), vocab_size, alpha, shift)
    initialised = np.zeros(vocab_size, dtype=bool)
    initialised[rows] = True
    initialised[list(excluded)] = False
    if initialised.sum() < 2:
        raise TooLittleText(f"word vectors: the text gives {int(initialised.sum())} piece(s) a context within "
                            f"{window} pieces (at least 2 are needed); it is too small to learn vectors from")
    matrix = torch.sparse_coo_tensor(torch.from_numpy(np.stack([rows, cols])), torch.from_numpy(values).float(),
                                     (vocab_size, vocab_size), check_invariants=True).coalesce()
    ratios = None if labels is None else torch.from_numpy(label_ratios(ids, offsets, labels, vocab_size, classes))
    k = 0 if ratios is None else ratios.shape[1]
    if k and not 2 * k <= dim:
        raise AlbertlmError(f"label coordinates: {k} of them leave too few of the {dim} coordinates for the text's "
                            "vectors (at most half may be labels)")
    rank = min(dim - k, vocab_size)
    U, S = truncated_svd(matrix, rank, generator)
    vectors = torch.zeros(vocab_size, dim)
    vectors[:, :rank] = U * S.sqrt()  # [V, rank]; further columns (E - K > V) stay 0
    mask = torch.from_numpy(initialised)
    filled = vectors[mask] - vectors[mask].mean(0)  # [n, E], each coordinate centred
    text = filled[:, :dim - k]
    filled[:, :dim - k] = text * (std / text.pow(2).mean().sqrt().clamp_min(1e-30))
    if k:
        lean = ratios[mask].float()
        lean = lean - lean.mean(0)
        strongest = filled[:, :dim - k].std(0, unbiased=False).max()
        filled[:, dim - k:] = lean * (strongest / lean.std(0, unbiased=False).clamp_min(1e-30))
    vectors = torch.zeros_like(vectors)
    vectors[mask] = filled
    return WordVectors(vectors=vectors, initialised=mask, pairs=len(values), seconds=time.perf_counter() - start)


def fit_word_vectors(texts: Sequence[str], tokenizer, dim: int, std: float, generator: torch.Generator, *,
                     window: int = DEFAULT_WINDOW, labels: Sequence[int] | None = None, classes: int = 0
                     ) -> WordVectors:
    """PPMI-SVD word vectors of some texts in a tokenizer's pieces (`word_vectors_from_ids`).

    Args:
        texts: the raw training texts.
        tokenizer: a Vocabulary (tokenizer/base.py): its encode_batch_packed, vocab_size and
            special_ids (never filled).
        dim, std, generator, window: as `word_vectors_from_ids`.
        labels, classes: the class ids of the first len(labels) texts (the labelled ones; texts after
            them, unlabelled, count for the SVD only) and the number of classes, for label coordinates.
    Returns:
        WordVectors, `seconds` counting the encoding too.
    """
    start = time.perf_counter()
    ids, _, offsets = tokenizer.encode_batch_packed(list(texts), word_starts=False)
    label_kw = {}
    if labels is not None:  # the ratios read the labelled texts only
        n = len(labels)
        label_kw = {"labels": np.asarray(labels), "classes": classes}
        if n < len(offsets) - 1:
            label_kw["labels"] = np.concatenate([np.asarray(labels, dtype=np.int64), np.full(len(offsets) - 1 - n, -1)])
    result = word_vectors_from_ids(ids, offsets, tokenizer.vocab_size, dim, std, generator,
                                   excluded=tokenizer.special_ids.excluded, window=window, **label_kw)
    return WordVectors(vectors=result.vectors, initialised=result.initialised, pairs=result.pairs,
                       seconds=time.perf_counter() - start)


@torch.no_grad()
def write_rows(table: torch.Tensor, result: WordVectors) -> None:
    """Copy the initialised rows of `result` into an embedding table [V, E] in place; the others keep theirs."""
    if tuple(table.shape) != tuple(result.vectors.shape):
        raise AlbertlmError(f"word vectors: the table is {tuple(table.shape)}, the vectors "
                            f"{tuple(result.vectors.shape)}")
    table[result.initialised] = result.vectors[result.initialised].to(table.dtype)
