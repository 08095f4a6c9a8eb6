"""Weighted mixtures of corpora and exact deduplication of documents, both in one process, in order.

**A weight is a share of documents.** `interleave` draws the sources of `kjv@3 wiki/*.parquet@1`
so that after any n documents each source has given n x weight / (sum of weights) of them, within
one document: a smooth weighted round robin (each source gains its weight in credit every draw; the
richest is drawn and pays the total), so the order depends on the weights alone, not on a seed or
on the number of build workers. Shares of *tokens* follow from the sources' document lengths;
`albertlm data stats` reports both.

**A source that runs out stops the mixture.** Cycling it would repeat its documents and call the
repeats a mixture, so the mixture ends at the first source read to its end, and the shares stay
the ones asked for; the others are left partly unread, which the build summary
and `data stats` say. To use more of a large source, give it a larger weight.

**Deduplication** (`Deduplicator`) drops a document whose normalised text (the vocabulary's own
normalisation, whitespace collapsed, sentences joined by one space) was seen before, anywhere in the
stream. Each text is kept as its 16-byte blake2b digest, in a Python set: a 49-byte bytes object
(rounded up by the allocator) plus a 16-byte slot in a table the set keeps 1.7-3.3x larger than
itself. Measured as resident memory, that is 93-114 bytes per unique document from 3x10^5 to 3x10^6
documents; `DEDUP_BYTES_PER_DOCUMENT` (120) bounds it, so ten million documents take at most
1.2 GB in the main process, and nothing else grows with the corpus. Filtering happens before the
mixture draws, so the weights hold for the documents that are kept; a repeat counts against the
source it reappears in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass

from albertlm.data.documents import Document

DEDUP_DIGEST_BYTES = 16
"""blake2b digest size of a document's normalised text (a collision is about 2^-65 likely at 2^32 documents)."""
DEDUP_BYTES_PER_DOCUMENT = 120
"""Memory the seen-set needs per unique document at most, past its first 50,000 (measured: 93-114)."""


@dataclass
class SourceStats:
    """What one corpus SPEC of a pass contributed.

    Attributes:
        spec: the SPEC as written (weight included).
        weight: its weight, or None outside a weighted mixture.
        documents: documents it gave (repeats not counted).
        duplicates: its documents dropped as exact repeats of earlier ones.
        read_to_end: whether every file of the source was read to its end.
    """

    spec: str
    weight: float | None = None
    documents: int = 0
    duplicates: int = 0
    read_to_end: bool = False

    def to_json(self) -> dict:
        """A plain dict for meta.json."""
        return asdict(self)


class Deduplicator:
    """Remembers the digest of every document's normalised text and recognises exact repeats.

    Args:
        normalise: text -> the text as the vocabulary sees it (e.g. `Vocabulary.normalise_text`).
    """

    def __init__(self, normalise: Callable[[str], str]):
        self.normalise = normalise
        self.seen: set[bytes] = set()

    def key(self, doc: Document) -> bytes:
        """The digest that identifies a document's text."""
        text = self.normalise(" ".join(doc.sentences))
        return hashlib.blake2b(text.encode("utf-8"), digest_size=DEDUP_DIGEST_BYTES).digest()

    def is_repeat(self, doc: Document) -> bool:
        """True if an equal text was seen before; otherwise remember this one."""
        key = self.key(doc)
        if key in self.seen:
            return True
        self.seen.add(key)
        return False

    def unique(self, documents: Iterator[Document], source: SourceStats) -> Iterator[Document]:
        """The documents that are not repeats; the others are counted in `source.duplicates`."""
        for doc in documents:
            if self.is_repeat(doc):
                source.duplicates += 1
            else:
                yield doc


def interleave(streams: Sequence[Iterator[Document]], weights: Sequence[float]) -> Iterator[Document]:
    """Documents of several sources in proportion to their weights (module docstring), until one runs out.

    Args:
        streams: one iterator of documents per source.
        weights: positive weights, one per source.
    Returns:
        an iterator of Documents; it ends when a drawn source has no document left.
    """
    total = float(sum(weights))
    credit = [0.0] * len(streams)
    while True:
        for i, w in enumerate(weights):
            credit[i] += w
        pick = max(range(len(credit)), key=credit.__getitem__)  # the first of equals: the order given
        credit[pick] -= total
        doc = next(streams[pick], None)
        if doc is None:
            return
        yield doc


# ------------------------------------------------------------------------------ reporting
def source_shares(meta: dict) -> list[dict]:
    """What each corpus spec of a build contributed, as shares of the whole build (both splits).

    Args:
        meta: a build's meta.json content (`sources` is absent from builds made before mixtures).
    Returns:
        per spec: spec, weight_share (the share its weight asked for, or None), documents,
        document_share, text_tokens, token_share, duplicates, read_to_end.
    """
    sources = meta.get("sources") or []
    documents = sum(s["documents"] for s in sources) or 1
    tokens = sum(s["text_tokens"] for s in sources) or 1
    weights = sum(s["weight"] or 0.0 for s in sources)
    return [{"spec": s["spec"], "weight_share": s["weight"] / weights if s["weight"] else None,
             "documents": s["documents"], "document_share": s["documents"] / documents,
             "text_tokens": s["text_tokens"], "token_share": s["text_tokens"] / tokens,
             "duplicates": s["duplicates"], "read_to_end": s["read_to_end"]} for s in sources]


def format_sources(meta: dict) -> list[str]:
    """One line per corpus spec of a build (nothing for a single spec without dedup), and how a mixture ended."""
    shares = source_shares(meta)
    dedup = bool(meta.get("settings", {}).get("dedup"))
    if len(shares) < 2 and not dedup:
        return []
    lines = []
    for s in shares:
        asked = f", weight {s['weight_share']:.1%}" if s["weight_share"] is not None else ""
        repeats = f"; {s['duplicates']:,} exact repeat(s) dropped" if dedup else ""
        unread = "" if s["read_to_end"] else "; not read to its end"
        lines.append(f"source {s['spec']}: {s['documents']:,} documents ({s['document_share']:.1%}{asked}), "
                     f"{s['text_tokens']:,} tokens ({s['token_share']:.1%}){repeats}{unread}")
    if meta.get("mixture") == "weighted" and len(shares) > 1:
        ran_out = next((s["spec"] for s in shares if s["read_to_end"]), None)
        if ran_out is not None:
            lines.append(f"the mixture stopped when {ran_out} ran out, so the shares stay the weights; raise the "
                         "weight of a source to use more of it")
    return lines
