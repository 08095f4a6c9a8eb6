"""report.md from the results of `run_report`: every number here comes from its Report."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from albertlm.analysis.params import PAPER_TOLERANCE_M
from albertlm.analysis.results import InferenceSpeed, SpeedResults, Table5Row, VariantSummary
from albertlm.train.pretrain_recipe import pretrain_command

if TYPE_CHECKING:  # report.py imports this module
    from albertlm.analysis.results import Report, StudyResults

PAPER_TABLE3 = {("none", 64): (87, 81.3), ("none", 128): (89, 81.7), ("none", 256): (93, 81.8),
                ("none", 768): (108, 82.3), ("all", 64): (10, 79.0), ("all", 128): (12, 80.1),
                ("all", 256): (16, 79.6), ("all", 768): (31, 79.8)}
"""(sharing, E) -> (params M, downstream Avg) of ALBERT-base (H = 768, L = 12)."""
PAPER_TABLE4 = {"all": (12, 80.1), "attention": (64, 81.7), "ffn": (38, 80.2), "none": (89, 81.6)}
"""Sharing at E = 128 -> (params M, Avg)."""
PAPER_TABLE5 = {"none": (54.9, 52.4, 53.3), "nsp": (54.5, 90.5, 52.0), "sop": (54.0, 78.9, 86.5)}
"""Objective -> (MLM, NSP, SOP accuracy %)."""
PAPER_TABLE5_AVG = {"none": 79.0, "nsp": 79.2, "sop": 80.1}
PAPER_TOKENS = 125_000 * 4096 * 512
"""Tokens (with padding) the paper's ablations trained on: 125k steps x 4096 x 512."""
SHARING_NAMES = {"all": "all-shared", "attention": "shared-attention", "ffn": "shared-FFN", "none": "not-shared"}


def _table(header: list[str], rows: list[list[Any]], align: str | None = None) -> str:
    align = align or "l" + "r" * (len(header) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _threads(n: int) -> str:
    return f"{n} torch thread{'s' if n != 1 else ''}"


def _m(n: float) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k"


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.1f}"


def _mb(n: float | None) -> str:
    return "" if n is None else f"{n / 1e6:,.1f}"


# ---------------------------------------------------------------------------- sections
def _header(r: Report) -> list[str]:
    s, env, t = r.settings, r.environment, r.timings
    quick = s.quick
    lines = ["# ALBERT's findings, reproduced at small scale", "",
             f"Written by `{r.command or 'albertlm report'}` in **{t['total'] / 60:.1f} minutes** "
             f"(budget {s.budget_minutes:g} min) on {env.cpus_usable} CPU cores ({env.cpu_model}), "
             f"torch {env.torch}, albertlm {env.albertlm}. Every number below comes from this run "
             "(`results.json` holds them all); the paper's numbers are quoted beside ours from "
             "Lan et al., ICLR 2020.", ""]
    if quick:
        lines += ["> **Quick mode**: tiny budgets (a few training steps per model, short sequences) to check "
                  "that the whole pipeline runs. These numbers show the machinery works, *not* the paper's effects; "
                  "run without `--quick` (default budget 60 min) for the study.", ""]
    lines += ["Contents: 1. Parameters · 2. Speed and memory · 3. Embedding size and sharing · "
              "4. SOP vs NSP vs none · 5. Smoothness · 6. Reproducibility", ""]
    return lines


