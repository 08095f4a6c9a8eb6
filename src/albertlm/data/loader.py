"""PretrainingDataset: examples from shards, sharded across data-parallel ranks, with a resumable cursor.

Order: the examples of all shards form one endless stream: the permutation drawn from (seed, 0),
then the one drawn from (seed, 1), and so on, one per epoch. Rank r of W takes stream positions
r, r + W, r + 2W, ... Every example is seen exactly once per epoch across the ranks, and the k-th
global batch holds the same examples whatever W is (even across an epoch boundary that does not
divide evenly), which is what makes a 2-process run equal a 1-process run.

Start-up does not read the data: the examples per shard come from meta.json (`shard_sizes`), and
a shard is opened (its header read, its file mapped: one descriptor each) the first time one of
its examples is asked for, so the first batch opens at most batch-size shards whatever the corpus.
What does grow with the corpus is the epoch's permutation (8 bytes per example of the split, drawn
when an epoch starts) and, for splits up to `VERIFY_AT_LOAD_BYTES` (256 MB) in all, the sha256
check of every shard, which reads them once; larger splits are checked by `data stats --verify`.

Masks: shards built with static masking carry their masks (the official dupe_factor scheme);
otherwise the loader masks dynamically, drawing example i's mask in epoch e from a generator
seeded by (seed, e, i), so it does not depend on the rank layout or on where a run resumed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albertlm.data.shards import Shard, list_shards
from albertlm.errors import AlbertlmError
from albertlm.vocab import IGNORE_INDEX, SPIECE_IDS, SpecialIds


class PretrainingDataset(torch.utils.data.IterableDataset):
    """Per-example dicts: input_ids, token_type_ids, attention_mask, labels, sentence_order_label.

    Args:
        directory: a directory written by `albertlm data build`.
        split: "train" or "heldout".
        rank, world_size: this process's data-parallel position.
        seed: order and dynamic-mask seed.
        shuffle: permute each epoch (False: file order, e.g. for evaluation).
        epochs: stop after this many epochs (None: forever).
        masking: "auto" (static when the shards carry masks), "static" or "dynamic".
        masked_lm_prob, max_predictions, max_ngram: dynamic masking settings (paper: 0.15, 20, 3).
    """

    def __init__(self, directory: str | os.PathLike, split: str = "train", rank: int = 0, world_size: int = 1,
                 seed: int = 0, shuffle: bool = True, epochs: int | None = None, masking: str = "auto",
                 masked_lm_prob: float | None = None, max_predictions: int | None = None,
                 max_ngram: int | None = None):
        super().__init__()
        if not 0 <= rank < world_size:
            raise AlbertlmError(f"rank {rank} is outside world_size {world_size}")
        self.directory = Path(directory)
        build_meta = read_build_meta(self.directory)
        build = build_meta["settings"]
        self.paths = list_shards(self.directory, split)
        if sum(p.stat().st_size for p in self.paths) <= VERIFY_AT_LOAD_BYTES:
            verify_shards(self.directory, build_meta, self.paths)
        self._open: dict[int, Shard] = {}  # shards are opened when first read (module docstring)
        self.sizes = shard_sizes(self.directory, build_meta, self.paths, self._open)
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)])
        self.num_examples = int(self.starts[-1])
        if self.num_examples == 0:
            raise AlbertlmError(f"{self.directory}: the {split} split has no examples")
        first = self.shard(int(np.flatnonzero(self.sizes)[0]))
        self.vocab_size = int(first.meta.get("vocab_size", 0))
        self.special_ids = build_special_ids(self.directory, build_meta)
        has_static = "mlm_positions" in first
        if masking == "auto":
            masking = "static" if has_static else "dynamic"
        if masking == "static" and not has_static:
            raise AlbertlmError(f"{self.directory}: shards carry no static masks; use masking='dynamic'")
        if masking not in ("static", "dynamic"):
            raise AlbertlmError(f"masking must be auto, static or dynamic, got {masking!r}")
        self.masking = masking
        # dynamic masks follow the build's recorded settings unless told otherwise
        self.masked_lm_prob = float(build["masked_lm_prob"] if masked_lm_prob is None else masked_lm_prob)
        self.max_predictions = int(max_predictions or first.meta.get("max_predictions", build["max_predictions"]))
        self.max_ngram = int(build["max_ngram"] if max_ngram is None else max_ngram)
        self.rank, self.world_size, self.seed, self.shuffle, self.epochs = rank, world_size, seed, shuffle, epochs
        self.position = 0  # examples this rank has taken from the stream
        self._perm: tuple[int, np.ndarray] | None = None

    @property
    def epoch(self) -> int:
        """The epoch of the next example this rank takes."""
        return (self.rank + self.position * self.world_size) // self.num_examples

    # ------------------------------------------------------------------ cursor
    def state_dict(self) -> dict[str, Any]:
        """The cursor: where the next example comes from."""
        return {"position": self.position, "seed": self.seed, "rank": self.rank,
                "world_size": self.world_size, "num_examples": self.num_examples}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a cursor saved by state_dict (same data, seed and world size)."""
        if state.get("num_examples") != self.num_examples or state.get("seed") != self.seed:
            raise AlbertlmError(f"{self.directory}: the saved data cursor belongs to other data or another "
                                "seed; cannot resume the data order exactly")
        if state.get("world_size") != self.world_size or state.get("rank", self.rank) != self.rank:
            raise AlbertlmError(f"the saved data cursor is for {state.get('world_size')} ranks, this run has "
                                f"{self.world_size}; resume with the same number of processes")
        self.position = int(state["position"])

    def __len__(self) -> int:
        """Examples this rank sees per epoch (ranks differ by at most one)."""
        return len(range(self.rank, self.num_examples, self.world_size))

    def shard(self, s: int) -> Shard:
        """Shard number `s` of the split, opened (header read, file mapped) on first use."""
        shard = self._open.get(s)
        if shard is None:
            shard = self._open[s] = Shard(self.paths[s])
            if len(shard) != self.sizes[s]:
                raise AlbertlmError(f"{shard.path}: holds {len(shard)} examples where meta.json records "
                                    f"{self.sizes[s]} (a shard from another build?); rebuild the data")
        return shard

    # ------------------------------------------------------------------ iteration
    def _order(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.num_examples)
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_examples)

    def example(self, index: int, epoch: int = 0) -> dict[str, np.ndarray]:
        """Global example `index` as numpy arrays (masked as it would be in `epoch`)."""
        s = int(np.searchsorted(self.starts, index, side="right") - 1)
        shard, i = self.shard(s), index - int(self.starts[s])
        tokens = shard.row("tokens", i).astype(np.int64)
        n = len(tokens)
        if n and (int(tokens.max()) >= self.vocab_size or int(tokens.min()) < 0):
            raise AlbertlmError(f"{shard.path}: example {i} holds token ids outside the vocabulary of "
                                f"{self.vocab_size} (a corrupt shard; `albertlm data stats --verify` checks every file)")
        types = np.zeros(n, dtype=np.int64)
        types[int(shard["segment_a"][i]):] = 1
        labels = np.full(n, IGNORE_INDEX, dtype=np.int64)
        if self.masking == "static":
            pos = shard.row("mlm_positions", i, "mlm_offsets").astype(np.int64)
            labels[pos] = shard.row("mlm_labels", i, "mlm_offsets")
        else:
            masked = self.dynamic_mask(index, epoch)
            tokens, labels = masked.input_ids.astype(np.int64), masked.labels.astype(np.int64)
        return {"input_ids": tokens, "token_type_ids": types, "attention_mask": np.ones(n, dtype=np.int64),
                "labels": labels, "sentence_order_label": np.int64(shard["sentence_order_label"][i])}

    def dynamic_mask(self, index: int, epoch: int = 0):
        """The dynamic mask of global example `index` in `epoch` (masking.MaskedInstance): the one
        draw training makes, also used by `data stats`."""
        from albertlm.data.masking import mask_instance

        s = int(np.searchsorted(self.starts, index, side="right") - 1)
        shard, i = self.shard(s), index - int(self.starts[s])
        tokens = shard.row("tokens", i).astype(np.int64)
        word_start = shard.row("word_start", i, "tokens_offsets").astype(bool)
        return mask_instance(tokens, word_start, np.random.default_rng([self.seed, epoch, index, 1]),
                             vocab_size=self.vocab_size, masked_lm_prob=self.masked_lm_prob,
                             max_predictions=self.max_predictions, max_ngram=self.max_ngram,
                             special=self.special_ids)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        while True:
            g = self.rank + self.position * self.world_size  # position in the global stream
            epoch, offset = divmod(g, self.num_examples)
            if self.epochs is not None and epoch >= self.epochs:
                return
            if self._perm is None or self._perm[0] != epoch:
                self._perm = (epoch, self._order(epoch))
            self.position += 1  # advance first: the cursor always names the NEXT example
            yield self.example(int(self._perm[1][offset]), epoch)


