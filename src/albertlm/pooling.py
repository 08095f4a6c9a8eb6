"""Sentence vectors from the backbone: pooling over the last layer, optional L2 normalisation.

    cls      the last layer at [CLS], h[:, 0]                              [B, H]
    pooler   ALBERT's pooler on [CLS], tanh(Linear(h[:, 0])) (model.py); trained for sentence
             order (paper §4.1), not for similarity, and absent from mean-pooled heads
    mean     the mean of the last layer over the non-padding tokens ([CLS] and [SEP] included,
             as sentence-transformers counts them)
    max      the per-dimension maximum over the non-padding tokens

`SentenceEmbedder` puts the backbone and one of these together as a plain module whose forward
takes (input_ids, attention_mask, token_type_ids) and returns [B, H]: it runs in PyTorch and traces
into ONNX as it is (no data-dependent Python branches). The fine-tuning heads' `sentence_vector`
(heads.py) uses `mean_pool` from here.

A model trained for embeddings (train/embedding.py) records its pooling in config.json under
`EMBEDDING_KEY`; `saved_pooling` reads it back, so `albertlm embed` and the sentence-transformers
writer pool as the model was trained.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from albertlm.config import AlbertConfig
from albertlm.errors import ConfigError
from albertlm.model import AlbertModel

POOLINGS = ("cls", "pooler", "mean", "max")
"""The pooling modes, in the order the docs list them."""
EMBEDDING_KEY = "albertlm_embedding"
"""config.json's entry of an embedding model: {"pooling", "objective", "task"} (train/embedding.py)."""


def saved_pooling(config: AlbertConfig, source: str = "config.json") -> str | None:
    """The pooling a model was trained with (config.json's `EMBEDDING_KEY`), or None when it records none.

    Raises:
        ConfigError: the entry names no pooling mode albertlm has (one line naming `source`).
    """
    record = config.extra.get(EMBEDDING_KEY)
    if record is None:
        return None
    mode = record.get("pooling") if isinstance(record, dict) else None
    if mode not in POOLINGS:
        raise ConfigError(f"{source}: {EMBEDDING_KEY}.pooling is {mode!r}; expected one of {', '.join(POOLINGS)}")
    return mode


def token_positions(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """Where the pooled tokens are, shaped to broadcast over the hidden size.

    Args:
        attention_mask: [B, S], 1 for tokens and 0 for padding; None means no padding.
    Returns:
        [B, S, 1] bool, True at tokens; None when `attention_mask` is None.
    """
    return None if attention_mask is None else attention_mask.bool().unsqueeze(-1)  # [B, S, 1]


def mean_pool(h: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """The mean of each sequence's non-padding positions.

    Args:
        h: [B, S, H] hidden states.
        attention_mask: [B, S], 1 for tokens and 0 for padding; None means no padding.
    Returns:
        [B, H]; a row without any token gives zeros.
    """
    keep = token_positions(attention_mask)
    if keep is None:
        return h.mean(1)
    weight = keep.to(h.dtype)  # [B, S, 1]
    return (h * weight).sum(1) / weight.sum(1).clamp_min(1.0)  # [B, H]


def max_pool(h: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """The per-dimension maximum over each sequence's non-padding positions.

    Args:
        h: [B, S, H] hidden states.
        attention_mask: [B, S], 1 for tokens and 0 for padding; None means no padding.
    Returns:
        [B, H]; a row without any token gives zeros.
    """
    keep = token_positions(attention_mask)
    if keep is None:
        return h.max(1).values
    lowest = torch.finfo(h.dtype).min  # not -inf: a row of padding only must not give -inf
    top = h.masked_fill(~keep, lowest).max(1).values  # [B, H]
    return torch.where(keep.any(1), top, torch.zeros_like(top))  # keep.any(1): [B, 1]


def pool(model: AlbertModel, h: torch.Tensor, attention_mask: torch.Tensor | None, mode: str) -> torch.Tensor:
    """One sentence vector per sequence of a layer's output.

    Args:
        model: the backbone (its pooler serves "pooler").
        h: [B, S, H], the last layer's output.
        attention_mask: [B, S], 1 for tokens and 0 for padding; None means no padding.
        mode: one of POOLINGS.
    Returns:
        [B, H].
    Raises:
        ValueError: an unknown mode, or "pooler" on a backbone without a pooler.
    """
    if mode == "cls":
        return h[:, 0]
    if mode == "pooler":
        if model.pooler is None:
            raise ValueError("pooling 'pooler' needs the backbone's pooler, and this one has none")
        return model.pool(h)
    if mode == "mean":
        return mean_pool(h, attention_mask)
    if mode == "max":
        return max_pool(h, attention_mask)
    raise ValueError(f"pooling {mode!r} is unknown; choose one of {', '.join(POOLINGS)}")


class SentenceEmbedder(nn.Module):
    """The backbone, one pooling mode and optional L2 normalisation: token ids in, [B, H] out.

    Args:
        model: the backbone; for mode "pooler" it must have its pooler.
        mode: one of POOLINGS.
        normalize: divide each vector by its L2 norm (so dot products are cosines).
    """

    unpads = True
    """forward takes `unpad=True` and gives the same vectors (PreTrainedAlbert.unpads)."""

    def __init__(self, model: AlbertModel, mode: str = "mean", normalize: bool = False):
        super().__init__()
        if mode not in POOLINGS:
            raise ValueError(f"pooling {mode!r} is unknown; choose one of {', '.join(POOLINGS)}")
        if mode == "pooler" and model.pooler is None:
            raise ValueError("pooling 'pooler' needs the backbone's pooler, and this one has none")
        self.albert = model
        self.config = model.config
        self.mode = mode
        self.normalize = normalize

    def num_parameters(self) -> int:
        """The backbone's distinct parameters (pooling adds none)."""
        return self.albert.num_parameters()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, unpad: bool = False) -> torch.Tensor:
        """Embed a batch.

        Args:
            input_ids, attention_mask, token_type_ids: [B, S], as AlbertModel.forward.
            unpad: run the encoder on the real tokens only (AlbertModel.forward): the same vectors.
        Returns:
            [B, H] sentence vectors (unit length with `normalize`).
        """
        h = self.albert(input_ids, attention_mask, token_type_ids, unpad=unpad).last_hidden_state  # [B, S, H]
        v = pool(self.albert, h, attention_mask, self.mode)  # [B, H]
        return F.normalize(v, p=2.0, dim=-1) if self.normalize else v
