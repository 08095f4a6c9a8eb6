"""Cheaper CPU inference for a trained model: int8 Linear layers (quantize.py)."""
