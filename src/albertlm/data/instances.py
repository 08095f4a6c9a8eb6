"""Documents → sentence-pair pretraining instances `[CLS] A [SEP] B [SEP]` for SOP, NSP or none.

Follows the official ALBERT `create_pretraining_data.py` (`create_instances_from_document`):
whole sentences are accumulated into a chunk until a target length is reached (max_seq_length - 3,
or with probability short_seq_prob a random length in [2, max]); the chunk is split at a random
sentence boundary into A and B; the pair is truncated to fit by trimming the longer segment from a
random end. Paper §4.1 / §3 (SOP): positives are two consecutive segments of one document,
negatives the same two segments swapped. NSP (the BERT objective, an ablation in Table 5) takes B
from another document half of the time.

Deliberate departures from the official script, each a bug fix (docs/design-notes.md, "Pretraining data"):

(a) Single-sentence chunks. The official code, when a chunk holds one sentence (a long sentence, or
    the last sentence of a document), takes B from a *random other document* and, with SOP, still
    labels the pair as if it were an (un)swapped pair of one document. Here a one-sentence chunk is
    split at a uniformly random *word* boundary into A and B, so SOP remains a true order task;
    a chunk that cannot form two non-empty segments (a one-word sentence) is skipped.
(b) Length shortcut. A fixed split point (say, A = the first sentence) lets a model read the SOP
    label off the segment lengths. Here the split is uniform over the chunk's boundaries and the
    swap an independent coin, so len(A) - len(B) has nearly the same law under both labels; the
    official truncation tie rule (always trim B) is replaced by a coin, which removed a parity
    signal (len(A) - len(B) in {0, +1}). Exact symmetry is impossible with whole-sentence chunks:
    the sentence that overflows the target always sits in B, so B is longer by a few tokens on
    average (about 4% of max_seq_length on synthetic text; in simulation a classifier that sees
    only the two lengths reaches 52-54% SOP accuracy at lengths 512 and 128).
    For NSP the random B is cut to exactly the true B's length, so lengths carry no NSP label
    information (the official code filled it to the leftover target: longer random Bs).
(c) Randomness. Every draw comes from the explicit `numpy.random.Generator`; the official script
    mixed Python's `random.Random` with the global numpy RNG, so a seed did not reproduce the data.
(d) The short target length is drawn per chunk (per instance), so ~short_seq_prob of *instances*
    are short, as the paper states; the official script draws it once per document.
(e) After truncation from the front, the first piece of a segment may be the tail of a word; it is
    marked as a word start so whole-word masking treats the fragment as a word (the official
    masker glued it onto the last word of the other segment, across [SEP]).

Streaming: NSP needs "another document". The caller passes any random-access view of the documents
it currently holds (a list, or an accessor plus `num_documents`); a worker that builds instances a
block of documents at a time therefore draws NSP negatives only from within its block. With blocks
of thousands of documents this is indistinguishable in practice, but negatives never cross blocks.

This module is numpy only: the data pipeline imports neither torch nor the model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Union

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.vocab import SPIECE_IDS, SpecialIds

OBJECTIVES = ("sop", "nsp", "none")

Sentence = tuple[np.ndarray, np.ndarray]  # (ids int32 [n], word_start bool [n])
Document = Sequence[Sentence]
Documents = Union[Sequence[Document], Callable[[int], Document]]


@dataclass(frozen=True)
class Instance:
    """One pretraining pair.

    Attributes:
        tokens: int32 [L], `[CLS] A [SEP] B [SEP]`, L <= max_seq_length (not padded).
        token_type: int8 [L], 0 for [CLS] A [SEP], 1 for B [SEP].
        word_start: bool [L], True at the first piece of each whole word of A and B; False at
            [CLS]/[SEP] (they are never masked).
        sentence_order_label: SOP: 0 in order, 1 swapped. NSP: 0 B is the true continuation,
            1 B comes from another document. "none": always 0.
        is_short: True when this instance drew a short target length (probability short_seq_prob).
    """

    tokens: np.ndarray
    token_type: np.ndarray
    word_start: np.ndarray
    sentence_order_label: int
    is_short: bool

    @property
    def segment_a(self) -> int:
        """Number of type-0 tokens (`[CLS] A [SEP]`); the shard field of the same name."""
        return int(np.count_nonzero(self.token_type == 0))


def truncate_counts(
    len_a: int, len_b: int, max_num_tokens: int, rng: np.random.Generator | None = None
) -> tuple[int, int]:
    """How many tokens the official `truncate_seq_pair` removes from A and from B.

    The official loop removes one token at a time from the longer segment (B on a tie) until the
    pair fits. This is its closed form, so truncation costs O(1) instead of O(excess). With `rng`,
    ties are broken by a coin instead of always trimming B: the official rule leaves
    len(A) - len(B) in {0, +1} whenever both are trimmed, a parity a model can read the order off.

    Args:
        len_a, len_b: segment lengths before truncation.
        max_num_tokens: the most tokens A and B may hold together (max_seq_length - 3).
        rng: tie-break coin; None reproduces the official B-first rule.

    Returns:
        (cut_a, cut_b), the number of tokens to drop from A and from B.
    """
    excess = len_a + len_b - max_num_tokens
    if excess <= 0:
        return 0, 0
    gap = abs(len_a - len_b)
    if excess <= gap:  # only the longer segment is trimmed
        return (excess, 0) if len_a > len_b else (0, excess)
    rest = excess - gap  # then both shrink in turn; an odd token goes to B (official) or a coin
    odd_to_a = rest % 2 == 1 and rng is not None and rng.random() < 0.5
    cut_a = rest // 2 + odd_to_a + (gap if len_a > len_b else 0)
    cut_b = excess - cut_a
    return cut_a, cut_b


def _trim(ids: np.ndarray, ws: np.ndarray, cut: int, rng: np.random.Generator):
    """Drop `cut` tokens, each from the front or back with probability 1/2 (official behaviour).

    The number taken from the front is Binomial(cut, 1/2), the same law as the official per-token
    coin flips. The first surviving piece is marked a word start (departure (e) above).
    """
    if cut:
        front = int(rng.binomial(cut, 0.5))
        ids, ws = ids[front:len(ids) - (cut - front)], ws[front:len(ws) - (cut - front)]
    if len(ws) and not ws[0]:
        ws = ws.copy()
        ws[0] = True
    return ids, ws


def _concat(sentences: Sequence[Sentence]) -> tuple[np.ndarray, np.ndarray]:
    ids = np.concatenate([s[0] for s in sentences]).astype(np.int32, copy=False)
    ws = np.concatenate([s[1] for s in sentences]).astype(bool, copy=False)
    return ids, ws


def _clean(document: Document) -> list[Sentence]:
    """Drop empty sentences and coerce dtypes (int32 ids, bool word starts)."""
    out = []
    for ids, ws in document:
        if len(ids) != len(ws):
            raise AlbertlmError(f"sentence has {len(ids)} ids but {len(ws)} word_start flags")
        if len(ids):
            out.append((np.asarray(ids, dtype=np.int32), np.asarray(ws, dtype=bool)))
    return out


def create_instances(
    doc_index: int,
    documents: Documents,
    *,
    rng: np.random.Generator,
    num_documents: int | None = None,
    max_seq_length: int = 512,
    short_seq_prob: float = 0.1,
    objective: str = "sop",
    special: SpecialIds = SPIECE_IDS,
) -> Iterator[Instance]:
    """Yield the pretraining instances of one document, in document order.

    One function on purpose (longer than our 60 lines): it follows the official pairing loop step
    by step, so that it can be read against it; the departures are the numbered ones above.

    Args:
        doc_index: which document of `documents` to turn into instances.
        documents: a sequence of documents, or an accessor `documents(i) -> document` (then pass
            `num_documents`). A document is a list of sentences `(ids int32 [n], word_start bool
            [n])`. For NSP, random B segments are drawn from the other documents of this view.
        rng: the only source of randomness; same generator state and inputs give identical output.
        num_documents: how many documents the accessor can serve (defaults to len(documents)).
        max_seq_length: L, the length of `[CLS] A [SEP] B [SEP]` after truncation (>= 5).
        short_seq_prob: probability that a chunk targets a random length in [2, L - 3].
        objective: "sop" (swap with probability 1/2), "nsp" (B from another document with
            probability 1/2) or "none" (A, B in order, label 0).
        special: the vocabulary's SpecialIds (the [CLS] and [SEP] ids laid out).

    Yields:
        Instance objects (see `Instance`), tokens of length <= max_seq_length.
    """
    if objective not in OBJECTIVES:
        raise AlbertlmError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if max_seq_length < 5:
        raise AlbertlmError(f"max_seq_length must be >= 5, got {max_seq_length}")
    get = documents if callable(documents) else documents.__getitem__
    if num_documents is None:
        if callable(documents):
            raise AlbertlmError("num_documents is required when documents is an accessor")
        num_documents = len(documents)
    if objective == "nsp" and num_documents < 2:
        raise AlbertlmError("NSP needs at least two documents in the block to draw negatives from")

    document = _clean(get(doc_index))
    max_num_tokens = max_seq_length - 3

    def draw_target() -> tuple[int, bool]:
        # Paper §4.1: "shorter sequences with probability 0.1" -- drawn per instance (see (d)).
        if rng.random() < short_seq_prob:
            return int(rng.integers(2, max_num_tokens + 1)), True
        return max_num_tokens, False

    target, is_short = draw_target()
    chunk: list[Sentence] = []
    chunk_len = 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        chunk_len += len(document[i][0])
        if i == len(document) - 1 or chunk_len >= target:
            pair = _split_chunk(chunk, rng)
            if pair is not None:
                (a_ids, a_ws), (b_ids, b_ws), a_end = pair
                label = 0
                if objective == "sop" and rng.random() < 0.5:
                    (a_ids, a_ws), (b_ids, b_ws) = (b_ids, b_ws), (a_ids, a_ws)
                    label = 1
                elif objective == "nsp" and rng.random() < 0.5:
                    random_b = _random_segment(doc_index, get, num_documents, len(b_ids), rng)
                    if random_b is not None:
                        b_ids, b_ws = random_b
                        label = 1
                        # Official: the sentences that would have formed B go back into the
                        # stream. (A split single sentence puts nothing back: its tail is dropped.)
                        i -= len(chunk) - a_end if len(chunk) > 1 else 0
                yield _assemble(a_ids, a_ws, b_ids, b_ws, max_num_tokens, label, is_short, rng, special)
            chunk, chunk_len = [], 0
            target, is_short = draw_target()
        i += 1


def _split_chunk(chunk: list[Sentence], rng: np.random.Generator):
    """Split a chunk into (A, B, a_end): at a random sentence boundary, or a random word boundary.

    Returns None when no split gives two non-empty segments (a one-word, one-sentence chunk).
    """
    if len(chunk) >= 2:
        # Uniform over the boundaries 1..n-1: symmetric under a_end <-> n - a_end, which is what
        # keeps len(A) and len(B) alike in law and stops a length shortcut (b).
        a_end = int(rng.integers(1, len(chunk)))
        return _concat(chunk[:a_end]), _concat(chunk[a_end:]), a_end
    ids, ws = chunk[0]
    boundaries = np.flatnonzero(ws[1:]) + 1  # word starts other than the first piece
    if len(boundaries) == 0:
        return None  # (a): cannot form two segments of whole words; skip this chunk
    cut = int(boundaries[rng.integers(len(boundaries))])
    return (ids[:cut], ws[:cut]), (ids[cut:], ws[cut:]), 1


def _random_segment(doc_index, get, num_documents, target_len, rng):
    """NSP negative: whole sentences of another document from a random start until target_len.

    The other document is uniform over the others (no retry loop that can land on the same
    document, as the official 10-try loop could). Empty documents are retried a few times;
    returns None if only empty ones were found (the pair then stays a positive).
    """
    for _ in range(10):
        other = int(rng.integers(num_documents - 1))
        other += other >= doc_index  # uniform over all indices except doc_index
        sentences = _clean(get(other))
        if sentences:
            break
    else:
        return None
    start = int(rng.integers(len(sentences)))
    taken, length = [], 0
    for sentence in sentences[start:]:
        taken.append(sentence)
        length += len(sentence[0])
        if length >= target_len:
            break
    ids, ws = _concat(taken)
    # (b): cut to exactly the true B's length, so len(B) carries no NSP label information (the
    # official code filled B up to the leftover target, making random Bs longer on average).
    return ids[:target_len], ws[:target_len]


def _assemble(a_ids, a_ws, b_ids, b_ws, max_num_tokens, label, is_short, rng, special) -> Instance:
    """Truncate the pair to max_num_tokens and lay out `[CLS] A [SEP] B [SEP]`."""
    cut_a, cut_b = truncate_counts(len(a_ids), len(b_ids), max_num_tokens, rng)
    a_ids, a_ws = _trim(a_ids, a_ws, cut_a, rng)
    b_ids, b_ws = _trim(b_ids, b_ws, cut_b, rng)
    la, lb = len(a_ids), len(b_ids)
    tokens = np.empty(la + lb + 3, dtype=np.int32)
    tokens[0] = special.cls
    tokens[1:la + 1] = a_ids
    tokens[la + 1] = special.sep
    tokens[la + 2:la + 2 + lb] = b_ids
    tokens[-1] = special.sep
    token_type = np.zeros(la + lb + 3, dtype=np.int8)
    token_type[la + 2:] = 1
    word_start = np.zeros(la + lb + 3, dtype=bool)
    word_start[1:la + 1] = a_ws
    word_start[la + 2:la + 2 + lb] = b_ws
    return Instance(tokens, token_type, word_start, label, is_short)


def create_block_instances(
    documents: Documents,
    *,
    rng: np.random.Generator,
    num_documents: int | None = None,
    **kwargs,
) -> Iterator[Instance]:
    """Yield the instances of every document of a block, documents in order.

    The caller shuffles if it wants (the official script shuffles all instances at the end).

    Args:
        documents, rng, num_documents: as in `create_instances`; NSP negatives come from this block.
        **kwargs: max_seq_length, short_seq_prob, objective, special, passed to `create_instances`.

    Yields:
        Instance objects.
    """
    n = len(documents) if num_documents is None else num_documents
    for doc_index in range(n):
        yield from create_instances(doc_index, documents, rng=rng, num_documents=n, **kwargs)
