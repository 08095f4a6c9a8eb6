"""The server's one dependency on the inference code: a fine-tuned directory loaded once
(`inference.load.load_model_dir`), predicting a batch of input lines with `inference.predict.predict_batch`,
the path `albertlm predict` takes, so every answer's `line` is what predict prints for it.
tests/test_serve.py checks every served answer against `predict_lines`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from albertlm.errors import AlbertlmError
from albertlm.serve.settings import ServeSettings

SPECIAL_TOKENS = 3
"""[CLS] A [SEP] B [SEP]: the pieces an input costs beyond its text's, in the batch's token count."""

PREDICT_BATCH = 64
"""Features per forward pass at least: `albertlm predict`'s default --batch-size."""


class ServedModel:
    """A fine-tuned directory ready to predict: `predict(lines)` gives one answer per line.

    Args:
        model_dir: the fine-tuned directory.
        settings: the server's settings (device, int8, patience).
    Raises:
        AlbertlmError: not a fine-tuned directory, --patience on a model without exit heads, int8 off the CPU.
    """

    def __init__(self, model_dir: str | Path, settings: ServeSettings):
        from albertlm.inference.load import load_model_dir

        if not Path(model_dir).is_dir():
            raise AlbertlmError(f"{model_dir}: not a model directory")
        self.model_dir = str(model_dir)
        int8 = settings.int8_backend if settings.int8 else None
        self.loaded = load_model_dir(model_dir, device=settings.device, int8=int8, patience=settings.patience,
                                     regression_threshold=settings.regression_threshold)
        self.config, self.tokenizer, self.family = self.loaded.config, self.loaded.tokenizer, self.loaded.family
        self.head, self.device, self.patience = self.loaded.arch, self.loaded.device, settings.patience
        self.features = self.loaded.settings()
        self.labels = self.loaded.labels
        # a batch the batcher merged runs as one forward pass up to --max-batch-tokens of features; one
        # request that is larger alone (a long text's windows) runs in passes of that size
        self.forward_batch = max(PREDICT_BATCH, settings.max_batch_tokens // self.features.max_seq_length)
        self.backend = f"int8 ({int8})" if int8 else "fp32"

    def example(self, index: int, line: str) -> Any:
        """The family's example for one input line, or a one-line error naming `inputs[index]`."""
        try:
            return self.family.parse_line(index, line, self.tokenizer)
        except AlbertlmError as exc:  # the family names the line of a file: here it is an input of a request
            raise AlbertlmError(re.sub(r"^line \d+: ", f"inputs[{index}]: ", str(exc))) from None

    def tokens(self, line: str) -> int:
        """What one input line costs in a batch: its pieces plus the special tokens."""
        return len(self.tokenizer.encode(line)) + SPECIAL_TOKENS

    def predict(self, lines: list[str]) -> list[dict[str, Any]]:
        """One answer per (non-blank) line: `{"line": what albertlm predict prints}` plus the same
        prediction as fields (`answer_fields`), and `"layers"` run under early exit.

        Raises:
            AlbertlmError: a line the family cannot parse, or non-finite outputs.
        """
        from albertlm.inference.predict import predict_batch

        for i, line in enumerate(lines):
            self.example(i, line)  # a bad input is named as the request's, before any work
        predictions = predict_batch(self.loaded, lines, self.forward_batch)
        answers = [{**answer_fields(result), "line": self.family.line(result)} for result in predictions.results]
        if predictions.exit_layers is not None:
            for a, n in zip(answers, predictions.exit_layers):
                a["layers"] = n
        return answers

    def describe(self) -> dict[str, Any]:
        """What /info says about the model."""
        return {"model_dir": self.model_dir, "task": self.config.extra.get("finetuning_task"), "head": self.head,
                "family": self.family.name, "problem_type": self.loaded.problem_type, "labels": self.labels,
                "backend": self.backend, "device": str(self.device),
                "max_seq_length": self.features.max_seq_length, "forward_batch": self.forward_batch,
                "early_exit": None if self.patience is None else {"patience": self.patience,
                                                                  "layers": self.config.num_layer_calls}}


def answer_fields(result: dict[str, Any]) -> dict[str, Any]:
    """A result of `predict_batch` as the answer's fields: the label and its probability as `score`
    (rounded as predict prints it), the score (regression), the labels (multi-label), each word with its
    tag (NER), the answer text (QA), the option's letter and text (multiple choice)."""
    if "probability" in result:
        return {"label": result["label"], "score": round(result["probability"], 4)}
    if "tags" in result:
        return {"tokens": [{"word": w, "tag": t} for w, t in zip(result["words"], result["tags"])]}
    return dict(result)
