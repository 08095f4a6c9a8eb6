"""Knowledge distillation: a fine-tuned ALBERT classifier (the teacher) trains a smaller student.

The student learns from the teacher's outputs on the task's training examples (Hinton et al.,
2015, "Distilling the knowledge in a neural network"):

    loss = alpha * T^2 * KL(softmax(t / T) || softmax(s / T)) + (1 - alpha) * CE(s, label)

with s the student's and t the teacher's logits. T > 1 softens both distributions so the student
also sees how the teacher ranks the wrong classes; the T^2 factor keeps the soft term's gradients
on the scale of the hard term's whatever T is (they shrink as 1/T^2 otherwise). Regression has no
distribution to soften: its soft term is the squared distance to the teacher's output (T plays no
part), its hard term the squared distance to the label. Multi-label classification uses the KL of
each label's Bernoulli at temperature T, averaged over the labels like its BCE hard term. Token
classification (NER) distils every word: the soft term is the softmax KL at each word's first piece
(the position the tag is read from), averaged over words; the hard term is the cross-entropy over
the tagged positions, averaged over them, as fine-tuning's.

Everything but the objective is fine-tuning's (train/finetune.py): the same data reading,
features, recipe defaults, shared training loop, best-dev checkpoint and output directory, so the
output loads in `albertlm evaluate` / `predict` and in transformers' class of the same name. The
soft term is averaged over all training features, the hard term over the labelled ones: optional
unlabelled in-domain text (one text, or `text_a<TAB>text_b`, per line) adds examples that only
the teacher labels. With alpha = 0 and no unlabelled text the run is plain fine-tuning.

Several teachers (an ensemble: fine-tuned runs of one task that tokenize alike and share the class
names) teach as one: the soft target is the mean of their distributions at temperature T, the
ensemble experiments/ensemble_dev.py scores at T = 1 (for regression, the mean of their outputs;
for multi-label, the mean of each label's probability). It is stored as logits z = T log(mean p), so
the objective above reads it unchanged: softmax(z / T) is the mean. One teacher's logits are used as
they are.

The teacher runs once per input: its logits are cached in the output directory
(`teacher_logits.safetensors`, rows in feature order) under a fingerprint of the teacher's files,
every feature's pieces and the input settings, with a sha256 of the rows themselves. A changed
teacher, data file or max length computes them anew (several teachers: one file, their logits side by
side in the order given, under a key of all their fingerprints); a rerun of a stopped run (same inputs) reads
them back once their sha256 and finiteness are checked (a cache that fails is computed again, with a
warning). The student itself restarts from step 0 (fine-tuning keeps no training checkpoints). A
student directory must tokenize exactly as the teacher: the same vocabulary and settings.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from albertlm.config import PRESETS, AlbertConfig, get_preset
from albertlm.distributed import resolve_device
from albertlm.errors import AlbertlmError
from albertlm.heads import HEADS
from albertlm.inference.evaluate import task_labels
from albertlm.inference.load import load_head, load_model_dir, load_tokenizer
from albertlm.inference.run import check_finite_outputs, run_features
from albertlm.interop.hf import SAFETENSORS_INDEX_NAME
from albertlm.tasks.common import Feature, FeatureSettings, numbered_lines
from albertlm.tasks.registry import TaskSpec, get_task
from albertlm.train.finetune import (FinetuneRecipe, TaskRun, check_head_options, head_config, output_dir, prepare_task,
                                     start_outputs,
                                     train_task)
from albertlm.train.loop import CountFn, LossFn, unpadded
from albertlm.utils import atomic_path, check_field_types, sha256_file
from albertlm.vocab import IGNORE_INDEX

TEACHER_CACHE = "teacher_logits.safetensors"
"""The teacher's cached logits inside the output directory."""
CACHE_VERSION = "1"
"""Part of every fingerprint: bump it when the cached rows change meaning."""
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
"""Batch entries the student's forward pass takes (the rest are targets)."""
TEACHER_WEIGHT_SUFFIXES = (".safetensors", ".bin")
"""With config.json and a sharded index, the files of a fine-tuned directory whose bytes decide the
teacher's outputs (model.safetensors, pytorch_model.bin, every shard)."""


TEMPERATURE_RANGE = (0.01, 100.0)
"""The temperatures distillation takes. Beyond them the logits over T overflow float32, or T^2 times
a KL of float rounding noise becomes the loss (Hinton et al. use 1 to 20)."""


