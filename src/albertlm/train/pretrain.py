"""The pretraining recipe: MLM + SOP (paper §4.1) with LAMB, on any corpus, resumable, data-parallel.

`pretrain(recipe, run_dir, ctx)` does everything the `albertlm pretrain` command promises:
tokenizer (trained unless the run already has one), data shards (built unless present),
model, optimizer, the step loop with evaluation, logging and checkpoints, and a final model
directory that transformers' AlbertForPreTraining.from_pretrained loads. The token objective is
MLM (`MaskedLM`) or, with token_objective "rtd", ELECTRA's replaced-token detection
(train/rtd.py), whose final directory is the discriminator as an AlbertModel.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from albertlm.checkpoint import (load_checkpoint, read_optimizer_state,
                                 remove_stale_temporaries, resume_checkpoint, save_checkpoint, unwrap)
from albertlm.config import get_preset
from albertlm.data.loader import PretrainingDataset, collate
from albertlm.distributed import (DistContext, all_reduce_sum, apply_activation_checkpointing, barrier,
                                  gather_full_state, gradient_bytes, load_optimizer_state, maybe_compile,
                                  wrap_data_parallel)
from albertlm.errors import AlbertlmError
from albertlm.model import AlbertForPreTraining
from albertlm.optim import build_optimizer, lr_at
from albertlm.rundir import RunLock, claim_run_dir, clear_run
from albertlm.train.loop import Cadence, StepSettings, make_scaler, resolve_precision, run_steps
from albertlm.train.metrics import MetricsLogger
from albertlm.train.mlm_eval import TokenBaselines, evaluate, mask_accuracy_sums
from albertlm.train.rtd import RTDObjective
from albertlm.utils import atomic_write_text, crash_point
# the recipe and the stages live in their own modules; importing them from here keeps working
from albertlm.train.pretrain_recipe import RECIPES, PretrainRecipe, flat_settings  # noqa: F401
from albertlm.train.stages import read_json_object, check_stages, curriculum_dir, prepare_data  # noqa: F401
from albertlm.vocab import IGNORE_INDEX, MASK_ID


HELDOUT_MASKED_LM_PROB = 0.15  # the paper's rate: every run is scored on the same task


# ---------------------------------------------------------------------------- losses
def _counts(batch: dict[str, torch.Tensor]) -> dict[str, float]:
    return {"masked": float((batch["labels"] != IGNORE_INDEX).sum()), "examples": float(len(batch["labels"]))}


def _loss(model: nn.Module, batch: dict[str, torch.Tensor], totals: dict[str, float], mask_id: int = MASK_ID):
    """MLM + SOP loss of a micro-batch, each normalised by its global target count (`mask_id`: the
    vocabulary's [MASK], for the accuracy at [MASK] positions)."""
    out = model(**batch)
    n_masked, n_examples = _counts(batch).values()
    mlm = out.mlm_loss * (n_masked / max(totals["masked"], 1.0))
    sop = out.sop_loss * (n_examples / totals["examples"])
    with torch.no_grad():
        mlm_correct, mask_count = mask_accuracy_sums(out, batch, mask_id)  # at [MASK]: the headline
        sop_correct = float((out.sop_logits.argmax(-1) == batch["sentence_order_label"]).sum())
    metrics = {"mlm_loss_sum": float(out.mlm_loss.detach()) * n_masked, "sop_loss_sum": float(out.sop_loss.detach()) * n_examples,
               "mlm_mask_correct": mlm_correct, "mlm_mask_count": mask_count, "sop_correct": sop_correct}
    return mlm + sop, metrics


class MaskedLM:
    """ALBERT's own token objective: MLM + the sentence objective on one AlbertForPreTraining.

    The run's hooks ask the token objective for the model, the step loss, the log's extra entries,
    held-out scoring and the exported directory; train/rtd.py's RTDObjective is the other one.
    """

    name = "mlm"
    best_metric: str | None = "mlm_mask_accuracy"
    """The held-out score that picks the best checkpoint."""

    def __init__(self, mask_id: int = MASK_ID):
        self.mask_id = mask_id

    @staticmethod
    def build(config) -> AlbertForPreTraining:
        return AlbertForPreTraining(config)

    @staticmethod
    def prepare(micro_batches: list[dict[str, torch.Tensor]], index: int, rank: int, world_size: int
                ) -> list[dict[str, torch.Tensor]]:
        return micro_batches

    counts = staticmethod(_counts)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor], totals: dict[str, float]):
        return _loss(model, batch, totals, self.mask_id)

    @staticmethod
    def train_metrics(m: dict[str, Any]) -> dict[str, float]:
        return {}

    @staticmethod
    def evaluate(model: nn.Module, heldout: PretrainingDataset, ctx: DistContext, max_examples: int,
                 baselines: TokenBaselines) -> dict[str, float]:
        return evaluate(model, heldout, ctx, max_examples=max_examples, baselines=baselines)

    @staticmethod
    def setup_record(model: nn.Module) -> dict[str, float]:
        return {}

    @staticmethod
    def save_model(model: nn.Module, path: Path, state_dict: dict | None) -> None:
        model.save_pretrained(path, state_dict=state_dict)