def shard_sizes(directory: Path, meta: dict[str, Any], paths: Sequence[Path], opened: dict[int, Shard]) -> np.ndarray:
    """Examples in each shard, from meta.json's `shard_sizes`, without opening any shard (a build
    made before that record: every shard is opened, and kept in `opened`).

    Args:
        directory: the build's directory (for messages).
        meta: its meta.json content.
        paths: the split's shard files, in order.
        opened: index -> Shard; filled for builds without the record.
    Returns:
        int64 [len(paths)].
    """
    recorded = meta.get("shard_sizes")
    if not isinstance(recorded, dict):
        opened.update((s, Shard(p)) for s, p in enumerate(paths))
        return np.array([len(opened[s]) for s in range(len(paths))], dtype=np.int64)
    unlisted = [p for p in paths if not isinstance(recorded.get(p.name), int)]
    if unlisted:
        raise AlbertlmError(f"{unlisted[0]}: not listed in {Path(directory) / 'meta.json'} (a shard from another "
                            "build?)")
    return np.array([recorded[p.name] for p in paths], dtype=np.int64)


VERIFY_AT_LOAD_BYTES = 256 << 20
"""Splits up to this size are checked against their recorded sha256 every time they are opened."""


def verify_shards(directory: Path, meta: dict[str, Any], paths: Sequence[Path] | None = None) -> int:
    """Check shards against the sha256 recorded in meta.json; one line naming the first that differs.

    Returns the number of files checked (0 for a build that predates checksums)."""
    from albertlm.utils import sha256_file

    sums = meta.get("checksums")
    if not isinstance(sums, dict):
        return 0
    every_file = paths is None
    paths = list(paths) if paths is not None else sorted(Path(directory).glob("*.shard"))
    for path in paths:
        expected = sums.get(path.name)
        if expected is None:
            raise AlbertlmError(f"{path}: not listed in {Path(directory) / 'meta.json'} (a shard from another build?)")
        if sha256_file(path) != expected:
            raise AlbertlmError(f"{path}: fails its sha256 check (the file changed after the build); rebuild the data")
    missing = [name for name in sums if every_file and not (Path(directory) / name).exists()]
    if missing:
        raise AlbertlmError(f"{Path(directory) / missing[0]}: listed in meta.json but missing")
    return len(paths)