def _params(r: Report) -> list[str]:
    recs = r.params
    groups = {"1": "Table 1 (and the presets)", "3": "Table 3: E x sharing, ALBERT-base shape",
              "4": "Table 4: sharing strategies, ALBERT-base shape"}
    lines = ["## 1. Parameters (Tables 1, 3, 4)", "",
             "Exact counts from the configuration (`albertlm params`; equal to the built model's, tested). "
             "*backbone* = embeddings + E→H projection + distinct layers + pooler, what the paper counts; "
             "*+heads* adds the MLM head (decoder tied) and the SOP head. *all-reduce* is the fp32 gradient "
             "that data-parallel training sums across workers every step: one value per distinct parameter, "
             "whatever the batch (bf16 gradients halve it). Same scale as the paper: these are the full-size "
             "configurations.", ""]
    for table, title in groups.items():
        rows = []
        for x in (x for x in recs if x.table == table):
            paper = "" if x.paper_M is None else f"{x.paper_M}M"
            diff = "" if x.diff_M is None else f"{x.diff_M:+.1f}" + (" *" if not x.within_tolerance else "")
            rows.append([x.name, x.layers, x.hidden, x.embedding, SHARING_NAMES[x.sharing],
                         f"{x.backbone:,}", paper, diff, f"{x.with_heads:,}",
                         f"{x.allreduce_bytes_fp32 / 1e6:,.0f}"])
        lines += [f"**{title}**", "", _table(["config", "L", "H", "E", "sharing", "backbone (ours)", "paper",
                                              "diff (M)", "+heads", "all-reduce MB/step"], rows, "lrrrlrrrrr"), ""]
    big = {x.name: x for x in recs if x.table == "1"}
    if "bert-large" in big and "albert-large" in big:
        b, a = big["bert-large"], big["albert-large"]
        lines += [f"Every printed figure is matched within {PAPER_TOLERANCE_M:g}M except those marked *: "
                  f"{r.xxlarge_note} Sharing divides the all-reduce traffic: BERT-large moves "
                  f"{b.allreduce_bytes_fp32 / 1e9:.2f} GB per step, ALBERT-large "
                  f"{a.allreduce_bytes_fp32 / 1e6:.0f} MB "
                  f"({b.allreduce_bytes_fp32 / a.allreduce_bytes_fp32:.0f}x "
                  "less), while the compute per token stays that of a 24-layer, H=1024 network (section 2).", ""]
    return lines


def _speed(r: Report) -> list[str]:
    sp = r.speed
    st = sp.settings
    env = r.environment
    lines = ["## 2. Speed and memory (Table 2)", "",
             f"**Scale.** Paper: training throughput on TPU v3 at batch 4096 x 512 tokens, full steps. Here: "
             f"{env.cpus_usable} shared CPU cores ({_threads(env.torch_threads)}), a forward + backward "
             f"pretraining step (MLM on 15% of positions + SOP, no optimizer step) on a random batch of "
             f"**{st.batch_size} x {st.seq_len} tokens**, median of {st.repeats} timed step(s) after one "
             "warm-up. "
             "Relative throughput reflects compute per token; the optimizer step, left out, costs in proportion to "
             "the parameters and would favour ALBERT slightly. *FLOP ratio* is the analytic training FLOPs per "
             f"token of {sp.reference} over the model's (`analysis/params.flops_per_token`).", ""]
    rows = []
    for x in sp.training:
        train_mem = 16 * x.parameters + x.activation_bytes
        rows.append([x.name, _m(x.parameters), f"{x.seconds:.2f}", f"{x.tokens_per_s:,.0f}",
                     f"**{x.speedup:.2f}x**", f"{x.flops_speedup:.2f}x",
                     "" if x.paper_speedup is None else f"{x.paper_speedup:g}x",
                     _mb(x.activation_bytes), _mb(train_mem)])
    lines += [_table(["model", "params", "s / step", "tokens/s", f"vs {sp.reference} (ours)", "FLOP ratio",
                      "paper speedup", "activations MB", "training MB"], rows), "",
              "*activations*: bytes autograd saves for the backward pass at this batch (measured, deduplicated by "
              "storage, weights excluded); *training MB* = 16 bytes per parameter (fp32 weights, gradients, Adam's "
              "two moments) + activations. ALBERT's small parameter count shrinks the first term; the second grows "
              "with layers x hidden size exactly as in a BERT of the same shape.", ""]
    if sp.inference:
        lines += [f"**Inference: ALBERT vs the BERT of the same shape** (the twin: E = H, nothing shared). Backbone "
                  f"forward pass, batch {st.inference_batch_size} x {st.inference_seq_len} tokens, median of "
                  f"{st.inference_repeats} calls after a warm-up.", "",
                  _table(["model", "params", "latency ms", "vs other", "GFLOPs/token", "param MB",
                          "forward peak MB", "total MB"], _inference_rows(sp)), "",
                  "Memory method: *param MB* = parameters x 4 bytes (exact). *forward peak MB* = the peak resident "
                  "memory one forward pass adds on top of the built model, measured in a fresh Python process "
                  "(Linux: /proc/self/clear_refs resets VmHWM after the model is built; VmHWM - VmRSS after the "
                  "pass). " + _inference_observed(sp), ""]
    lines += ["Paper: BERT-large has about 3.17x the training throughput of ALBERT-xxlarge (0.3x) despite "
              "ALBERT-xxlarge's 70% of the parameters: fewer parameters do not mean less compute. "
              + _speed_observed(sp),
              "", f"![speed]({r.figures.speed})", ""]
    return lines


