"""`albertlm data build`: corpus → tokenized SOP/NSP instances → shards, streaming and in parallel.

The corpus is read once, as a stream; documents are grouped into blocks (`block_documents` each,
held-out documents into blocks of their own) and each block is tokenized, paired and (with static
masking) masked in a worker process. At most `2 x workers` blocks are in flight, so peak memory
does not grow with the corpus. Every random choice of block b, copy d comes from a generator seeded
with (seed, split, b, d): the output is byte-identical whatever the number of workers.

Output directory:
    train-00000.shard ...     examples for training (format: data/shards.py)
    heldout-00000.shard ...   examples from held-out documents (never seen in training)
    meta.json                 settings, tokenizer (kind, vocabulary file sha256, special ids), counts,
                              corpus statistics, the examples (`shard_sizes`) and sha256 of every
                              shard; written last, so its presence means the build completed

An interrupted build (killed at any point) leaves shards without a meta.json, and perhaps a
temporary file of the shard it was writing (`.train-00003.shard.*.tmp`: every file is written to a
temporary and renamed, so a shard name never holds a partial file). Nothing reads such a directory
(`read_build_meta` refuses it), and running the build again removes those files, says how many in
the summary and in meta.json (`restart`), and builds every shard anew: none is reused, because a
shard's examples depend on every block before it, and reading and tokenizing up to the point of
the kill is most of the cost of writing it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from albertlm.data.corpus import Corpus, format_corpus_stats, is_heldout
from albertlm.data.instances import OBJECTIVES, create_block_instances
from albertlm.data.masking import mask_instance
from albertlm.data.mixture import format_sources
from albertlm.data.shards import write_shard
from albertlm.errors import AlbertlmError
from albertlm.tokenizer import load_vocabulary, vocabulary_fingerprint
from albertlm.utils import atomic_write_text, check_field_types, sha256_file
from albertlm.vocab import IGNORE_INDEX

SPLITS = ("train", "heldout")
META_VERSION = 1


@dataclass(frozen=True)
class BuildSettings:
    """How instances are made (paper §4.1 and the official create_pretraining_data.py)."""

    max_seq_length: int = 512
    """Tokens per example, [CLS] A [SEP] B [SEP] included."""
    short_seq_prob: float = 0.1
    """Probability of a shorter random target length."""
    objective: str = "sop"
    """Sentence-level task: sop, nsp or none."""
    masking: str = "dynamic"
    """static: masks stored in the shards (dupe_factor copies); dynamic: the loader masks anew each epoch."""
    dupe_factor: int = 1
    """Copies of the corpus, each with its own pairing (and masks, when static)."""
    masked_lm_prob: float = 0.15
    """Fraction of maskable tokens predicted."""
    max_predictions: int = 20
    """Predicted tokens per example at most."""
    max_ngram: int = 3
    """Longest masked n-gram, in whole words."""
    heldout_fraction: float = 0.02
    """Fraction of documents held out for evaluation (chosen by a hash of seed and document index)."""
    seed: int = 0
    """Seed of every random choice."""
    workers: int = 1
    """Worker processes."""
    block_documents: int = 256
    """Documents per work unit (NSP draws its random documents from the same block)."""
    shard_examples: int = 65536
    """Examples per shard file at most."""
    dedup: bool = False
    """Drop exact repeats of a document (text as the vocabulary normalises it); at most 120 bytes per unique document."""

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise AlbertlmError(f"objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if self.masking not in ("static", "dynamic"):
            raise AlbertlmError(f"masking must be static or dynamic, got {self.masking!r}")
        check_field_types(self)
        if not 8 <= self.max_seq_length <= MAX_SHARD_SEQ_LENGTH:
            raise AlbertlmError(f"max_seq_length must be in [8, {MAX_SHARD_SEQ_LENGTH}] (positions within an example "
                                f"are stored as 16-bit integers), got {self.max_seq_length}")
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise AlbertlmError(f"masked_lm_prob must lie in (0, 1), got {self.masked_lm_prob}")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise AlbertlmError(f"short_seq_prob must lie in [0, 1], got {self.short_seq_prob}")
        for name in ("dupe_factor", "max_predictions", "max_ngram", "workers", "block_documents", "shard_examples"):
            if getattr(self, name) < 1:
                raise AlbertlmError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not 0.0 <= self.heldout_fraction < 1.0:
            raise AlbertlmError(f"heldout_fraction must lie in [0, 1), got {self.heldout_fraction}")


# ---------------------------------------------------------------------------- the worker side
MAX_SHARD_SEQ_LENGTH = 65535
"""The shard format stores positions within an example (segment boundary, static mask positions) as uint16."""
_ROW_FIELDS = ("tokens", "word_start", "segment_a", "label", "short", "mlm_positions", "mlm_labels", "span_n")
_TOKENIZER = None


def _init_worker(tokenizer_dir: str, threads: int) -> None:
    global _TOKENIZER
    # Text that literally contains "[MASK]" is text, not a control token (as the official pipeline).
    _TOKENIZER = load_vocabulary(tokenizer_dir, parse_special_tokens=False, num_threads=threads)


def _process_block(job: tuple[int, int, list[list[str]], list[int], BuildSettings]) -> dict[str, Any]:
    """Tokenize, pair and (statically) mask one block of documents; returns packed arrays and the
    text tokens of each corpus spec the documents came from."""
    split_id, block_id, documents, corpora, s = job
    tok = _TOKENIZER
    sentences = [sent for doc in documents for sent in doc]
    ids, starts, offsets = tok.encode_batch_packed(sentences, word_starts=True)
    docs, k = [], 0
    source_tokens: dict[int, int] = {}  # corpus spec index -> text tokens of its documents here
    for doc, corpus in zip(documents, corpora):
        sents = []
        source_tokens[corpus] = source_tokens.get(corpus, 0) + int(offsets[k + len(doc)] - offsets[k])
        for _ in doc:
            a, b = offsets[k], offsets[k + 1]
            if b > a:
                sents.append((ids[a:b], starts[a:b]))
            k += 1
        if sents:
            docs.append(sents)
    rows: dict[str, list] = {k: [] for k in _ROW_FIELDS}
    for d in range(s.dupe_factor):
        rng = np.random.default_rng([s.seed, split_id, block_id, d])
        if len(docs) < 2 and s.objective == "nsp":
            continue  # NSP needs another document to draw from (blocks are merged to avoid this)
        made = list(create_block_instances(docs, rng=rng, max_seq_length=s.max_seq_length,
                                           short_seq_prob=s.short_seq_prob, objective=s.objective,
                                           special=tok.special_ids))
        for i in rng.permutation(len(made)):  # the official script shuffles instances
            inst = made[i]
            tokens = inst.tokens
            if s.masking == "static":
                m = mask_instance(tokens, inst.word_start, rng, vocab_size=tok.vocab_size,
                                  masked_lm_prob=s.masked_lm_prob, max_predictions=s.max_predictions,
                                  max_ngram=s.max_ngram, special=tok.special_ids)
                pos = np.flatnonzero(m.labels != IGNORE_INDEX)
                rows["mlm_positions"].append(pos.astype(np.uint16))
                rows["mlm_labels"].append(m.labels[pos].astype(np.int32))
                rows["span_n"].append(m.span_n.astype(np.uint8))
                tokens = m.input_ids
            rows["tokens"].append(tokens)
            rows["word_start"].append(inst.word_start)
            rows["segment_a"].append(inst.segment_a)
            rows["label"].append(inst.sentence_order_label)
            rows["short"].append(inst.is_short)
    return {"split": split_id, "rows": rows, "text_tokens": int(len(ids)), "sentences": len(sentences),
            "documents": len(documents), "source_tokens": source_tokens}


# ---------------------------------------------------------------------------- the writer side
class _ShardWriter:
    """Accumulates processed blocks of one split and writes a shard whenever it is full."""

    def __init__(self, out_dir: Path, split: str, vocab_size: int, settings: BuildSettings, meta: dict):
        self.out_dir, self.split, self.settings, self.meta = out_dir, split, settings, meta
        self.dtype = np.uint16 if vocab_size <= 65536 else np.int32
        self.pending: dict[str, list] = {k: [] for k in _ROW_FIELDS}
        self.count = 0
        self.shards = 0
        self.paths: list[Path] = []
        self.sizes: list[int] = []
        self.totals = {"examples": 0, "tokens": 0, "short": 0, "label_1": 0, "masked": 0}

    def add(self, rows: dict[str, list]) -> None:
        for k, v in rows.items():
            self.pending[k].extend(v)
        self.count += len(rows["tokens"])
        while self.count >= self.settings.shard_examples:
            self._flush(self.settings.shard_examples)

    def close(self) -> None:
        if self.count or not self.shards:
            self._flush(self.count)

    def _flush(self, n: int) -> None:
        take = {k: v[:n] for k, v in self.pending.items()}
        self.pending = {k: v[n:] for k, v in self.pending.items()}
        self.count -= n
        lengths = np.array([len(t) for t in take["tokens"]], dtype=np.int64)
        arrays = {
            "tokens": _cat(take["tokens"], self.dtype), "tokens_offsets": _offsets(lengths),
            "word_start": _cat(take["word_start"], np.uint8),
            "segment_a": np.array(take["segment_a"], dtype=np.uint16),
            "sentence_order_label": np.array(take["label"], dtype=np.uint8),
            "is_short": np.array(take["short"], dtype=np.uint8),
        }
        if self.settings.masking == "static":
            arrays["mlm_positions"] = _cat(take["mlm_positions"], np.uint16)
            arrays["mlm_labels"] = _cat(take["mlm_labels"], np.int32)
            arrays["mlm_offsets"] = _offsets(np.array([len(p) for p in take["mlm_positions"]], dtype=np.int64))
            arrays["span_n"] = _cat(take["span_n"], np.uint8)
            arrays["span_offsets"] = _offsets(np.array([len(p) for p in take["span_n"]], dtype=np.int64))
            self.totals["masked"] += len(arrays["mlm_positions"])
        path = self.out_dir / f"{self.split}-{self.shards:05d}.shard"
        write_shard(path, arrays, n, meta=self.meta)
        self.paths.append(path)
        self.sizes.append(n)
        self.shards += 1
        self.totals["examples"] += n
        self.totals["tokens"] += int(lengths.sum())
        self.totals["short"] += int(arrays["is_short"].sum())
        self.totals["label_1"] += int(arrays["sentence_order_label"].sum())


def _cat(parts: list, dtype) -> np.ndarray:
    return np.concatenate([np.asarray(p, dtype=dtype) for p in parts]) if parts else np.zeros(0, dtype)


def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def _blocks(corpus: Corpus, s: BuildSettings) -> Iterator[tuple[int, int, list[tuple[list[str], int]]]]:
    """(split id, block id, documents as (sentences, corpus spec index)) in corpus order; a final block
    too small for NSP is merged."""
    held: list[list[tuple[list[str], int]] | None] = [None, None]
    current: list[list[tuple[list[str], int]]] = [[], []]
    count = [0, 0]
    for index, doc in enumerate(corpus.documents()):
        split = 1 if s.heldout_fraction and is_heldout(index, s.heldout_fraction, s.seed) else 0
        current[split].append((doc.sentences, doc.corpus))
        if len(current[split]) == s.block_documents:
            if held[split] is not None:
                yield split, count[split], held[split]
                count[split] += 1
            held[split], current[split] = current[split], []
    for split in (0, 1):
        last = current[split]
        if held[split] is not None and len(last) < 2:
            held[split] = held[split] + last  # keep NSP's "another document" inside the block
            last = []
        for block in (held[split], last):
            if block:
                yield split, count[split], block
                count[split] += 1


def _write_blocks(corpus: Corpus, tokenizer_dir: str | os.PathLike, settings: BuildSettings,
                  writers: list[_ShardWriter], progress: bool) -> dict[str, int]:
    """Turn every block of documents into rows (in worker processes unless workers == 1) and hand
    them to their split's writer, in block order; returns the text token, sentence and document counts
    and the text tokens of each corpus spec."""
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(desc="data build", unit="doc", dynamic_ncols=True)
    start = time.perf_counter()
    counts = {"text_tokens": 0, "sentences": 0, "documents": 0}
    source_tokens = [0] * len(corpus.specs)
    jobs = ((sp, b, [d for d, _ in block], [c for _, c in block], settings)
            for sp, b, block in _blocks(corpus, settings))
    if settings.workers == 1:
        _init_worker(str(tokenizer_dir), 1)
        results: Iterator[dict] = map(_process_block, jobs)
    else:
        results = _parallel(jobs, str(tokenizer_dir), settings.workers)
    for r in results:
        writers[r["split"]].add(r["rows"])
        for key in counts:
            counts[key] += r[key]
        for source, tokens in r["source_tokens"].items():
            source_tokens[source] += tokens
        if bar is not None:
            bar.update(r["documents"])
            bar.set_postfix(examples=sum(w.totals["examples"] + w.count for w in writers),
                            tok_s=f"{counts['text_tokens'] / max(time.perf_counter() - start, 1e-9):,.0f}")
    if bar is not None:
        bar.close()
    return {**counts, "source_tokens": source_tokens}


def build_dataset(corpus_spec: str | Sequence[str], tokenizer_dir: str | os.PathLike, out_dir: str | os.PathLike,
                  settings: BuildSettings = BuildSettings(), progress: bool = True) -> dict[str, Any]:
    """Build train and held-out shards from a corpus.

    Args:
        corpus_spec: a corpus SPEC (data/corpus.py), e.g. `kjv` or `books/*.txt`, or several: read one
            after the other, or mixed when each carries a weight (`kjv@3`, data/mixture.py).
        tokenizer_dir: directory with spiece.model (albertlm tokenizer train) or a WordPiece vocab.txt.
        out_dir: where shards and meta.json go (must not hold a completed build).
        settings: BuildSettings.
        progress: show a progress bar.
    Returns:
        The meta.json content: settings, counts per split, throughput, corpus statistics, and per
        corpus spec its documents, text tokens and dropped repeats (`sources`).
    """
    out_dir = Path(out_dir)
    if (out_dir / "meta.json").exists():
        raise AlbertlmError(f"{out_dir}: already holds a completed build (delete it to rebuild)")
    tok = load_vocabulary(tokenizer_dir)
    corpus = Corpus(corpus_spec, dedup=tok.normalise_text if settings.dedup else None)  # a bad spec fails here
    out_dir.mkdir(parents=True, exist_ok=True)
    restart = clear_interrupted_build(out_dir)
    if progress and any(restart.values()):
        print(format_restart(restart), file=sys.stderr, flush=True)
    fingerprint = vocabulary_fingerprint(tokenizer_dir)  # kind, file, sha256: which vocabulary built the data
    shard_meta = {"vocab_size": tok.vocab_size, "max_seq_length": settings.max_seq_length,
                  "masking": settings.masking, "max_predictions": settings.max_predictions,
                  "objective": settings.objective, "seed": settings.seed}
    writers = [_ShardWriter(out_dir, name, tok.vocab_size, settings, shard_meta) for name in SPLITS]
    start = time.perf_counter()
    counts = _write_blocks(corpus, tokenizer_dir, settings, writers, progress)
    text_tokens, sentences, documents = counts["text_tokens"], counts["sentences"], counts["documents"]
    if documents == 0:
        names = corpus_spec if isinstance(corpus_spec, str) else " ".join(corpus_spec)
        raise AlbertlmError(f"{names}: the corpus has no documents ({format_corpus_stats(corpus.stats)})")
    for w in writers:
        w.close()
    seconds = time.perf_counter() - start
    sources = [dict(src.to_json(), text_tokens=tokens) for src, tokens in zip(corpus.sources, counts["source_tokens"])]
    meta = {"format": "albertlm-pretraining-data", "version": META_VERSION,
            "settings": dataclasses.asdict(settings),
            "corpus": corpus_spec if isinstance(corpus_spec, str) else list(corpus_spec),
            "tokenizer": {"vocab_size": tok.vocab_size, **fingerprint, "chinese": tok.chinese,
                          "special_ids": tok.special_ids.to_json()},
            "documents": documents, "sentences": sentences, "text_tokens": text_tokens,
            "seconds": seconds, "tokens_per_s": text_tokens / max(seconds, 1e-9),
            "tokens_per_s_per_worker": text_tokens / max(seconds, 1e-9) / settings.workers,
            "splits": {name: dict(w.totals, shards=w.shards) for name, w in zip(SPLITS, writers)},
            "corpus_stats": format_corpus_stats(corpus.stats),
            "sources": sources, "mixture": "weighted" if corpus.weighted else "in order",
            "duplicates": sum(src["duplicates"] for src in sources),
            "restart": restart,
            "shard_sizes": {p.name: w.sizes[k] for w in writers for k, p in enumerate(w.paths)},
            "checksums": {p.name: sha256_file(p) for p in sorted(out_dir.glob("*.shard"))}}
    atomic_write_text(out_dir / "meta.json", json.dumps(meta, indent=2) + "\n")
    return meta


def clear_interrupted_build(out_dir: Path) -> dict[str, int]:
    """Remove what an interrupted build left in `out_dir` (module docstring).

    Args:
        out_dir: a build directory without meta.json.
    Returns:
        {"removed_shards", "removed_temporaries", "reused_shards"} (the last always 0).
    """
    shards = [p for split in SPLITS for p in out_dir.glob(f"{split}-*.shard")]
    temporaries = [p for split in SPLITS for p in out_dir.glob(f".{split}-*.shard.*.tmp")]
    temporaries += list(out_dir.glob(".meta.json.*.tmp"))
    for path in shards + temporaries:
        path.unlink()
    return {"removed_shards": len(shards), "removed_temporaries": len(temporaries), "reused_shards": 0}


def format_restart(restart: dict[str, int]) -> str:
    """The line saying what a restarted build removed and redid."""
    return (f"restarted: removed {restart['removed_shards']} shard(s) and {restart['removed_temporaries']} "
            "temporary file(s) of an interrupted build (it had no meta.json); every shard was built again, "
            f"{restart['reused_shards']} reused")


def _parallel(jobs: Iterator, tokenizer_dir: str, workers: int) -> Iterator[dict]:
    """Results of `jobs` in order, with at most 2 x workers blocks in flight (bounded memory)."""
    window: list[Future] = []
    with ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(tokenizer_dir, 1)) as pool:
        for job in jobs:
            window.append(pool.submit(_process_block, job))
            if len(window) >= 2 * workers:
                yield window.pop(0).result()
        while window:
            yield window.pop(0).result()


def format_build_summary(meta: dict[str, Any]) -> str:
    """A short human summary of a build."""
    tr, ho = meta["splits"]["train"], meta["splits"]["heldout"]
    text = (f"{meta['documents']:,} documents, {meta['sentences']:,} sentences, {meta['text_tokens']:,} tokens "
            f"in {meta['seconds']:.1f} s ({meta['tokens_per_s']:,.0f} tokens/s, "
            f"{meta['tokens_per_s_per_worker']:,.0f} per worker)\n"
            f"train: {tr['examples']:,} examples in {tr['shards']} shard(s); held-out: {ho['examples']:,} examples\n"
            f"corpus: {meta['corpus_stats']}")
    lines = format_sources(meta)
    restart = meta.get("restart")
    if restart and any(restart.values()):
        lines.append(format_restart(restart))
    return "\n".join([text, *lines])
