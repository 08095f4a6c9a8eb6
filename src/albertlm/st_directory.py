"""sentence-transformers directories with ALBERT inside, both ways: the layout as a table, a reader and a writer
(at the floor of convert.py: the writer builds a model, which interop/ never does).

A directory `SentenceTransformer(dir)` loads is a list of modules run in order (modules.json):

    modules.json                        [Transformer at "", Pooling at "1_Pooling", Normalize at "2_Normalize"]
    config_sentence_transformers.json   model type, prompts, similarity function (cosine)
    sentence_bert_config.json           the Transformer's max_seq_length (tokens, [CLS] and [SEP] included)
                                        and do_lower_case (lower-case the text before the tokenizer)
    config.json, model.safetensors      a transformers AlbertModel (interop/hf.py's key table)
    spiece.model | vocab.txt | tokenizer.json, tokenizer_config.json   its tokenizer
    1_Pooling/config.json               the pooling mode: cls, mean or max (`ST_POOLINGS`)
    2_Normalize/                        present when the vectors are L2-normalised
    onnx/model.onnx                     optional: the AlbertModel's token vectors (last_hidden_state) as ONNX,
                                        what SentenceTransformer(dir, backend="onnx") runs before its Pooling;
                                        onnx/model_qint8.onnx its onnxruntime int8 copy

`write_sentence_transformers` writes that layout from any ALBERT directory albertlm reads, and
`read_sentence_transformers` reads one, written here or by sentence-transformers (any version: the
module types are matched by class name, the Pooling config in its older boolean form
`pooling_mode_mean_tokens` or its newer `pooling_mode`). Written here are the type names and the
Pooling keys every sentence-transformers release reads (`sentence_transformers.models.*`, the boolean
form), and do_lower_case false: lower-casing is the tokenizer's own setting. ALBERT's tanh pooler has
no sentence-transformers module, so pooling "pooler" is refused; so are modules other than these
three (a Dense projection, say), and pooling modes other than cls, mean and max.
`convert --from bert` (convert_bert.py) reads a sentence-transformers directory of a BERT with the
same reader (its `read_config` reads the BERT's config.json as the ALBERT that computes it) and
writes the imported one's module files with `write_modules`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from albertlm.config import AlbertConfig, read_json_file
from albertlm.errors import AlbertlmError
from albertlm.outputs import MODEL_FILES, OutputDir
from albertlm.pooling import saved_pooling
from albertlm.utils import atomic_write_text

MODULES_FILE = "modules.json"
ST_CONFIG_FILE = "config_sentence_transformers.json"
TRANSFORMER_CONFIG_FILE = "sentence_bert_config.json"
_TRANSFORMER_CONFIG_FILES = (TRANSFORMER_CONFIG_FILE, "sentence_albert_config.json")  # older releases' name too
POOLING_DIR, NORMALIZE_DIR, ONNX_DIR = "1_Pooling", "2_Normalize", "onnx"
ONNX_FP32, ONNX_INT8 = "model.onnx", "model_qint8.onnx"
"""The graphs in onnx/: sentence-transformers loads the first unless model_kwargs names a file_name."""
ST_POOLINGS = ("cls", "mean", "max")
"""The pooling modes of albertlm.pooling that sentence-transformers' Pooling module has."""
_MODULES = ("Transformer", "Pooling", "Normalize")
"""The module classes read and written, in their order in modules.json."""
_TYPE_PREFIX = "sentence_transformers.models."
_LEGACY_FLAGS = {"cls": "pooling_mode_cls_token", "max": "pooling_mode_max_tokens", "mean": "pooling_mode_mean_tokens",
                 "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
                 "weightedmean": "pooling_mode_weightedmean_tokens", "lasttoken": "pooling_mode_lasttoken"}
"""Pooling mode -> its boolean key in the older Pooling config (every mode sentence-transformers has)."""
ST_FILES = MODEL_FILES + (MODULES_FILE, ST_CONFIG_FILE, TRANSFORMER_CONFIG_FILE, POOLING_DIR, NORMALIZE_DIR, ONNX_DIR)
"""What `write_sentence_transformers` may write into its output directory."""


@dataclass(frozen=True)
class SentenceTransformersLayout:
    """What a sentence-transformers directory says about its ALBERT and its pooling."""

    model_dir: Path
    """The Transformer module's directory: config.json, the weights and the tokenizer."""
    pooling: str
    """One of ST_POOLINGS."""
    normalize: bool
    """Whether a Normalize module follows the pooling."""
    max_seq_length: int | None
    """sentence_bert_config.json's max_seq_length, else tokenizer_config.json's model_max_length; None
    when neither says (the model's max_position_embeddings then bounds it)."""
    do_lower_case: bool
    """Lower-case the text before the tokenizer sees it."""