def _pairs(sp: SpeedResults) -> dict[str, dict[str, InferenceSpeed]]:
    """ALBERT preset -> {"albert": its row, "twin": its BERT twin's row} (either may be missing)."""
    pairs: dict[str, dict[str, InferenceSpeed]] = {}
    for x in sp.inference:
        pairs.setdefault(x.pair, {})["twin" if x.twin else "albert"] = x
    return pairs


def _inference_rows(sp: SpeedResults) -> list[list[str]]:
    rows = []
    for d in _pairs(sp).values():
        for key in ("albert", "twin"):
            x = d.get(key)
            if x is None:
                continue
            other = d.get("twin" if key == "albert" else "albert")
            peak = (x.rss.peak_kib - x.rss.rss_built_kib) * 1024 if x.rss and x.rss.peak_kib else None
            rows.append([x.name, _m(x.parameters), f"{1000 * x.seconds:.1f}",
                         f"{x.seconds / other.seconds:.2f}" if other else "",
                         f"{x.flops_per_token / 1e9:.2f}", _mb(x.parameter_bytes), _mb(peak),
                         _mb(x.parameter_bytes + peak) if peak is not None else ""])
    return rows


def _speed_observed(sp: SpeedResults) -> str:
    rows = {x.name: x for x in sp.training}
    ref = rows.get(sp.reference)
    if ref is None:
        return ""
    parts = [f"{x.name} has {x.parameters / ref.parameters:.2f}x the parameters of {ref.name} and "
             f"trains {x.speedup:.2f}x as fast (FLOP ratio {x.flops_speedup:.2f}x"
             + (f", paper {x.paper_speedup:g}x)" if x.paper_speedup is not None else ")")
             for x in sp.training if x is not ref and x.name.startswith("albert")]
    if not parts:
        return ""
    return "Here: " + "; ".join(parts) + "."


def _inference_observed(sp: SpeedResults) -> str:
    ratios = [f"{name} {d['albert'].seconds / d['twin'].seconds:.2f}x its twin's latency with "
              f"{d['albert'].parameters / d['twin'].parameters:.2f}x its parameters"
              for name, d in _pairs(sp).items() if "albert" in d and "twin" in d]
    return ("Equal compute per token should mean equal latency: sharing saves memory, not time. Measured: "
            + "; ".join(ratios) + " (single calls on a shared machine vary by some 10-20%).") if ratios else ""


def _se(p: float, n: float) -> float:
    """Binomial standard error, in points, of an accuracy p measured on n items."""
    return 100 * (p * (1 - p) / max(n, 1)) ** 0.5


def _cell(values: list[float], mean: float | None) -> str:
    """Mean over seeds in bold, then every seed's value."""
    if not values:
        return ""
    seeds = ", ".join(_pct(x) for x in values)
    return f"**{_pct(mean)}**" + (f" ({seeds})" if len(values) > 1 else "")


def _accuracy(v: VariantSummary) -> str:
    return _cell(v.mask_accuracy, v.mask_accuracy_mean)


def _downstream(v: VariantSummary) -> str:
    return _cell(v.downstream, v.downstream_mean)


def _spread(v: VariantSummary) -> str:
    return "" if len(v.mask_accuracy) < 2 else f"{100 * v.mask_accuracy_spread:.1f}"