@dataclass(frozen=True)
class DistillSettings:
    """What distillation adds to a fine-tuning recipe."""

    temperature: float = 2.0
    """T: both logit vectors are divided by T before the softmax (classification only); 0.01 to 100."""
    alpha: float = 0.5
    """Weight of the soft (teacher) term; 1 - alpha weighs the hard-label term."""
    unlabelled: str | None = None
    """In-domain text file, one example per line (text, text_a<TAB>text_b, or a sentence for NER): soft targets only."""
    student_layers: int | None = None
    """Preset students: override the preset's number of layers L."""
    student_hidden: int | None = None
    """Preset students: override the preset's width H (the FFN keeps its ratio to H, the heads their number)."""

    def __post_init__(self) -> None:
        check_field_types(self)
        low, high = TEMPERATURE_RANGE
        if not low <= self.temperature <= high:
            raise AlbertlmError(f"--temperature must lie in [{low:g}, {high:g}], got {self.temperature:g}")
        if not 0.0 <= self.alpha <= 1.0:
            raise AlbertlmError(f"--alpha must lie in [0, 1], got {self.alpha:g}")
        for name in ("student_layers", "student_hidden"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise AlbertlmError(f"{name} must be positive, got {getattr(self, name)}")


# ---------------------------------------------------------------------------- the objective
def _softmax_kl(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """T^2 * KL(softmax(teacher / T) || softmax(student / T)) per row: [B, C] x 2 -> [B]."""
    kl = F.kl_div(F.log_softmax(student / temperature, -1), F.log_softmax(teacher / temperature, -1),
                  reduction="none", log_target=True)
    return kl.sum(-1) * temperature ** 2


def _bernoulli_kl(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """T^2 * the mean over labels of KL(Bernoulli(sigmoid(t / T)) || Bernoulli(sigmoid(s / T))): [B, C] -> [B]."""
    s, t = student / temperature, teacher / temperature
    p = torch.sigmoid(t)
    kl = p * (F.logsigmoid(t) - F.logsigmoid(s)) + (1 - p) * (F.logsigmoid(-t) - F.logsigmoid(-s))
    return kl.mean(-1) * temperature ** 2


def _squared_error(student: torch.Tensor, target: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """(student - target)^2 per row, summed over outputs: [B, 1] or [B] -> [B]; no temperature."""
    return (student.reshape(len(student), -1) - target.reshape(len(student), -1)).pow(2).sum(-1)


SOFT_TERMS = {"single_label_classification": _softmax_kl, "multi_label_classification": _bernoulli_kl,
              "regression": _squared_error}
"""Problem type -> (student logits, teacher logits, T) -> per-example soft loss [B]."""

HARD_TERMS = {
    "single_label_classification": lambda s, y: F.cross_entropy(s, y, reduction="none"),
    "multi_label_classification": lambda s, y: F.binary_cross_entropy_with_logits(s, y, reduction="none").mean(-1),
    "regression": _squared_error,
}
"""Problem type -> (student logits, labels) -> per-example loss [B], each the per-example form of the
head's own loss (heads.AlbertForSequenceClassification), so alpha = 0 is plain fine-tuning."""


def token_distill_objective(temperature: float, alpha: float, unpad: bool = False) -> tuple[LossFn, CountFn]:
    """The loop's (loss_fn, count_fn) for token classification.

    A batch holds the model inputs, `labels` [B, S] (IGNORE_INDEX off tagged positions: all of an
    unlabelled sentence), `teacher_logits` [B, C, S] (stored sequence-last, so padding extends S) and
    `soft_mask` [B, S] (1 at each word's first piece). The soft term is averaged over the step's
    words, the hard term over its tagged positions, both by global counts. With `unpad` the student's
    forward runs unpadded (heads.py), which leaves the logits at its tagged positions as they are.
    """
    options = {"unpad": True} if unpad else {}

    def count(batch: dict[str, torch.Tensor]) -> dict[str, float]:
        return {"n": float(batch["soft_mask"].sum()), "n_hard": float((batch["labels"] != IGNORE_INDEX).sum())}

    def loss_fn(model: nn.Module, batch: dict[str, torch.Tensor], totals: dict[str, float]):
        logits = model(**{k: batch[k] for k in MODEL_INPUTS if k in batch}, **options).logits.float()  # [B, S, C]
        teacher = batch["teacher_logits"].float().transpose(1, 2)  # [B, S, C]
        soft = (_softmax_kl(logits, teacher, temperature) * batch["soft_mask"]).sum()  # [B, S] -> scalar
        hard = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1),
                               ignore_index=IGNORE_INDEX, reduction="sum")
        loss = alpha * soft / max(totals["n"], 1.0) + (1 - alpha) * hard / max(totals["n_hard"], 1.0)
        return loss, {"loss_sum": float(loss.detach()) * totals["n"], "soft_sum": float(soft.detach()),
                      "hard_sum": float(hard.detach())}

    return loss_fn, count


def distill_objective(problem_type: str, temperature: float, alpha: float, unpad: bool = False
                      ) -> tuple[LossFn, CountFn]:
    """The loop's (loss_fn, count_fn) for distillation.

    A batch holds the model inputs, `labels`, `teacher_logits` [B, C] and `hard_weight` [B]
    (1: labelled, 0: unlabelled text). The soft term is averaged over every example of the step,
    the hard term over the labelled ones, both by global counts (train/loop.py). With `unpad` the
    student's forward runs unpadded (heads.py): the same logits.
    """
    soft_fn, hard_fn = SOFT_TERMS[problem_type], HARD_TERMS[problem_type]

    options = {"unpad": True} if unpad else {}

    def count(batch: dict[str, torch.Tensor]) -> dict[str, float]:
        return {"n": float(len(batch["input_ids"])), "n_hard": float(batch["hard_weight"].sum())}

    def loss_fn(model: nn.Module, batch: dict[str, torch.Tensor], totals: dict[str, float]):
        logits = model(**{k: batch[k] for k in MODEL_INPUTS if k in batch}, **options).logits.float()  # [B, C]
        soft = soft_fn(logits, batch["teacher_logits"].float(), temperature)  # [B]
        hard = hard_fn(logits, batch["labels"]) * batch["hard_weight"]  # [B]; unlabelled rows weigh 0
        loss = alpha * soft.sum() / totals["n"] + (1 - alpha) * hard.sum() / max(totals["n_hard"], 1.0)
        return loss, {"loss_sum": float(loss.detach()) * totals["n"], "soft_sum": float(soft.detach().sum()),
                      "hard_sum": float(hard.detach().sum())}

    return loss_fn, count


def ensemble_targets(rows: np.ndarray, teachers: int, problem_type: str, temperature: float) -> np.ndarray:
    """One soft target per row from `teachers` teachers' logits side by side ([R, teachers * C] -> [R, C]).

    Classification (single-label, and every token of a tagger): T * log of the mean of the teachers'
    softmax(t / T), so softmax(target / T) is that mean. Multi-label: T * logit of the mean of each
    label's sigmoid(t / T). Regression: the mean output. One teacher: its logits unchanged.
    """
    if teachers == 1:
        return rows
    t = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32)).double()
    t = t.reshape(len(rows), teachers, -1)  # [R, n, C]
    if problem_type == "regression":
        out = t.mean(1)
    elif problem_type == "multi_label_classification":
        p = torch.sigmoid(t / temperature).mean(1).clamp(1e-12, 1 - 1e-12)
        out = temperature * torch.logit(p)
    else:
        out = temperature * (torch.logsumexp(torch.log_softmax(t / temperature, -1), 1) - math.log(teachers))
    return out.float().numpy()


