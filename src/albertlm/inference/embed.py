"""Sentence embeddings from any ALBERT directory: one float32 vector per text, in input order.

A directory is read as what it holds:

  - a sentence-transformers directory (modules.json; st_directory.py): its ALBERT,
    its pooling, its Normalize module, its max_seq_length and do_lower_case;
  - any other ALBERT directory (pretrained AlbertForPreTraining or AlbertModel, fine-tuned head, ours
    or transformers'): its backbone; the pooling it was trained with (config.json's
    `albertlm_embedding`, written by `albertlm finetune --objective ...`), else mean, and no
    normalisation unless asked.

Each text becomes `[CLS] pieces [SEP]` with its pieces cut to max_seq_length - 2, as transformers
truncates; an empty text is `[CLS] [SEP]` and gets that input's vector (what sentence-transformers
gives for ""). Texts are batched by length (data/bucketing.py, one pool holding every text: each
batch pads to a similar length) and the vectors put back in input order. Pooling is
albertlm.pooling's; with `int8`, the model's Linear layers run in int8 on the CPU
(inference/quantize.py), the vectors stay float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch

from albertlm.errors import AlbertlmError
from albertlm.pooling import POOLINGS, SentenceEmbedder, saved_pooling
from albertlm.tokenizer.base import Vocabulary
from albertlm.utils import atomic_path, check_field_types, read_bytes

if TYPE_CHECKING:
    from albertlm.config import AlbertConfig
    from albertlm.model import AlbertModel

OUTPUT_FORMATS = (".npy", ".jsonl")
"""The output files `write_vectors` writes, by extension."""
DEFAULT_MAX_SEQ_LENGTH = 512
"""Tokens per text when nothing else says: the most ALBERT's released models have positions for."""


