"""Speed and memory of albertlm against Hugging Face transformers' ALBERT, measured side by side.

One run builds the same configuration, weights and batch in both libraries (ours ->
`save_pretrained` -> transformers' `from_pretrained`, attention "sdpa"), checks that their outputs
agree, then times them in alternation (A B A B ...) and reports, per preset and sequence length:

  - a training step: forward, MLM (15% of positions) + SOP loss, backward, torch's AdamW over the
    same parameter groups (`albertlm.optim.param_groups`); transformers computes its dense
    [B, S, V] logits (its real behaviour), ours only the labelled positions;
  - inference: the backbone's forward pass (AlbertModel) under torch.inference_mode, at the
    training batch and at batch 1;
  - tokens/s as the median over the rounds, the ratio ours / transformers, and model FLOPs
    utilisation: `flops_per_token` x tokens/s / the fp32 matmul peak measured in the same run
    (the same model FLOPs for both libraries: useful work, not the work each one does);
  - peak training memory (see `memory_child`), ours with and without activation checkpointing;
  - batches of mixed lengths: padding to the longest vs our unpadded path (`unpad=True`), and
    random vs length-bucketed batches (`albertlm.data.bucketing`).

The machine may be shared: every timed call also measures how much CPU other processes used
meanwhile (/proc/stat minus our own CPU time). A round in which they used more than
--max-foreign cores is thrown away and redone (the JSON counts them), and before each round the
script waits, up to a budget, for the machine to be quiet.

Usage:
    # the full run (~25 min on 2 quiet cores; longer while other jobs share the machine)
    python -m benchmarks.bench_speed --markdown docs/benchmarks.md
    python -m benchmarks.bench_speed --quick          # smoke run, ~1-2 min
    python -m benchmarks.bench_speed --presets albert-base --seq-lens 128 --repeats 5

Writes the results envelope (benchmarks/harness.py) to benchmarks/results/speed-<date>-<time>.json,
prints the report, and appends it to the markdown file given by --markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from albertlm.analysis.params import flops_per_token
from albertlm.analysis.speed import reset_peak_rss, status_kib
from albertlm.config import AlbertConfig, get_preset
from albertlm.data.bucketing import bucket_by_length, padded_tokens
from albertlm.distributed import apply_activation_checkpointing, maybe_compile
from albertlm.inference.prepack import prepack_for_cpu
from albertlm.model import AlbertForPreTraining
from albertlm.optim import param_groups
from benchmarks.harness import (REPO, RESULTS, Quiet, Target, compare, envelope, matmul_peak, profile_steps, publish,
                                targets_markdown, warm_up_libraries)

THREADS = 2
MLM_PROB = 0.15
SEED = 0
TOKENS_PER_BATCH = 1024  # default batch: 8 x 128, 2 x 512


# ---------------------------------------------------------------------------- models and batches
def hf_config(config: AlbertConfig):
    import transformers

    data = {k: v for k, v in config.to_dict().items() if k not in ("sharing", "model_type")}
    return transformers.AlbertConfig(**data, attn_implementation="sdpa")


def build_pair(config: AlbertConfig, workdir: Path):
    """Ours (seeded) and transformers' AlbertForPreTraining with the same weights, via a HF directory."""
    import transformers

    torch.manual_seed(SEED)
    ours = AlbertForPreTraining(config)
    ours.save_pretrained(workdir)
    theirs = transformers.AlbertForPreTraining.from_pretrained(workdir, attn_implementation="sdpa")
    return ours, theirs


