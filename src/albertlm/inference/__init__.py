"""Running a trained directory: what evaluate, predict, fill-mask and export use (train/ imports it, never the
reverse), and what a server sits on (`predict.Predictor`).

    load.py          which class a directory holds (`model_class`), `load_model_dir` with its backend
    features.py      the input settings a directory was fine-tuned with
    run.py           a head over features, batched by length, outputs in feature order
    post.py          outputs to predictions and metrics
    evaluate.py      a directory scored on a task split; whether a head fits a task
    predict.py       predictions for raw inputs: Predictor, predict_batch, predict_lines
    fill_mask.py     [MASK] filled by a pretrained directory
    settings.py      the commands' settings (their flags, through albertlm.options)
    exit.py          patience-based early exit
    prepack.py       oneDNN-packed fp32 weights
    quantize.py      int8 Linear layers
    onnx_backend.py  an exported file run by onnxruntime
"""