def is_sentence_transformers(path: str | os.PathLike) -> bool:
    """Whether a directory is a sentence-transformers one (it holds modules.json)."""
    return (Path(path) / MODULES_FILE).is_file()


# ---------------------------------------------------------------------------- reading
def read_sentence_transformers(path: str | os.PathLike,
                               read_config: Callable[[Path], AlbertConfig] = AlbertConfig.from_json_file
                               ) -> SentenceTransformersLayout:
    """Read a sentence-transformers directory's modules: Transformer (an ALBERT), Pooling, [Normalize].

    Args:
        path: the directory (with modules.json).
        read_config: reads the Transformer's config.json as the ALBERT that computes it (the default
            takes ALBERT configs only; `convert --from bert` passes one that reads a BERT's).
    Returns:
        Its SentenceTransformersLayout.
    Raises:
        AlbertlmError: one line naming the file and the field: another module list, a pooling mode
            albertlm lacks, a Pooling width other than the model's hidden_size, a non-ALBERT model.
    """
    path = Path(path)
    modules_file = path / MODULES_FILE
    modules = read_json_file(modules_file)
    kinds = [_module_kind(modules_file, i, m) for i, m in enumerate(modules if isinstance(modules, list) else [None])]
    if kinds not in (list(_MODULES[:2]), list(_MODULES)):
        raise AlbertlmError(f"{modules_file}: holds the modules {', '.join(kinds) or '(none)'}; albertlm reads "
                            "Transformer, Pooling and an optional Normalize, in that order")
    model_dir = _module_dir(path, modules_file, modules[0])
    config = read_config(model_dir / "config.json")  # model_type albert (by default), or one line
    pooling = _read_pooling(_module_dir(path, modules_file, modules[1]) / "config.json", config.hidden_size)
    settings = _transformer_settings(model_dir)
    return SentenceTransformersLayout(model_dir=model_dir, pooling=pooling, normalize=len(kinds) == 3,
                                      max_seq_length=settings[0], do_lower_case=settings[1])


def _module_kind(modules_file: Path, index: int, entry) -> str:
    """The class name of modules.json's entry `index` (its `type`'s last component)."""
    if not (isinstance(entry, dict) and isinstance(entry.get("type"), str) and isinstance(entry.get("path"), str)):
        raise AlbertlmError(f"{modules_file}: expected a list of objects with \"type\" and \"path\" strings "
                            f"(entry {index} is {entry!r})")
    kind = entry["type"].rsplit(".", 1)[-1]
    if not entry["type"].startswith("sentence_transformers.") or kind not in _MODULES:
        raise AlbertlmError(f"{modules_file}: module {index} is {entry['type']}; albertlm reads sentence-transformers' "
                            f"{', '.join(_MODULES)} modules only")
    return kind


def _module_dir(root: Path, modules_file: Path, entry: dict) -> Path:
    """A module's directory: its `path` inside the root, which it may not leave."""
    rel = Path(entry["path"])
    if rel.is_absolute() or ".." in rel.parts:
        raise AlbertlmError(f"{modules_file}: module path {entry['path']!r} leaves the directory")
    where = root / rel
    if not where.is_dir():
        raise AlbertlmError(f"{modules_file}: module {entry['type'].rsplit('.', 1)[-1]} is at {where}, which is "
                            "not a directory")
    return where


def _read_pooling(config_file: Path, hidden_size: int) -> str:
    """The one pooling mode of a Pooling config, in either form; its width must be the model's."""
    data = read_json_file(config_file)
    if not isinstance(data, dict):
        raise AlbertlmError(f"{config_file}: expected a JSON object")
    width = data.get("embedding_dimension", data.get("word_embedding_dimension"))
    if width != hidden_size:
        raise AlbertlmError(f"{config_file}: the pooled width is {width!r}, but the model's hidden_size is "
                            f"{hidden_size}")
    if "pooling_mode" in data:
        given = data["pooling_mode"]
        modes = [given] if isinstance(given, str) else given
    else:  # the older boolean form; none set means mean, as sentence-transformers reads it
        modes = [mode for mode, key in _LEGACY_FLAGS.items() if data.get(key) is True] or ["mean"]
    if not (isinstance(modes, list) and len(modes) == 1 and modes[0] in ST_POOLINGS):
        raise AlbertlmError(f"{config_file}: pooling {modes!r}; albertlm reads one of {', '.join(ST_POOLINGS)}")
    return modes[0]


