"""Interop with other ALBERT formats: `hf` (transformers directories with a SentencePiece vocabulary)."""