# ---------------------------------------------------------------------------- the teacher's outputs
def teachers_fingerprint(prints: Sequence[str]) -> str:
    """The key part that names the teachers: one teacher's fingerprint as it is (its caches stay valid),
    several teachers' as a sha256 of theirs in order."""
    if len(prints) == 1:
        return prints[0]
    return hashlib.sha256("\0".join(["ensemble", *prints]).encode()).hexdigest()


def teacher_fingerprint(teacher_dir: str | Path) -> str:
    """sha256 over the teacher's config.json and weight files (a sharded index and its shards included)."""
    folder = Path(teacher_dir)
    names = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name != TEACHER_CACHE and (
        p.name in ("config.json", SAFETENSORS_INDEX_NAME) or p.suffix in TEACHER_WEIGHT_SUFFIXES))
    h = hashlib.sha256()
    for name in names:
        h.update(name.encode() + b"\0" + sha256_file(folder / name).encode() + b"\0")
    return h.hexdigest()


def inputs_fingerprint(teacher: str, features: Sequence[Feature], settings: FeatureSettings) -> str:
    """sha256 of (teacher fingerprint, input settings, every feature's pieces in order): the cache key."""
    h = hashlib.sha256(f"v{CACHE_VERSION}\0{teacher}\0{json.dumps(dataclasses.asdict(settings), sort_keys=True)}"
                       .encode())
    for f in features:
        for name in ("input_ids", "token_type_ids"):
            array = np.ascontiguousarray(f.inputs[name], dtype=np.int64)
            h.update(np.int64(array.size).tobytes() + array.tobytes())
    return h.hexdigest()