def token_objective(recipe: PretrainRecipe, mask_id: int = MASK_ID) -> MaskedLM | RTDObjective:
    """The recipe's token objective (`mask_id`: the vocabulary's [MASK])."""
    if recipe.token_objective == "rtd":
        return RTDObjective(recipe.seed, recipe.generator_size, recipe.rtd_weight, mask_id)
    return MaskedLM(mask_id)


# ---------------------------------------------------------------------------- the run
def pretrain(recipe: PretrainRecipe, run_dir: str | Path, ctx: DistContext | None = None,
             resume: bool = False, progress: bool = True, stop_after: int | None = None,
             restart: bool = False) -> dict[str, Any]:
    """Run (or resume) a pretraining run in `run_dir`.

    Args:
        recipe: the run's settings.
        run_dir: everything is written below it: tokenizer/, data/, checkpoints/, metrics.jsonl,
            tensorboard/, and the final model/ directory.
        ctx: data-parallel context (single process on CPU by default).
        resume: continue from the latest checkpoint (the recipe must match the saved one).
        progress: show a progress bar on the main rank.
        stop_after: stop (without the final save) once this many steps are done in this call;
            used by tests to simulate an interrupted run.
        restart: first delete what an earlier run left in run_dir (only a directory albertlm
            marked as a run: rundir.clear_run).
    Returns:
        A summary: final held-out metrics with baselines, steps, wall time, tokens/s.

    The main process holds run_dir's lock (rundir.RunLock) for the whole run: a second run of the
    same directory fails at once. The metrics log is cut to the step the run starts from.
    """
    ctx = ctx or DistContext()
    run_dir = Path(run_dir)
    # the run seeds torch's global generator (initialisation, dropout) inside a fork: the caller's
    # own random state is the same afterwards
    with torch.random.fork_rng(devices=[ctx.device] if ctx.device.type == "cuda" else []):
        if not ctx.is_main:
            barrier(ctx)  # the main process locks, claims and clears the directory first
            return _pretrain(recipe, run_dir, ctx, resume, progress, stop_after)
        with RunLock(run_dir):
            claim_run_dir(run_dir)
            if restart:
                clear_run(run_dir)
            for path in remove_stale_temporaries(run_dir):
                print(f"removed {path}, left by an interrupted save", flush=True)
            barrier(ctx)
            return _pretrain(recipe, run_dir, ctx, resume, progress, stop_after)


def _record_recipe(recipe: PretrainRecipe, run_dir: Path, ctx: DistContext, resume: bool) -> None:
    """Refuse to resume under other settings (saved vs new values and the fix); else write recipe.json."""
    recipe_path = run_dir / "recipe.json"
    if resume and recipe_path.exists():
        saved, now = flat_settings(read_json_object(recipe_path)), flat_settings(dataclasses.asdict(recipe))
        diffs = [f"{k}: saved {saved[k]!r}, now {now[k]!r}" for k in sorted(set(saved) & set(now)) if saved[k] != now[k]]
        if diffs:
            raise AlbertlmError(f"{recipe_path}: this run was started with other settings ({'; '.join(diffs)}); "
                                "pass --restart to start over with the new settings, or choose another --name")
    elif ctx.is_main:
        atomic_write_text(recipe_path, json.dumps(dataclasses.asdict(recipe), indent=2))