def compare(a: VariantSummary, b: VariantSummary) -> str:
    """`b minus a` in points with a verdict against the two variants' seed spreads."""
    diff = 100 * (b.mask_accuracy_mean - a.mask_accuracy_mean)
    if len(a.mask_accuracy) < 2 or len(b.mask_accuracy) < 2:
        return f"{diff:+.1f} points (one seed: spread not measured)"
    spread = 100 * max(a.mask_accuracy_spread, b.mask_accuracy_spread)
    verdict = "larger than" if abs(diff) > spread else "within"
    return f"{diff:+.1f} points, {verdict} the seed spread ({spread:.1f})"


def _study_observed(variants: dict[str, VariantSummary], base: int, hidden: int, sizes: list[int]) -> str:
    facts = []
    a, n = variants.get(f"e{base}-all"), variants.get(f"e{base}-none")
    if a and n:
        facts.append(f"not-shared minus all-shared at E={base}: {compare(a, n)} (paper, downstream Avg: "
                     f"{PAPER_TABLE4['none'][1] - PAPER_TABLE4['all'][1]:+.1f})")
    at, ff = variants.get(f"e{base}-attention"), variants.get(f"e{base}-ffn")
    if at and ff and a:
        facts.append(f"shared-attention minus all-shared: {compare(a, at)}; shared-FFN minus all-shared: "
                     f"{compare(a, ff)} (paper: {PAPER_TABLE4['attention'][1] - PAPER_TABLE4['all'][1]:+.1f} and "
                     f"{PAPER_TABLE4['ffn'][1] - PAPER_TABLE4['all'][1]:+.1f})")
    lo, hi = min(sizes), max(sizes)
    for sharing in ("all", "none"):
        x, y = variants.get(f"e{lo}-{sharing}"), variants.get(f"e{hi}-{sharing}")
        if x and y and lo != hi:
            paper_lo, paper_hi = PAPER_TABLE3[(sharing, 64)][1], PAPER_TABLE3[(sharing, 768)][1]
            facts.append(f"E={hi}{' (=H)' if hi == hidden else ''} minus E={lo}, {SHARING_NAMES[sharing]}: "
                         f"{compare(x, y)} (paper, E=768 minus E=64: {paper_hi - paper_lo:+.1f})")
        mid = variants.get(f"e{base}-{sharing}")
        if x and mid and base not in (lo, hi):
            facts.append(f"E={base} minus E={lo}, {SHARING_NAMES[sharing]}: {compare(x, mid)}")
    return "Here: " + "; ".join(facts) + "."


def _plateau_note(study: StudyResults) -> str:
    """Name the variants whose mean [MASK] accuracy is below the context baseline: still on the plateau."""
    first = next(iter(study.runs.values())).summary.eval
    bigram = first.baseline_bigram_accuracy
    stuck = [name for name, v in study.variants.items() if v.mask_accuracy_mean < bigram]
    if not stuck:
        return (f"Every variant ends above the context baseline ({_pct(bigram)}%): all left the unigram plateau.")
    return (f"**On the plateau:** {', '.join(stuck)} end{'s' if len(stuck) == 1 else ''} below the context baseline "
            f"({_pct(bigram)}%) on average over its seeds: in {study.plan.steps} steps "
            f"{'it has' if len(stuck) == 1 else 'they have'} not left the unigram plateau, so a gap to "
            f"{'it' if len(stuck) == 1 else 'them'} measures how soon a variant leaves the plateau at this budget, "
            "not what it can learn.")


def _heldout_se(study: StudyResults) -> str:
    first = next(iter(study.runs.values())).summary.eval
    se = _se(first.mlm_mask_accuracy, first.mask_positions)
    seeds = len(study.seeds)
    return (f"The held-out set alone gives each accuracy a binomial standard error of about ±{se:.1f} points "
            f"({int(first.mask_positions):,} [MASK] positions). Each variant ran {seeds} time"
            f"{'s' if seeds > 1 else ''} (seeds {', '.join(map(str, study.seeds))}: initialisation, data order and "
            "masks differ; data build and held-out documents do not); *spread* is the highest minus the lowest "
            "seed. A difference within the larger of the two spreads is not evidence; with two seeds a spread is "
            "itself a rough estimate, so even a difference beyond it is suggestive rather than settled.")