def _logits_sha256(logits: np.ndarray) -> str:
    """sha256 of the logits' bytes as the cache file stores them (little-endian float32, row-major)."""
    return hashlib.sha256(np.ascontiguousarray(logits, dtype="<f4").tobytes()).hexdigest()


def _read_cache(path: Path, key: str, shape: tuple[int, int]) -> np.ndarray | None:
    """The cached logits when `path` holds them for `key`, intact, else None (compute them again).

    A cache written for other inputs is replaced without a word; one that claims these inputs but
    cannot be trusted (unreadable, another shape, bytes that do not match the sha256 stored with
    them, non-finite values) is replaced after a warning. Its key alone is not trusted.

    Raises:
        AlbertlmError: `path` is something other than a file (albertlm does not replace a directory).
    """
    from safetensors import SafetensorError, safe_open

    if not path.exists() and not path.is_symlink():
        return None
    if not path.is_file():
        what = "a directory" if path.is_dir() else "not a regular file"
        raise AlbertlmError(f"{path}: is {what}, but it is where distillation caches the teacher's logits; "
                            "move it away or choose another --out")
    try:
        with safe_open(str(path), framework="numpy") as fh:
            meta = fh.metadata() or {}
            if meta.get("fingerprint") != key:
                return None  # written for other inputs
            logits = fh.get_tensor("logits") if "logits" in fh.keys() else None
    except (SafetensorError, OSError, ValueError) as exc:
        return _distrust(path, f"cannot be read ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})")
    if logits is None:
        return _distrust(path, "holds no logits tensor")
    if logits.shape != shape or logits.dtype != np.float32:
        return _distrust(path, f"holds {logits.dtype} logits of shape {list(logits.shape)}, not float32 {list(shape)}")
    if "sha256" not in meta:
        return _distrust(path, "stores no sha256 of its logits (an older albertlm wrote it)")
    if meta["sha256"] != _logits_sha256(logits):
        return _distrust(path, "its logits do not match the sha256 stored with them")
    if not np.isfinite(logits).all():
        return _distrust(path, "holds non-finite logits")
    return logits


def _distrust(path: Path, why: str) -> None:
    """Say why a cache that claims these inputs is not used (a cache: computing again is the recovery)."""
    warnings.warn(f"{path}: {why}; computing the teacher's logits again", stacklevel=3)
    return None


def teacher_logits(teacher: nn.Module | Sequence[nn.Module], spec: TaskSpec, features: Sequence[Feature], key: str,
                   cache: Path, batch_size: int, device: torch.device, where: str | Sequence[str] = "--teacher"
                   ) -> tuple[list[np.ndarray], bool]:
    """The teacher's logits for every feature, from the cache when its key matches, else computed and cached.

    Args:
        teacher: the fine-tuned teacher, on `device`, or several (their logits side by side, in order:
            [num_labels * teachers] a row).
        spec: the task (its family's outputs).
        features: the student's training features, in order.
        key: inputs_fingerprint of those features.
        cache: the cache file (written atomically).
        batch_size: features per teacher forward pass.
        device: the torch device.
        where: how messages name the teacher (`--teacher DIR`), one name per teacher.
    Returns:
        (one float32 array per feature: [num_labels], or [S_feature, num_labels] for token
        classification; whether they came from the cache). The file holds them as one matrix,
        per-token rows concatenated in feature order.
    """
    models = [teacher] if isinstance(teacher, nn.Module) else list(teacher)
    names = [where] if isinstance(where, str) else list(where)
    per_position = spec.family.per_position
    lengths = [len(f) for f in features] if per_position else [1] * len(features)
    shape = (sum(lengths), sum(m.config.num_labels for m in models))
    logits = _read_cache(cache, key, shape)
    cached = logits is not None
    if not cached:
        from safetensors.numpy import save_file

        columns = []
        for model, name in zip(models, names):
            outputs = run_features(model, spec, list(features), batch_size, device)
            check_finite_outputs(outputs, spec, name)  # before anything is cached or taught
            rows = outputs["logits"]
            columns.append((np.concatenate(rows) if per_position else np.stack(rows)).astype(np.float32))
        logits = np.concatenate(columns, axis=1) if len(columns) > 1 else columns[0]
        with atomic_path(cache) as tmp:
            save_file({"logits": logits}, str(tmp), metadata={"fingerprint": key, "features": str(len(features)),
                                                              "sha256": _logits_sha256(logits)})
    if not per_position:
        return list(logits), cached
    return np.split(logits, np.cumsum(lengths)[:-1]), cached


