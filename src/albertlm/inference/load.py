"""Loading a model directory to run it: the one place that answers "which model class is this".

A directory says what it is in config.json: `architectures` (the class), `id2label`,
`problem_type`, `finetuning_task` and `albertlm_features` (the input settings it was trained
with), and `albertlm_early_exit` when exit heads sit beside the head (`albertlm.exit_heads`).
Directories fine-tuned by transformers work too (then a task must be named and the feature
settings are the task's defaults). `model_class` resolves the class, `load_model_dir` loads a
directory with the backend asked for (torch fp32 as saved, oneDNN-prepacked fp32, int8 Linear
layers, or an exported ONNX file run by onnxruntime) into a `LoadedModel`.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from albertlm.config import AlbertConfig
from albertlm.distributed import resolve_device
from albertlm.errors import AlbertlmError
from albertlm.exit_heads import CONFIG_KEY, EXIT_HEADS, EXIT_HEADS_NAME, has_exit_heads
from albertlm.heads import HEADS, resolve_problem_type
from albertlm.inference.exit import DEFAULT_REGRESSION_THRESHOLD, check_patience, patience_runner
from albertlm.inference.features import check_saved_entries, saved_settings
from albertlm.model import AlbertForPreTraining
from albertlm.tasks.common import FeatureSettings
from albertlm.tasks.registry import Family, TaskSpec, family_of_head

MASKED_LM_ARCHITECTURES = ("AlbertForPreTraining", "AlbertForMaskedLM")
"""Directories whose config.json names one of these hold trained MLM-head weights (our pretraining output
or transformers'); both load as AlbertForPreTraining."""
Backend = Literal["torch", "prepack", "int8", "onnxruntime"]
"""How a loaded directory runs: its torch weights as saved, a oneDNN-prepacked fp32 copy, an int8 copy, or
an exported ONNX file run by onnxruntime."""


# ---------------------------------------------------------------------------- what a directory holds
def read_architecture(model_dir: str | Path) -> tuple[str, AlbertConfig]:
    """(class name from config.json's `architectures`, the config).

    Raises:
        AlbertlmError: `architectures` is not a list of class names (a bare string would give its first
            letter, a list of objects a TypeError).
    """
    path = Path(model_dir) / "config.json"
    config = AlbertConfig.from_json_file(path)  # exists, UTF-8, a JSON object: checked there
    archs = json.loads(path.read_text(encoding="utf-8")).get("architectures")
    if archs not in (None, []) and not (isinstance(archs, list) and all(isinstance(a, str) and a for a in archs)):
        shown = repr(archs) if len(repr(archs)) <= 80 else repr(archs)[:77] + "..."
        raise AlbertlmError(f"{path}: architectures must be a list of class names, e.g. "
                            f"[\"AlbertForSequenceClassification\"], got {shown}")
    return (archs or ["AlbertModel"])[0], config


def model_class(arch: str, config: AlbertConfig, *, exit_heads: bool = True) -> type[nn.Module]:
    """The class that runs `arch` (a config.json `architectures` entry) under `config`.

    Args:
        arch: AlbertForPreTraining or AlbertForMaskedLM (both: AlbertForPreTraining), or a head of heads.HEADS.
        config: the directory's config; a head announcing exit heads builds its early-exit class.
        exit_heads: False builds the plain head even then (what transformers and the ONNX export see).
    Returns:
        The class.
    Raises:
        AlbertlmError: no albertlm class for `arch`, or exit heads announced for a head without them.
    """
    if arch in MASKED_LM_ARCHITECTURES:
        return AlbertForPreTraining
    if arch not in HEADS:
        known = ", ".join((*MASKED_LM_ARCHITECTURES, *HEADS))
        raise AlbertlmError(f"no albertlm class runs an {arch} (known: {known})")
    if exit_heads and has_exit_heads(config):
        if arch not in EXIT_HEADS:
            raise AlbertlmError(f"early exit is implemented for {' and '.join(EXIT_HEADS)}, not {arch}")
        return EXIT_HEADS[arch]
    return HEADS[arch]


def saved_labels(config: AlbertConfig) -> list[str] | None:
    """A head's class or tag names in id order (config.json's id2label, else LABEL_0, LABEL_1, ...);
    None for a regression head."""
    if config.problem_type == "regression" or config.num_labels == 1:
        return None
    names = config.id2label or {i: f"LABEL_{i}" for i in range(config.num_labels)}
    return [names[i] for i in range(config.num_labels)]


def load_tokenizer(model_dir: str | Path):
    """The tokenizer of a model directory: SentencePiece (spiece.model) or WordPiece (vocab.txt),
    with its tokenizer_config.json (tokenizer/auto.py)."""
    from albertlm.tokenizer import load_model_vocabulary

    return load_model_vocabulary(model_dir)  # its size must be config.json's vocab_size


def load_head(spec: TaskSpec, model_dir: str | Path, config: AlbertConfig) -> nn.Module:
    """The task's head class from `model_dir`, to fine-tune (its early-exit class when `config` announces
    exit heads); a head the directory lacks starts random, silently."""
    with warnings.catch_warnings():  # a pretrained directory has no task head: expected here
        warnings.filterwarnings("ignore", message=".*randomly initialised.*")
        return model_class(spec.family.head, config).from_pretrained(model_dir, config=config)


# ---------------------------------------------------------------------------- weights
def load_module(model_dir: str | Path, arch: str, config: AlbertConfig, *, exit_heads: bool = True) -> nn.Module:
    """The trained network of a directory (`model_class`), on the CPU, in training mode as built.

    A head must hold trained weights for every tensor of its class (`check_head_weights`); loading
    warnings are shown only once it does. A pretraining directory without an SOP head loads quietly
    (none of the commands that run it uses that head).

    Raises:
        AlbertlmError: naming the weight file and a missing key.
    """
    cls = model_class(arch, config, exit_heads=exit_heads)
    if arch in MASKED_LM_ARCHITECTURES:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*SOP head.*")
            return cls.from_pretrained(model_dir)
    with warnings.catch_warnings(record=True) as caught:  # held back until the head is known to be trained
        warnings.simplefilter("always")
        model = cls.from_pretrained(model_dir)
    check_head_weights(model_dir, arch, model)
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return model


def check_head_weights(model_dir: str | Path, arch: str, model: torch.nn.Module) -> None:
    """A directory used for inference must hold trained weights for the head its config.json names.

    Loading leaves a head (or pooler) the weight file lacks randomly initialised, which is right when
    fine-tuning starts from a pretrained directory and wrong everywhere else: a pretraining directory
    whose `architectures` claims a classifier would score noise.

    Raises:
        AlbertlmError: naming the weight file and a missing key.
    """
    from albertlm.interop.hf import ARCHITECTURES, key_table, weight_names

    names, source = weight_names(Path(model_dir))
    prefix = ARCHITECTURES[arch].hf_prefix
    pooler = f"{ARCHITECTURES[arch].ours_prefix}pooler.weight" in model.state_dict()
    missing = [n for _, hf in key_table(model.config, arch, pooler) for n in hf
               if n not in names and not (n.startswith(prefix) and n[len(prefix):] in names)]  # a bare backbone
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise AlbertlmError(f"{source}: no {missing[0]}{more}, yet config.json's architectures says {arch}: "
                            "this is not a fine-tuned directory (its head would be random)")


# ---------------------------------------------------------------------------- a directory ready to run
@dataclass(frozen=True)
class LoadedModel:
    """A model directory loaded to run: what its config.json says, its tokenizer, and the module that runs it."""

    path: Path
    arch: str
    """config.json's `architectures` entry: a plain head class of heads.HEADS (also for a head with exit
    heads), or AlbertForPreTraining / AlbertForMaskedLM."""
    config: AlbertConfig
    tokenizer: Any
    model: nn.Module
    """The network in eval mode: the torch module (`backend` torch, int8 or prepack) or an OnnxModel."""
    backend: Backend
    device: torch.device
    """Where the inputs go (the CPU for int8, prepack and onnxruntime)."""
    runner: nn.Module
    """What runs features (`inference.run.run_features`): `model`, or with `patience` its patience runner."""
    patience: int | None = None
    """Early exit's patience (`inference.exit`); None runs every layer."""

    @property
    def labels(self) -> list[str] | None:
        """The head's class or tag names in id order (None for regression)."""
        return saved_labels(self.config)

    @property
    def problem_type(self) -> str:
        """The head's problem type (heads.resolve_problem_type; single-label for heads without one)."""
        return resolve_problem_type(self.config)

    @property
    def exit_heads(self) -> bool:
        """Whether the directory has exit heads (config.json's `albertlm_early_exit`)."""
        return has_exit_heads(self.config)

    @property
    def family(self) -> Family:
        """The task family of the head (tasks.registry)."""
        return family_of_head(self.arch)

    def settings(self, default_length: int = 128, max_answer_length: int | None = None) -> FeatureSettings:
        """The input settings the directory was fine-tuned with (`features.saved_settings`); a directory
        that saved none gets max_seq_length `default_length`."""
        return saved_settings(self.config, default_length, self.tokenizer.chinese, max_answer_length)

    def with_patience(self, patience: int, regression_threshold: float = DEFAULT_REGRESSION_THRESHOLD) -> LoadedModel:
        """A copy whose runner stops each input early (`inference.exit.patience_runner`).

        Raises:
            AlbertlmError: the directory has no exit heads, or the backend is onnxruntime (the file holds
                the plain head).
        """
        if self.backend == "onnxruntime":
            raise AlbertlmError(f"{self.path}: --patience runs the torch model's exit heads; an ONNX file holds "
                                "the plain head only")
        runner = patience_runner(self.path, self.model, patience, regression_threshold)
        return dataclasses.replace(self, runner=runner, patience=patience)


def load_model_dir(model_dir: str | Path, *, device: str | torch.device = "cpu", int8: str | None = None,
                   prepack: bool = False, patience: int | None = None,
                   regression_threshold: float = DEFAULT_REGRESSION_THRESHOLD,
                   onnx: str | Path | None = None, pretrained: bool = False) -> LoadedModel:
    """Load a fine-tuned directory (or with `pretrained` a pretraining one) to run it.

    Args:
        model_dir: the directory (config.json, weights, tokenizer files).
        device: torch device ("auto": the GPU when there is one); int8, prepack and onnx run on the CPU.
        int8: run a CPU copy with int8 Linear layers by this backend (`inference.quantize`: fbgemm, torchao).
        prepack: run a CPU copy with oneDNN-packed fp32 weights (`inference.prepack`).
        patience: early exit (a head fine-tuned with exit heads): each input stops once its prediction has
            held for this many layers (`inference.exit`).
        regression_threshold: with `patience`, a regression output moving less than this counts as unchanged.
        onnx: run this file (`albertlm export DIR FILE`) with onnxruntime instead of the torch weights;
            the directory still gives the config, labels, feature settings and tokenizer.
        pretrained: take a pretraining directory (MASKED_LM_ARCHITECTURES, for its MLM head) instead of a
            fine-tuned one.
    Returns:
        The LoadedModel, its network in eval mode.
    Raises:
        AlbertlmError: one line: not a directory albertlm runs, a head without trained weights, exit heads
            announced but missing, backends combined or on a GPU.
    """
    arch, config = read_architecture(model_dir)
    _check_directory(model_dir, arch, config, pretrained)
    backend: Backend = "onnxruntime" if onnx is not None else "int8" if int8 is not None else (
        "prepack" if prepack else "torch")
    chosen = [flag for flag, on in (("--int8", int8 is not None), ("--prepack", prepack), ("ONNX", onnx is not None))
              if on]
    if len(chosen) > 1:
        raise AlbertlmError(f"{' and '.join(chosen)} are exclusive: choose one backend")
    if backend != "torch":
        if str(device) == "auto":
            device = "cpu"
        if resolve_device(device).type != "cpu":
            raise AlbertlmError(f"{backend} inference runs on the CPU; got --device {device}")
    if patience is not None:
        check_patience(patience)
    if onnx is not None:
        model = _onnx_model(onnx, model_dir, arch)
    else:
        model = load_module(model_dir, arch, config).to(resolve_device(device)).eval()
    if int8 is not None:
        from albertlm.inference.quantize import quantize_int8

        model = quantize_int8(model, int8)
    if prepack:  # CPU, fp32: oneDNN-packed weights
        from albertlm.inference.prepack import prepack_for_cpu

        model = prepack_for_cpu(model)
    loaded = LoadedModel(Path(model_dir), arch, config, load_tokenizer(model_dir), model, backend,
                         resolve_device(device), runner=model)
    return loaded.with_patience(patience, regression_threshold) if patience is not None else loaded


def _check_directory(model_dir: str | Path, arch: str, config: AlbertConfig, pretrained: bool) -> None:
    """A pretraining directory when `pretrained`, else a fine-tuned one whose saved entries are as albertlm
    writes them and whose announced exit heads are there."""
    if pretrained:
        if arch not in MASKED_LM_ARCHITECTURES:
            raise AlbertlmError(f"{model_dir}: holds an {arch}, which has no masked-LM head; a pretrained "
                                f"directory holds an {' or '.join(MASKED_LM_ARCHITECTURES)}")
        return
    check_saved_entries(Path(model_dir) / "config.json", config)
    if arch not in HEADS:
        vectors = "; its sentence vectors: albertlm embed DIR" if arch == "AlbertModel" else ""
        raise AlbertlmError(f"{model_dir}: holds an {arch}, not a fine-tuned model (one of {', '.join(HEADS)})"
                            f"{vectors}")
    if has_exit_heads(config) and not (Path(model_dir) / EXIT_HEADS_NAME).is_file():
        raise AlbertlmError(f"{model_dir}: config.json announces exit heads ({CONFIG_KEY}) but {EXIT_HEADS_NAME} "
                            "is missing")


def _onnx_model(path: str | Path, model_dir: str | Path, arch: str) -> nn.Module:
    """An exported file behind the model's call; its outputs must be those of the directory's class."""
    from albertlm.inference.onnx_backend import OnnxModel
    from albertlm.interop.onnx import ONNX_OUTPUTS

    if not Path(path).is_file():
        raise AlbertlmError(f"{path}: no such ONNX file")
    model = OnnxModel(path, threads=torch.get_num_threads())
    wanted = ONNX_OUTPUTS.get(arch, ())
    if not wanted or sorted(model.output_names) != sorted(wanted):
        raise AlbertlmError(f"{path}: its outputs are {', '.join(model.output_names)}; {model_dir} holds an {arch}, "
                            f"whose export has {', '.join(wanted) or 'none'}")
    return model.eval()
