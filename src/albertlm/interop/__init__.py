"""Interop with the other ALBERT formats: `hf` (transformers directories), `tf` (the key tables of
Google's TF1 / TF-Hub checkpoints and of brightmart/albert_zh's layout), `tf_bundle` (TF1
checkpoints read and written without TensorFlow; `sstable` is its table and protobuf layer),
`onnx` (`albertlm export`, each shared tensor stored once). Nothing here builds a model: whole
checkpoints are converted by `albertlm.convert`, which sits above both."""