def _study_scale(r: Report) -> str:
    st = r.study
    s, plan = st.settings, st.plan
    tokens = plan.steps * s.batch_size * s.max_seq_length
    train_tokens = st.builds["sop"].splits["train"]["tokens"]
    short = plan.curriculum_steps
    curriculum = (f", the first {short} of them as {s.batch_size * s.max_seq_length // s.curriculum_seq_length}"
                  f" x {s.curriculum_seq_length}-token examples (the quick recipe's curriculum)" if short else "")
    return (f"**Scale.** Paper: ALBERT-base (H=768, L=12), 125k steps x 4096 x 512 tokens on BookCorpus + Wikipedia "
            f"(~16 GB), scored by the average of five downstream tasks. Here: `{s.preset}` "
            f"(H={st.hidden}, L={st.layers}) trained **{plan.steps} steps x "
            f"{s.batch_size} x {s.max_seq_length} tokens**{curriculum} with {s.optimizer} at lr {s.lr:g} "
            f"(at most {tokens:,} token slots, {tokens / PAPER_TOKENS:.1e} of the paper's; "
            f"{tokens / max(train_tokens, 1):.2f} epochs of the {train_tokens:,}-token training split of "
            f"`{s.corpus}`), scored by held-out accuracy at [MASK] positions of "
            f"{int(next(iter(st.runs.values())).summary.eval.examples):,} held-out pairs.")


def _study(r: Report) -> list[str]:
    st = r.study
    variants, base = st.variants, st.base_embedding
    hidden = st.hidden
    down = any(v.downstream for v in variants.values())
    sizes = list(dict.fromkeys(e or hidden for e in st.settings.embedding_sizes))
    lines = ["## 3. Embedding size and cross-layer sharing (Tables 3, 4)", "", _study_scale(r), "",
             f"Downstream (SST-2 dev accuracy after a short fine-tuning): {r.downstream}.", ""]
    head = ["E", "sharing", "params (ours)", "held-out [MASK] acc % (seeds)", "spread", "[MASK] loss"] + (
        ["SST-2 dev %"] if down else []) + ["paper params", "paper Avg"]
    rows = []
    for sharing in ("none", "all", "attention", "ffn"):
        for e in sizes:
            v = variants.get(f"e{e}-{sharing}")
            if v is None or sharing not in st.settings.table3_sharing:
                continue
            paper_e = 768 if e == hidden else e
            p = PAPER_TABLE3.get((sharing, paper_e))
            rows.append([f"{e}" + (" (=H)" if e == hidden else ""), SHARING_NAMES[sharing], _m(v.backbone),
                         _accuracy(v), _spread(v), f"{v.mask_loss_mean:.3f}"]
                        + ([_downstream(v)] if down else [])
                        + ([f"{p[0]}M" + (" (E=768=H)" if paper_e == 768 else ""), p[1]] if p else ["", ""]))
    lines += ["**Table 3: embedding size** (paper: ALBERT-base; its E=768 is E=H, our E=H is the last row of "
              "each block; the paper's E=256 row has no counterpart here unless H=256)", "",
              _table(head, rows, "llrrrr" + "r" * (len(head) - 6)), ""]
    rows = []
    for sharing in ("all", "attention", "ffn", "none"):
        v = variants.get(f"e{base}-{sharing}")
        if v is None:
            continue
        p = PAPER_TABLE4[sharing]
        rows.append([SHARING_NAMES[sharing], _m(v.backbone), _accuracy(v), _spread(v), f"{v.mask_loss_mean:.3f}"]
                    + ([_downstream(v)] if down else []) + [f"{p[0]}M", p[1]])
    head4 = ["sharing", "params (ours)", "held-out [MASK] acc % (seeds)", "spread", "[MASK] loss"] + (
        ["SST-2 dev %"] if down else []) + ["paper params", "paper Avg"]
    first = next(iter(st.runs.values())).summary.eval
    lines += [f"**Table 4: sharing strategy at E={base}**", "",
              _table(head4, rows, "lrrrr" + "r" * (len(head4) - 5)), "",
              f"Accuracy is scored at [MASK] positions only (kept and random-token positions apart). Baselines "
              f"at the same positions: the most frequent training token gives "
              f"{_pct(first.baseline_unigram_accuracy)}%, the most frequent token after the visible left "
              f"neighbour {_pct(first.baseline_bigram_accuracy)}%. " + _heldout_se(st), "",
              "Paper: the factorised embedding costs little (E=128 is best when all-shared); all-shared loses "
              "1.5-2.2 points of Avg against not-shared, most of it from sharing the FFN, little from sharing "
              "attention. " + _study_observed(variants, base, hidden, sizes), "", _plateau_note(st),
              "", f"![embedding and sharing]({r.figures.study})", "",
              f"![training curves]({r.figures.curves})", ""]
    return lines