# ---------------------------------------------------------------------------- teacher and student
def load_teacher(teacher_dir: str | Path, spec: TaskSpec, device: torch.device, data_dir: str | Path | None = None):
    """(teacher in eval mode, its config, its tokenizer, its class names) after checking it fits the
    task (`inference.evaluate.task_labels`, the check evaluate makes too)."""
    if not Path(teacher_dir).is_dir():
        raise AlbertlmError(f"--teacher {teacher_dir}: no such directory")
    loaded = load_model_dir(teacher_dir, device=device)
    labels = task_labels(f"--teacher {teacher_dir}", loaded.config, loaded.arch, spec, data_dir)
    return loaded.model, loaded.config, loaded.tokenizer, labels


def load_teachers(teacher_dirs: Sequence[str | Path], spec: TaskSpec, device: torch.device,
                  data_dir: str | Path | None = None):
    """(the teachers in eval mode, the first one's config, tokenizer and class names): load_teacher for
    each, after checking that every later one tokenizes as the first (`tokenizer_difference`: the cached
    logits and the student read one piece sequence) and has its class names in the same order (the mean
    of their distributions is taken class by class)."""
    first, config, tokenizer, labels = load_teacher(teacher_dirs[0], spec, device, data_dir)
    models = [first]
    for other in teacher_dirs[1:]:
        model, _, tok, names = load_teacher(other, spec, device, data_dir)
        differs = tokenizer_difference(Path(other), Path(teacher_dirs[0]), tok, tokenizer)
        if differs is not None:
            raise AlbertlmError(f"--teacher {other} and --teacher {teacher_dirs[0]} tokenize differently ({differs}); "
                                "an ensemble's teachers must share one tokenizer")
        if list(names or ()) != list(labels or ()):
            raise AlbertlmError(f"--teacher {other}: its classes are {', '.join(map(str, names or ()))}, the first "
                                f"teacher's {', '.join(map(str, labels or ()))}; an ensemble's teachers must share them "
                                "in one order")
        models.append(model)
    return models, config, tokenizer, labels


TOKENIZER_VOCABULARY = ("model_proto", "pieces")
"""The entries of a tokenizer's state that are its vocabulary (SentencePiece's model, WordPiece's pieces)."""
TOKENIZER_RUNTIME = ("num_threads", "source")
"""Entries of a tokenizer's state that do not change how it splits text."""


def tokenizer_difference(student_dir: Path, teacher_dir: Path, student_tok, teacher_tok) -> str | None:
    """How the student's tokenizer differs from the teacher's (the first difference found), or None.

    Cached teacher logits are per piece sequence, so the two must split every text identically: the
    same vocabulary (SentencePiece's model byte for byte: its scores decide the pieces) and the same
    settings (do_lower_case, keep_accents, ...).
    """
    from albertlm.tokenizer import vocabulary_fingerprint

    ours, theirs = vocabulary_fingerprint(student_dir), vocabulary_fingerprint(teacher_dir)
    if ours["file"] != theirs["file"]:
        return f"a {ours['file']}, the teacher a {theirs['file']}"
    a, b = student_tok.__getstate__(), teacher_tok.__getstate__()
    for name in sorted(set(a) | set(b), key=lambda n: (n not in TOKENIZER_VOCABULARY, n)):
        if name in TOKENIZER_RUNTIME or a.get(name) == b.get(name):
            continue
        if name not in TOKENIZER_VOCABULARY:
            return f"tokenizer_config.json {name} is {a.get(name)}, the teacher's {b.get(name)}"
        if student_tok.vocab_size != teacher_tok.vocab_size:
            return f"{ours['file']} has {student_tok.vocab_size} pieces, the teacher's {teacher_tok.vocab_size}"
        return f"{ours['file']} sha256 {ours['sha256'][:16]}, the teacher's {theirs['sha256'][:16]}"
    return None


