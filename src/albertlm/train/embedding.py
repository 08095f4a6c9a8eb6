"""Fine-tuning for sentence embeddings: `albertlm finetune --objective mnrl|cosent|cosine|simcse`.

The backbone and a pooling (pooling.py, mean by default) make one vector per text; no task head is
trained. Each objective compares the vectors of a batch (u, v: the two texts of a pair, cos the
cosine, s the similarity scale, 20 by default):

    mnrl    multiple-negatives ranking over alike pairs (anchor, positive): cross-entropy over the
            [B, B] matrix s * cos(u_i, v_j), target j = i: every other row's positive is a negative
            (in-batch negatives; Henderson et al. 2017, the loss sentence-transformers calls MNRL)
    cosent  CoSENT over graded (or binary) pairs: log(1 + sum over pairs (i, j) with score_i > score_j
            of exp(s * (cos_j - cos_i))): only the order of the cosines is trained, not their values
    cosine  cosine regression: mean squared error of cos(u, v) against the score scaled to [0, 1]
            by the training set's smallest and largest score
    simcse  unsupervised SimCSE (Gao et al. 2021, section 3): each training text twice through the
            network in train mode, so two dropout masks; the second pass is the first one's positive,
            the batch's other texts its negatives (mnrl's loss). Dropout must be above 0; unset, it is 0.1

Pairs come from the task's training split as tasks/pairs.py reads them (STS-B graded, MRPC / QNLI /
RTE / LCQMC / AFQMC by their alike label); mnrl takes the alike pairs only (STS-B from score 4), simcse
every distinct training text of any task. A micro-batch makes its own in-batch negatives (with
--micro-batch-size below --batch-size there are fewer). Dev is scored with the embedding metrics
(inference/embed_eval.py): Spearman of the cosines (graded), accuracy at the best cosine threshold
(binary), retrieval MRR (unlabelled); the best checkpoint is kept, as for every fine-tuning run, by
the shared loop (train/finetune.train_task).

The output is an ordinary model directory: the backbone as an AlbertModel, its tokenizer, and in
config.json `albertlm_embedding` = {pooling, objective, task}, which `albertlm embed` and
`st_directory.write_sentence_transformers` read. Where sentence-transformers can express the model
(cls, mean or max pooling; a network transformers loads), OUT/sentence-transformers/ is also written
from the best checkpoint when the run ends. Without --model, train/scratch_embedding.py trains the same
from a random ALBERT made from the task's own text, inside a time budget.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from albertlm.config import AlbertConfig
from albertlm.distributed import resolve_device
from albertlm.errors import AlbertlmError
from albertlm.exit_heads import with_exit_heads
from albertlm.inference.embed import Embedder, text_inputs
from albertlm.inference.embed_eval import embedding_metrics
from albertlm.inference.load import load_tokenizer
from albertlm.model import AlbertModel
from albertlm.outputs import FINETUNE_FILES, OutputDir
from albertlm.pooling import EMBEDDING_KEY, SentenceEmbedder
from albertlm.tasks.common import Feature, FeatureSettings
from albertlm.tasks.pairs import NOT_FRACTIONS, Pairs, pairs_of
from albertlm.tasks.registry import TaskSpec, get_task
from albertlm.train.finetune import DevScorer, FinetuneRecipe, TaskRun, read_splits, start_outputs, train_task
from albertlm.train.loop import CountFn, LossFn, unpadded
from albertlm.utils import atomic_write_text, check_field_types

OBJECTIVES = ("task", "mnrl", "cosent", "cosine", "simcse")
"""What `albertlm finetune --objective` takes: the task's head and loss, or an embedding objective."""
ST_SUBDIR = "sentence-transformers"
"""The sentence-transformers copy of the best checkpoint, inside --out."""
SIMCSE_DROPOUT = 0.1
"""SimCSE's dropout when --dropout is unset (Gao et al. 2021: the default p = 0.1 works best)."""