def _objectives(r: Report) -> list[str]:
    st = r.study
    t5 = st.table5
    variants = st.variants
    rows = []
    down = any(v.downstream for v in variants.values())

    for obj in ("none", "nsp", "sop"):
        x = t5[obj]
        p = PAPER_TABLE5[obj]
        sst2 = [_downstream(variants[x.variant])] if down else []
        rows.append([obj.upper() if obj != "none" else "None",
                     _cell([s.mlm_accuracy for s in x.per_seed], x.mlm_accuracy),
                     _cell([s.nsp_accuracy for s in x.per_seed], x.nsp_accuracy),
                     _cell([s.sop_accuracy for s in x.per_seed], x.sop_accuracy),
                     *sst2, p[0], p[1], p[2], PAPER_TABLE5_AVG[obj]])
    sizes = {"none": int(t5["sop"].per_seed[0].scores["none"].examples), **t5["sop"].pairs}
    base = {o: _pct(t5["sop"].baseline[o]) for o in ("nsp", "sop")}
    s = st.settings
    return ["## 4. Sentence-level objective: SOP vs NSP vs none (Table 5)", "",
            f"Each objective trains the same model (E={st.base_embedding}, all-shared, "
            f"{st.plan.steps} steps, {len(st.seeds)} seeds) on "
            "its own data build; the three builds share the tokenizer, the seed and the held-out documents "
            f"(heldout_fraction {s.heldout_fraction}: documents never seen in training). Every model is then scored "
            f"on the held-out pairs of all three builds: MLM accuracy at [MASK] positions of the `none` pairs "
            f"(natural order, {sizes['none']} pairs), NSP accuracy on the `nsp` pairs ({sizes['nsp']}; majority-label "
            f"baseline {base['nsp']}%), SOP accuracy on the `sop` pairs ({sizes['sop']}; baseline {base['sop']}%). "
            "Cells: the mean over seeds in bold, then each seed.", "",
            _table(["trained with", "MLM acc %", "NSP acc %", "SOP acc %", *(["SST-2 dev %"] if down else []),
                    "paper MLM", "paper NSP", "paper SOP", "paper Avg"], rows), "",
            "**Label mapping.** Both tasks ask the same binary question of the one 2-way head: is segment B the "
            "true continuation of A (label 0) or not (label 1)? For SOP label 1 means *swapped* (same two segments, "
            "reversed), for NSP *B comes from another document*. A model's head is read as trained (class 0 = "
            "positive) and scored against the other task's labels: the NSP model's \"random next\" answers the "
            "SOP question \"swapped?\", the SOP model's \"swapped\" answers the NSP question \"not a continuation?\". "
            "The `none` model's head only ever saw label 0: it answers \"in order\" to everything, so its accuracy is "
            "the share of positive pairs (about 50%) by construction.", "",
            "Paper: an NSP-trained model cannot do SOP (52.0%, chance) because NSP is solvable from topic alone; an "
            "SOP-trained model does NSP well (78.9%) since a swapped pair is also not a continuation. "
            + objectives_observed(t5), "",
            f"**Scale.** As section 3 ({st.plan.steps} steps of {s.batch_size} x {s.max_seq_length} "
            "tokens vs the paper's 125k x 4096 x 512).", "", f"![objectives]({r.figures.table5})", ""]