def _datasets(recipe: PretrainRecipe, run_dir: Path, data_dir: Path, ctx: DistContext
              ) -> tuple[PretrainingDataset, PretrainingDataset | None, PretrainingDataset]:
    """(this rank's training split, its curriculum split or None, the held-out split)."""
    def training_split(directory: Path) -> PretrainingDataset:
        return PretrainingDataset(directory, "train", ctx.rank, ctx.world_size, seed=recipe.seed,
                                  max_predictions=recipe.build.max_predictions,
                                  masked_lm_prob=recipe.build.masked_lm_prob, max_ngram=recipe.build.max_ngram)

    short_dir = curriculum_dir(run_dir, recipe)
    heldout = PretrainingDataset(data_dir, "heldout", seed=recipe.seed, shuffle=False,
                                 max_predictions=recipe.build.max_predictions, masked_lm_prob=HELDOUT_MASKED_LM_PROB)
    return training_split(data_dir), training_split(short_dir) if short_dir is not None else None, heldout


def _build_model(recipe: PretrainRecipe, vocab_size: int, ctx: DistContext, objective: MaskedLM | RTDObjective
                 ) -> nn.Module:
    """The recipe's model (`objective.build`), initialised from its seed (the same weights on every
    rank); then each rank's own dropout stream."""
    overrides: dict[str, Any] = {"vocab_size": vocab_size, "max_position_embeddings": max(recipe.build.max_seq_length, 512)}
    if recipe.sharing:
        overrides["sharing"] = recipe.sharing
    if recipe.embedding_size:
        overrides["embedding_size"] = recipe.embedding_size
    if recipe.dropout is not None:
        overrides.update(hidden_dropout_prob=recipe.dropout, attention_probs_dropout_prob=recipe.dropout)
    torch.manual_seed(recipe.seed)
    model = objective.build(get_preset(recipe.preset, **overrides))
    model.init_embeddings(recipe.position_init, recipe.token_type_init, recipe.projection_init)
    if ctx.distributed:
        torch.manual_seed(recipe.seed * 1_000_003 + ctx.rank + 1)
    return model


def _pretrain(recipe: PretrainRecipe, run_dir: Path, ctx: DistContext, resume: bool, progress: bool,
              stop_after: int | None) -> dict[str, Any]:
    """pretrain()'s body, once the run directory is locked: prepare, restore, train, export."""
    _record_recipe(recipe, run_dir, ctx, resume)
    tok_dir, data_dir = prepare_data(recipe, run_dir, ctx, progress)
    train_data, short_data, heldout = _datasets(recipe, run_dir, data_dir, ctx)
    baselines = TokenBaselines.from_shards(data_dir, train_data.vocab_size, special=train_data.special_ids)
    objective = token_objective(recipe, train_data.special_ids.mask)
    model = _build_model(recipe, train_data.vocab_size, ctx, objective)
    step, tokens_seen, elapsed_before = 0, 0, 0.0
    ckpt = resume_checkpoint(run_dir, notice=_notice(ctx)) if resume else None
    if ckpt is not None:  # weights go into the plain model, before any wrapper shards them
        state = load_checkpoint(ckpt, model, rank=ctx.rank)
        for dataset, key in ((train_data, "data"), (short_data, "data_curriculum")):
            if dataset is not None:
                saved = state[key]
                dataset.load_state_dict(saved[ctx.rank] if isinstance(saved, list) else saved)
        step, tokens_seen, elapsed_before = state["step"], state["tokens_seen"], state.get("elapsed", 0.0)
        if ctx.is_main:
            print(f"resuming the run in {run_dir} from {ckpt.name} (pass --restart to start over)", flush=True)
    if ctx.is_main:  # records after the starting step belong to an interrupted attempt
        _truncate_metrics(run_dir / "metrics.jsonl", step)
    model = model.to(ctx.device)
    if recipe.activation_checkpointing:
        apply_activation_checkpointing(model)
    model = wrap_data_parallel(maybe_compile(model, recipe.compile), ctx, recipe.data_parallel)
    optimizer = build_optimizer(recipe.optimizer, unwrap(model), lr=recipe.peak_lr, weight_decay=recipe.weight_decay)
    if ckpt is not None:
        load_optimizer_state(model, optimizer, read_optimizer_state(ckpt), ctx, recipe.data_parallel)
    precision = resolve_precision(recipe.precision, ctx.device)
    settings = StepSettings(precision=precision, clip_norm=recipe.clip_norm, on_nonfinite=recipe.on_nonfinite)
    scaler = make_scaler(settings, ctx.device)
    step, tokens_seen, eval_metrics, start = _train_steps(
        recipe, run_dir, ctx, model, optimizer, settings, scaler, (train_data, short_data, heldout), baselines,
        step, tokens_seen, elapsed_before, progress, stop_after, objective)
    if step == recipe.steps and not eval_metrics:  # resumed a finished run: report it again
        eval_metrics = objective.evaluate(model, heldout, ctx, recipe.eval_examples, baselines)
    wall = elapsed_before + time.perf_counter() - start
    summary = {"steps": step, "tokens_seen": tokens_seen, "train_seconds": wall,
               "tokens_per_s": tokens_seen / max(wall, 1e-9), "parameters": unwrap(model).num_parameters(),
               "eval": eval_metrics, "run_dir": str(run_dir)}
    if objective.name != "mlm":  # an MLM run's summary keeps its keys: the report reads it as a typed record
        summary["token_objective"] = objective.name
    final_sd = gather_full_state(model, optimizer, ctx, recipe.data_parallel)[0] if step == recipe.steps else None
    if step == recipe.steps and ctx.is_main:
        final_dir = run_dir / "model"
        objective.save_model(unwrap(model), final_dir, final_sd)
        crash_point("model:saved")
        for f in tok_dir.iterdir():  # spiece.model or vocab.txt, tokenizer_config.json: a self-contained dir
            if f.is_file():
                shutil.copy2(f, final_dir / f.name)
        summary["model_dir"] = str(final_dir)
        atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=2))
    return summary