def read_build_meta(directory: Path) -> dict[str, Any]:
    """A completed build's meta.json (an interrupted build has none and is refused)."""
    import json

    path = Path(directory) / "meta.json"
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise AlbertlmError(f"{directory}: no meta.json (not a completed `albertlm data build` output; "
                            "an interrupted build is rebuilt by running it again)") from None
    except (ValueError, UnicodeDecodeError):
        raise AlbertlmError(f"{path}: not valid JSON") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("settings"), dict):
        raise AlbertlmError(f"{path}: no settings object (not an `albertlm data build` meta.json)")
    missing = [k for k in ("masked_lm_prob", "max_predictions", "max_ngram", "seed", "masking", "max_seq_length")
               if k not in meta["settings"]]
    if missing:
        raise AlbertlmError(f"{path}: settings lack {', '.join(missing)}")
    return meta


def build_special_ids(directory: Path, meta: dict[str, Any]) -> SpecialIds:
    """The special ids of the vocabulary a build used (meta.json "tokenizer"; ALBERT's SentencePiece
    layout for builds that predate the record)."""
    tok = meta.get("tokenizer")
    return SpecialIds.from_json(tok.get("special_ids") if isinstance(tok, dict) else None,
                                where=f"{Path(directory) / 'meta.json'}: tokenizer.special_ids")


def collate(examples: Sequence[dict[str, np.ndarray]], pad_to_multiple: int = 8,
            special: SpecialIds = SPIECE_IDS) -> dict[str, torch.Tensor]:
    """Stack examples into tensors, padding to the longest (rounded up to a multiple of 8) with the
    vocabulary's padding id (`special.pad`; pass the dataset's `special_ids`).

    Returns:
        input_ids, token_type_ids, attention_mask, labels: [B, S]; sentence_order_label: [B].
    """
    longest = max(len(e["input_ids"]) for e in examples)
    S = -(-longest // pad_to_multiple) * pad_to_multiple
    B = len(examples)
    fill = {"input_ids": special.pad, "token_type_ids": 0, "attention_mask": 0, "labels": IGNORE_INDEX}
    out = {k: np.full((B, S), v, dtype=np.int64) for k, v in fill.items()}
    for b, e in enumerate(examples):
        n = len(e["input_ids"])
        for k in fill:
            out[k][b, :n] = e[k]
    batch = {k: torch.from_numpy(v) for k, v in out.items()}
    batch["sentence_order_label"] = torch.tensor([int(e["sentence_order_label"]) for e in examples])
    return batch