def student_base(student: str, teacher_dir: str | Path, teacher_config: AlbertConfig, teacher_tokenizer,
                 settings: DistillSettings) -> tuple[AlbertConfig, Path | None]:
    """(the student's backbone config, its directory or None for a preset started at random).

    A preset takes the teacher's vocabulary size and special ids (it shares the teacher's
    tokenizer); a directory must have the teacher's tokenizer (`tokenizer_difference`) and as many
    embedding rows.
    """
    overrides = settings.student_layers is not None or settings.student_hidden is not None
    if Path(student).is_dir():
        if overrides:
            raise AlbertlmError(f"--student {student} is a model directory; --student-layers / --student-hidden "
                                "only change a preset")
        base = AlbertConfig.from_json_file(Path(student) / "config.json")
        differs = tokenizer_difference(Path(student), Path(teacher_dir), load_tokenizer(student), teacher_tokenizer)
        if differs is None and base.vocab_size != teacher_config.vocab_size:
            differs = f"config.json vocab_size is {base.vocab_size}, the teacher's {teacher_config.vocab_size}"
        if differs is not None:
            raise AlbertlmError(f"--student {student} and --teacher {teacher_dir} tokenize differently ({differs}); "
                                "the student's tokenizer is not the teacher's, and it must be")
        return base, Path(student)
    if student not in PRESETS:
        raise AlbertlmError(f"--student {student}: neither a model directory nor a preset "
                            f"(one of {', '.join(PRESETS)})")
    preset = PRESETS[student]
    changes: dict[str, Any] = {k: getattr(teacher_config, k) for k in ("vocab_size", "pad_token_id", "bos_token_id",
                                                                        "eos_token_id")}
    if settings.student_layers is not None:
        changes["num_hidden_layers"] = settings.student_layers
    if settings.student_hidden is not None:
        ratio = preset.intermediate_size / preset.hidden_size
        changes.update(hidden_size=settings.student_hidden, intermediate_size=round(ratio * settings.student_hidden))
    return get_preset(student, **changes), None
def unlabelled_features(path: str | Path, run: TaskRun, tokenizer) -> list[Feature]:
    """Features of the unlabelled text file: a placeholder label (weight 0) so they batch with the rest."""
    lines = [(n, line) for n, line in numbered_lines(path) if line.strip()]
    if not lines:
        raise AlbertlmError(f"--unlabelled {path}: no text lines")
    spec = run.spec
    examples = [spec.family.parse_line(n - 1, line, tokenizer) for n, line in lines]
    features = spec.family.featurize(spec, examples, tokenizer, run.labels, run.settings, True)
    placeholder = np.zeros_like(run.train_f[0].inputs["labels"])
    for f in features:  # token classification: no position is tagged
        f.inputs["labels"] = (np.full(len(f), IGNORE_INDEX, dtype=np.int64) if spec.family.token_level
                              else placeholder.copy())
    return features


# ---------------------------------------------------------------------------- the run
def distill(task: str | TaskSpec, teacher_dir: str | Path | Sequence[str | Path], student: str, data_dir: str | Path,
            out_dir: str | Path, recipe: FinetuneRecipe | None = None, settings: DistillSettings | None = None, *,
            device: str | torch.device = "cpu", progress: bool = True) -> dict[str, Any]:
    """Distil a fine-tuned teacher into a student on a sequence classification, regression or token
    classification task.

    Args:
        task: a task name (tasks/registry.py) or a TaskSpec; the teacher must be fine-tuned for it.
        teacher_dir: the teacher's fine-tuned directory, or several (an ensemble that teaches the mean of
            its distributions at T; they must tokenize alike and share the class names).
        student: a preset name (config.PRESETS; random weights, the teacher's tokenizer) or a
            pretrained model directory with the teacher's vocabulary.
        data_dir: the task's data directory (train and dev files).
        out_dir: the run's directory: the best student (a fine-tuned model directory), the
            teacher's cached logits, metrics.jsonl, results.json.
        recipe: fine-tuning settings (None: the task's defaults).
        settings: temperature, alpha, unlabelled text, preset overrides.
        device: torch device ("cpu", "cuda", "auto").
        progress: show a progress bar.
    Returns:
        Fine-tuning's results plus "distillation": the teacher paths and fingerprints ("teacher" and
        "teacher_fingerprint" name the first, or the only one), T, alpha, the unlabelled file and
        count, whether the teacher's logits came from the cache.
    """
    device = resolve_device(device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), contextlib.ExitStack() as held:
        return _distill(task, teacher_dir, student, data_dir, out_dir, recipe or FinetuneRecipe(),
                        settings or DistillSettings(), device=device, progress=progress, held=held)