class _RunHooks:
    """What the shared step loop calls back into during pretraining: the batches of each step (the
    curriculum's short examples first), the training log, held-out evaluation and checkpoints, with
    the state they share (tokens seen, the throughput window, the last held-out metrics)."""

    def __init__(self, recipe: PretrainRecipe, run_dir: Path, ctx: DistContext, model: nn.Module,
                 optimizer: torch.optim.Optimizer, datasets: tuple, baselines, tokens_seen: int, elapsed_before: float,
                 objective: MaskedLM | RTDObjective):
        self.recipe, self.run_dir, self.ctx, self.model, self.optimizer = recipe, run_dir, ctx, model, optimizer
        self.objective = objective
        self.train_data, self.short_data, self.heldout = datasets
        self.baselines, self.elapsed_before = baselines, elapsed_before
        self.micro, self.accum = recipe.per_device_batch(ctx.world_size)
        self.short_micro = recipe.per_device_batch(ctx.world_size, curriculum=True)[0]
        self.special = self.train_data.special_ids
        self.it = iter(self.train_data)
        self.short_it = iter(self.short_data) if self.short_data is not None else None
        self.logger = MetricsLogger(run_dir, enabled=ctx.is_main)
        self.cadence = Cadence(recipe.steps, recipe.log_every, recipe.eval_every, recipe.checkpoint_every)
        self.start = time.perf_counter()
        self.tokens_seen, self.step_tokens = tokens_seen, 0
        self.window_tokens, self.window_start = 0, time.perf_counter()
        self.eval_metrics: dict[str, float] = {}

    def log_setup(self, step: int, precision: str) -> None:
        model, ctx = unwrap(self.model), self.ctx
        self.logger.log(step, "setup", {"parameters": model.num_parameters(), "allreduce_bytes_per_step":
                                        gradient_bytes(model) if ctx.distributed else 0, "world_size": ctx.world_size,
                                        "micro_batch": self.micro, "accumulation": self.accum,
                                        "peak_lr": self.recipe.peak_lr, "precision": precision,
                                        **self.objective.setup_record(model)})

    def batches(self, index: int) -> list[dict[str, torch.Tensor]]:
        if self.short_it is not None and index < self.recipe.curriculum_steps:  # the short-example phase
            micro_batches = [collate([next(self.short_it) for _ in range(self.short_micro)], special=self.special)
                             for _ in range(self.accum)]
        else:
            micro_batches = [collate([next(self.it) for _ in range(self.micro)], special=self.special)
                             for _ in range(self.accum)]
        self.step_tokens = sum(int(b["attention_mask"].sum()) for b in micro_batches)
        moved = [{k: v.to(self.ctx.device) for k, v in b.items()} for b in micro_batches]
        return self.objective.prepare(moved, index, self.ctx.rank, self.ctx.world_size)

    def on_log(self, done: int, m: dict[str, Any], lr: float, logged: bool) -> dict[str, str] | None:
        step_tokens = int(all_reduce_sum(torch.tensor([self.step_tokens], device=self.ctx.device), self.ctx)[0])
        self.tokens_seen += step_tokens
        self.window_tokens += step_tokens
        if m["skipped"] and self.ctx.is_main:
            print(f"step {done}: non-finite loss or gradient; the step was skipped", flush=True)
        if not logged:
            return None
        now = time.perf_counter()
        tps = self.window_tokens / max(now - self.window_start, 1e-9)
        self.window_tokens, self.window_start = 0, now
        train = {"loss": m["loss"], "mlm_loss": m["mlm_loss_sum"] / max(m["n_masked"], 1),
                 "sop_loss": m["sop_loss_sum"] / m["n_examples"],
                 "mlm_mask_accuracy": m["mlm_mask_correct"] / max(m["mlm_mask_count"], 1),
                 "sop_accuracy": m["sop_correct"] / m["n_examples"], "lr": lr, "grad_norm": m["grad_norm"],
                 "tokens_per_s": tps, "tokens_seen": self.tokens_seen, "skipped": m["skipped"],
                 **self.objective.train_metrics(m)}
        self.logger.log(done, "train", train)
        return {"loss": f"{m['loss']:.3f}", "mask_acc": f"{train['mlm_mask_accuracy']:.3f}", "tok_s": f"{tps:,.0f}"}

    def on_eval(self, done: int) -> bool:
        self.eval_metrics = self.objective.evaluate(self.model, self.heldout, self.ctx, self.recipe.eval_examples,
                                                    self.baselines)
        self.logger.log(done, "eval", self.eval_metrics)
        if not math.isfinite(self.eval_metrics.get("mlm_all_loss", 0.0)):
            raise AlbertlmError(f"step {done}: the held-out loss is not finite (the model diverged); nothing "
                                "from this step on was saved as a result; lower the learning rate")
        return False

    def on_checkpoint(self, done: int) -> None:
        recipe, ctx = self.recipe, self.ctx
        model_sd, optim_sd = gather_full_state(self.model, self.optimizer, ctx, recipe.data_parallel)  # all ranks
        data_state = _gather_cursors(self.train_data, ctx)
        rng_states = _gather_rng(ctx)
        short_state = _gather_cursors(self.short_data, ctx) if self.short_data is not None else None
        if ctx.is_main:
            state = {"data": data_state, "tokens_seen": self.tokens_seen,
                     **({"data_curriculum": short_state} if self.short_data is not None else {}),
                     "elapsed": self.elapsed_before + time.perf_counter() - self.start}
            best = self.objective.best_metric
            scored = best is not None and self.cadence.due(done, recipe.eval_every)
            save_checkpoint(self.run_dir, done, self.model, self.optimizer, state, keep_last=recipe.keep_last,
                            metric=self.eval_metrics.get(best) if scored else None,
                            model_state=model_sd, optimizer_state=optim_sd, rng_states=rng_states)
        barrier(ctx)


