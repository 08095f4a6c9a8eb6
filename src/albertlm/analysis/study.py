"""The small-scale pretraining study behind the report's Tables 3, 4, 5 and Figure 1.

One tokenizer and one data build per sentence-level objective (sop, nsp, none) are made once,
on the same corpus, seed and held-out documents, and copied into every run directory
(`train.pretrain.prepare_data` reuses what a run directory already holds). Then:

  - Table 3: embedding size E in {64, 128, H} (all-shared; `table3_sharing` adds not-shared);
  - Table 4: sharing {all, attention, ffn, none} at E = 128;
  - Table 5: the E = 128 all-shared model trained with sop (shared with Tables 3 and 4), nsp and none,
    each evaluated on the held-out pairs of all three builds;
  - Figure 1: layer smoothness of the all-shared and not-shared E = 128 models.

Every variant is trained `seeds` times (initialisation, data order and masks differ; the data
build and held-out documents do not), so a difference between variants can be set against the
seed-to-seed spread of each. The runs use the quick pretraining recipe (albert-mini, AdamW, a
16-token curriculum for the first third of the steps, bf16 where native): the recipe that leaves
the unigram plateau on this corpus (docs/pretraining.md).

Budget: the time left for the study (see `plan_steps`) is split evenly among the runs; a step time
measured on real batches of the most expensive variant turns each run's share into a step count.
Every run gets the same number of steps (the comparison is at equal steps, as the paper's).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import torch

from albertlm.analysis.params import count_parameters
from albertlm.analysis.results import (BuildSummary, Downstream, HeldoutScores, PretrainSummary, SmoothnessCurve,
                                       StudyPlan, StudyResults, StudyRun, Table5Row, Table5Seed, VariantSummary,
                                       parse)
from albertlm.analysis.settings import StudySettings, Variant
from albertlm.config import AlbertConfig, get_preset
from albertlm.distributed import DistContext
from albertlm.train.mlm_eval import evaluate
from albertlm.train.pretrain import PretrainRecipe, prepare_data, pretrain

OBJECTIVE_NAMES = {"sop": "SOP", "nsp": "NSP", "none": "None"}


def variants(settings: StudySettings) -> list[Variant]:
    """The variants: Table 3's E sweep, Table 4's other sharing strategies, Table 5's other objectives."""
    hidden = get_preset(settings.preset).hidden_size
    sizes = list(dict.fromkeys(e or hidden for e in settings.embedding_sizes))
    base = base_embedding(settings)
    out = [Variant(f"e{e}-{s}", e, s) for s in settings.table3_sharing for e in sizes]
    out += [Variant(f"e{base}-{s}", base, s) for s in ("all", "attention", "ffn", "none")
            if s not in settings.table3_sharing]
    out += [Variant(f"e{base}-all-{o}", base, "all", o) for o in ("nsp", "none")]
    return out


def seeds(settings: StudySettings) -> list[int]:
    """The training seeds of every variant."""
    return [settings.seed + k for k in range(settings.seeds)]


def run_name(variant: Variant, seed: int) -> str:
    """The run directory of one variant trained with one seed."""
    return f"{variant.name}-s{seed}"


def base_embedding(settings: StudySettings) -> int:
    """The E of Tables 4 and 5 and Figure 1: the preset's own E when the grid has it (128 for albert-mini)."""
    preset = get_preset(settings.preset)
    sizes = [e or preset.hidden_size for e in settings.embedding_sizes]
    return preset.embedding_size if preset.embedding_size in sizes else sizes[0]


def curriculum_steps(settings: StudySettings, steps: int) -> int:
    """Steps at the curriculum length (0: none, also when the steps are too few to split)."""
    if settings.curriculum_seq_length is None:
        return 0
    return int(settings.curriculum_fraction * steps)