@dataclass(frozen=True)
class EmbeddingSettings:
    """What `albertlm finetune` optimises: the task's head, or sentence vectors of the backbone."""

    objective: Literal["task", "mnrl", "cosent", "cosine", "simcse"] = "task"
    """task (the task's head and loss), or a sentence-embedding objective on the backbone alone
    (train/embedding.py): mnrl (in-batch negatives over alike pairs), cosent (CoSENT ranking of graded or
    binary pairs), cosine (cosine regression), simcse (unsupervised: two dropout passes of each text).
    Without --model and without this flag, a task of graded pairs (sts-b) trains cosent"""
    pooling: Literal["cls", "pooler", "mean", "max"] = "mean"
    """embedding objectives: how the last layer becomes one vector, saved with the model (pooling.py)"""
    similarity_scale: float = 20.0
    """embedding objectives: the factor on the cosines of mnrl, simcse and cosent (1 / temperature)"""

    def __post_init__(self) -> None:
        check_field_types(self)
        if not (math.isfinite(self.similarity_scale) and self.similarity_scale > 0):
            raise AlbertlmError(f"--similarity-scale must be a positive number, got {self.similarity_scale}")
        if self.objective == "task" and (self.pooling != "mean" or self.similarity_scale != 20.0):
            flag = "--pooling" if self.pooling != "mean" else "--similarity-scale"
            raise AlbertlmError(f"{flag} applies to the embedding objectives (--objective mnrl, cosent, cosine or "
                                "simcse); the task's head has its own (--classifier-pooling)")


# ---------------------------------------------------------------------------- the losses
def _wide(x: torch.Tensor) -> torch.Tensor:
    """fp16 / bf16 (autocast) as float32 before an exponential; float32 and float64 as they are."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def in_batch_loss(anchors: torch.Tensor, positives: torch.Tensor, scale: float) -> torch.Tensor:
    """Multiple-negatives ranking: row i's positive is positives[i], every other row's a negative.

    Args:
        anchors, positives: [B, H] vectors (any length: the cosine is taken).
        scale: the factor on the cosines before the softmax.
    Returns:
        The mean over rows of -log softmax(scale * cos(anchor_i, positives))[i].
    """
    sims = scale * F.normalize(anchors, dim=-1) @ F.normalize(positives, dim=-1).T  # [B, B]
    return F.cross_entropy(_wide(sims), torch.arange(len(sims), device=sims.device))


def cosent_loss(a: torch.Tensor, b: torch.Tensor, scores: torch.Tensor, scale: float) -> torch.Tensor:
    """CoSENT: log(1 + sum over (i, j) with scores_i > scores_j of exp(scale * (cos_j - cos_i))).

    Args:
        a, b: [B, H] the two texts' vectors.
        scores: [B] gold similarities (any scale: only their order counts).
        scale: the factor on the cosines.
    Returns:
        The loss (0 for a batch whose scores are all equal).
    """
    cos = scale * _wide(F.cosine_similarity(a, b, dim=-1))  # [B]
    diff = cos[None, :] - cos[:, None]  # [B, B]: diff[i, j] = cos_j - cos_i
    wrong = scores[:, None] > scores[None, :]  # [B, B]: pair i should be more alike than pair j
    return torch.logsumexp(torch.cat([diff.new_zeros(1), diff[wrong]]), dim=0)


def cosine_loss(a: torch.Tensor, b: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cosine regression: the mean of (cos(a_i, b_i) - targets_i)^2; targets [B] in [0, 1]."""
    cos = _wide(F.cosine_similarity(a, b, dim=-1))  # [B]
    return F.mse_loss(cos, targets.to(cos.dtype))