@dataclass(frozen=True)
class EmbedSettings:
    """How `albertlm embed` turns texts into vectors."""

    pooling: Literal["cls", "pooler", "mean", "max"] | None = None
    """How the last layer's token vectors become one: cls ([CLS]'s), pooler (ALBERT's tanh pooler on [CLS]),
    mean or max over the tokens; unset: a sentence-transformers directory's own, else mean."""
    normalize: bool | None = None
    """Scale every vector to unit L2 length (dot products are then cosines); unset: a sentence-transformers
    directory's own choice, else off."""
    max_seq_length: int | None = None
    """Tokens per text, [CLS] and [SEP] included; longer texts are cut. Unset: a sentence-transformers
    directory's own, else the model's max_position_embeddings, at most 512."""
    batch_size: int = 32
    """Texts per forward pass (texts of similar length are batched together)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the model runs."""
    int8: bool = False
    """CPU only: run a copy of the model with dynamic int8 Linear layers; the vectors stay float32."""
    int8_backend: Literal["fbgemm", "torchao"] = "fbgemm"
    """int8 kernels, as `albertlm predict --int8-backend`."""
    progress: bool = True
    """A progress bar on stderr when the input takes more than one batch."""

    def __post_init__(self) -> None:
        check_field_types(self)
        if self.pooling is not None and self.pooling not in POOLINGS:
            raise AlbertlmError(f"--pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        if self.batch_size < 1:
            raise AlbertlmError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.max_seq_length is not None and self.max_seq_length < 2:
            raise AlbertlmError(f"--max-seq-length must be at least 2 ([CLS] and [SEP]), got {self.max_seq_length}")
        if self.int8 and self.device == "cuda":
            raise AlbertlmError("--int8 runs on the CPU; drop --device cuda")


def text_inputs(vocabulary: Vocabulary, texts: list[str], max_seq_length: int, lower_case: bool = False
                ) -> list[np.ndarray]:
    """Each text's input ids: `[CLS] pieces [SEP]`, the pieces cut to max_seq_length - 2 (an empty text:
    `[CLS] [SEP]`); lower-cased first with `lower_case`."""
    if lower_case:
        texts = [t.lower() for t in texts]
    keep = max_seq_length - 2
    return [vocabulary.build_inputs(pieces[:keep])[0] for pieces in vocabulary.encode_batch(texts)]


def pad_rows(rows: list[np.ndarray], pad: int) -> tuple[np.ndarray, np.ndarray]:
    """int64 (ids [B, S], attention mask [B, S]) of id rows padded with `pad` to the longest."""
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for j, row in enumerate(rows):
        ids[j, :len(row)], mask[j, :len(row)] = row, 1
    return ids, mask


class Embedder:
    """A loaded directory, ready to embed texts.

    Args:
        model: the SentenceEmbedder (or its int8 copy), in eval mode on `device`.
        vocabulary: the directory's tokenizer.
        max_seq_length: tokens per text, [CLS] and [SEP] included.
        lower_case: lower-case every text first (a sentence-transformers directory's do_lower_case).
        pooling, normalize: what `model` computes, for the record.
        device: where `model` is.
    """

    def __init__(self, model: torch.nn.Module, vocabulary: Vocabulary, max_seq_length: int, *, lower_case: bool,
                 pooling: str, normalize: bool, device: torch.device):
        self.model, self.vocabulary = model, vocabulary
        self.max_seq_length, self.lower_case = max_seq_length, lower_case
        self.pooling, self.normalize, self.device = pooling, normalize, device
        self.dim = model.config.hidden_size

    def inputs(self, texts: list[str]) -> list[np.ndarray]:
        """Each text's input ids (`text_inputs`)."""
        return text_inputs(self.vocabulary, texts, self.max_seq_length, self.lower_case)

    @torch.inference_mode()
    def encode(self, texts: list[str], batch_size: int = 32, progress: bool = False) -> np.ndarray:
        """Embed texts.

        Args:
            texts: N texts (an empty one gets the vector of `[CLS] [SEP]`).
            batch_size: texts per forward pass.
            progress: a tqdm bar on stderr when there is more than one batch.
        Returns:
            float32 [N, H], row i for texts[i].
        Raises:
            AlbertlmError: the model produced NaN or infinity (naming the first such text).
        """
        from tqdm import tqdm

        from albertlm.data.bucketing import bucket_by_length

        rows = self.inputs(list(texts))
        lengths = [len(r) for r in rows]
        out = np.zeros((len(rows), self.dim), dtype=np.float32)
        if not rows:
            return out
        # One pool holding every text sorts them all by length; the generator only orders the batches.
        batches = bucket_by_length(lengths, batch_size, np.random.default_rng(0),
                                   pool_batches=math.ceil(len(rows) / batch_size))
        pad = self.vocabulary.special_ids.pad
        with tqdm(total=len(rows), unit="text", disable=not progress or len(batches) <= 1, leave=False) as bar:
            for batch in batches:
                ids, mask = pad_rows([rows[i] for i in batch], pad)
                vectors = self.model(torch.from_numpy(ids).to(self.device), torch.from_numpy(mask).to(self.device))
                out[batch] = vectors.float().cpu().numpy()  # [B, H] back to the texts' rows
                bar.update(len(batch))
        bad = np.flatnonzero(~np.isfinite(out).all(1))
        if len(bad):
            raise AlbertlmError(f"the model gave NaN or infinity for {len(bad)} text(s), first line {bad[0] + 1}")
        return out


@dataclass(frozen=True)
class EmbedChoice:
    """What embedding a directory means, resolved without loading its weights."""

    source: Path
    """The ALBERT directory the weights and tokenizer are in (a sentence-transformers directory's module)."""
    config: AlbertConfig
    pooling: str
    normalize: bool
    max_seq_length: int
    lower_case: bool
    """A sentence-transformers directory's do_lower_case (False for any other directory)."""


def embed_choice(model_dir: str | Path, settings: EmbedSettings = EmbedSettings()) -> EmbedChoice:
    """The pooling, normalisation and length `albertlm embed` uses for a directory: the settings' where
    given, else the directory's own (a sentence-transformers layout's, or the pooling saved in
    config.json, else mean). Reads only the configuration files.

    Raises:
        AlbertlmError: one line: not a model directory, a length beyond the model's positions.
    """
    from albertlm.config import AlbertConfig
    from albertlm.interop.hf import CONFIG_NAME
    from albertlm.st_directory import is_sentence_transformers, read_sentence_transformers

    path = Path(model_dir)
    if not path.is_dir():
        raise AlbertlmError(f"{path}: not a model directory")
    layout = read_sentence_transformers(path) if is_sentence_transformers(path) else None
    source = layout.model_dir if layout is not None else path
    if not (source / CONFIG_NAME).is_file():
        raise AlbertlmError(f"{source}: no {CONFIG_NAME}; not a model directory")
    config = AlbertConfig.from_json_file(source / CONFIG_NAME)
    pooling = settings.pooling or (layout.pooling if layout is not None else
                                   saved_pooling(config, str(source / CONFIG_NAME)) or "mean")
    normalize = settings.normalize if settings.normalize is not None else (layout is not None and layout.normalize)
    length = _max_seq_length(settings.max_seq_length, layout.max_seq_length if layout is not None else None,
                             config.max_position_embeddings)
    return EmbedChoice(source, config, pooling, normalize, length, layout is not None and layout.do_lower_case)


def load_embedder(model_dir: str | Path, settings: EmbedSettings = EmbedSettings()) -> Embedder:
    """Load a directory for embedding: its backbone, its tokenizer and the pooling it asks for.

    Args:
        model_dir: a sentence-transformers directory with ALBERT inside, or any ALBERT directory.
        settings: pooling, normalisation, length, device and int8 (unset ones from the directory: embed_choice).
    Returns:
        The Embedder (`embedder_on` the backbone loaded here).
    Raises:
        AlbertlmError: one line: not a model directory, a tokenizer that is not the model's, pooling
            "pooler" on weights without a pooler, a length beyond the model's positions.
    """
    from albertlm.distributed import resolve_device
    from albertlm.interop.hf import weight_names
    from albertlm.model import AlbertModel
    from albertlm.tokenizer import load_model_vocabulary

    choice = embed_choice(model_dir, settings)
    vocabulary = load_model_vocabulary(choice.source)
    if choice.pooling == "pooler":
        names, weights = weight_names(choice.source)
        if not {"pooler.weight", "albert.pooler.weight"} & names:
            raise AlbertlmError(f"{weights}: no pooler weights (pooler.weight); pooling 'pooler' needs ALBERT's "
                                "pooler: choose cls, mean or max")
    device = resolve_device("cpu" if settings.int8 else settings.device)
    backbone = AlbertModel.from_pretrained(choice.source, config=choice.config,
                                           add_pooling_layer=choice.pooling == "pooler")
    if settings.int8:
        from albertlm.inference.quantize import quantize_int8

        backbone = quantize_int8(backbone, settings.int8_backend)
    return embedder_on(backbone.to(device), choice, vocabulary, device)


def embedder_on(backbone: AlbertModel, choice: EmbedChoice, vocabulary: Vocabulary, device: torch.device
                ) -> Embedder:
    """The Embedder of a resolved directory (`embed_choice`) on a backbone already loaded from it, its
    weights used as they are (shared, not copied).

    `load_embedder` ends here with the backbone it loads; `albertlm serve` calls it with the backbone of the
    head it loaded for /predict, so both routes run one copy of the encoder. An int8 backbone gives what
    `load_embedder`'s int8 gives: `quantize_int8` swaps each Linear for one quantized from that Linear's
    weights alone, the same whether the backbone is quantized inside its head or by itself.

    Args:
        backbone: the AlbertModel of `choice.source` (fp32, or int8 by `quantize_int8`), on `device`, with its
            pooler when `choice.pooling` is "pooler".
        choice: the pooling, normalisation, length and lower-casing to embed with.
        vocabulary: the directory's tokenizer.
        device: where `backbone` is.
    Returns:
        The Embedder; the backbone is put in eval mode.
    """
    model = SentenceEmbedder(backbone, choice.pooling, choice.normalize).eval()
    return Embedder(model, vocabulary, choice.max_seq_length, lower_case=choice.lower_case, pooling=choice.pooling,
                    normalize=choice.normalize, device=device)


def _max_seq_length(given: int | None, saved: int | None, positions: int) -> int:
    """The flag's length (at most the model's positions), else the directory's or 512, capped by the positions
    as sentence-transformers caps them."""
    if given is not None:
        if given > positions:
            raise AlbertlmError(f"--max-seq-length {given} is beyond the model's max_position_embeddings ({positions})")
        return given
    return min(saved or DEFAULT_MAX_SEQ_LENGTH, positions)


def embed(model_dir: str | Path, texts: list[str], settings: EmbedSettings = EmbedSettings()) -> np.ndarray:
    """float32 [len(texts), H]: `load_embedder(model_dir, settings).encode(texts)`, with the settings' batch size
    and progress bar."""
    return load_embedder(model_dir, settings).encode(texts, settings.batch_size, settings.progress)


# ---------------------------------------------------------------------------- files
def split_lines(data: bytes, source: str) -> list[str]:
    """The texts of an input file, one per line: UTF-8, a final newline optional, "\\r\\n" read as "\\n", a
    leading byte-order mark dropped. Blank lines are texts too (empty ones), so line i is text i.

    Raises:
        AlbertlmError: the bytes are not UTF-8, naming `source` and the line.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise AlbertlmError(f"{source}: line {line} is not UTF-8 text (byte {data[exc.start]:#04x})") from None
    lines = text.removeprefix("\ufeff").split("\n")  # not splitlines(): it also splits at \x1c, \u2028, ...
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return [line.removesuffix("\r") for line in lines]


def read_texts(path: str | Path) -> list[str]:
    """`split_lines` of a file; a missing or unreadable file is one line naming it."""
    return split_lines(read_bytes(path, "text file"), str(path))


def output_format(path: str | Path) -> str:
    """".npy" or ".jsonl", by the file's extension; anything else is one line naming the file."""
    suffix = Path(path).suffix.lower()
    if suffix not in OUTPUT_FORMATS:
        raise AlbertlmError(f"{path}: the output must end in {' or '.join(OUTPUT_FORMATS)} (float32 array, or one "
                            "JSON array of floats per line)")
    return suffix


def jsonl_lines(vectors: np.ndarray):
    """One JSON array per vector, each number with 9 significant digits (a float32 read back exactly)."""
    for v in vectors:
        yield "[" + ", ".join(f"{x:.9g}" for x in v.tolist()) + "]\n"


def write_vectors(vectors: np.ndarray, path: str | Path) -> None:
    """Write float32 [N, H] vectors atomically: .npy (np.load reads it) or .jsonl (line i, vector i)."""
    fmt = output_format(path)
    with atomic_path(path) as tmp:
        if fmt == ".npy":
            with open(tmp, "wb") as fh:  # a file object: np.save given a name would append ".npy" to it
                np.save(fh, np.ascontiguousarray(vectors, dtype=np.float32))
        else:
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.writelines(jsonl_lines(vectors))
