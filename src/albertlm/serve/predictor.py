"""The server's one dependency on the inference code: a model directory loaded once.

  - predictions: a fine-tuned directory (`inference.load.load_model_dir`, torch, int8 or an exported ONNX
    file), a batch of input lines predicted with `inference.predict.predict_batch`, the path `albertlm
    predict` takes, so every answer's `line` is what predict prints for it;
  - embeddings: any directory `albertlm embed` reads (pretrained, fine-tuned or sentence-transformers), texts
    encoded by `Embedder.encode`, the path `albertlm embed` takes. A directory without a task head serves
    embeddings only (`no_predict` says why), except a sentence embedder trained here (its config.json
    records its objective and task, `inference.embed_eval.embedding_record`): its /predict scores each
    `text_a<TAB>text_b` input by the cosine of the two texts' vectors, as `albertlm predict` prints it
    (`inference.embed_eval.pair_cosines`), computed by the embedding routes' own encoder.

The encoder is held once where it can be: on a fine-tuned directory run by torch (fp32 or int8, early exit
or not), the embedder is built on the /predict model's backbone (`inference.embed.embedder_on`), which
computes what `albertlm embed` loads (int8: the same Linear layers quantized the same way, each from its
own weights; early exit: `patience_forward` walks the backbone's layers, its forward still runs them all).
An ONNX file has no torch backbone, and a head without a pooler has none to share for `--pooling pooler`:
those load the directory a second time (`inference.embed.load_embedder`). `/info` says which
(`embedding.encoder`).

`run` is what the batcher calls: a batch of tagged items (`Item`), predictions and embeddings each
computed in one call, the results back in item order. tests/test_serve.py checks every served answer
against `predict_lines` and every served vector against `albertlm embed`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from albertlm.errors import AlbertlmError
from albertlm.serve.settings import ServeSettings

SPECIAL_TOKENS = 3
"""[CLS] A [SEP] B [SEP]: the pieces an input costs beyond its text's, in the batch's token count."""

PREDICT_BATCH = 64
"""Features per forward pass at least: `albertlm predict`'s default --batch-size."""

SHARED_BACKENDS = ("torch", "int8")
"""The `LoadedModel.backend`s whose model holds the backbone (`.albert`) the embedding routes run."""

PREDICT, EMBED = "predict", "embed"
Item = tuple[str, Any, str]
"""One input of a batch: (PREDICT, None, input line) or (EMBED, normalize, text)."""


