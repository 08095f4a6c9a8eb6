"""`albertlm compress`: a pretrained, unshared model made small in the paper's shapes, then distilled.

    teacher (ALBERT with E = H and sharing none: an imported BERT, or a BERT directory imported here)
      -> factorized embedding at E (surgery.factorize_embeddings: LayerNorm-aware SVD on the corpus' tokens)
      -> G shared groups (surgery.share_layers: average / stepwise / random)
      -> FFN neurons pruned to --ffn-size (surgery.prune_ffn), if asked
      -> distillation on unlabelled text (objective.py) for --budget minutes or --steps steps
      -> OUT: a plain ALBERT directory (config.json, model.safetensors, the teacher's tokenizer, and
         the sentence-transformers modules when the teacher had them), plus compress.json (the
         record), metrics.jsonl, tensorboard/ and checkpoints/

The run is checkpointed every `checkpoint_every` steps (checkpoint.py: atomic, checksummed); the same
command on the same OUT resumes from the newest checkpoint, with the same plan of steps, the same
data position and the same random state, and ends with the same weights as an uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from albertlm.checkpoint import load_checkpoint, remove_stale_temporaries, resume_checkpoint, save_checkpoint
from albertlm.compress import surgery
from albertlm.compress.objective import Objective, distill_loss, hidden_states, pooled_cosine, squared_error
from albertlm.compress.surgery import ShareInit
from albertlm.compress.text import Text, batches_of, encode, examples, skip
from albertlm.config import AlbertConfig
from albertlm.data.corpus import Corpus
from albertlm.distributed import DistContext
from albertlm.errors import AlbertlmError
from albertlm.model import AlbertModel
from albertlm.outputs import MODEL_FILES, OutputDir
from albertlm.train.loop import Cadence, StepSettings, run_steps
from albertlm.train.metrics import MetricsLogger
from albertlm.utils import atomic_write_text, check_field_types

RECORD = "compress.json"
RECIPE = "recipe.json"
COMPRESS_FILES = MODEL_FILES + (RECORD, RECIPE, "metrics.jsonl", "tensorboard", "checkpoints", "teacher",
                                "modules.json", "config_sentence_transformers.json", "sentence_bert_config.json",
                                "1_Pooling", "2_Normalize")
"""What compress writes into OUT."""
RESERVE_SECONDS = 30.0
"""Of the budget, kept for the final evaluation and writing OUT."""


@dataclass(frozen=True)
class CompressRecipe:
    """The shape of the compressed model and how it is distilled."""

    embedding_size: int = 128
    """E of the factorized embedding (V x E + E x H); the teacher's hidden size keeps it unfactorized"""
    sharing: str = "all"
    """cross-layer sharing: all (one shared block), groups:N (N shared groups) or none"""
    init: ShareInit = "average"
    """how a shared group's block starts: average (the mean of the teacher's layers it replaces), stepwise (the
    first of them), random"""
    ffn_size: int | None = None
    """prune the FFN to this many neurons per block, the most active ones (none: keep the teacher's)"""
    objective: Objective = "pooled"
    """pooled (every layer's hidden states + the mean-pooled vectors' cosine), hidden (the hidden states alone),
    last (the last layer's hidden states)"""
    budget: float = 60.0
    """minutes of distillation (the plan of steps is fitted to it after timing the first steps)"""
    steps: int | None = None
    """distil for exactly this many steps instead of fitting them to --budget"""
    batch_size: int = 32
    """examples per step"""
    max_seq_length: int = 128
    """longest example in pieces, [CLS] and [SEP] included"""
    learning_rate: float = 1e-3
    """AdamW's peak learning rate (linear warmup, then linear decay to zero)"""
    warmup_fraction: float = 0.05
    """share of the steps spent warming up"""
    weight_decay: float = 0.01
    """AdamW's decoupled weight decay (not on biases and LayerNorms)"""
    pair_fraction: float = 0.5
    """share of examples that are two consecutive sentences as segments A and B"""
    sample_examples: int = 4096
    """examples whose tokens choose the embedding subspace and rank the FFN neurons"""
    heldout: int = 256
    """examples held out of training, on which the loss and the agreement are reported"""
    checkpoint_every: int = 100
    """steps between checkpoints (a killed run resumes from the last)"""
    seed: int = 0
    """seeds the examples' order and pairing, dropout and a random init"""

    def __post_init__(self) -> None:
        check_field_types(self)
        for name in ("embedding_size", "batch_size", "max_seq_length", "sample_examples", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise AlbertlmError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.max_seq_length < 4:
            raise AlbertlmError(f"--max-seq-length {self.max_seq_length} leaves no room for text")
        if self.steps is not None and self.steps < 1:
            raise AlbertlmError(f"--steps must be at least 1, got {self.steps}")
        if not self.budget > 0:
            raise AlbertlmError(f"--budget must be a positive number of minutes, got {self.budget}")
        for name in ("warmup_fraction", "pair_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise AlbertlmError(f"--{name.replace('_', '-')} must lie in [0, 1], got {getattr(self, name)}")
        if not self.learning_rate > 0 or self.weight_decay < 0:
            raise AlbertlmError("--learning-rate must be positive and --weight-decay non-negative")
        if self.heldout < 0:
            raise AlbertlmError(f"--heldout must be at least 0, got {self.heldout}")
        if self.ffn_size is not None and self.ffn_size < 1:
            raise AlbertlmError(f"--ffn-size must be at least 1, got {self.ffn_size}")


def lr_at(step: int, base: float, warmup: int, total: int) -> float:
    """Linear warmup over `warmup` steps, then linear decay to zero at `total`.

    Not `albertlm.optim.lr_at` (the official schedule, which pretraining and fine-tuning follow): that
    one's first update runs at lr 0 and its decay counts from step 0, under the warmup. Here the first
    update already learns and the decay spans the steps after the warmup; the measured recipes in
    docs/compress.md ran with this one."""
    if step < warmup:
        return base * (step + 1) / warmup
    return base * max(0.0, (total - step) / max(1, total - warmup))


# ---------------------------------------------------------------------------- the pieces
def build_student(teacher: AlbertModel, recipe: CompressRecipe, sample: list[dict[str, torch.Tensor]]) -> AlbertModel:
    """The compressed network before distillation: factorized, shared, pruned (surgery.py)."""
    model = teacher
    if recipe.embedding_size != teacher.config.hidden_size:
        model = surgery.factorize_embeddings(model, recipe.embedding_size, surgery.embedding_sums(model, sample))
    sharing, groups = surgery.parse_sharing(recipe.sharing, teacher.config.num_hidden_layers)
    if sharing == "all":
        model = surgery.share_layers(model, groups, recipe.init,
                                     torch.Generator().manual_seed(recipe.seed))
    if recipe.ffn_size is not None:
        model = surgery.prune_ffn(model, recipe.ffn_size, surgery.ffn_importance(model, sample))
    if model is teacher:
        raise AlbertlmError("nothing to compress: --embedding-size is the hidden size, --sharing none and no --ffn-size")
    return model


@torch.no_grad()
def evaluate(student: AlbertModel, teacher: AlbertModel, batches: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    """Held-out agreement: the mean squared error of the hidden states (every layer application, per entry)
    and the mean cosine between the two models' mean-pooled sentence vectors."""
    was_training = student.training
    student.eval()
    se = cos = tokens = sentences = 0.0
    for batch in batches:
        s, t = hidden_states(student, batch), hidden_states(teacher, batch)
        keep = batch["attention_mask"].bool()
        se += float(squared_error(s, t, keep))
        tokens += float(keep.sum())
        cos += float(pooled_cosine(s[-1], t[-1], batch["attention_mask"]).sum())
        sentences += batch["input_ids"].shape[0]
    student.train(was_training)
    return {"hidden_mse": se / max(tokens, 1.0), "pooled_cosine": cos / max(sentences, 1.0)}


def _optimizer(model: AlbertModel, recipe: CompressRecipe) -> torch.optim.Optimizer:
    decay = [p for n, p in model.named_parameters() if p.dim() > 1]
    rest = [p for n, p in model.named_parameters() if p.dim() <= 1]
    return torch.optim.AdamW([{"params": decay, "weight_decay": recipe.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=recipe.learning_rate)


def _time_step(student: AlbertModel, teacher: AlbertModel, batch: dict[str, torch.Tensor], recipe: CompressRecipe,
               repeats: int = 2) -> float:
    """Seconds of one training step's forward and backward (no update: the weights stay as they are)."""
    loss_fn, count_fn = distill_loss(recipe.objective, teacher)
    totals = count_fn(batch)
    loss_fn(student, batch, totals)[0].backward()  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        loss_fn(student, batch, totals)[0].backward()
    student.zero_grad(set_to_none=True)
    return (time.perf_counter() - start) / repeats * 1.05  # the optimizer's share


# ---------------------------------------------------------------------------- the run
def compress(teacher: AlbertModel, vocabulary, corpus: Corpus, out: OutputDir, recipe: CompressRecipe, *,
             source: dict[str, Any], write_extras=None, device: torch.device = torch.device("cpu"),
             progress: bool = True, stop_after: int | None = None, notice=print) -> dict[str, Any]:
    """Build, distil and write the compressed model into `out` (claimed here); resumes a killed run.

    Args:
        teacher: the teacher backbone (E == H, sharing none), in eval mode.
        vocabulary: its tokenizer.
        corpus: the unlabelled text.
        out: the output directory (OutputDir for "compress").
        recipe: the compressed shape and the distillation settings.
        source: what the record says of the teacher (path, kind, parameters).
        write_extras: called with the student's config and OUT's path after the model is written (the
            tokenizer, the sentence-transformers modules).
        progress: show a progress bar.
        stop_after: stop after this many steps without writing the model (tests: a killed run).
        device: where both models run.
        notice: where one-line notices go.
    Returns:
        The record written to OUT/compress.json.
    """
    with torch.random.fork_rng(devices=[]):  # dropout draws from the global generator: the caller's is left as it was
        torch.manual_seed(recipe.seed)
        return _compress(teacher, vocabulary, corpus, out, recipe, source, write_extras, device, progress, stop_after,
                         notice)


def _compress(teacher, vocabulary, corpus: Corpus, out: OutputDir, recipe: CompressRecipe, source: dict[str, Any],
              write_extras, device: torch.device, progress: bool, stop_after: int | None, notice) -> dict[str, Any]:
    started = time.monotonic()
    if recipe.max_seq_length > teacher.config.max_position_embeddings:  # no longer than the model's positions
        recipe = dataclasses.replace(recipe, max_seq_length=teacher.config.max_position_embeddings)
    recipe_json = {"recipe": dataclasses.asdict(recipe), "corpus": [s.text for s in corpus.specs], "teacher": source}
    with out.claim():
        path = out.path
        remove_stale_temporaries(path)
        saved = path / RECIPE
        if saved.is_file():
            if json.loads(saved.read_text()) != json.loads(json.dumps(recipe_json)):
                raise AlbertlmError(f"{saved}: OUT holds a compress run of another recipe, corpus or teacher; "
                                    "choose another --out (or remove it) to start afresh")
        else:
            atomic_write_text(saved, json.dumps(recipe_json, indent=2, sort_keys=True) + "\n")
        held, stream = examples(corpus, recipe.seed, recipe.pair_fraction, recipe.heldout)
        held_batches = [_to(b, device) for b in batches_of(vocabulary, held, recipe.batch_size, recipe.max_seq_length)]
        teacher.to(device).eval()
        ckpt = resume_checkpoint(path, notice=notice)
        if ckpt is not None:
            student = AlbertModel(AlbertConfig.from_json_file(ckpt / "config.json"),
                                  add_pooling_layer=teacher.pooler is not None)
            student.to(device)
            optimizer = _optimizer(student, recipe)  # on the device, before its state is loaded
            state = load_checkpoint(ckpt, student, optimizer)
            start, plan, consumed, elapsed = state["step"], state["planned_steps"], state["examples"], state["elapsed"]
            initial = state["initial"]
            skip(stream, consumed)
            notice(f"resuming from {ckpt.name} (step {start} of {plan})")
        else:
            sample_texts = [t for _, t in zip(range(recipe.sample_examples), stream)]
            _, stream = examples(corpus, recipe.seed, recipe.pair_fraction, recipe.heldout)  # the stream from its start
            sample = [_to(b, device) for b in batches_of(vocabulary, sample_texts, recipe.batch_size,
                                                         recipe.max_seq_length)]
            student = build_student(teacher, recipe, sample).to(device)
            ids = vocabulary.special_ids  # config.json's pad/bos/eos: the tokenizer's [PAD], [CLS], [SEP]
            student.config = student.config.replace(pad_token_id=ids.pad, bos_token_id=ids.cls, eos_token_id=ids.sep)
            if student.config.num_layer_calls != teacher.config.num_layer_calls:
                raise AlbertlmError("the student and the teacher must run the same number of layers")
            optimizer = _optimizer(student, recipe)
            initial = evaluate(student, teacher, held_batches) if held_batches else {}
            start, consumed, elapsed = 0, 0, 0.0
            if recipe.steps is not None:
                plan = recipe.steps
            else:
                probe = _to(encode(vocabulary, sample_texts[: recipe.batch_size], recipe.max_seq_length), device)
                seconds = _time_step(student.train(), teacher, probe, recipe)
                left = recipe.budget * 60.0 - (time.monotonic() - started) - RESERVE_SECONDS
                plan = max(1, int(left / seconds))
                notice(f"compress: {seconds:.2f} s a step; {plan} steps fit the {recipe.budget:g}-minute budget")
        return _train(student, teacher, vocabulary, stream, held_batches, optimizer, path, recipe, start, plan,
                      consumed, elapsed, initial, source, write_extras, device, progress, stop_after)


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in batch.items()}


def _train(student, teacher, vocabulary, stream, held_batches, optimizer, path: Path, recipe: CompressRecipe,
           start: int, plan: int, consumed: int, elapsed: float, initial: dict, source: dict,
           write_extras, device: torch.device, progress: bool, stop_after: int | None) -> dict[str, Any]:
    loss_fn, count_fn = distill_loss(recipe.objective, teacher)
    warmup = max(1, int(recipe.warmup_fraction * plan))
    logger = MetricsLogger(path)
    position = {"examples": consumed}
    session_start = time.monotonic()
    deadline = None if recipe.steps is not None else recipe.budget * 60.0 - RESERVE_SECONDS

    def batches(step: int):
        texts: list[Text] = [t for _, t in zip(range(recipe.batch_size), stream)]
        position["examples"] += len(texts)
        return [_to(encode(vocabulary, texts, recipe.max_seq_length), device)]

    def spent() -> float:
        return elapsed + time.monotonic() - session_start

    def on_log(step: int, m: dict, lr: float, due: bool):
        mse = m["hidden_se"] / max(m["n_tokens"], 1.0)
        if due:
            logger.log(step, "train", {"loss": m["loss"], "hidden_mse": mse, "lr": lr, "grad_norm": m["grad_norm"]})
        return {"loss": f"{m['loss']:.4f}"}

    def on_eval(step: int) -> bool:
        if held_batches:
            logger.log(step, "heldout", evaluate(student, teacher, held_batches))
        return False

    def on_checkpoint(step: int) -> None:
        save_checkpoint(path, step, student, optimizer, {"examples": position["examples"], "elapsed": spent(),
                                                        "planned_steps": plan, "initial": initial}, keep_last=1)

    student.train()
    cadence = Cadence(steps=plan, log_every=10, eval_every=max(recipe.checkpoint_every, plan // 10 or 1),
                      checkpoint_every=recipe.checkpoint_every)
    done = run_steps(student, optimizer, start=start, cadence=cadence, batches=batches,
                     lr=lambda s: lr_at(s, recipe.learning_rate, warmup, plan), loss_fn=loss_fn, count_fn=count_fn,
                     ctx=DistContext(device=device), settings=StepSettings(), on_log=on_log, on_eval=on_eval,
                     on_checkpoint=on_checkpoint, progress="compress" if progress else None, stop_after=stop_after,
                     time_up=(lambda s: spent() >= deadline) if deadline is not None else None)
    if stop_after is not None and done < plan:
        return {"stopped_at": done}
    if done % recipe.checkpoint_every and done < plan:  # the budget ran out between checkpoints
        on_checkpoint(done)
    student.eval()
    final = evaluate(student, teacher, held_batches) if held_batches else {}
    student.cpu().save_pretrained(path)
    if write_extras is not None:
        write_extras(student.config, path)
    record = {
        "teacher": source, "recipe": dataclasses.asdict(recipe),
        "student": {"parameters": student.num_parameters(), "config": describe(student.config)},
        "teacher_parameters": teacher.num_parameters(),
        "steps": done, "planned_steps": plan, "examples": position["examples"],
        "minutes": round(spent() / 60.0, 2),
        "heldout": {"before": initial, "after": final},
    }
    atomic_write_text(path / RECORD, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


def describe(config: AlbertConfig) -> str:
    """One line naming a backbone's shape."""
    groups = f"{config.num_hidden_groups} shared group(s)" if config.sharing == "all" else f"sharing {config.sharing}"
    return (f"L={config.num_hidden_layers} H={config.hidden_size} E={config.embedding_size} "
            f"I={config.intermediate_size} heads={config.num_attention_heads} V={config.vocab_size}, {groups}")


def ratio(teacher: int, student: int) -> str:
    """"3.82x fewer"."""
    return f"{teacher / student:.2f}x fewer" if student else "n/a"


