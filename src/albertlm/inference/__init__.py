"""Running a trained directory: exit.py (patience-based early exit), quantize.py (int8 Linear layers)."""
