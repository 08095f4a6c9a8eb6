"""`albertlm data stats`: what a built data directory holds, checked against the paper's recipe.

Reports examples, tokens, padding fraction (at max_seq_length), mask rate of the maskable tokens,
the masked n-gram length histogram, sentence-order label balance and the short-sequence fraction,
and for a build of several corpus specs (or with --dedup) the share of documents and of tokens each
spec actually gave, beside the share its weight asked for, and the repeats dropped.
Static masks are read from the shards; dynamic masks are drawn for a sample of examples exactly
as the loader draws them in epoch 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from albertlm.data.mixture import format_sources, source_shares
from albertlm.data.shards import Shard, list_shards
from albertlm.errors import AlbertlmError
from albertlm.vocab import IGNORE_INDEX

SPECIALS_PER_EXAMPLE = 3  # [CLS], [SEP], [SEP]: never masked


def data_stats(directory: str | Path, split: str = "train", sample: int = 4000) -> dict[str, Any]:
    """Statistics of one split.

    Args:
        directory: a directory written by `albertlm data build`.
        split: train or heldout.
        sample: examples whose dynamic masks are drawn (ignored for static masks).
    Returns:
        A dict of counts and fractions (see module docstring).
    """
    from albertlm.data.loader import PretrainingDataset, read_build_meta

    if sample < 1:
        raise AlbertlmError(f"--sample must be at least 1, got {sample}")
    directory = Path(directory)
    meta = read_build_meta(directory)
    settings = meta["settings"]
    shards = [Shard(p) for p in list_shards(directory, split)]
    n = sum(len(s) for s in shards)
    lengths = np.concatenate([np.diff(s["tokens_offsets"]) for s in shards])
    labels = np.concatenate([np.asarray(s["sentence_order_label"]) for s in shards])
    short = np.concatenate([np.asarray(s["is_short"]) for s in shards])
    tokens = int(lengths.sum())
    if settings["masking"] == "static":
        masked = sum(len(s["mlm_positions"]) for s in shards)
        maskable = tokens - SPECIALS_PER_EXAMPLE * n
        spans = np.concatenate([np.asarray(s["span_n"]) for s in shards])
        masked_from = f"all {n:,} examples (static masks)"
    else:  # the loader's own draw, with the build's settings, as a run with seed = the build's seed
        data = PretrainingDataset(directory, split, seed=settings["seed"], shuffle=False, masking="dynamic")
        picks = np.random.default_rng([settings["seed"], 0]).choice(n, size=min(sample, n), replace=False)
        masked = maskable = 0
        span_list = []
        for index in np.sort(picks):
            m = data.dynamic_mask(int(index), epoch=0)
            masked += int((m.labels != IGNORE_INDEX).sum())
            maskable += len(m.labels) - SPECIALS_PER_EXAMPLE
            span_list.append(m.span_n)
        spans = np.concatenate(span_list) if span_list else np.zeros(0, np.int8)
        masked_from = f"a sample of {len(picks):,} examples (dynamic masks, epoch 0, as training draws them)"
    hist = np.bincount(spans.astype(np.int64), minlength=settings["max_ngram"] + 1)[1:]
    return {
        "split": split, "examples": n, "tokens": tokens,
        "mean_length": tokens / max(n, 1),
        "padding_fraction": 1.0 - tokens / max(n * settings["max_seq_length"], 1),
        "mask_rate": masked / max(maskable, 1), "masked_tokens": masked, "mask_stats_from": masked_from,
        "ngram_fractions": {str(k + 1): float(c) / max(int(hist.sum()), 1) for k, c in enumerate(hist)},
        "label_1_fraction": float(labels.mean()) if n else 0.0,
        "short_fraction": float(short.mean()) if n else 0.0,
        "objective": settings["objective"], "masking": settings["masking"],
        "max_seq_length": settings["max_seq_length"], "max_predictions": settings["max_predictions"],
        "max_ngram": settings["max_ngram"], "short_seq_prob": settings.get("short_seq_prob", 0.1),
        "masked_lm_prob": settings["masked_lm_prob"],
        "sources": source_shares(meta), "source_lines": format_sources(meta),
    }


def format_stats(s: dict[str, Any]) -> str:
    """The stats as an aligned text block."""
    grams = ", ".join(f"{k}-gram {v:.1%}" for k, v in s["ngram_fractions"].items())
    weights = [1 / n for n in range(1, s["max_ngram"] + 1)]  # p(n) proportional to 1/n
    expected = ", ".join(f"{w / sum(weights):.1%}" for w in weights)
    label = "swapped (SOP label 1)" if s["objective"] == "sop" else "label 1"
    rows = [
        ("split", s["split"]), ("examples", f"{s['examples']:,}"), ("tokens", f"{s['tokens']:,}"),
        ("mean length", f"{s['mean_length']:.1f} of {s['max_seq_length']}"),
        ("padding fraction", f"{s['padding_fraction']:.1%} (if padded to max_seq_length)"),
        ("mask rate", f"{s['mask_rate']:.2%} of maskable tokens (masked_lm_prob {s['masked_lm_prob']:.0%}), over "
                      f"{s['mask_stats_from']}"),
        ("n-gram lengths", f"{grams} (expected from max_ngram {s['max_ngram']}: {expected})"),
        (f"{label}", f"{s['label_1_fraction']:.1%}"),
        ("short sequences", f"{s['short_fraction']:.1%} (short_seq_prob {s['short_seq_prob']:.0%})"),
    ]
    rows += [("corpus (whole build)" if k == 0 else "", line) for k, line in enumerate(s.get("source_lines", []))]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
