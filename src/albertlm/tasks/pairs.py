"""Sentence pairs for embedding models, and the metrics of their vectors (numpy only).

A task's pair examples (`TextExample` with a `text_b`) become `Pairs` of one of three kinds:

    graded      a similarity score per pair (STS-B's 0-5: a regression task)
    binary      alike or not, by the task's `pair_positive` label (MRPC "1", QNLI "entailment", LCQMC "1")
    unlabelled  no labels at all: every pair is taken as alike (a positive)

The metrics compare the two texts' vectors, which the caller L2-normalises first (`unit_rows`; a
tf-idf vectorizer's rows already are), so every similarity is a cosine:

    graded      spearman, pearson       of the pair cosines against the gold scores (SentEval's STS protocol)
    binary      accuracy, threshold     the best accuracy of "alike when cosine >= t" over every t
    every kind  recall_at_1, recall_at_10, mrr
                                        each positive pair's first text is a query; the candidates are
                                        the distinct second texts of ALL pairs (negatives' too), the
                                        target its own pair's; a tie with another candidate counts
                                        against the target (so identical vectors are no help)

A graded pair counts as a positive (a retrieval query, an MNRL training pair) from `GRADED_POSITIVE` up.
The main metric, the one a best checkpoint is chosen by: spearman (graded), accuracy (binary), mrr
(unlabelled). Vectors may be dense numpy arrays or scipy sparse matrices (the tf-idf baselines).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.tasks import metrics

GRADED_POSITIVE = 4.0
"""The score from which a graded pair counts as alike: STS's 4 is "mostly equivalent, some unimportant
details differ" (Agirre et al., 2012 annotation guidelines)."""
MAIN_METRIC = {"graded": "spearman", "binary": "accuracy", "unlabelled": "mrr"}
"""Pair kind -> the metric a best dev checkpoint is chosen by (higher is better)."""
NOT_FRACTIONS = ("threshold", "queries", "candidates")
"""Metric entries that are not fractions in [0, 1]: a cosine and two counts (printed as they are)."""
RECALL_AT = (1, 10)


@dataclass(frozen=True)
class Pairs:
    """Sentence pairs and what is known about their similarity."""

    text_a: list[str]
    text_b: list[str]
    kind: str
    """graded, binary or unlabelled (module docstring)."""
    scores: np.ndarray | None
    """float64 [N]: the gold score (graded) or 1/0 (binary); None when unlabelled."""

    def __len__(self) -> int:
        return len(self.text_a)

    @property
    def positive(self) -> np.ndarray:
        """bool [N]: the pairs taken as alike (module docstring)."""
        if self.kind == "unlabelled":
            return np.ones(len(self), dtype=bool)
        return self.scores >= (GRADED_POSITIVE if self.kind == "graded" else 1.0)

    @property
    def main_metric(self) -> str:
        return MAIN_METRIC[self.kind]


def pairs_of(spec, examples: Sequence, source: str) -> Pairs:
    """The pairs of a task's examples.

    Args:
        spec: the task (its problem_type and pair_positive say the kind).
        examples: its reader's examples of one split.
        source: what the examples came from (task, split), for messages.
    Returns:
        Pairs of the kind the task's labels give.
    Raises:
        AlbertlmError: one line: the task has no sentence pairs, or labels that say nothing about
            similarity, or only some examples are labelled.
    """
    if not examples or any(getattr(e, "text_b", None) is None for e in examples):
        raise AlbertlmError(f"{source}: task {spec.name} has no sentence pairs (every example needs a second text); "
                            "embedding objectives and their evaluation take pair tasks such as sts-b, mrpc, qnli, "
                            "lcqmc, afqmc")
    a, b = [e.text_a for e in examples], [e.text_b for e in examples]
    labels = [e.label for e in examples]
    if all(label is None for label in labels):
        return Pairs(a, b, "unlabelled", None)
    if any(label is None for label in labels):
        raise AlbertlmError(f"{source}: {sum(label is None for label in labels)} of {len(labels)} pairs have no label")
    if spec.problem_type == "regression":
        return Pairs(a, b, "graded", np.asarray(labels, dtype=np.float64))
    if spec.pair_positive is None:
        raise AlbertlmError(f"{source}: task {spec.name}'s labels say nothing about similarity (it has no positive "
                            "pair label); use a graded task (sts-b) or one whose label marks alike pairs (mrpc, "
                            "qnli, rte, lcqmc, afqmc)")
    return Pairs(a, b, "binary", np.asarray([label == spec.pair_positive for label in labels], dtype=np.float64))


