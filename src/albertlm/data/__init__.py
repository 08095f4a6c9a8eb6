"""The pretraining data pipeline: corpus → sentences → SOP/NSP instances → masked shards → loader.

`from albertlm.data import PretrainingDataset` is the entry point for training code.
"""

from __future__ import annotations

__all__ = ["PretrainingDataset", "collate"]


def __getattr__(name: str):
    # Lazy: the readers, instance builder and masker need only numpy; the loader brings in torch.
    if name in __all__:
        from albertlm.data import loader

        return getattr(loader, name)
    raise AttributeError(f"module 'albertlm.data' has no attribute {name!r}")
