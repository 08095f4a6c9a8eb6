"""Interop with other ALBERT formats: `hf` (transformers directories), `tf` (Google TF1 checkpoints)."""