def _transformer_settings(model_dir: Path) -> tuple[int | None, bool]:
    """(max_seq_length, do_lower_case) of the Transformer module: its sentence_bert_config.json, with
    tokenizer_config.json's model_max_length where the former gives no length (newer releases)."""
    config_file = next((model_dir / n for n in _TRANSFORMER_CONFIG_FILES if (model_dir / n).is_file()), None)
    data = read_json_file(config_file) if config_file is not None else {}
    if not isinstance(data, dict):
        raise AlbertlmError(f"{config_file}: expected a JSON object")
    task = data.get("transformer_task", "feature-extraction")
    if task != "feature-extraction":
        raise AlbertlmError(f"{config_file}: transformer_task {task!r}; albertlm reads \"feature-extraction\" only")
    length, lower = data.get("max_seq_length"), data.get("do_lower_case", False)
    if length is None and (model_dir / "tokenizer_config.json").is_file():
        tokenizer_config = read_json_file(model_dir / "tokenizer_config.json")
        config_file, length = model_dir / "tokenizer_config.json", tokenizer_config.get("model_max_length")
        length = length if isinstance(length, int) and length < 10**9 else None  # transformers' "no limit": 1e30
    if length is not None and (not isinstance(length, int) or isinstance(length, bool) or length < 2):
        raise AlbertlmError(f"{config_file}: max_seq_length must be an integer of at least 2, got {length!r}")
    if not isinstance(lower, bool):
        raise AlbertlmError(f"{config_file}: do_lower_case must be true or false, got {lower!r}")
    return length, lower


# ---------------------------------------------------------------------------- writing
def write_sentence_transformers(model_dir: str | os.PathLike, out_dir: str | os.PathLike, pooling: str | None = None,
                                normalize: bool = False, max_seq_length: int | None = None, *, onnx: bool = False,
                                int8: bool = False, dynamo: bool = True) -> dict:
    """Write a directory `sentence_transformers.SentenceTransformer(out_dir)` loads, from an ALBERT directory.

    The backbone is written as a transformers AlbertModel (its pooler too, where the source has one;
    sentence-transformers does not use it), beside the source's tokenizer and the module files of
    the layout in the module docstring. Everything is checked before OUT is touched; OUT is then
    claimed (`OutputDir`: new, empty, or an earlier export), emptied, and filled file by file, each
    written atomically, modules.json last.

    Args:
        model_dir: any ALBERT directory albertlm reads (pretrained, fine-tuned, sentence-transformers).
        out_dir: the directory to write.
        pooling: one of ST_POOLINGS ("pooler" is refused: sentence-transformers has no such module);
            None: the pooling the model was trained with (pooling.saved_pooling), else mean.
        normalize: add a Normalize module (unit-length vectors).
        max_seq_length: tokens per text, [CLS] and [SEP] included; None: the model's
            max_position_embeddings, at most 512.
        onnx: also write onnx/model.onnx, the backbone's token vectors (`interop.onnx.export_onnx`: each
            shared tensor once), for sentence-transformers' ONNX backend.
        int8: with `onnx`, also onnx/model_qint8.onnx (`interop.onnx.quantize_onnx_int8`).
        dynamo: the ONNX exporter: torch.export's (True) or the TorchScript one.
    Returns:
        {"out_dir", "pooling", "normalize", "max_seq_length", "files", "onnx"} ("onnx": the export
        report of onnx/model.onnx, or None).
    Raises:
        AlbertlmError: one line for a refused pooling, length or network, or an unusable OUT.
    """
    from albertlm.interop.hf import transformers_can_load, weight_names
    from albertlm.model import AlbertModel
    from albertlm.tokenizer import load_model_vocabulary

    source = Path(model_dir)
    if not source.is_dir():
        raise AlbertlmError(f"{source}: not a model directory")
    layout = read_sentence_transformers(source) if is_sentence_transformers(source) else None
    source = layout.model_dir if layout is not None else source
    config = AlbertConfig.from_json_file(source / "config.json")
    if pooling is None:
        pooling = layout.pooling if layout is not None else saved_pooling(config, str(source / "config.json")) or "mean"
    if pooling == "pooler":
        raise AlbertlmError("pooling 'pooler' (ALBERT's tanh pooler) has no sentence-transformers module; "
                            f"export with one of {', '.join(ST_POOLINGS)}")
    if pooling not in ST_POOLINGS:
        raise AlbertlmError(f"pooling {pooling!r} is unknown; choose one of {', '.join(ST_POOLINGS)}")
    if int8 and not onnx:
        raise AlbertlmError("int8 applies to the ONNX graph: ask for onnx too (--onnx)")
    config = config.replace(classifier_pooling="cls", extra={})
    if not transformers_can_load(config):
        raise AlbertlmError(f"{source}: sharing={config.sharing!r}, embedding_layout={config.embedding_layout!r}: "
                            "transformers, and so sentence-transformers, cannot express this network")
    length = export_length(config, max_seq_length)
    vocabulary = load_model_vocabulary(source)
    names, _ = weight_names(source)
    pooler = bool({"pooler.weight", "albert.pooler.weight"} & names)
    model = AlbertModel.from_pretrained(source, config=config, add_pooling_layer=pooler)
    if onnx:  # the optional packages, before OUT is touched
        from albertlm.interop.onnx import require

        for package in ("onnx", *(("onnxscript",) if dynamo else ()), *(("onnxruntime",) if int8 else ())):
            require(package)
    out = OutputDir(out_dir, "export", ST_FILES, flag="OUT", inputs={"DIR": model_dir})
    with out.claim():
        out.empty()  # an earlier export's 2_Normalize must not outlive a new export without it
        model.save_pretrained(out.path)
        vocabulary.save(out.path)
        report = _write_onnx(model.eval(), out.path / ONNX_DIR, int8, dynamo) if onnx else None
        write_modules(out.path, config.hidden_size, pooling, normalize, length)
        files = sorted(p.name for p in out.path.iterdir() if not p.name.startswith("."))
    return {"out_dir": str(out.path), "pooling": pooling, "normalize": normalize, "max_seq_length": length,
            "files": files, "onnx": report}


