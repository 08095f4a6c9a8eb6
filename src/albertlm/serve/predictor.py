"""The server's one dependency on the inference code: a fine-tuned directory loaded once, predicting a
batch of input lines exactly as `albertlm predict` does for them.

`albertlm predict` (`predict_lines` in train/inference.py) loads the directory on every call; a server
loads it once and runs many batches, so `ServedModel` holds what `_predict_nonblank` builds per call
(the model, the family, the prediction spec, the feature settings, the labels) and runs the same steps
on each batch: parse each line with the family, featurize, run the head, render the family's output
line. When the batch-level inference API lands, `ServedModel.predict` becomes a call to it; the server
uses nothing else. tests/test_serve.py checks every served answer against `predict_lines`.
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
        from albertlm.tasks.registry import TaskSpec, family_of_head
        from albertlm.train.inference import _labels, _settings, head_name, load_finetuned, patience_runner

        if not Path(model_dir).is_dir():
            raise AlbertlmError(f"{model_dir}: not a model directory")
        self.model_dir = str(model_dir)
        int8 = settings.int8_backend if settings.int8 else None
        model, self.config, self.tokenizer = load_finetuned(model_dir, settings.device, int8)
        self.head = head_name(model)
        self.device = next(model.parameters()).device
        self.family = family_of_head(self.head)
        self.patience = settings.patience
        self.runner = model if self.patience is None else patience_runner(model_dir, model, self.patience,
                                                                          settings.regression_threshold)
        problem = self.config.problem_type or ("regression" if self.config.num_labels == 1
                                               else "single_label_classification")
        self.spec = TaskSpec.for_prediction(self.family, problem)
        self.features = _settings(self.config, chinese=self.tokenizer.chinese)
        self.labels = _labels(self.config)
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
        prediction as fields (`ANSWERS`), and `"layers"` run under early exit.

        Raises:
            AlbertlmError: a line the family cannot parse, or non-finite outputs.
        """
        from albertlm.train.finetune import check_finite_outputs, run_features

        examples = [self.example(i, line) for i, line in enumerate(lines)]
        features = self.family.featurize(self.spec, examples, self.tokenizer, self.labels, self.features, False)
        extra = ("exit_layers",) if self.patience is not None else ()
        outputs = run_features(self.runner, self.spec, features, self.forward_batch, self.device, per_feature=extra)
        check_finite_outputs(outputs, self.spec, self.model_dir)
        args = (self.spec, examples, features, outputs, self.labels, self.features)
        rendered = self.family.render(*args)
        predictions = self.family.predict(*args)
        answers = [{**ANSWERS[self.family.name](self.spec, e, p, line), "line": line}
                   for e, p, line in zip(examples, predictions, rendered)]
        if self.patience is not None:  # an input split into windows: its deepest window, as predict counts
            for a in answers:
                a["layers"] = 0
            for f, n in zip(features, outputs["exit_layers"]):
                answers[f.example]["layers"] = max(answers[f.example]["layers"], int(n))
        return answers

    def describe(self) -> dict[str, Any]:
        """What /info says about the model."""
        return {"model_dir": self.model_dir, "task": self.config.extra.get("finetuning_task"), "head": self.head,
                "family": self.family.name, "problem_type": self.spec.problem_type, "labels": self.labels,
                "backend": self.backend, "device": str(self.device),
                "max_seq_length": self.features.max_seq_length, "forward_batch": self.forward_batch,
                "early_exit": None if self.patience is None else {"patience": self.patience,
                                                                  "layers": self.config.num_layer_calls}}


# ---------------------------------------------------------------------------- answers as fields
def _classification(spec, example, prediction, line: str) -> dict[str, Any]:
    if spec.problem_type == "single_label_classification":  # the line: label<TAB>probability
        label, score = line.rsplit("\t", 1)
        return {"label": label, "score": float(score)}
    if spec.problem_type == "regression":
        return {"score": float(line)}
    return {"labels": list(prediction)}


def _ner(spec, example, prediction, line: str) -> dict[str, Any]:
    return {"tokens": [{"word": w, "tag": t} for w, t in zip(example.tokens, prediction)]}


def _qa(spec, example, prediction, line: str) -> dict[str, Any]:
    return {"answer": prediction}


def _choice(spec, example, prediction, line: str) -> dict[str, Any]:
    from albertlm.tasks.multiple_choice import LETTERS

    return {"choice": LETTERS[prediction], "option": example.options[prediction]}


ANSWERS = {"classification": _classification, "ner": _ner, "qa": _qa, "multiple_choice": _choice}
"""Family name -> (spec, example, prediction, rendered line) -> the answer's fields: the label and its
probability (rounded as predict prints it), the score (regression), the labels (multi-label), each word
with its tag (NER), the answer text (QA), the option's letter and text (multiple choice)."""