def _train_steps(recipe: PretrainRecipe, run_dir: Path, ctx: DistContext, model: nn.Module,
                 optimizer: torch.optim.Optimizer, settings: StepSettings, scaler, datasets: tuple, baselines,
                 step: int, tokens_seen: int, elapsed_before: float, progress: bool, stop_after: int | None,
                 objective: MaskedLM | RTDObjective) -> tuple[int, int, dict[str, float], float]:
    """Train from `step` to the recipe's end (or `stop_after` steps) with logging, held-out evaluation
    and checkpoints. Returns (steps done, tokens seen, the last held-out metrics, the start time)."""
    hooks = _RunHooks(recipe, run_dir, ctx, model, optimizer, datasets, baselines, tokens_seen, elapsed_before,
                      objective)
    hooks.log_setup(step, settings.precision)
    model.train()
    step = run_steps(model, optimizer, start=step, cadence=hooks.cadence, batches=hooks.batches,
                     lr=lambda index: lr_at(index, recipe.peak_lr, recipe.warmup_steps, recipe.steps),
                     loss_fn=objective.loss, count_fn=objective.counts, ctx=ctx,
                     settings=settings, scaler=scaler, on_log=hooks.on_log, on_eval=hooks.on_eval,
                     on_checkpoint=hooks.on_checkpoint, progress="pretrain" if progress and ctx.is_main else None,
                     stop_after=stop_after)
    hooks.logger.close()
    return step, hooks.tokens_seen, hooks.eval_metrics, hooks.start