def recipe_for(settings: StudySettings, variant: Variant, steps: int, seed: int | None = None) -> PretrainRecipe:
    """The PretrainRecipe of one run: the quick recipe with the study's settings and the variant's."""
    short = curriculum_steps(settings, steps)
    return PretrainRecipe().with_settings(
        preset=settings.preset, sharing=variant.sharing, embedding_size=variant.embedding_size,
        corpus=settings.corpus, vocab_size=settings.vocab_size, max_seq_length=settings.max_seq_length,
        curriculum_seq_length=settings.curriculum_seq_length if short else None, curriculum_steps=short,
        objective=variant.objective, heldout_fraction=settings.heldout_fraction, batch_size=settings.batch_size,
        steps=steps, warmup_steps=max(1, round(settings.warmup_fraction * steps)), lr=settings.lr,
        optimizer=settings.optimizer,
        eval_every=steps, eval_examples=settings.eval_examples, log_every=max(1, steps // 50),
        checkpoint_every=steps, keep_last=1, seed=settings.seed if seed is None else seed, data_seed=settings.seed,
        workers=settings.workers)


def prepare_shared(settings: StudySettings, root: Path, log: Callable[[str], None]) -> dict[str, Path]:
    """One tokenizer and one build per objective under root/<objective>/{tokenizer,data[,data-<short>]}."""
    dirs: dict[str, Path] = {}
    first: Path | None = None
    for objective in ("sop", "nsp", "none"):
        d = root / objective
        d.mkdir(parents=True, exist_ok=True)
        if first is not None and not (d / "tokenizer").exists():
            shutil.copytree(first / "tokenizer", d / "tokenizer")
        log(f"study: {'tokenizer + ' if first is None else ''}data build ({objective})")
        recipe = recipe_for(settings, Variant("x", 128, "all", objective), 1)
        if settings.curriculum_seq_length is not None:  # the short build too, whatever the step count
            recipe = dataclasses.replace(recipe, curriculum_seq_length=settings.curriculum_seq_length,
                                         curriculum_steps=1)
        prepare_data(recipe, d, DistContext(), progress=False)
        first = first or d
        dirs[objective] = d
    return dirs


def measure_step_seconds(settings: StudySettings, shared: Path) -> float:
    """Median seconds of one optimizer step of the most expensive variant (E = H, not shared), at the
    recipe's precision; with a curriculum, the mean over the run of short and full-length steps."""
    from albertlm.data.loader import PretrainingDataset, collate
    from albertlm.model import AlbertForPreTraining
    from albertlm.optim import build_optimizer
    from albertlm.train.loop import autocast, resolve_precision

    device = torch.device("cpu")
    precision = resolve_precision(recipe_for(settings, Variant("x", 128, "all"), 1).precision, device)
    hidden = get_preset(settings.preset).hidden_size
    vocab = PretrainingDataset(shared / "data", "train", seed=settings.seed).vocab_size
    config = get_preset(settings.preset, vocab_size=vocab, embedding_size=max(
        [e or hidden for e in settings.embedding_sizes]), sharing="none",
        max_position_embeddings=max(settings.max_seq_length, 512))

    def median_step(directory: Path, batch_size: int) -> float:
        torch.manual_seed(settings.seed)
        model = AlbertForPreTraining(config).train()
        optimizer = build_optimizer(settings.optimizer, model, lr=settings.lr, weight_decay=0.01)
        data = PretrainingDataset(directory, "train", seed=settings.seed)
        it = iter(data)
        times = []
        for k in range(settings.calibration_steps + 1):
            batch = collate([next(it) for _ in range(batch_size)], special=data.special_ids)
            start = time.perf_counter()
            with autocast(device, precision):
                loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if k:  # the first step warms up
                times.append(time.perf_counter() - start)
        return sorted(times)[len(times) // 2]

    full = median_step(shared / "data", settings.batch_size)
    short_len = settings.curriculum_seq_length
    if short_len is None or settings.curriculum_fraction == 0:
        return full
    short = median_step(shared / f"data-{short_len}", settings.batch_size * settings.max_seq_length // short_len)
    return settings.curriculum_fraction * short + (1 - settings.curriculum_fraction) * full


def plan_steps(seconds_available: float, runs: int, step_seconds: float, settings: StudySettings,
               finetune_share: float = 0.0) -> dict[str, float]:
    """Turn the study's time into one step count for every run.

    Each run gets seconds_available / runs; a share `finetune_share` of it goes to fine-tuning;
    the final evaluation (a forward pass, about a third of a step, per `batch_size` held-out
    pairs) and a few seconds of setup and saving are set aside; the rest is steps of `step_seconds`.
    """
    per_run = seconds_available / max(runs, 1)
    pretrain_seconds = per_run * (1.0 - finetune_share)
    overhead = 3.0 + settings.eval_examples / settings.batch_size * step_seconds / 3
    steps = max(settings.min_steps, int((pretrain_seconds - overhead) / step_seconds))
    return {"per_run_seconds": per_run, "pretrain_seconds": pretrain_seconds,
            "finetune_seconds": per_run - pretrain_seconds,
            "step_seconds": step_seconds, "overhead_seconds": overhead, "steps": steps}


def _copy_data(shared: Path, run_dir: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    for part in sorted(p.name for p in shared.iterdir() if p.name == "tokenizer" or p.name.startswith("data")):
        if not (run_dir / part).exists():
            shutil.copytree(shared / part, run_dir / part)


def _heldout(data_dir: Path, settings: StudySettings):
    from albertlm.data.loader import PretrainingDataset

    return PretrainingDataset(data_dir, "heldout", seed=settings.seed, shuffle=False)


def run_study(settings: StudySettings, root: Path, seconds_available: float, log: Callable[[str], None] = print,
              started: float | None = None, hf_checkpoint: str | None = None,
              sst2_dir: Path | None = None, finetune_share: float = 0.0) -> StudyResults:
    """Prepare the data, train every variant, evaluate Tables 3-5 and Figure 1.

    Args:
        settings: StudySettings.
        root: working directory of the study (shared/ and runs/ go below it).
        seconds_available: wall-clock time for the whole study, data preparation included.
        log: progress lines.
        hf_checkpoint: an HF-format ALBERT directory (with spiece.model) for Figure 1, or None.
        sst2_dir: SST-2 data (train.tsv, dev.tsv) for a downstream score, or None.
        finetune_share: share of each run's time given to SST-2 fine-tuning when sst2_dir is set.
    Returns:
        StudyResults: plan, runs (recipe, summary, parameters, downstream), variants over seeds,
        table5, smoothness.
    """
    with torch.random.fork_rng(devices=[]):  # it seeds torch's generator; the caller's state is restored
        return _run_study(settings, root, seconds_available, log, started, hf_checkpoint, sst2_dir, finetune_share)


def _run_study(settings: StudySettings, root: Path, seconds_available: float, log: Callable[[str], None],
               started: float | None, hf_checkpoint: str | None, sst2_dir: Path | None,
               finetune_share: float) -> StudyResults:
    """run_study()'s body, run inside a fork of torch's global generator."""
    t0 = started if started is not None else time.perf_counter()
    root.mkdir(parents=True, exist_ok=True)
    shared = prepare_shared(settings, root / "shared", log)
    plan = _plan(settings, shared, seconds_available - (time.perf_counter() - t0), seconds_available,
                 finetune_share if sst2_dir else 0.0, log)
    runs = _pretrain_runs(settings, root, shared, plan, sst2_dir, log)
    base = base_embedding(settings)
    table5 = _table5(settings, root, shared, base, log)
    curves = _figure1(settings, root, shared, base, hf_checkpoint)
    log("study: smoothness measured")
    builds = {o: json.loads((shared[o] / "data" / "meta.json").read_text()) for o in shared}
    shape = get_preset(settings.preset)
    return StudyResults(settings=settings, hidden=shape.hidden_size, layers=shape.num_hidden_layers, plan=plan,
                        seeds=seeds(settings), runs=runs, variants=aggregate(runs), table5=table5, smoothness=curves,
                        base_embedding=base,
                        builds={o: BuildSummary(documents=b["documents"], text_tokens=b["text_tokens"],
                                                splits=b["splits"]) for o, b in builds.items()})


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def aggregate(runs: dict[str, StudyRun]) -> dict[str, VariantSummary]:
    """Per variant: the runs over seeds, their [MASK] accuracies and losses, mean and spread (max - min)."""
    groups: dict[str, list[tuple[str, StudyRun]]] = {}
    for name, run in runs.items():
        groups.setdefault(run.variant.name, []).append((name, run))
    out = {}
    for variant, members in groups.items():
        first = members[0][1]
        values = {"mask_accuracy": [r.summary.eval.mlm_mask_accuracy for _, r in members],
                  "mask_loss": [r.summary.eval.mlm_mask_loss for _, r in members],
                  "downstream": [r.downstream.accuracy for _, r in members
                                 if r.downstream is not None and r.downstream.accuracy is not None]}
        stats = {f"{key}_{stat}": (None if not v else _mean(v) if stat == "mean" else max(v) - min(v))
                 for key, v in values.items() for stat in ("mean", "spread")}
        out[variant] = VariantSummary(variant=first.variant, backbone=first.backbone, with_heads=first.with_heads,
                                      runs=[n for n, _ in members], seeds=[r.seed for _, r in members],
                                      **values, **stats)
    return out


def _finetune_sst2(run_dir: Path, sst2_dir: Path, plan: StudyPlan, settings: StudySettings,
                   log: Callable[[str], None], name: str) -> Downstream:
    """Fine-tune one pretrained run on SST-2 for its share of the time; the best dev accuracy."""
    from albertlm.train.finetune import FinetuneRecipe, finetune

    seq = 64
    # batch 32 x 64 tokens: about the tokens (and time) of a pretraining step of batch 16 x 128
    step = plan.step_seconds * (32 * seq) / (settings.batch_size * settings.max_seq_length)
    steps = max(10, int((plan.finetune_seconds - 15) / step))  # ~15 s: reading, featurising, 872 dev
    recipe = FinetuneRecipe(lr=1e-4, batch_size=32, steps=steps, warmup_steps=max(1, steps // 10),
                            max_seq_length=seq, eval_every=steps, dropout=0.0, seed=settings.seed)
    log(f"study: fine-tuning {name} on SST-2 ({steps} steps)")
    results = finetune("sst-2", run_dir / "model", sst2_dir, run_dir / "sst2", recipe, progress=False)
    return Downstream(accuracy=results["best"].get("accuracy"), steps=steps, dev_examples=results["dev_examples"],
                      seconds=results["train_seconds"])


def _plan(settings: StudySettings, shared: dict[str, Path], left: float, seconds_available: float,
          finetune_share: float, log: Callable[[str], None]) -> StudyPlan:
    """Steps per run from the time left after the builds (or --steps), with the numbers behind them."""
    step_seconds = measure_step_seconds(settings, shared["sop"])
    reserve = 0.08 * seconds_available  # Table 5's cross-evaluation, Figure 1, the report itself
    n_variants, n_seeds = len(variants(settings)), len(seeds(settings))
    plan = plan_steps(left - reserve, n_variants * n_seeds, step_seconds, settings, finetune_share)
    plan["steps_from"] = "the budget"
    if settings.steps is not None:  # fixed: the budget only sets the fine-tuning share's time
        plan.update(steps=settings.steps, steps_from="fixed (--steps)")
    plan.update(seconds_available=seconds_available, seconds_left_after_setup=left, reserve_seconds=reserve,
                curriculum_steps=curriculum_steps(settings, int(plan["steps"])), runs=n_variants * n_seeds)
    log(f"study: step {step_seconds:.2f} s -> {plan['steps']} steps for each of {n_variants} variants x "
        f"{n_seeds} seeds ({plan['per_run_seconds']:.0f} s each)")
    return StudyPlan(**plan)


def _pretrain_runs(settings: StudySettings, root: Path, shared: dict[str, Path], plan: StudyPlan,
                   sst2_dir: Path | None, log: Callable[[str], None]) -> dict[str, StudyRun]:
    """Every variant at every seed, seed-major (the first seed's runs are complete before the
    second's begin); each run starts from an empty directory, so every number comes from it."""
    runs: dict[str, StudyRun] = {}
    for seed in seeds(settings):
        for v in variants(settings):
            name = run_name(v, seed)
            run_dir = root / "runs" / name
            if run_dir.exists():
                shutil.rmtree(run_dir)
            _copy_data(shared[v.objective], run_dir)
            recipe = recipe_for(settings, v, plan.steps, seed)
            log(f"study: pretraining {name} ({recipe.steps} steps)")
            start = time.perf_counter()
            summary = parse(PretrainSummary, pretrain(recipe, run_dir, DistContext(), progress=False), "summary")
            seconds = time.perf_counter() - start
            count = count_parameters(AlbertConfig.from_json_file(run_dir / "model" / "config.json"))
            log(f"study: {name}: [MASK] accuracy {100 * summary.eval.mlm_mask_accuracy:.1f}%")
            downstream = None if sst2_dir is None else _finetune_sst2(run_dir, sst2_dir, plan, settings, log, name)
            runs[name] = StudyRun(variant=v, seed=seed, recipe=dataclasses.asdict(recipe), summary=summary,
                                  seconds=seconds, backbone=count.backbone, with_heads=count.with_heads,
                                  downstream=downstream)
    return runs


def _table5(settings: StudySettings, root: Path, shared: dict[str, Path], base: int,
            log: Callable[[str], None]) -> dict[str, Table5Row]:
    """Table 5: every objective's model on the held-out pairs of every build, for every seed."""
    from albertlm.model import AlbertForPreTraining

    heldout = {o: _heldout(shared[o] / "data", settings) for o in ("sop", "nsp", "none")}
    table5: dict[str, Table5Row] = {}
    for objective in ("none", "nsp", "sop"):
        variant = Variant(f"e{base}-all" + ("" if objective == "sop" else f"-{objective}"), base, "all", objective)
        per_seed = []
        for seed in seeds(settings):
            name = run_name(variant, seed)
            model = AlbertForPreTraining.from_pretrained(root / "runs" / name / "model")
            scores = {task: parse(HeldoutScores, evaluate(model, heldout[task], DistContext(),
                                                          max_examples=settings.eval_examples), f"scores.{task}")
                      for task in ("none", "nsp", "sop")}
            per_seed.append(Table5Seed(run=name, seed=seed, mlm_accuracy=scores["none"].mlm_mask_accuracy,
                                       nsp_accuracy=scores["nsp"].sop_accuracy,
                                       sop_accuracy=scores["sop"].sop_accuracy, scores=scores))
            log(f"study: Table 5 {name}: MLM {per_seed[-1].mlm_accuracy:.3f} "
                f"NSP {per_seed[-1].nsp_accuracy:.3f} SOP {per_seed[-1].sop_accuracy:.3f}")
        first = per_seed[0].scores
        table5[objective] = Table5Row(
            variant=variant.name, per_seed=per_seed, mlm_accuracy=_mean([x.mlm_accuracy for x in per_seed]),
            nsp_accuracy=_mean([x.nsp_accuracy for x in per_seed]),
            sop_accuracy=_mean([x.sop_accuracy for x in per_seed]),
            pairs={t: int(first[t].examples) for t in ("nsp", "sop")},
            baseline={t: first[t].baseline_sop_accuracy for t in ("nsp", "sop")})
    return table5


def _figure1(settings: StudySettings, root: Path, shared: dict[str, Path], base: int,
             hf_checkpoint: str | None) -> dict[str, SmoothnessCurve]:
    """Figure 1: smoothness of the all-shared and not-shared models (first seed), each also at its
    initialisation, and of an HF checkpoint when given."""
    from albertlm.analysis.smoothness import UNTRAINED, reencode_batches, smoothness, unmasked_heldout_batches
    from albertlm.model import AlbertModel

    batches = unmasked_heldout_batches(shared["sop"] / "data", batch_size=32, max_examples=settings.eval_examples,
                                       seed=settings.seed)
    curves: dict[str, SmoothnessCurve] = {}
    first = seeds(settings)[0]
    for sharing, label in (("all", "all-shared (ALBERT)"), ("none", "not-shared (BERT-style)")):
        name = run_name(Variant(f"e{base}-{sharing}", base, sharing), first)
        trained = AlbertModel.from_pretrained(root / "runs" / name / "model")
        curves[label] = SmoothnessCurve(run=name, **smoothness(trained, batches))
        torch.manual_seed(first)  # the same architecture before training: what training changed
        curves[label + UNTRAINED] = SmoothnessCurve(run=f"{name} at initialisation",
                                                    **smoothness(AlbertModel(trained.config), batches))
    if hf_checkpoint:
        from albertlm.tokenizer import load_model_vocabulary, load_vocabulary

        model = AlbertModel.from_pretrained(hf_checkpoint)
        source = load_vocabulary(shared["sop"] / "tokenizer")
        target = load_model_vocabulary(hf_checkpoint)  # checked against the checkpoint's vocab_size
        hf_batches = reencode_batches(batches, source, target, min(128, model.config.max_position_embeddings))
        curves[f"{Path(hf_checkpoint).name} (--hf-checkpoint)"] = SmoothnessCurve(run=str(hf_checkpoint),
                                                                                   **smoothness(model, hf_batches))
    return curves
