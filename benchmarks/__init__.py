"""Measurements: speed, memory, serving, data build, inference paths, int8, early exit, distillation,
the count-based baselines and the GPU check. Every script runs as `python -m benchmarks.NAME` from the
repository root and writes its results through `benchmarks.harness` (docs/benchmarks.md; the list of
results files: benchmarks/results/INDEX.md)."""