def _write_onnx(model, onnx_dir: Path, int8: bool, dynamo: bool) -> dict:
    """onnx/model.onnx (the token vectors) and, with `int8`, onnx/model_qint8.onnx; the export's report."""
    from albertlm.interop.onnx import export_onnx, quantize_onnx_int8

    onnx_dir.mkdir()
    report = export_onnx(model, onnx_dir / ONNX_FP32, dynamo=dynamo)
    if int8:
        report.update(quantize_onnx_int8(onnx_dir / ONNX_FP32, onnx_dir / ONNX_INT8))
    return report


def export_length(config: AlbertConfig, max_seq_length: int | None) -> int:
    """The max_seq_length a written directory states: the one asked for, checked against the positions,
    else the model's max_position_embeddings, at most 512."""
    if max_seq_length is None:
        return min(512, config.max_position_embeddings)
    if not 2 <= max_seq_length <= config.max_position_embeddings:
        raise AlbertlmError(f"max_seq_length must lie in [2, max_position_embeddings={config.max_position_embeddings}]"
                            f", got {max_seq_length}")
    return max_seq_length


def write_modules(out: Path, hidden_size: int, pooling: str, normalize: bool, max_seq_length: int, *,
                  do_lower_case: bool = False, settings: dict | None = None) -> None:
    """The module files of the layout beside a model and tokenizer already in `out`; modules.json,
    which makes the directory a sentence-transformers one, last.

    Args:
        out: the directory.
        hidden_size: the Transformer's width (the Pooling module's).
        pooling: one of ST_POOLINGS.
        normalize: add the Normalize module.
        max_seq_length: tokens per text, [CLS] and [SEP] included.
        do_lower_case: the Transformer lower-cases the text before its tokenizer (a source's setting,
            carried by `convert --from bert`; the export writes False).
        settings: `prompts`, `default_prompt_name` and `similarity_fn_name` to keep from a source's
            config_sentence_transformers.json (default: none, none, cosine).
    """
    def dump(path: Path, data) -> None:
        atomic_write_text(path, json.dumps(data, indent=2) + "\n")

    dump(out / TRANSFORMER_CONFIG_FILE, {"max_seq_length": max_seq_length, "do_lower_case": do_lower_case})
    kept = {k: v for k, v in (settings or {}).items() if k in ("prompts", "default_prompt_name", "similarity_fn_name")}
    dump(out / ST_CONFIG_FILE, {"model_type": "SentenceTransformer", "prompts": {}, "default_prompt_name": None,
                                "similarity_fn_name": "cosine", **kept})
    (out / POOLING_DIR).mkdir()
    dump(out / POOLING_DIR / "config.json", {"word_embedding_dimension": hidden_size,
                                             **{key: mode == pooling for mode, key in _LEGACY_FLAGS.items()},
                                             "include_prompt": True})
    paths = ["", POOLING_DIR]
    if normalize:
        (out / NORMALIZE_DIR).mkdir()
        dump(out / NORMALIZE_DIR / "config.json", {})  # read by none; a directory with a file survives uploads
        paths.append(NORMALIZE_DIR)
    dump(out / MODULES_FILE, [{"idx": i, "name": str(i), "path": p, "type": _TYPE_PREFIX + kind}
                              for i, (p, kind) in enumerate(zip(paths, _MODULES))])