def _vs_chance(values: list[float], baseline: float, n: int) -> tuple[str, bool]:
    """'mean 58.1 ± 1.6 (SE)' and whether the mean is more than two standard errors above the baseline.

    The standard error is binomial on the n held-out pairs; every seed is scored on the same pairs,
    so averaging seeds does not shrink it."""
    mean = sum(values) / len(values)
    se = _se(mean, n)
    return f"mean {100 * mean:.1f} ± {se:.1f} (SE)", 100 * (mean - baseline) > 2 * se


def objectives_observed(t5: dict[str, Table5Row]) -> str:
    """Table 5 in both directions, each verdict against the majority baseline and a standard error."""
    nsp, sop = t5["nsp"], t5["sop"]
    n_sop, n_nsp = sop.pairs["sop"], sop.pairs["nsp"]
    b_sop, b_nsp = sop.baseline["sop"], sop.baseline["nsp"]
    own, own_above = _vs_chance([x.sop_accuracy for x in sop.per_seed], b_sop, n_sop)
    cross_sop, cross_sop_above = _vs_chance([x.sop_accuracy for x in nsp.per_seed], b_sop, n_sop)
    cross_nsp, cross_nsp_above = _vs_chance([x.nsp_accuracy for x in sop.per_seed], b_nsp, n_nsp)
    own_nsp, own_nsp_above = _vs_chance([x.nsp_accuracy for x in nsp.per_seed], b_nsp, n_nsp)

    def verdict(above: bool) -> str:
        return "above chance" if above else "not distinguishable from chance"

    facts = [f"the SOP-trained model on SOP: {own} against the {100 * b_sop:.1f}% baseline, {verdict(own_above)}",
             f"the NSP-trained model on SOP: {cross_sop}, {verdict(cross_sop_above)} (paper: chance)",
             f"the SOP-trained model on NSP: {cross_nsp} against {100 * b_nsp:.1f}%, {verdict(cross_nsp_above)} "
             "(paper: well above)",
             f"the NSP-trained model on NSP: {own_nsp}, {verdict(own_nsp_above)}"]
    holds = own_above and not cross_sop_above
    return ("Here: " + "; ".join(facts) + ". The standard error is binomial on the held-out pairs (the seeds "
            "share them, so averaging seeds does not shrink it). " + ("The paper's finding in the SOP direction (SOP-trained "
            "above chance on SOP, NSP-trained not) holds at this scale." if holds else
            "The paper's finding in the SOP direction (SOP-trained above chance on SOP, NSP-trained not) is **not** "
            "shown at this scale: " + ("the SOP-trained model is itself at chance on SOP." if not own_above else
                                       "the NSP-trained model is above chance on SOP too.")))


def _smoothness(r: Report) -> list[str]:
    curves = r.study.smoothness
    n = max(c.layers for c in curves.values())
    head = ["model"] + [str(i + 1) for i in range(n)]

    def rows(values: dict[str, list[float]], fmt: str) -> list[list[str]]:
        return [[label] + [format(v[i], fmt) if i < curves[label].layers else "" for i in range(n)]
                for label, v in values.items()]

    tokens = next(iter(curves.values())).tokens
    gap = {k: [(c.distance[-1], c.angle[-1]) for label, c in curves.items()
               if label.startswith(k) and "untrained" not in label] for k in ("all-shared", "not-shared")}
    observed = ""
    if gap["all-shared"] and gap["not-shared"]:
        (da, aa), (dn, an) = gap["all-shared"][0], gap["not-shared"][0]
        observed = (f" Here, at the last layer: all-shared {da:.2f} / {aa:.1f}°, not-shared {dn:.2f} / {an:.1f}° "
                    "(L2 / angle); the dashed curves are the same two architectures at initialisation, so the "
                    "difference between solid and dashed is what training did.")
    return ["## 5. Smoothness of the layer transitions (Figure 1)", "",
            "For every layer, the L2 distance and the angle (degrees; arccos of the cosine similarity) between the "
            f"layer's input and output embedding of each token, averaged over {tokens:,} held-out tokens (padding "
            "excluded; the first layer's input is the E→H projection). `analysis/smoothness.py`.", "",
            "**L2 distance, by layer**", "", _table(head, rows({k: c.distance for k, c in curves.items()}, ".2f")), "",
            "**Angle (degrees), by layer**", "", _table(head, rows({k: c.angle for k, c in curves.items()}, ".1f")), "",
            "**What the curves mean.** A small distance and angle mean a layer changes its input only a little, so the "
            "network refines the representation gradually instead of jumping between layers; the paper finds "
            "ALBERT's (all-shared) transitions much smoother than BERT's and oscillating rather than converging to 0, "
            "i.e. weight sharing stabilises the network's parameters." + observed, "",
            "**Scale.** Paper: BERT-large and ALBERT-large, 24 layers, fully pretrained. Here: the study's all-shared "
            f"and not-shared models ({r.study.layers} layers, section 3's steps)"
            + (" and the --hf-checkpoint model" if any("--hf-checkpoint" in k for k in curves) else "") + ".", "",
            f"![smoothness]({r.figures.smoothness})", ""]