class ServedModel:
    """A model directory ready to serve: `predict(lines)` gives one answer per line (a fine-tuned directory),
    `embed(texts, normalize)` one vector per text (any ALBERT directory).

    Args:
        model_dir: a fine-tuned directory, or (embeddings only) a pretrained or sentence-transformers one.
        settings: the server's settings (device, int8, onnx, patience, pooling, normalize).
    Raises:
        AlbertlmError: not a model directory, --patience on a model without exit heads, --onnx or --patience
            on a directory without a task head, int8 off the CPU, --pooling pooler without a pooler.
    """

    def __init__(self, model_dir: str | Path, settings: ServeSettings):
        from albertlm.inference.embed import EmbedSettings
        from albertlm.inference.embed_eval import embedding_record, saved_score_map
        from albertlm.inference.load import load_model_dir
        from albertlm.tasks.score_map import SCORE_MAP_KEY

        if not Path(model_dir).is_dir():
            raise AlbertlmError(f"{model_dir}: not a model directory")
        self.model_dir = str(model_dir)
        int8 = settings.int8_backend if settings.int8 else None
        record = embedding_record(model_dir)
        self.pair_scores = None if record is None else {k: v for k, v in record.items() if k != SCORE_MAP_KEY}
        """A sentence embedder's record (objective, task): /predict gives the cosine of each text pair; or None."""
        self.score_map = saved_score_map(model_dir) if record is not None else None
        """An embedder's cosine -> score map (trained on graded pairs): /predict gives the mapped score too."""
        self.no_predict = None if self.pair_scores is not None else predict_refusal(model_dir)
        """Why /predict is not served (a directory without a task head), or None."""
        self.loaded = None
        if self.no_predict is None and self.pair_scores is None:
            self.loaded = load_model_dir(model_dir, device=settings.device, int8=int8, patience=settings.patience,
                                         regression_threshold=settings.regression_threshold, onnx=settings.onnx)
        else:
            why = self.no_predict or f"{model_dir} is a sentence embedder, without a task head or exit heads"
            for flag, on in (("--onnx", settings.onnx is not None), ("--patience", settings.patience is not None)):
                if on:
                    raise AlbertlmError(f"{flag} needs a fine-tuned directory: {why}")
        device = self.loaded.device.type if self.loaded is not None else settings.device
        self.embedder, self.embedding_encoder = self._embedder(EmbedSettings(
            pooling=settings.pooling, normalize=settings.normalize, device=device, int8=settings.int8,
            int8_backend=settings.int8_backend, progress=False))
        """The embedding routes' Embedder, and where its encoder is: "shared" (the /predict model's backbone),
        "second copy" (loaded again beside it) or "own" (no /predict)."""
        self.normalize = self.embedder.normalize
        """Whether vectors are normalised when a request does not say."""
        self._embedders = {self.normalize: self.embedder, not self.normalize: renormalized(self.embedder)}
        self.patience = settings.patience
        self.backend = "onnx" if settings.onnx is not None else f"int8 ({int8})" if int8 else "fp32"
        self.onnx = settings.onnx
        if self.loaded is not None:
            self.config, self.tokenizer, self.family = self.loaded.config, self.loaded.tokenizer, self.loaded.family
            self.head, self.device = self.loaded.arch, self.loaded.device
            self.features = self.loaded.settings()
            self.labels = self.loaded.labels
            # a batch the batcher merged runs as one forward pass up to --max-batch-tokens of features; one
            # request that is larger alone (a long text's windows) runs in passes of that size
            self.forward_batch = max(PREDICT_BATCH, settings.max_batch_tokens // self.features.max_seq_length)
        else:
            self.config, self.tokenizer, self.family = self.embedder.model.config, self.embedder.vocabulary, None
            self.head, self.device, self.features, self.labels = None, self.embedder.device, None, None
            self.forward_batch = None

    def _embedder(self, settings):
        """The Embedder `albertlm embed` would load with these settings, on the /predict model's backbone
        where it holds one that computes the same (see the module docstring); and which it is."""
        from albertlm.inference.embed import embed_choice, embedder_on, load_embedder

        if self.loaded is None:
            return load_embedder(self.model_dir, settings), "own"
        choice = embed_choice(self.model_dir, settings)
        backbone = self.loaded.model.albert if self.loaded.backend in SHARED_BACKENDS else None
        if backbone is None or (choice.pooling == "pooler" and backbone.pooler is None):
            return load_embedder(self.model_dir, settings), "second copy"
        return embedder_on(backbone, choice, self.loaded.tokenizer, self.loaded.device), "shared"

    @property
    def title(self) -> str:
        """What the startup line calls the model: its head, or what serves embeddings only."""
        if self.pair_scores is not None:
            return "a sentence embedder (/predict: the cosine of each text pair; /embed, /v1/embeddings)"
        return self.head or "embeddings only (/embed, /v1/embeddings)"

    # ------------------------------------------------------------------------ predictions
    def example(self, index: int, line: str) -> Any:
        """The family's example for one input line (a sentence embedder's: the two texts), or a one-line error
        naming `inputs[index]`."""
        if self.pair_scores is not None:
            from albertlm.inference.embed_eval import split_pair

            return split_pair(line, f"inputs[{index}]", self.model_dir, "for one text's vector: POST /embed")
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
            AlbertlmError: no task head (`no_predict`), a line the family cannot parse, or non-finite outputs.
        """
        from albertlm.inference.predict import predict_batch

        if self.no_predict is not None:
            raise AlbertlmError(self.no_predict)
        examples = [self.example(i, line) for i, line in enumerate(lines)]  # a bad input named before any work
        if self.pair_scores is not None:
            from albertlm.inference.embed import EmbedSettings
            from albertlm.inference.embed_eval import pair_cosines

            cosines = pair_cosines(self.embedder, examples, EmbedSettings.batch_size)
            if self.score_map is None:
                return [{"score": round(c, 4), "line": f"{c:.4f}"} for c in cosines]
            mapped = [float(v) for v in self.score_map(cosines)]
            return [{"score": round(m, 4), "cosine": round(c, 4), "line": f"{c:.4f}\t{m:.4f}"}
                    for c, m in zip(cosines, mapped)]
        predictions = predict_batch(self.loaded, lines, self.forward_batch)
        answers = [{**answer_fields(result), "line": self.family.line(result)} for result in predictions.results]
        if predictions.exit_layers is not None:
            for a, n in zip(answers, predictions.exit_layers):
                a["layers"] = n
        return answers

    # ------------------------------------------------------------------------ embeddings
    def embed_tokens(self, texts: list[str]) -> list[int]:
        """The tokens each text is embedded with ([CLS] and [SEP] included, after truncation)."""
        return [len(ids) for ids in self.embedder.inputs(texts)]

    def embed(self, texts: list[str], normalize: bool | None = None) -> np.ndarray:
        """float32 [N, H], row i for texts[i], as `albertlm embed` computes it.

        Args:
            texts: the texts (an empty one gets the vector of `[CLS] [SEP]`).
            normalize: unit-length vectors; None: the server's default (`self.normalize`).
        Raises:
            AlbertlmError: NaN or infinity in the vectors.
        """
        from albertlm.inference.embed import EmbedSettings

        embedder = self._embedders[self.normalize if normalize is None else normalize]
        return embedder.encode(texts, EmbedSettings.batch_size)

    # ------------------------------------------------------------------------ the batcher's call
    def run(self, items: list[Item]) -> list:
        """One result per item, in order: the PREDICT items' answers from one `predict` call, the EMBED items'
        vectors from one `embed` call per normalisation."""
        groups: dict[tuple[str, Any], list[int]] = {}
        for i, (kind, option, _) in enumerate(items):
            groups.setdefault((kind, option), []).append(i)
        out: list = [None] * len(items)
        for (kind, option), where in groups.items():
            inputs = [items[i][2] for i in where]
            results = self.predict(inputs) if kind == PREDICT else list(self.embed(inputs, option))
            for i, result in zip(where, results, strict=True):
                out[i] = result
        return out

    def describe(self) -> dict[str, Any]:
        """What /info says about the model."""
        e = self.embedder
        head = self.loaded is not None
        task = self.config.extra.get("finetuning_task") if head else (self.pair_scores or {}).get("task")
        return {"model_dir": self.model_dir, "task": task,
                "head": self.head, "family": self.family.name if head else None,
                "problem_type": self.loaded.problem_type if head else None, "labels": self.labels,
                "backend": self.backend, "onnx_file": self.onnx, "device": str(self.device),
                "max_seq_length": self.features.max_seq_length if head else None, "forward_batch": self.forward_batch,
                "early_exit": None if self.patience is None else {"patience": self.patience,
                                                                  "layers": self.config.num_layer_calls},
                "predict": self.no_predict is None, "no_predict": self.no_predict,
                "pair_scores": None if self.pair_scores is None else {
                    "score": "cosine" if self.score_map is None else "score_map", **self.pair_scores},
                "embedding": {"pooling": e.pooling, "normalize": self.normalize, "dimensions": e.dim,
                              "max_seq_length": e.max_seq_length, "device": str(e.device),
                              "backend": "fp32" if self.backend == "onnx" else self.backend,
                              "encoder": self.embedding_encoder}}


def predict_refusal(model_dir: str | Path) -> str | None:
    """Why a directory answers no /predict (a pretrained or sentence-transformers one: no task head), or None
    for a fine-tuned one (`inference.load` then checks it whole)."""
    from albertlm.heads import HEADS
    from albertlm.inference.load import read_architecture
    from albertlm.st_directory import is_sentence_transformers

    if is_sentence_transformers(model_dir):
        what = "a sentence-transformers directory"
    else:
        arch, _ = read_architecture(model_dir)
        if arch in HEADS:
            return None
        what = f"an {arch}"
    return (f"{model_dir} holds {what}, which has no task head: this server answers /embed and /v1/embeddings "
            "only (serve a fine-tuned directory for /predict)")


def renormalized(embedder):
    """The same embedder (weights shared, same pooling and inputs) with normalisation flipped: a request's
    `normalize` picks one of the two, both computed by `albertlm embed`'s module."""
    from albertlm.inference.embed import Embedder
    from albertlm.pooling import SentenceEmbedder

    flipped = not embedder.normalize
    model = SentenceEmbedder(embedder.model.albert, embedder.pooling, flipped).eval()
    return Embedder(model, embedder.vocabulary, embedder.max_seq_length, lower_case=embedder.lower_case,
                    pooling=embedder.pooling, normalize=flipped, device=embedder.device)


def answer_fields(result: dict[str, Any]) -> dict[str, Any]:
    """A result of `predict_batch` as the answer's fields: the label and its probability as `score`
    (rounded as predict prints it), the score (regression), the labels (multi-label), each word with its
    tag (NER), the answer text (QA), the option's letter and text (multiple choice)."""
    if "probability" in result:
        return {"label": result["label"], "score": round(result["probability"], 4)}
    if "tags" in result:
        return {"tokens": [{"word": w, "tag": t} for w, t in zip(result["words"], result["tags"])]}
    return dict(result)
