"""Running a trained directory: exit.py (patience-based early exit), prepack.py (oneDNN-packed fp32),
quantize.py (int8 Linear layers), onnx_backend.py (an exported file run by onnxruntime)."""
