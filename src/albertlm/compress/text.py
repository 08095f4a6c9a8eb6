"""The unlabelled examples compress distils on: a corpus read by `data/corpus.py`, as model inputs.

An example is one sentence (segment A), or, with probability `pair_fraction` where the document has
a next sentence, two consecutive sentences as segments A and B, so that the student also sees the
second segment's token types that pair tasks use. Examples are shuffled in windows of `SHUFFLE_WINDOW`
with a generator seeded by (seed, pass), and a pass that reaches the end of the corpus starts the
next one. The stream is a pure function of the corpus and the seed: a resumed run skips the
examples it has consumed and sees exactly what an uninterrupted run would have seen.

The first `heldout` examples of the first pass are held out (the loss that is reported, never
trained on); the training stream is everything after them.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from albertlm.data.corpus import Corpus
from albertlm.errors import AlbertlmError
from albertlm.tokenizer.base import Vocabulary

SHUFFLE_WINDOW = 8192
"""Examples shuffled together (a window, not the whole corpus, which is streamed)."""

Text = tuple[str, str | None]


def _pass(corpus: Corpus, seed: int, epoch: int, pair_fraction: float) -> Iterator[Text]:
    rng = random.Random(f"compress-text:{seed}:{epoch}")
    window: list[Text] = []
    for doc in corpus.documents():
        sentences = [s for s in doc.sentences if s.strip()]
        i = 0
        while i < len(sentences):
            if i + 1 < len(sentences) and rng.random() < pair_fraction:
                window.append((sentences[i], sentences[i + 1]))
                i += 2
            else:
                window.append((sentences[i], None))
                i += 1
            if len(window) >= SHUFFLE_WINDOW:
                rng.shuffle(window)
                yield from window
                window = []
    rng.shuffle(window)
    yield from window


def examples(corpus: Corpus, seed: int, pair_fraction: float, heldout: int) -> tuple[list[Text], Iterator[Text]]:
    """(the held-out examples, an endless stream of training examples).

    Raises:
        AlbertlmError: when the corpus holds no more than `heldout` examples.
    """
    first = _pass(corpus, seed, 0, pair_fraction)
    held = [t for _, t in zip(range(heldout), first)]

    def training() -> Iterator[Text]:
        seen = 0
        for text in first:
            seen += 1
            yield text
        if not seen:
            raise AlbertlmError(f"the corpus holds {len(held)} examples, all held out (--heldout {heldout}); "
                                "give more text")
        epoch = 1
        while True:  # later passes: the whole corpus, newly paired and shuffled
            yield from _pass(corpus, seed, epoch, pair_fraction)
            epoch += 1

    return held, training()


def skip(stream: Iterator[Text], n: int) -> None:
    """Consume n examples of a stream (a resumed run's position)."""
    for _ in zip(range(n), stream):
        pass


def encode(vocabulary: Vocabulary, texts: Sequence[Text], max_seq_length: int) -> dict[str, torch.Tensor]:
    """A padded batch: input_ids, attention_mask, token_type_ids [B, S], S the longest example.

    Segments are cut longest first so that [CLS] A [SEP] (B [SEP]) fits max_seq_length.
    """
    rows, types = [], []
    for a, b in texts:
        ids_a = list(vocabulary.encode(a))
        ids_b = list(vocabulary.encode(b)) if b is not None else None
        room = max_seq_length - (3 if ids_b is not None else 2)
        while len(ids_a) + len(ids_b or []) > room:
            if ids_b is not None and len(ids_b) > len(ids_a):
                ids_b.pop()
            else:
                ids_a.pop()
        ids, tt = vocabulary.build_inputs(ids_a, ids_b)
        rows.append(np.asarray(ids, dtype=np.int64))
        types.append(np.asarray(tt, dtype=np.int64))
    S = max(len(r) for r in rows)
    pad = vocabulary.special_ids.pad
    input_ids = torch.full((len(rows), S), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), S), dtype=torch.long)
    token_types = torch.zeros((len(rows), S), dtype=torch.long)
    for i, (r, t) in enumerate(zip(rows, types)):
        input_ids[i, : len(r)] = torch.from_numpy(r)
        mask[i, : len(r)] = 1
        token_types[i, : len(t)] = torch.from_numpy(t)
    return {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": token_types}


def batches_of(vocabulary: Vocabulary, texts: Sequence[Text], batch_size: int, max_seq_length: int
               ) -> list[dict[str, torch.Tensor]]:
    """`encode` over consecutive slices of `texts`."""
    return [encode(vocabulary, texts[i:i + batch_size], max_seq_length) for i in range(0, len(texts), batch_size)]