def _distill(task: str | TaskSpec, teacher_dir: str | Path | Sequence[str | Path], student: str, data_dir: str | Path,
             out_dir: str | Path, recipe: FinetuneRecipe, settings: DistillSettings, *, device: torch.device,
             progress: bool, held: contextlib.ExitStack) -> dict[str, Any]:
    """distill()'s body, run inside a fork of torch's global generator (it seeds it); the claim of --out is
    entered into `held`, which distill() leaves when the run ends."""
    spec = get_task(task) if isinstance(task, str) else task
    if not distills(spec):
        raise AlbertlmError(f"task {spec.name}: distillation supports sequence classification, regression and "
                            f"token classification tasks, not the {spec.family.name} family")
    if recipe.early_exit:  # the student's loss is the distillation loss of its last layer only
        raise AlbertlmError("--early-exit: distillation trains the final classifier only; fine-tune the distilled "
                            "student with `albertlm finetune --early-exit` to add exit heads")
    if recipe.pooler_reinit:
        raise AlbertlmError("--pooler-reinit: a distillation student keeps the pooler it starts with (a preset "
                            "student's is random already)")
    check_head_options(spec, recipe)
    teacher_dirs = [teacher_dir] if isinstance(teacher_dir, (str, Path)) else list(teacher_dir)
    if not teacher_dirs:
        raise AlbertlmError("--teacher: give one fine-tuned model directory, or several")
    if len({Path(t).resolve() for t in teacher_dirs}) < len(teacher_dirs):
        raise AlbertlmError("--teacher: the same directory is given twice; an ensemble's teachers are distinct runs")
    teachers, t_config, tokenizer, labels = load_teachers(teacher_dirs, spec, device, data_dir)
    teacher_dir = teacher_dirs[0]
    base, student_dir = student_base(student, teacher_dir, t_config, tokenizer, settings)
    inputs = [*(("--teacher", t) for t in teacher_dirs), ("--data", data_dir), ("--unlabelled", settings.unlabelled),
              *((("--student", student_dir),) if student_dir else ())]
    out = output_dir(out_dir, "distill", inputs)
    out_dir = out.path
    positions = min(base.max_position_embeddings, *(t.config.max_position_embeddings for t in teachers))
    if recipe.max_seq_length is not None and recipe.max_seq_length > positions:
        raise AlbertlmError(f"--max-seq-length {recipe.max_seq_length}: the teacher or the student has only "
                            f"{positions} positions")
    run = prepare_task(spec, data_dir, recipe, tokenizer, base.replace(max_position_embeddings=positions), labels)
    extra = unlabelled_features(settings.unlabelled, run, tokenizer) if settings.unlabelled else []
    if not spec.family.token_level:  # tokens: an unlabelled sentence has no tagged position, no weight needed
        for f in extra:
            f.inputs["hard_weight"] = np.float32(0.0)  # train_student weighs the labelled ones 1
    run = dataclasses.replace(run, train_f=run.train_f + extra, recipe=recipe.resolve(spec, len(run.train_f) + len(extra)))

    record = distillation_record(teacher_dirs, student, settings, len(extra))
    held.enter_context(out.claim())
    start_outputs(out_dir, {"task": spec.name, **dataclasses.asdict(run.recipe), "distillation": record})
    return train_student(run, teachers, record, student_dir, base, tokenizer, out_dir, settings, device=device,
                         progress=progress, where=[f"--teacher {t}" for t in teacher_dirs])


def distills(spec: TaskSpec) -> bool:
    """Whether distillation has a soft target for the task: token classification, or a sequence task whose
    problem type SOFT_TERMS has."""
    return spec.family.token_level or (spec.family.sets_problem_type and spec.problem_type in SOFT_TERMS)