def _repro(r: Report) -> list[str]:
    s, env, t = r.settings, r.environment, r.timings
    st = r.study
    plan = st.plan
    lines = ["## 6. Reproducibility", "", "```", r.command or "albertlm report", "```", "",
             _table(["", ""], [
                 ["mode", "quick (tiny budgets, smoke test)" if s.quick else "full"],
                 ["budget", f"{s.budget_minutes:g} min for the whole report (default 60; --quick: 6)"],
                 ["wall time", " · ".join(f"{k}: {v / 60:.1f} min" for k, v in t.items())],
                 ["per-run budget", f"{plan.per_run_seconds:.0f} s = (time left after sections 1-2 and the data "
                  f"builds: {plan.seconds_left_after_setup:.0f} s - reserve {plan.reserve_seconds:.0f} s) / "
                  f"{len(st.runs)} runs"],
                 ["steps", f"{plan.steps} for every run (the first {plan.curriculum_steps} at the "
                  "curriculum length), " + ("fixed by --steps" if plan.steps_from != "the budget"
                                            else f"= (pretraining share {plan.pretrain_seconds:.0f} s - "
                  f"evaluation/saving {plan.overhead_seconds:.0f} s) / measured step {plan.step_seconds:.2f} s")],
                 ["threads", f"{_threads(r.threads.chosen)} ({r.threads.how}"
                  + (": " + ", ".join(f"{n}: {v:.2f} s/step" for n, v in r.threads.seconds.items())
                     if r.threads.seconds else "") + ")"],
                 ["seeds", f"{s.seed} (tokenizer sample, data builds, speed inputs); training seeds "
                  f"{', '.join(map(str, st.seeds))} (initialisation, data order, masks) for every variant"],
                 ["versions", f"albertlm {env.albertlm} (git {env.git_commit or 'unknown'}), "
                  f"torch {env.torch}, "
                  f"python {env.python}, numpy {env.numpy}, sentencepiece {env.sentencepiece}, "
                  f"matplotlib {env.matplotlib}"],
                 ["machine", f"{env.cpu_model}, {env.cpu_count} CPUs ({env.cpus_usable} usable), "
                  f"{_threads(env.torch_threads)}, {(env.memory_bytes or 0) / 2**30:.0f} GiB RAM, "
                  f"{env.platform}"],
                 ["load", f"load average {', '.join(f'{x:.1f}' for x in env.load_average or [])} at the start, "
                  f"{', '.join(f'{x:.1f}' for x in env.load_average_end or [])} at the end (a shared machine "
                  "slows the timings, not the results of a fixed step count)"],
             ], "ll"), "",
             "Each study run can be repeated alone: copy `study/shared/<objective>/{tokenizer,data}` into a fresh "
             "run directory `DIR/NAME` (so the same tokenizer and shards are used), then:", "", "```"]
    for name, x in st.runs.items():
        lines.append(pretrain_command(x.recipe, name, "DIR"))
    lines += ["```", "", "Files: `results.json` (every number), `report.log`, `study/runs/<name>/` (recipe.json, "
              "metrics.jsonl, tensorboard/, model/ loadable by transformers), `study/shared/` (tokenizer and "
              "the three data builds).", ""]
    return lines


def render(report: Report) -> str:
    """The whole report.md."""
    parts = (_header, _params, _speed, _study, _objectives, _smoothness, _repro)
    return "\n".join(line for part in parts for line in part(report))