# ---------------------------------------------------------------------------- metrics
def unit_rows(x: np.ndarray) -> np.ndarray:
    """float64 [N, H] rows scaled to unit L2 length (a zero row stays zero)."""
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def row_cosines(a, b) -> np.ndarray:
    """float64 [N]: the dot product of row i of `a` with row i of `b` (unit rows: the cosine)."""
    if hasattr(a, "multiply"):  # scipy sparse
        return np.asarray(a.multiply(b).sum(axis=1), dtype=np.float64).ravel()
    return np.einsum("ij,ij->i", a, b)


def graded_scores(cosines: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    """{"spearman", "pearson"} of the pair cosines against the gold scores (NaN when either is constant)."""
    return {"spearman": metrics.spearman(cosines, gold), "pearson": metrics.pearson(cosines, gold)}


def threshold_accuracy(cosines: np.ndarray, alike: np.ndarray) -> dict[str, float]:
    """The best accuracy of "alike when cosine >= t", and that t.

    Every cut between two distinct cosines is tried (and "all alike"); of equally good ones, the highest
    threshold wins. The threshold reported is the lowest cosine still called alike.

    Args:
        cosines: [N] pair cosines.
        alike: [N] 1 for an alike pair, 0 otherwise.
    Returns:
        {"accuracy", "threshold"}.
    """
    order = np.argsort(-np.asarray(cosines, dtype=np.float64), kind="stable")
    c, y = np.asarray(cosines, dtype=np.float64)[order], np.asarray(alike, dtype=np.float64)[order]
    n, negatives = len(c), float(len(c) - y.sum())
    called = np.arange(1, n + 1)  # the first k pairs called alike
    true_pos = np.cumsum(y)
    correct = true_pos + (negatives - (called - true_pos))  # [N]: TP + TN after cut k
    valid = np.append(c[1:] < c[:-1], True)  # a cut may not split equal cosines
    correct = np.where(valid, correct, -1.0)
    k = int(np.argmax(correct))  # the first maximum: the highest threshold
    return {"accuracy": float(correct[k] / n), "threshold": float(c[k])}


def retrieval_scores(queries, candidates, targets: np.ndarray, chunk: int = 512) -> dict[str, float]:
    """Recall@1, recall@10 and mean reciprocal rank of each query's target among all candidates.

    A candidate scoring as high as the target, or higher, ranks before it (ties count against it).

    Args:
        queries: [Q, H] unit rows (numpy or scipy sparse).
        candidates: [C, H] unit rows, the same type.
        targets: int [Q], each query's candidate row.
        chunk: queries scored at once (memory: chunk x C floats).
    Returns:
        {"recall_at_1", "recall_at_10", "mrr", "queries", "candidates"}.
    """
    ranks = np.zeros(len(targets), dtype=np.int64)
    for start in range(0, len(targets), chunk):
        sims = queries[start:start + chunk] @ candidates.T  # [q, C]
        sims = np.asarray(sims.toarray() if hasattr(sims, "toarray") else sims, dtype=np.float64)
        rows = np.arange(len(sims))
        own = sims[rows, targets[start:start + chunk]][:, None]  # [q, 1]
        ranks[start:start + chunk] = (sims >= own).sum(1)  # the target itself counts once: rank >= 1
    out = {f"recall_at_{k}": float(np.mean(ranks <= k)) for k in RECALL_AT}
    out["mrr"] = float(np.mean(1.0 / ranks))
    return {**out, "queries": len(targets), "candidates": candidates.shape[0]}


def pair_metrics(pairs: Pairs, a, b) -> dict[str, float]:
    """Every metric of the pairs' kind (module docstring) from the two texts' vectors.

    Args:
        pairs: the pairs (N).
        a, b: [N, H] unit rows of the first and the second texts (numpy or scipy sparse).
    Returns:
        {metric: value}; fractions in [0, 1] but `NOT_FRACTIONS`.
    Raises:
        AlbertlmError: no pair is a positive (retrieval has no query).
    """
    cosines = row_cosines(a, b)
    out: dict[str, float] = {}
    if pairs.kind == "graded":
        out.update(graded_scores(cosines, pairs.scores))
    elif pairs.kind == "binary":
        out.update(threshold_accuracy(cosines, pairs.scores))
    queries = np.flatnonzero(pairs.positive)
    if not len(queries):
        raise AlbertlmError("no pair is alike, so retrieval has no query")
    first: dict[str, int] = {}
    for i, text in enumerate(pairs.text_b):  # each distinct second text once, at its first row
        first.setdefault(text, i)
    rows = np.fromiter(first.values(), dtype=np.int64)
    where = {text: k for k, text in enumerate(first)}
    targets = np.array([where[pairs.text_b[i]] for i in queries], dtype=np.int64)
    out.update(retrieval_scores(a[queries], b[rows], targets))
    return out
