"""One measured run of the pretraining recipe search: a recipe, its wall time and its held-out curve.

    python -m experiments.pretrain_search --name adamw-1e-3 --threads 1 --set optimizer=adamw lr=1e-3
    python -m experiments.pretrain_search --name h256 --model hidden_size=256 num_attention_heads=4 \
        intermediate_size=1024

`--set` changes PretrainRecipe fields of the default recipe from before the search (OLD_DEFAULT); `--model` changes fields
of the preset's AlbertConfig. Tokenizer and data builds are cached under runs/search-cache/ by the
settings that shape them, so runs that differ only in training settings share one build and their
wall time is training alone (the build's time is recorded apart, once). The result is one JSON file
(the results envelope of benchmarks/harness.py) in benchmarks/results/pretrain-search/: the command,
the recipe, wall time, tokens/s and every
held-out evaluation (accuracy at [MASK] positions with both count baselines, kept and random
positions, SOP). docs/pretraining.md tabulates them.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import signal
import sys
import time
from pathlib import Path

import torch

from albertlm.config import PRESETS, get_preset
from albertlm.distributed import DistContext
from albertlm.train.metrics import read_metrics
from albertlm.train.pretrain import PretrainRecipe, prepare_data, pretrain
from albertlm.train.pretrain_recipe import BUILD_FIELDS as PRETRAIN_BUILD_FIELDS
from albertlm.train.pretrain_recipe import flat_settings
from benchmarks.harness import RESULTS, envelope, read_result, write_result

ROOT = Path(__file__).resolve().parent.parent
# The default recipe before this search: every --set changes this one, so the recorded commands
# reproduce as they were run.
OLD_DEFAULT = PretrainRecipe(preset="albert-tiny", batch_size=16, steps=2000, lr=5e-3, optimizer="lamb",
                             precision="fp32", eval_every=250, position_init="normal", token_type_init="normal",
                             projection_init="normal", curriculum_seq_length=None, curriculum_steps=0)
BUILD_FIELDS = ("corpus", "vocab_size", "max_seq_length", "objective", "masking", "dupe_factor",
                "max_predictions", "heldout_fraction", "seed", "curriculum_seq_length")


def _parse_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _pairs(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        out[key] = _parse_value(value)
    return out


def table(directory: Path) -> str:
    """Markdown: one row per result file, with its curve of [MASK] accuracy at every evaluation."""
    rows = ["| run | what differs from the old default | steps | tokens | wall (min) | tok/s | [MASK] acc | unigram | bigram "
            "| kept | SOP | [MASK] acc by step |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    base = flat_settings(dataclasses.asdict(OLD_DEFAULT))
    for path in sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime):
        r = read_result(path)["results"]
        diff = {k: v for k, v in flat_settings(r["recipe"]).items() if base.get(k) != v and k not in ("preset", "eval_every",
                "checkpoint_every")}
        diff.update(r.get("model_overrides") or {})
        e = r["final"]
        curve = " ".join(f"{x['step']}:{100 * x['mlm_mask_accuracy']:.1f}" for x in r["evals"])
        wall = "" if r["wall_seconds"] is None else f"{r['wall_seconds'] / 60:.1f}"
        steps = f"{r.get('steps') or r['evals'][-1]['step']}" + (" (stopped)" if r.get("stopped_by_hand") else "")
        rows.append(f"| {r['name']} | {', '.join(f'{k}={v}' for k, v in diff.items()) or '-'} | {steps} | "
                    f"{int(r['tokens_seen']):,} | {wall} | {r['tokens_per_s']:,.0f} | "
                    f"**{100 * e['mlm_mask_accuracy']:.1f}** | {100 * e['baseline_unigram_accuracy']:.1f} | "
                    f"{100 * e['baseline_bigram_accuracy']:.1f} | {100 * e['mlm_kept_accuracy']:.1f} | "
                    f"{100 * e['sop_accuracy']:.1f} | {curve} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--table", action="store_true", help="print the markdown table of every result in --out and exit")
    p.add_argument("--collect", nargs="*", default=None, metavar="RUN_DIR",
                   help="record probes that were killed before this script could (from their metrics.jsonl) and exit")
    p.add_argument("--name", help="run name (also the JSON file's name)")
    p.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="PretrainRecipe fields")
    p.add_argument("--model", nargs="*", default=[], metavar="FIELD=VALUE", help="AlbertConfig fields of the preset")
    p.add_argument("--stop-after", type=int, default=None,
                   help="stop after this many steps (the schedule still spans --set steps); for quick probes")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--out", default=str(RESULTS / "pretrain-search"))
    p.add_argument("--runs", default=str(ROOT / "runs" / "search"), help="parent of the run directories")
    args = p.parse_args(argv)
    if args.table:
        print(table(Path(args.out)))
        return 0
    if args.collect is not None:
        for run_dir in map(Path, args.collect):
            records = read_metrics(run_dir / "metrics.jsonl")
            evals = [r for r in records if r["split"] == "eval"]
            train = [r for r in records if r["split"] == "train"]
            if not evals:
                continue
            recipe = json.loads((run_dir / "recipe.json").read_text())
            last = max(train, key=lambda r: r["step"])
            result = {"name": run_dir.name, "stopped_by_hand": True, "recipe": recipe,
                      "model_overrides": {}, "steps": last["step"], "tokens_seen": last["tokens_seen"],
                      "wall_seconds": None, "tokens_per_s": last["tokens_per_s"],
                      "parameters": next(r for r in records if r["split"] == "setup")["parameters"],
                      "final": evals[-1], "evals": evals}
            collected = envelope("experiments.pretrain_search", argv, result)
            collected["command"] = None  # the probe's own command was never recorded; this one only collected it
            write_result(collected, Path(args.out) / f"{run_dir.name}.json")
        return 0
    if not args.name:
        p.error("--name is required")
    torch.set_num_threads(args.threads)

    recipe = OLD_DEFAULT.with_settings(**_pairs(args.set))
    model_overrides = _pairs(args.model)
    if model_overrides:
        name = f"search-{args.name}"
        PRESETS[name] = get_preset(recipe.preset, **model_overrides)
        recipe = dataclasses.replace(recipe, preset=name)

    # a cached tokenizer + data build for these settings
    key = {f: getattr(recipe.build if f in PRETRAIN_BUILD_FIELDS else recipe, f) for f in BUILD_FIELDS}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    cache = ROOT / "runs" / "search-cache" / digest
    build_seconds = None
    if not (cache / "data" / "meta.json").exists():
        start = time.perf_counter()
        prepare_data(recipe, cache, DistContext(), progress=False)
        build_seconds = time.perf_counter() - start
        (cache / "build.json").write_text(json.dumps({"settings": key, "seconds": build_seconds}, indent=2))
    run_dir = Path(args.runs) / args.name
    if run_dir.exists():
        raise SystemExit(f"{run_dir} exists; remove it or pick another --name")
    run_dir.mkdir(parents=True)
    for part in sorted(p.name for p in cache.iterdir() if p.is_dir()):  # tokenizer/, data/, data-<length>/
        (run_dir / part).symlink_to(cache / part)

    # `pkill` (SIGTERM) or Ctrl-C ends a probe early: what it measured until then is still recorded
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    start = time.perf_counter()
    stopped_by_hand = False
    try:
        pretrain(recipe, run_dir, DistContext(), progress=False, stop_after=args.stop_after)
    except KeyboardInterrupt:
        stopped_by_hand = True
    wall = time.perf_counter() - start
    records = read_metrics(run_dir / "metrics.jsonl")
    evals = [r for r in records if r["split"] == "eval"]
    train = [r for r in records if r["split"] == "train"]
    if not evals:
        raise SystemExit(f"{args.name}: stopped before its first evaluation; nothing recorded")
    last_train = max(train, key=lambda r: r["step"])
    result = {
        "name": args.name, "threads": args.threads, "stop_after": args.stop_after, "stopped_by_hand": stopped_by_hand,
        "recipe": dataclasses.asdict(recipe), "model_overrides": model_overrides,
        "config": dataclasses.asdict(get_preset(recipe.preset)),
        "build": json.loads((cache / "build.json").read_text()) if (cache / "build.json").exists() else None,
        "wall_seconds": wall, "steps": last_train["step"], "tokens_seen": last_train["tokens_seen"],
        "tokens_per_s": last_train["tokens_seen"] / wall,
        "parameters": next(r for r in records if r["split"] == "setup")["parameters"],
        "final": evals[-1], "evals": evals,
        "train_curve": [{k: r[k] for k in ("step", "loss", "mlm_loss", "mlm_mask_accuracy", "lr")} for r in train],
    }
    write_result(envelope("experiments.pretrain_search", argv, result), Path(args.out) / f"{args.name}.json")
    e = result["final"]
    print(f"{args.name}: {wall / 60:.1f} min, {result['tokens_per_s']:,.0f} tok/s; [MASK] acc "
          f"{e['mlm_mask_accuracy']:.1%} (unigram {e['baseline_unigram_accuracy']:.1%}, bigram "
          f"{e['baseline_bigram_accuracy']:.1%}), loss {e['mlm_mask_loss']:.3f}, distinct "
          f"{e['mask_distinct_predictions']}, kept {e['mlm_kept_accuracy']:.1%}, SOP {e['sop_accuracy']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