def distillation_record(teacher_dirs: Sequence[str | Path], student: str | Path, settings: DistillSettings,
                        unlabelled_features: int = 0) -> dict[str, Any]:
    """A run's "distillation" entry: the teachers and their fingerprints ("teacher" and
    "teacher_fingerprint" name the first), T, alpha, the student and its overrides, the unlabelled text."""
    prints = [teacher_fingerprint(t) for t in teacher_dirs]
    return {"teacher": str(teacher_dirs[0]), "teacher_fingerprint": prints[0],
            "teachers": [str(t) for t in teacher_dirs], "teacher_fingerprints": prints,
            "temperature": settings.temperature, "alpha": settings.alpha, "student": str(student),
            "student_layers": settings.student_layers, "student_hidden": settings.student_hidden,
            "unlabelled": settings.unlabelled, "unlabelled_features": unlabelled_features}


def train_student(run: TaskRun, teachers: Sequence[nn.Module], record: dict[str, Any], student_dir: Path | None,
                  base: AlbertConfig, tokenizer, out_dir: Path, settings: DistillSettings, *, device: torch.device,
                  progress: bool, where: str | Sequence[str] = "--teacher", deadline: float | None = None,
                  eval_s: float = 0.0) -> dict[str, Any]:
    """Distil `teachers` into a student on the run's training features, in the claimed `out_dir`
    (start_outputs done): the teachers' logits (cached there), the soft targets (their mean for several),
    the student's head on `student_dir`'s weights (a preset's random ones when None, drawn from the
    recipe's seed) and train_task with the distillation objective. A training feature of the classification
    families without a `hard_weight` (0: unlabelled text, its label term off) gets 1.

    Args:
        run: the prepared task, the student's recipe resolved.
        teachers: the fine-tuned teachers in eval mode, on `device`; dropped once their logits are known.
        record: the run's "distillation" entry (teacher_fingerprints, temperature, alpha, ...).
        student_dir, base: the student's weights and backbone config.
        tokenizer: the teachers' and the student's.
        out_dir, settings, device, progress: as distill's.
        where: how each teacher is named in an error (a flag and its value).
        deadline, eval_s: as train_task's.
    Returns:
        train_task's results, with "model_dir" (the student) and "distillation".
    """
    spec = run.spec
    teacher_dirs = record["teachers"]
    if not spec.family.token_level:
        for f in run.train_f:
            f.inputs.setdefault("hard_weight", np.float32(1.0))
    key = inputs_fingerprint(teachers_fingerprint(record["teacher_fingerprints"]), run.train_f, run.settings)
    logits, cached = teacher_logits(teachers, spec, run.train_f, key, out_dir / TEACHER_CACHE,
                                    run.recipe.eval_batch_size, device, where=where)
    del teachers  # the student trains alone
    if len(teacher_dirs) > 1:  # one matrix of rows (a feature, or a token), the teachers side by side
        problem = "single_label_classification" if spec.family.token_level else spec.problem_type
        rows = np.concatenate(logits) if spec.family.per_position else np.stack(logits)
        mean = ensemble_targets(rows, len(teacher_dirs), problem, settings.temperature)
        logits = (np.split(mean, np.cumsum([len(r) for r in logits])[:-1]) if spec.family.per_position
                  else list(mean))
    for f, row in zip(run.train_f, logits):
        f.inputs["teacher_logits"] = np.ascontiguousarray(row.T) if spec.family.token_level else row  # [C, S]
        if spec.family.token_level:
            f.inputs["soft_mask"] = np.zeros(len(f), dtype=np.float32)
            f.inputs["soft_mask"][f.meta["first_piece"]] = 1.0

    torch.manual_seed(run.recipe.seed)
    config = head_config(spec, base, run.labels, run.recipe, run.settings)
    kept = ("teacher", "teacher_fingerprint", "temperature", "alpha") + (
        ("teachers", "teacher_fingerprints") if len(teacher_dirs) > 1 else ())
    config = config.replace(extra={**config.extra, "albertlm_distillation": {k: record[k] for k in kept}})
    model = load_head(spec, student_dir, config) if student_dir else HEADS[spec.family.head](config)
    unpad = unpadded(run.recipe.unpad, model, device)
    loss_fn, count_fn = (token_distill_objective(settings.temperature, settings.alpha, unpad)
                         if spec.family.token_level
                         else distill_objective(spec.problem_type, settings.temperature, settings.alpha, unpad))
    return train_task(run, model.to(device).train(), tokenizer, out_dir, loss_fn=loss_fn, count_fn=count_fn,
                      device=device, progress=progress, name="distill", deadline=deadline, eval_s=eval_s,
                      record={"model_dir": str(record["student"]),
                              "distillation": {**record, "teacher_logits_cached": cached}})