def _notice(ctx: DistContext):
    def notice(message: str) -> None:
        if ctx.is_main:
            print(message, flush=True)
    return notice


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop records written after the step a run starts from (an interrupted attempt's last steps;
    everything when it starts from 0). The start writes its own setup record."""
    if not path.exists():
        return
    from albertlm.train.metrics import read_metrics

    kept = [r for r in read_metrics(path)
            if r.get("step", 0) < step or (r.get("step", 0) == step and r.get("split") != "setup")]
    atomic_write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))


def _gather_cursors(dataset: PretrainingDataset, ctx: DistContext) -> Any:
    """Every rank's data cursor, as a list indexed by rank (a dict in a single process)."""
    if not ctx.distributed:
        return dataset.state_dict()
    from albertlm.distributed import all_gather_object

    return all_gather_object(dataset.state_dict(), ctx)


def _gather_rng(ctx: DistContext) -> list[dict[str, Any]]:
    """Every rank's torch RNG state, indexed by rank (dropout differs per rank)."""
    from albertlm.checkpoint import rng_state
    from albertlm.distributed import all_gather_object

    return all_gather_object(rng_state(), ctx)  # [this process's state] without torchrun


def format_summary(summary: dict[str, Any], sentence_objective: str = "sop") -> str:
    """The end-of-run report: held-out accuracies beside their baselines (`sentence_objective`: the recipe's
    sop, nsp or none; none has no sentence accuracy to report)."""
    e = summary.get("eval", {})
    rtd = summary.get("token_objective") == "rtd"
    lines = [f"steps {summary['steps']}, {summary['tokens_seen']:,} tokens in {summary['train_seconds'] / 60:.1f} min "
             f"({summary['tokens_per_s']:,.0f} tokens/s), {summary['parameters']:,} parameters"
             + (" (generator included)" if rtd else "")]
    if e and rtd:
        lines.append(f"held-out replaced-token detection: accuracy {e['rtd_accuracy']:.1%} (all \"original\" "
                     f"{e['baseline_rtd_accuracy']:.1%}), replaced tokens found {e['rtd_replaced_accuracy']:.1%}, "
                     f"loss {e['rtd_loss']:.3f}; {e['replaced_share']:.1%} of the masked positions replaced")
    if e:
        whose = "the generator's " if rtd else ""
        lines.append(f"{whose}held-out accuracy at [MASK] positions {e['mlm_mask_accuracy']:.1%} "
                     f"(baselines: most frequent token {e['baseline_unigram_accuracy']:.1%}, "
                     f"most frequent after the left neighbour {e['baseline_bigram_accuracy']:.1%}), "
                     f"loss {e['mlm_mask_loss']:.3f}, "
                     f"{e['mask_distinct_predictions']:,} distinct predictions")
        lines.append(f"  kept positions (answer visible) {e['mlm_kept_accuracy']:.1%}, random-token positions "
                     f"{e['mlm_random_accuracy']:.1%}; all predicted positions {e['mlm_all_accuracy']:.1%}")
        if sentence_objective == "none":  # every label is "in order": an accuracy would mean nothing
            lines.append(f"no sentence-level objective (objective none); {int(e['examples']):,} held-out examples")
        else:
            lines.append(f"held-out {sentence_objective.upper()} accuracy {e['sop_accuracy']:.1%}  (chance "
                         f"/ majority-label baseline {e['baseline_sop_accuracy']:.1%}), on {int(e['examples']):,} "
                         "examples")
    if "model_dir" in summary:
        what = ("the discriminator, without an MLM head (loads with transformers' AlbertModel.from_pretrained)" if rtd
                else "(loads with transformers' AlbertForPreTraining.from_pretrained)")
        lines.append(f"model {what}: {summary['model_dir']}")
    lines.append(f"run directory: {summary['run_dir']}")
    return "\n".join(lines)