def make_batch(config: AlbertConfig, B: int, S: int, seed: int, lengths: list[int] | None = None) -> dict:
    """Random ids, segment B from the middle, MLM labels on 15% of the real tokens, SOP labels.

    With `lengths`, sequence b has lengths[b] real tokens followed by padding up to S.
    """
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, config.vocab_size, (B, S), generator=g)
    lens = torch.tensor(lengths if lengths is not None else [S] * B)
    mask = (torch.arange(S)[None, :] < lens[:, None]).long()  # [B, S]
    ids[:, 0] = config.bos_token_id
    ids[mask == 0] = config.pad_token_id
    types = (torch.arange(S)[None, :] >= (lens[:, None] // 2)).long() * mask  # [B, S]
    chosen = (torch.rand(B, S, generator=g) < MLM_PROB) & mask.bool()
    chosen[:, 1] = True  # at least one prediction per sequence
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    sop = torch.randint(0, 2, (B,), generator=g)
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels, sentence_order_label=sop)


def backbone_inputs(batch: dict) -> dict:
    return {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


def train_fn(model, optimizer, batch: dict, precision: str = "fp32", **extra) -> Callable[[], None]:
    """One training step of `model` on `batch` (the same code for both libraries)."""
    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = model(**batch, **extra).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def infer_fn(backbone, inputs: dict, precision: str = "fp32", **extra) -> Callable[[], None]:
    def forward():
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            backbone(**inputs, **extra)
    return forward


def adamw(model) -> torch.optim.Optimizer:
    # torch's AdamW over our groups (decay matrices and embeddings, not norms and biases), foreach
    # left at torch's default: the same optimizer code for both libraries.
    return torch.optim.AdamW(param_groups(model), lr=1e-5, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)


@torch.no_grad()
def parity(ours, theirs, batch: dict) -> float:
    """Max abs difference of the backbones' last hidden states at real tokens (eval mode)."""
    ours.eval(), theirs.eval()
    inputs = backbone_inputs(batch)
    a = ours.albert(**inputs).last_hidden_state
    b = theirs.albert(**inputs).last_hidden_state
    keep = inputs["attention_mask"].bool()
    ours.train(), theirs.train()
    return float((a[keep] - b[keep]).abs().max())


def summarise(timing: dict, tokens: int) -> dict:
    """Median seconds and tokens/s per name, and every name's ratio to "hf" (MFU is added at the end)."""
    out = {"tokens": tokens, "foreign_cores": timing["foreign_cores"], "discarded": timing["discarded"]}
    for name, secs in timing["seconds"].items():
        med = statistics.median(secs)
        out[name] = {"seconds": [round(s, 4) for s in secs], "median_s": round(med, 4),
                     "tokens_per_s": round(tokens / med, 2)}
    if "hf" in out:
        for name in timing["seconds"]:
            if name != "hf":
                out[name]["ratio_vs_hf"] = round(out[name]["tokens_per_s"] / out["hf"]["tokens_per_s"], 3)
    return out


# ---------------------------------------------------------------------------- memory (fresh processes)
def memory_child(spec: dict) -> dict:
    """Peak resident memory of training steps, measured in this fresh process.

    Method: after the imports, record the resident set (VmRSS); build the model, optimizer and
    batch; reset the kernel's high-water mark (write 5 to /proc/self/clear_refs); take `steps`
    training steps; read the high-water mark (VmHWM). Reported: high-water mark minus the baseline
    (taken after the imports and a small warm-up step of unrelated layers) = weights + gradients +
    optimizer state + activations + allocator slack: what the model and its training add. Where clear_refs cannot be
    written, ru_maxrss (the process's peak, build included) is used instead and flagged.
    """
    torch.set_num_threads(THREADS)
    import transformers  # noqa: F401  (imported before the baseline in both cases)

    warm_up_libraries()
    base_kb = status_kib("VmRSS")
    config = get_preset(spec["preset"])
    torch.manual_seed(SEED)
    if spec["impl"] == "hf":
        model = transformers.AlbertForPreTraining(hf_config(config))
    else:
        model = AlbertForPreTraining(config)
        if spec.get("ckpt"):
            apply_activation_checkpointing(model)
    model.train()
    optimizer = adamw(model)
    batch = make_batch(config, spec["batch"], spec["seq_len"], seed=SEED + 1, lengths=spec.get("lengths"))
    extra = {"unpad": True} if spec.get("unpad") else {}
    step = train_fn(model, optimizer, batch, **extra)
    method = "VmHWM after clear_refs" if reset_peak_rss() else "ru_maxrss (includes the build)"
    for _ in range(spec.get("steps", 2)):
        step()
    if method.startswith("VmHWM"):
        peak_kb = status_kib("VmHWM")
    else:
        import resource

        peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_mb": round((peak_kb - base_kb) / 1024, 1), "baseline_mb": round(base_kb / 1024, 1),
            "method": method}


def measure_memory(spec: dict, log: Callable[[str], None]) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.bench_speed", "--_memory-child", json.dumps(spec)]
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS), "TRANSFORMERS_VERBOSITY": "error"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        log(f"    memory probe failed: {proc.stderr.strip().splitlines()[-1:]}")
        return {"error": proc.stderr.strip()[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------- the run
def run(args, log: Callable[[str], None]) -> dict:
    torch.set_num_threads(THREADS)
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    quiet = Quiet(args.max_foreign, args.max_wait)
    result: dict = {"settings": {k: v for k, v in vars(args).items() if not k.startswith("_")},
                    "speed": [], "memory": [], "mixed": {}}

    def peaks_now() -> dict:
        quiet.wait()
        return {"fp32": matmul_peak(torch.float32), "bf16": matmul_peak(torch.bfloat16)}

    peak_samples = [peaks_now()]
    log(f"matmul peak: fp32 {peak_samples[0]['fp32']:.1f} GFLOP/s, bf16 {peak_samples[0]['bf16']:.1f} GFLOP/s")
    variants = [v for v in args.variants.split(",") if v]

    for preset in args.presets:
        config = get_preset(preset)
        with tempfile.TemporaryDirectory() as tmp:
            ours, theirs = build_pair(config, Path(tmp))
        compiled = maybe_compile(ours, True) if "compile" in variants else None
        # Parity first: the timed training steps move the weights (ours more often, with variants).
        deltas = {S: parity(ours, theirs, make_batch(config, 1, S, seed=SEED + 2)) for S in args.seq_lens}
        ours.train(), theirs.train()
        opt_ours, opt_hf = adamw(ours), adamw(theirs)
        for S in args.seq_lens:
            B = args.batch or max(1, TOKENS_PER_BATCH // S)
            batch = make_batch(config, B, S, seed=SEED + 1)
            delta = deltas[S]
            log(f"{preset} S={S} B={B}: parity max |ours - hf| = {delta:.2e}")

            fns = {"ours": train_fn(ours, opt_ours, batch), "hf": train_fn(theirs, opt_hf, batch)}
            if "bf16" in variants:
                fns["ours_bf16"] = train_fn(ours, opt_ours, batch, precision="bf16")
            if compiled is not None:
                fns["ours_compile"] = train_fn(compiled, opt_ours, batch)
            if args.profile:
                result.setdefault("profiles", {})[f"{preset} {B}x{S} train"] = profile_steps(
                    {"ours": fns["ours"], "hf": fns["hf"]}, log)
            log(f"  train {B}x{S}: {', '.join(fns)}")
            timing = compare(fns, args.repeats, quiet, log)
            row = summarise(timing, B * S)
            result["speed"].append({"preset": preset, "seq_len": S, "batch": B, "mode": "train",
                                    "parity_max_abs": delta, **row})
            log("    " + _brief(row))

            for b in dict.fromkeys([B, 1]):  # the training batch, then batch 1
                inputs = backbone_inputs(make_batch(config, b, S, seed=SEED + 3))
                fns = {"ours": infer_fn(ours.albert, inputs), "hf": infer_fn(theirs.albert, inputs)}
                if "bf16" in variants:
                    fns["ours_bf16"] = infer_fn(ours.albert, inputs, precision="bf16")
                if "prepack" in variants:
                    fns["ours_prepack"] = infer_fn(prepack_for_cpu(ours.albert), inputs)
                ours.eval(), theirs.eval()
                log(f"  infer {b}x{S}: {', '.join(fns)}")
                timing = compare(fns, args.infer_repeats, quiet, log)
                ours.train(), theirs.train()
                row = summarise(timing, b * S)
                result["speed"].append({"preset": preset, "seq_len": S, "batch": b, "mode": "infer", **row})
                log("    " + _brief(row))
        del ours, theirs, opt_ours, opt_hf, compiled
        peak_samples.append(peaks_now())

        if args.memory:
            for S in args.seq_lens:
                B = args.batch or max(1, TOKENS_PER_BATCH // S)
                mem = {"preset": preset, "seq_len": S, "batch": B}
                for name, spec in (("ours", {}), ("hf", {"impl": "hf"}), ("ours_ckpt", {"ckpt": True})):
                    spec = {"impl": "ours", "preset": preset, "seq_len": S, "batch": B, **spec}
                    mem[name] = measure_memory(spec, log)
                if all("peak_mb" in mem[k] for k in ("ours", "ours_ckpt", "hf")):
                    mem["ours_vs_hf"] = round(mem["ours"]["peak_mb"] / mem["hf"]["peak_mb"], 3)
                    mem["ckpt_cut"] = round(1 - mem["ours_ckpt"]["peak_mb"] / mem["ours"]["peak_mb"], 3)
                result["memory"].append(mem)
                log(f"  memory {preset} {B}x{S}: " + ", ".join(
                    f"{k} {mem[k].get('peak_mb')} MB" for k in ("ours", "hf", "ours_ckpt")))

    if args.mixed_preset:
        result["mixed"] = run_mixed(args, quiet, peak_samples, log)
    result["peaks_gflops"] = {k: round(max(p[k] for p in peak_samples), 1) for k in ("fp32", "bf16")}
    result["peak_samples_gflops"] = [{k: round(v, 1) for k, v in p.items()} for p in peak_samples]
    result["waited_for_quiet_s"] = round(quiet.waited_s, 1)
    # MFU against the best matmul peak of the whole run (the machine's, undisturbed)
    for row in result["speed"]:
        for name in ("ours", "hf", "ours_bf16", "ours_compile", "ours_prepack"):
            if name in row:
                precision = "bf16" if name == "ours_bf16" else "fp32"
                config = get_preset(row["preset"])
                f = flops_per_token(config, row["seq_len"], training=row["mode"] == "train",
                                    **({} if row["mode"] == "train" else {"mlm_fraction": 0.0}))
                row[name]["mfu"] = round(f * row[name]["tokens_per_s"] / (result["peaks_gflops"][precision] * 1e9), 4)
    return result


def run_mixed(args, quiet: Quiet, peak_samples: list[dict], log) -> dict:
    """Batches whose lengths are uniform in [lo, hi]: padding vs unpadding vs length bucketing."""
    config = get_preset(args.mixed_preset)
    lo, hi = args.mixed_lengths
    rng = np.random.default_rng(SEED)
    B = args.mixed_batch
    with tempfile.TemporaryDirectory() as tmp:
        ours, theirs = build_pair(config, Path(tmp))
    ours.train(), theirs.train()
    opt_ours, opt_hf = adamw(ours), adamw(theirs)
    out: dict = {"preset": args.mixed_preset, "lengths": [lo, hi], "batch": B}

    # One batch padded to its longest sequence: padded path, unpadded path, transformers.
    lengths = rng.integers(lo, hi + 1, size=B).tolist()
    S = max(lengths)
    batch = make_batch(config, B, S, seed=SEED + 4, lengths=lengths)
    out["batch_lengths"] = lengths
    with torch.no_grad():
        ours.eval()
        a = ours(**batch).loss
        b = ours(**batch, unpad=True).loss
        ours.train()
    out["unpad_loss_delta"] = float((a - b).abs())
    out["parity_max_abs"] = parity(ours, theirs, batch)
    log(f"mixed {args.mixed_preset}: lengths {lengths} (real {sum(lengths)} of {B * S} positions), "
        f"|loss padded - unpadded| = {out['unpad_loss_delta']:.1e}, max |ours - hf| = {out['parity_max_abs']:.1e}")
    real = sum(lengths)
    for mode in ("train", "infer"):
        if mode == "train":
            fns = {"ours_padded": train_fn(ours, opt_ours, batch), "ours_unpad": train_fn(ours, opt_ours, batch, unpad=True),
                   "hf": train_fn(theirs, opt_hf, batch)}
        else:
            inputs = backbone_inputs(batch)
            fns = {"ours_padded": infer_fn(ours.albert, inputs), "ours_unpad": infer_fn(ours.albert, inputs, unpad=True),
                   "hf": infer_fn(theirs.albert, inputs)}
            ours.eval(), theirs.eval()
        log(f"  {mode} mixed {B}x{S}: {', '.join(fns)}")
        timing = compare(fns, args.mixed_repeats, quiet, log)
        ours.train(), theirs.train()
        row = {"foreign_cores": timing["foreign_cores"], "discarded": timing["discarded"]}
        for name, secs in timing["seconds"].items():
            med = statistics.median(secs)
            row[name] = {"seconds": [round(s, 4) for s in secs], "median_s": round(med, 4),
                         "real_tokens_per_s": round(real / med, 2)}
        row["unpad_speedup"] = round(row["ours_padded"]["median_s"] / row["ours_unpad"]["median_s"], 3)
        row["unpad_vs_hf"] = round(row["hf"]["median_s"] / row["ours_unpad"]["median_s"], 3)
        out[mode] = row
        log(f"    unpadded {row['unpad_speedup']:.2f}x over padded, {row['unpad_vs_hf']:.2f}x over transformers")

    # A pool of examples: random batches vs length-bucketed batches, each padded to its longest.
    pool_lengths = rng.integers(lo, hi + 1, size=B * args.mixed_pool).tolist()
    random_batches = bucket_by_length(pool_lengths, B, np.random.default_rng(SEED), pool_batches=1)
    bucketed = bucket_by_length(pool_lengths, B, np.random.default_rng(SEED), pool_batches=args.mixed_pool)

    def epoch(batches):
        inputs = []
        for i, idx in enumerate(batches):
            ls = [pool_lengths[j] for j in idx]
            inputs.append(backbone_inputs(make_batch(config, len(ls), max(ls), seed=SEED + 10 + i, lengths=ls)))

        def go():
            with torch.inference_mode():
                for x in inputs:
                    ours.albert(**x)
        return go

    ours.eval()
    log(f"  bucketing: {len(pool_lengths)} examples in batches of {B}, inference")
    timing = compare({"random": epoch(random_batches), "bucketed": epoch(bucketed)},
                     args.mixed_repeats, quiet, log)
    ours.train()
    out["bucketing"] = {
        "mode": "infer", "examples": len(pool_lengths), "real_tokens": sum(pool_lengths),
        "padded_tokens_random": padded_tokens(pool_lengths, random_batches),
        "padded_tokens_bucketed": padded_tokens(pool_lengths, bucketed),
        "seconds": timing["seconds"], "foreign_cores": timing["foreign_cores"], "discarded": timing["discarded"],
        "speedup": round(statistics.median(timing["seconds"]["random"]) / statistics.median(timing["seconds"]["bucketed"]), 3),
    }
    log(f"    bucketed {out['bucketing']['speedup']:.2f}x over random batches")
    return out


def _brief(row: dict) -> str:
    parts = []
    for name in ("ours", "hf", "ours_bf16", "ours_compile", "ours_prepack"):
        if name in row:
            r = row[name]
            ratio = f" ({r['ratio_vs_hf']:.2f}x)" if "ratio_vs_hf" in r else ""
            parts.append(f"{name} {r['tokens_per_s']:.0f} tok/s{ratio}")
    return ", ".join(parts) + f"; discarded {row['discarded']}"


# ---------------------------------------------------------------------------- targets and report
def _find(result: dict, preset: str, mode: str, S: int, B: int) -> dict | None:
    for row in result["speed"]:
        if (row["preset"], row["mode"], row["seq_len"], row["batch"]) == (preset, mode, S, B):
            return row
    return None


def targets(result: dict) -> list[Target]:
    """The speed targets, each with its measured value (None when the run did not measure it)."""
    def ratio(preset, mode, S, B, key="ratio_vs_hf"):
        row = _find(result, preset, mode, S, B)
        return row["ours"][key] if row else None

    mixed = result.get("mixed") or {}
    mems = [m for m in result["memory"] if "ours_vs_hf" in m]
    large = [m["ckpt_cut"] for m in mems if m["preset"] == "albert-large"]
    out = [
        Target("train albert-tiny 8x128 vs HF", ratio("albert-tiny", "train", 128, 8), 2.0),
        Target("train albert-base 8x128 vs HF", ratio("albert-base", "train", 128, 8), 1.2),
        Target("train albert-base 8x128 MFU", ratio("albert-base", "train", 128, 8, "mfu"), 0.80, unit=""),
        Target("train albert-large 8x128 vs HF", ratio("albert-large", "train", 128, 8), 1.15),
        Target("infer albert-base 8x128 vs HF", ratio("albert-base", "infer", 128, 8), 1.2),
        Target("infer albert-base 1x128 vs HF", ratio("albert-base", "infer", 128, 1), 1.3),
        Target("mixed lengths: unpadded vs padded (train)", mixed.get("train", {}).get("unpad_speedup"), 1.5),
        Target("peak train memory ours / HF (worst row)", max((m["ours_vs_hf"] for m in mems), default=None), 1.0,
               higher_is_better=False, unit=""),
        Target("activation checkpointing cut, albert-large (worst row)", min(large) if large else None, 0.40,
               unit=""),
    ]
    return out


def markdown(env: dict) -> str:
    """The docs/benchmarks.md section of a result (an envelope): speed, prepacked, memory and mixed-length
    tables, then the targets."""
    result, m = env["results"], env["machine"]
    peaks = result["peaks_gflops"]
    lines = [
        f"## Speed vs transformers: {env['date'][:10]}, {m['cpu']} ({m['cores']} cores, {m['threads']} threads)",
        "",
        f"Command: `{env['command']}` (wall {env['wall_s'] / 60:.1f} min). torch {m['torch']}, "
        f"transformers {m['transformers']} (attention sdpa), fp32 unless marked. Matmul peak measured in "
        f"the run: fp32 {peaks['fp32']:.0f} GFLOP/s, bf16 {peaks['bf16']:.0f} GFLOP/s. Tokens/s are medians over "
        f"{result['settings']['repeats']} (training) / {result['settings']['infer_repeats']} (inference) alternating "
        "rounds; MFU = flops_per_token x tokens/s / fp32 peak "
        "(bf16 rows: / bf16 peak). Other load: the most CPU cores other processes used during a kept round; "
        f"a round above {result['settings']['max_foreign']} cores is dropped and redone (at most 3x as many times as there "
        "are rounds). Training: MLM 15% + SOP, torch AdamW; transformers computes dense logits, "
        f"ours only the labelled positions. Raw numbers: `{env['json']}`.",
        "",
        "| preset | mode | B x S | ours tok/s | HF tok/s | ours / HF | ours MFU | HF MFU | ours bf16 tok/s (x fp32) | other load | dropped |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["speed"]:
        bf = r.get("ours_bf16")
        bf_cell = f"{bf['tokens_per_s']:.0f} ({bf['tokens_per_s'] / r['ours']['tokens_per_s']:.2f}x)" if bf else "-"
        lines.append(f"| {r['preset']} | {r['mode']} | {r['batch']} x {r['seq_len']} | {r['ours']['tokens_per_s']:.0f} | "
                     f"{r['hf']['tokens_per_s']:.0f} | **{r['ours']['ratio_vs_hf']:.2f}x** | {r['ours']['mfu']:.0%} | "
                     f"{r['hf']['mfu']:.0%} | {bf_cell} | {max(r['foreign_cores']):.2f} | {r['discarded']} |")
    packed = [r for r in result["speed"] if "ours_prepack" in r]
    if packed:
        lines += ["", "Inference with oneDNN-packed weights (`albertlm.inference.prepack.prepack_for_cpu`, fp32), "
                  "timed in the same rounds as the rows above:", "",
                  "| preset | B x S | ours tok/s | ours packed tok/s | HF tok/s | packed / ours | packed / HF |",
                  "|---|---|---|---|---|---|---|"]
        for r in packed:
            lines.append(f"| {r['preset']} | {r['batch']} x {r['seq_len']} | {r['ours']['tokens_per_s']:.0f} | "
                         f"{r['ours_prepack']['tokens_per_s']:.0f} | {r['hf']['tokens_per_s']:.0f} | "
                         f"{r['ours_prepack']['tokens_per_s'] / r['ours']['tokens_per_s']:.2f}x | "
                         f"**{r['ours_prepack']['ratio_vs_hf']:.2f}x** |")
    if result["memory"]:
        lines += ["", "Peak training memory (RSS above the after-imports baseline, 2 steps in a fresh process; "
                  "ckpt = activation checkpointing of every block):", "",
                  "| preset | B x S | ours MB | HF MB | ours / HF | ours + ckpt MB | ckpt cut |", "|---|---|---|---|---|---|---|"]
        for r in result["memory"]:
            if "ours_vs_hf" not in r:
                continue
            lines.append(f"| {r['preset']} | {r['batch']} x {r['seq_len']} | {r['ours']['peak_mb']:.0f} | "
                         f"{r['hf']['peak_mb']:.0f} | {r['ours_vs_hf']:.2f} | {r['ours_ckpt']['peak_mb']:.0f} | "
                         f"{r['ckpt_cut']:.0%} |")
    mixed = result.get("mixed")
    if mixed:
        lo, hi = mixed["lengths"]
        lines += ["", f"Mixed lengths ({mixed['preset']}, {mixed['batch']} sequences of lengths uniform in {lo}..{hi}: "
                  f"{mixed['batch_lengths']}); real tokens/s:", "",
                  "| mode | ours padded | ours unpadded | HF padded | unpadded / padded | unpadded / HF |",
                  "|---|---|---|---|---|---|"]
        for mode in ("train", "infer"):
            r = mixed[mode]
            lines.append(f"| {mode} | {r['ours_padded']['real_tokens_per_s']:.0f} | {r['ours_unpad']['real_tokens_per_s']:.0f} | "
                         f"{r['hf']['real_tokens_per_s']:.0f} | **{r['unpad_speedup']:.2f}x** | {r['unpad_vs_hf']:.2f}x |")
        bk = mixed["bucketing"]
        lines += ["", f"Length bucketing ({bk['examples']} examples, inference, each batch padded to its longest): "
                  f"random batches compute {bk['padded_tokens_random']} positions, bucketed {bk['padded_tokens_bucketed']} "
                  f"(real {bk['real_tokens']}); bucketed runs **{bk['speedup']:.2f}x** faster."]
    lines += ["", "Targets:", "", *targets_markdown(env["targets"])]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- CLI
def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke run: albert-tiny at S=64, 1 round, no markdown")
    p.add_argument("--presets", nargs="+", default=["albert-tiny", "albert-base", "albert-large", "bert-base"])
    p.add_argument("--seq-lens", nargs="+", type=int, default=[128, 512])
    p.add_argument("--batch", type=int, default=None, help=f"batch size (default {TOKENS_PER_BATCH} // S: 8 x 128, 2 x 512)")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds per training measurement")
    p.add_argument("--infer-repeats", type=int, default=5, help="timed rounds per inference measurement")
    p.add_argument("--variants", default="bf16", help="extra timed variants of ours: bf16, compile (training), prepack "
                   "(inference with oneDNN-packed weights); comma-separated, '' for none")
    p.add_argument("--profile", action="store_true", help="also print (and keep in the JSON) a torch.profiler "
                   "table of one training step of each library, per preset and length")
    p.add_argument("--no-memory", dest="memory", action="store_false", help="skip the memory probes")
    p.add_argument("--mixed-preset", default="albert-base", help="preset of the mixed-length section ('' to skip)")
    p.add_argument("--mixed-lengths", nargs=2, type=int, default=[32, 512])
    p.add_argument("--mixed-batch", type=int, default=8)
    p.add_argument("--mixed-pool", type=int, default=4, help="batches in the bucketing pool")
    p.add_argument("--mixed-repeats", type=int, default=2)
    p.add_argument("--max-foreign", type=float, default=0.25,
                   help="discard a round when other processes used more CPU cores than this")
    p.add_argument("--max-wait", type=float, default=300, help="seconds, in all, to wait for a quiet machine")
    p.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/speed-<date>-<time>.json)")
    p.add_argument("--markdown", type=Path, default=None,
                   help="append the report to this markdown file (the dated results live in docs/benchmarks.md)")
    p.add_argument("--_memory-child", dest="_memory_child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.presets, args.seq_lens, args.batch, args.repeats, args.infer_repeats = ["albert-tiny"], [64], 4, 1, 1
        if args.mixed_preset:
            args.mixed_preset, args.mixed_lengths, args.mixed_pool, args.mixed_repeats = "albert-tiny", [8, 64], 2, 1
        args.max_wait = min(args.max_wait, 10)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args._memory_child:
        print(json.dumps(memory_child(json.loads(args._memory_child))))
        return 0

    def log(msg: str) -> None:
        print(msg, flush=True)

    start = time.perf_counter()
    result = envelope("benchmarks.bench_speed", argv, run(args, log), started=start)
    result["targets"] = [t.as_dict() for t in targets(result["results"])]
    stamp = result["date"][:16].replace("T", "-").replace(":", "")
    out = args.out or RESULTS / f"speed-{stamp}{'-quick' if args.quick else ''}.json"
    publish(result, out, markdown, args.markdown)
    log(f"wrote {out}" + (f", appended to {args.markdown}" if args.markdown else ""))
    return 0

if __name__ == "__main__":
    sys.exit(main())