def embedding_objective(objective: str, scale: float, unpad: bool = False) -> tuple[LossFn, CountFn]:
    """The loop's (loss_fn, count_fn) for an objective: each micro-batch's loss weighted by its share of
    the step's examples, a `loss_sum` metric and an `n` count (train/loop.py); with `unpad`, every text
    is encoded unpadded (SentenceEmbedder.forward)."""
    def count(batch: dict[str, torch.Tensor]) -> dict[str, float]:
        return {"n": float(len(batch["input_ids"]))}

    def loss_fn(model: nn.Module, batch: dict[str, torch.Tensor], totals: dict[str, float]):
        u = model(batch["input_ids"], batch["attention_mask"], unpad=unpad)  # [B, H]
        if objective == "simcse":  # the same texts again: another dropout mask
            loss = in_batch_loss(u, model(batch["input_ids"], batch["attention_mask"], unpad=unpad), scale)
        else:
            v = model(batch["pair_ids"], batch["pair_mask"], unpad=unpad)  # [B, H]
            loss = {"mnrl": lambda: in_batch_loss(u, v, scale),
                    "cosent": lambda: cosent_loss(u, v, batch["target"], scale),
                    "cosine": lambda: cosine_loss(u, v, batch["target"])}[objective]()
        n = count(batch)["n"]
        return loss * (n / totals["n"]), {"loss_sum": float(loss.detach()) * n}

    return loss_fn, count


# ---------------------------------------------------------------------------- the data
def training_features(objective: str, spec: TaskSpec, examples: list, vocabulary, max_seq_length: int,
                      source: str) -> list[Feature]:
    """The objective's training items as features: `input_ids` (the first text) and, for pair objectives,
    `pair_ids`, `pair_mask` (the second) and a float `target`.

    Raises:
        AlbertlmError: one line: no pairs, labels the objective cannot use, too few items.
    """
    if objective == "simcse":
        from albertlm.tasks.baselines import example_texts

        texts = list(dict.fromkeys(t for t in example_texts(examples) if t.strip()))
        ids = text_inputs(vocabulary, texts, max_seq_length)
        items = [Feature({"input_ids": row}, i) for i, row in enumerate(ids)]
    else:
        items = _pair_features(objective, pairs_of(spec, examples, source), vocabulary, max_seq_length, source)
    if len(items) < 2:
        raise AlbertlmError(f"{source}: {len(items)} training item(s) for --objective {objective}; in-batch and "
                            "pairwise losses need at least 2")
    return items


def _pair_features(objective: str, pairs: Pairs, vocabulary, max_seq_length: int, source: str) -> list[Feature]:
    if objective == "mnrl":
        keep = np.flatnonzero(pairs.positive)
        targets = np.ones(len(pairs))
    elif pairs.kind == "unlabelled":
        raise AlbertlmError(f"{source}: --objective {objective} needs labelled pairs (scores or alike labels); "
                            "use --objective mnrl or simcse on unlabelled pairs")
    else:
        keep, targets = np.arange(len(pairs)), pairs.scores
        if objective == "cosine":
            low, high = float(targets.min()), float(targets.max())
            if high == low:
                raise AlbertlmError(f"{source}: every training pair has the score {low}; cosine regression needs "
                                    "different scores")
            targets = (targets - low) / (high - low)
    a = text_inputs(vocabulary, [pairs.text_a[i] for i in keep], max_seq_length)
    b = text_inputs(vocabulary, [pairs.text_b[i] for i in keep], max_seq_length)
    return [Feature({"input_ids": x, "pair_ids": y, "pair_mask": np.ones(len(y), dtype=np.int64),
                     "target": np.float32(targets[i])}, int(i)) for x, y, i in zip(a, b, keep)]


# ---------------------------------------------------------------------------- the run
def check_recipe(recipe: FinetuneRecipe, settings: EmbeddingSettings) -> None:
    """Refuse, in one line, the recipe flags of the task's head (an embedding run trains none) and
    SimCSE without dropout."""
    head_only = [(flag, on) for flag, on in (
        ("--early-exit", recipe.early_exit), ("--mlm-weight", bool(recipe.mlm_weight)),
        ("--classifier-pooling", recipe.classifier_pooling != "cls"), ("--pooler-reinit", recipe.pooler_reinit),
        ("--classifier-dropout", recipe.classifier_dropout is not None)) if on]
    if head_only:
        raise AlbertlmError(f"{head_only[0][0]}: --objective {settings.objective} trains no task head; the flag "
                            "applies to --objective task")
    if settings.objective == "simcse" and recipe.dropout == 0:
        raise AlbertlmError("--objective simcse needs --dropout above 0: its positives are two dropout passes of "
                            "the same text (unset, it is 0.1)")


def embedder_config(base: AlbertConfig, recipe: FinetuneRecipe, settings: EmbeddingSettings, task: str
                    ) -> AlbertConfig:
    """The backbone's config: the recipe's dropout, no task-head entries, and the embedding record
    (pooling.EMBEDDING_KEY) that `albertlm embed` reads."""
    extra = {k: v for k, v in base.extra.items() if k not in ("finetuning_task", "albertlm_features")}
    extra[EMBEDDING_KEY] = {"pooling": settings.pooling, "objective": settings.objective, "task": task}
    config = base.replace(hidden_dropout_prob=recipe.dropout, attention_probs_dropout_prob=recipe.dropout,
                          extra=extra)
    return with_exit_heads(config, False)


def finetune_embedder(task: str | TaskSpec, model_dir: str | Path, data_dir: str | Path, out_dir: str | Path,
                      recipe: FinetuneRecipe | None = None, settings: EmbeddingSettings = EmbeddingSettings("mnrl"),
                      *, device: str | torch.device = "cpu", progress: bool = True) -> dict[str, Any]:
    """Train the backbone of `model_dir` for sentence vectors and keep the best dev checkpoint.

    Args:
        task: a task name or TaskSpec: pairs (sts-b, mrpc, qnli, lcqmc, ...), or any task for simcse
            (its dev split still needs pairs, to be scored).
        model_dir: any ALBERT directory albertlm reads.
        data_dir: the task's data directory (train and dev files).
        out_dir: the output directory (finetune's rules: new, empty or an earlier finetune output).
        recipe: the fine-tuning settings (unset fields: the task's defaults).
        settings: the objective, pooling and similarity scale (objective "task" is refused here).
        device, progress: the torch device; whether to show a progress bar.
    Returns:
        finetune's results (best dev metrics and step, ...), plus "embedding" (the settings) and
        "sentence_transformers" (the copy's path, or None with a reason in "sentence_transformers_note").
    Raises:
        AlbertlmError: one line for a refused flag, task or data.
    """
    device = resolve_device(device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        return _finetune_embedder(task, model_dir, data_dir, out_dir, recipe or FinetuneRecipe(), settings,
                                  device=device, progress=progress)


def _finetune_embedder(task, model_dir, data_dir, out_dir, recipe: FinetuneRecipe, settings: EmbeddingSettings, *,
                       device: torch.device, progress: bool) -> dict[str, Any]:
    """finetune_embedder()'s body, inside a fork of torch's global generator (it seeds it)."""
    spec = get_task(task) if isinstance(task, str) else task
    if settings.objective == "task":
        raise AlbertlmError("finetune_embedder trains an embedding objective; --objective task is train/finetune.py's")
    check_recipe(recipe, settings)
    if settings.objective == "simcse" and recipe.dropout is None:
        recipe = dataclasses.replace(recipe, dropout=SIMCSE_DROPOUT)
    out = OutputDir(out_dir, "finetune", FINETUNE_FILES + (ST_SUBDIR,), inputs={"--model": model_dir, "--data": data_dir})
    base = AlbertConfig.from_json_file(Path(model_dir) / "config.json")
    if recipe.max_seq_length is not None and recipe.max_seq_length > base.max_position_embeddings:
        raise AlbertlmError(f"--max-seq-length {recipe.max_seq_length}: the model at {model_dir} has only "
                            f"{base.max_position_embeddings} positions")
    tokenizer = load_tokenizer(model_dir)
    run, dev_pairs = prepare_run(spec, data_dir, recipe, settings, tokenizer, base)
    model = new_embedder(run, model_dir, base, settings, device)
    loss_fn, count_fn = embedding_objective(settings.objective, settings.similarity_scale,
                                            unpadded(run.recipe.unpad, model, device))
    scorer = embedding_scorer(run, dev_pairs, tokenizer, settings.pooling, device)
    with out.claim():
        _remove_earlier_copy(out.path / ST_SUBDIR)
        start_outputs(out.path, {"task": spec.name, "embedding": dataclasses.asdict(settings),
                                 **dataclasses.asdict(run.recipe)})
        results = train_task(run, model, tokenizer, out.path, loss_fn=loss_fn, count_fn=count_fn, device=device,
                             progress=progress, name=settings.objective, scorer=scorer,
                             record={"model_dir": str(model_dir), "embedding": dataclasses.asdict(settings)})
        results.update(sentence_transformers_copy(out.path, settings.pooling, run.settings.max_seq_length))
        results.update(score_map_stage(out.path, run, settings.pooling, device))
        atomic_write_text(out.path / "results.json", json.dumps(results, indent=2))
    return results


def new_embedder(run: TaskRun, model_dir: str | Path, base: AlbertConfig, settings: EmbeddingSettings,
                 device: torch.device) -> SentenceEmbedder:
    """The backbone of `model_dir` with the run's dropout and the settings' pooling, on `device` in train
    mode; torch's global generator (forked by the caller) seeded from the recipe, for the dropout draws
    (the backbone is loaded: nothing is drawn new)."""
    torch.manual_seed(run.recipe.seed)
    backbone = AlbertModel.from_pretrained(model_dir, config=embedder_config(base, run.recipe, settings, run.spec.name),
                                           add_pooling_layer=settings.pooling == "pooler")
    return SentenceEmbedder(backbone, settings.pooling).to(device).train()


def prepare_run(spec: TaskSpec, data_dir, recipe: FinetuneRecipe, settings: EmbeddingSettings, tokenizer,
                base: AlbertConfig) -> tuple[TaskRun, Pairs]:
    """Read the train and dev splits, make the training features and the dev pairs, resolve the recipe.

    Returns:
        (the TaskRun, whose train_f are the objective's features and dev_f empty; the dev pairs).
    """
    rng = np.random.default_rng(recipe.seed)
    train_ex, dev_ex = read_splits(spec, data_dir, recipe, rng)
    dev_pairs = pairs_of(spec, dev_ex, f"{data_dir} (dev)")  # refused before any tokenizing
    length = min(recipe.resolve(spec, 1).max_seq_length, base.max_position_embeddings)
    train_f = training_features(settings.objective, spec, train_ex, tokenizer, length, f"{data_dir} (train)")
    resolved = dataclasses.replace(recipe.resolve(spec, len(train_f)), max_seq_length=length)
    return TaskRun(spec, resolved, FeatureSettings(max_seq_length=length), None, train_ex, dev_ex, train_f, [],
                   rng), dev_pairs


def embedding_scorer(run: TaskRun, dev_pairs: Pairs, tokenizer, pooling: str, device: torch.device) -> DevScorer:
    """Dev scored by the pairs' metrics of the model's vectors (eval mode, then back to train mode); the
    best checkpoint is the backbone with its embedding record, and the tokenizer."""
    def score_dev(model: nn.Module) -> tuple[dict[str, float], None]:
        was = model.training
        model.eval()
        try:
            embedder = Embedder(model, tokenizer, run.settings.max_seq_length, lower_case=False, pooling=pooling,
                                normalize=False, device=device)
            metrics = embedding_metrics(embedder, dev_pairs, run.recipe.eval_batch_size)
        finally:
            model.train(was)
        return {k: v for k, v in metrics.items() if k not in NOT_FRACTIONS}, None

    def save(model: nn.Module, out_dir: Path, _: None) -> None:
        model.albert.save_pretrained(out_dir)
        tokenizer.save(out_dir)

    return DevScorer(dev_pairs.main_metric, score_dev, save)


def _remove_earlier_copy(path: Path) -> None:
    """An earlier run's sentence-transformers copy goes before training starts, so it never sits beside
    another run's model (checked first to be an albertlm export holding only its own files)."""
    from albertlm.st_directory import ST_FILES

    if path.is_dir() and not path.is_symlink():
        OutputDir(path, "export", ST_FILES, flag="--out")  # refuses a directory albertlm did not export
        shutil.rmtree(path)


def sentence_transformers_copy(out_dir: Path, pooling: str, max_seq_length: int) -> dict[str, Any]:
    """Write OUT/sentence-transformers from the best checkpoint where sentence-transformers can express it."""
    from albertlm.interop.hf import transformers_can_load
    from albertlm.st_directory import ST_POOLINGS, write_sentence_transformers

    config = AlbertConfig.from_json_file(out_dir / "config.json")
    if pooling not in ST_POOLINGS or not transformers_can_load(config):
        why = (f"pooling {pooling!r} has no sentence-transformers module" if pooling not in ST_POOLINGS
               else "transformers cannot express this network")
        return {"sentence_transformers": None, "sentence_transformers_note": why}
    written = write_sentence_transformers(out_dir, out_dir / ST_SUBDIR, max_seq_length=max_seq_length)
    return {"sentence_transformers": written["out_dir"]}


def score_map_stage(out_dir: Path, run: TaskRun, pooling: str, device: torch.device) -> dict[str, Any]:
    """For graded training pairs: fit the best checkpoint's score map (tasks/score_map.py) on its cosines of
    the training pairs, keep it in OUT/config.json, and score the dev pairs with it.

    Returns:
        {"score_map": {"pairs", "knots", "seconds", "dev": {"spearman", "pearson"}}}, or {"score_map": None,
        "score_map_note": why} where the scores do not rise with the cosine; {} for pairs that are not graded.
    """
    import time

    from albertlm.inference.embed import EmbedSettings, load_embedder
    from albertlm.inference.embed_eval import pair_cosines
    from albertlm.tasks.pairs import graded_scores
    from albertlm.tasks.score_map import SCORE_MAP_KEY, fit_score_map

    try:
        train = pairs_of(run.spec, run.train_ex, "train")
        dev = pairs_of(run.spec, run.dev_ex, "dev")
    except AlbertlmError:  # simcse on texts without pairs: nothing to fit
        return {}
    if train.kind != "graded" or dev.kind != "graded":
        return {}
    start = time.perf_counter()
    embedder = load_embedder(out_dir, EmbedSettings(pooling=pooling, max_seq_length=run.settings.max_seq_length,
                                                    batch_size=run.recipe.eval_batch_size, device=device.type,
                                                    progress=False))

    def cosines(pairs: Pairs) -> np.ndarray:
        return np.asarray(pair_cosines(embedder, list(zip(pairs.text_a, pairs.text_b)), run.recipe.eval_batch_size))

    fitted = fit_score_map(cosines(train), train.scores)
    if fitted is None:
        return {"score_map": None, "score_map_note": "the training scores do not rise with the cosine"}
    config_path = out_dir / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config[EMBEDDING_KEY][SCORE_MAP_KEY] = fitted.record()
    atomic_write_text(config_path, json.dumps(config, indent=2, sort_keys=True) + "\n")
    dev_scores = graded_scores(fitted(cosines(dev)), dev.scores)
    return {"score_map": {"pairs": fitted.pairs, "knots": len(fitted.cosine),
                          "seconds": round(time.perf_counter() - start, 3), "dev": dev_scores}}


def format_embedding(results: dict[str, Any]) -> str:
    """The line printed after the table of an embedding run: the pooling, where the sentence-transformers copy is."""
    copy = results["sentence_transformers"] or f"not written ({results['sentence_transformers_note']})"
    line = (f"{results['embedding']['pooling']} pooling, saved in config.json (albertlm embed reads it); "
            f"sentence-transformers copy: {copy}")
    fitted = results.get("score_map")
    if fitted:
        dev = fitted["dev"]
        line += (f"\nscore map (cosine -> the task's scores, isotonic on {fitted['pairs']:,} training pairs, "
                 f"{fitted['knots']} knots, in config.json): dev pearson {100 * dev['pearson']:.2f}, "
                 f"spearman {100 * dev['spearman']:.2f}")
    elif "score_map_note" in results:
        line += f"\nno score map: {results['score_map_note']}"
    return line
