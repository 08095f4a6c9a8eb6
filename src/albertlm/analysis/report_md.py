"""report.md from a Report: the tables and numbers are computed here, the fixed prose comes from
report_template.md beside this module (blocks of string.Template text, see that file's head)."""

from __future__ import annotations

import functools
import string
from importlib import resources
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


# ---------------------------------------------------------------------------- the template
TEMPLATE = "report_template.md"
BLOCK = "%% block "


@functools.lru_cache(maxsize=1)
def _blocks() -> dict[str, string.Template]:
    """The template's blocks by name (read once, from the installed package)."""
    text = resources.files("albertlm.analysis").joinpath(TEMPLATE).read_text(encoding="utf-8")
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(BLOCK):
            current = blocks.setdefault(line[len(BLOCK):].strip(), [])
        elif not line.startswith("%%") and current is not None:
            current.append(line)
    return {name: string.Template("\n".join(lines).strip("\n")) for name, lines in blocks.items()}


def _fill(name: str, **values: Any) -> str:
    """Block `name` of the template with its placeholders filled (a missing value is a KeyError)."""
    return _blocks()[name].substitute(values)


# ---------------------------------------------------------------------------- sections
def _header(r: Report) -> list[str]:
    s, env = r.settings, r.environment
    head = _fill("header", command=r.command or "albertlm report", minutes=f"{r.timings['total'] / 60:.1f}",
                 budget=f"{s.budget_minutes:g}", cpus=env.cpus_usable, cpu_model=env.cpu_model, torch=env.torch,
                 albertlm=env.albertlm)
    return [head, *([_fill("quick")] if s.quick else []), _fill("contents")]


def _params(r: Report) -> list[str]:
    recs = r.params
    groups = {"1": "Table 1 (and the presets)", "3": "Table 3: E x sharing, ALBERT-base shape",
              "4": "Table 4: sharing strategies, ALBERT-base shape"}
    blocks = [_fill("params")]
    for table, title in groups.items():
        rows = []
        for x in (x for x in recs if x.table == table):
            paper = "" if x.paper_M is None else f"{x.paper_M}M"
            diff = "" if x.diff_M is None else f"{x.diff_M:+.1f}" + (" *" if not x.within_tolerance else "")
            rows.append([x.name, x.layers, x.hidden, x.embedding, SHARING_NAMES[x.sharing],
                         f"{x.backbone:,}", paper, diff, f"{x.with_heads:,}",
                         f"{x.allreduce_bytes_fp32 / 1e6:,.0f}"])
        blocks.append(_fill("params_table", title=title, table=_table(
            ["config", "L", "H", "E", "sharing", "backbone (ours)", "paper", "diff (M)", "+heads",
             "all-reduce MB/step"], rows, "lrrrlrrrrr")))
    big = {x.name: x for x in recs if x.table == "1"}
    if "bert-large" in big and "albert-large" in big:
        b, a = big["bert-large"].allreduce_bytes_fp32, big["albert-large"].allreduce_bytes_fp32
        blocks.append(_fill("params_note", tolerance=f"{PAPER_TOLERANCE_M:g}", xxlarge_note=r.xxlarge_note,
                            bert_gb=f"{b / 1e9:.2f}", albert_mb=f"{a / 1e6:.0f}", ratio=f"{b / a:.0f}"))
    return blocks


def _speed(r: Report) -> list[str]:
    sp, st, env = r.speed, r.speed.settings, r.environment
    rows = []
    for x in sp.training:
        train_mem = 16 * x.parameters + x.activation_bytes
        rows.append([x.name, _m(x.parameters), f"{x.seconds:.2f}", f"{x.tokens_per_s:,.0f}",
                     f"**{x.speedup:.2f}x**", f"{x.flops_speedup:.2f}x",
                     "" if x.paper_speedup is None else f"{x.paper_speedup:g}x",
                     _mb(x.activation_bytes), _mb(train_mem)])
    table = _table(["model", "params", "s / step", "tokens/s", f"vs {sp.reference} (ours)", "FLOP ratio",
                    "paper speedup", "activations MB", "training MB"], rows)
    blocks = [_fill("speed", cpus=env.cpus_usable, threads=_threads(env.torch_threads), batch=st.batch_size,
                    seq_len=st.seq_len, repeats=st.repeats, reference=sp.reference, table=table)]
    if sp.inference:
        table = _table(["model", "params", "latency ms", "vs other", "GFLOPs/token", "param MB", "forward peak MB",
                        "total MB"], _inference_rows(sp))
        blocks.append(_fill("speed_inference", batch=st.inference_batch_size, seq_len=st.inference_seq_len,
                            repeats=st.inference_repeats, table=table, observed=_inference_observed(sp)))
    blocks.append(_fill("speed_paper", observed=_speed_observed(sp), figure=r.figures.speed))
    return blocks


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
            measured = x.rss and x.rss.peak_kib and x.rss.rss_built_kib is not None
            peak = (x.rss.peak_kib - x.rss.rss_built_kib) * 1024 if measured else None
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
    return _fill("speed_inference_observed", ratios="; ".join(ratios)) if ratios else ""


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
    bigram = study.first_eval.baseline_bigram_accuracy
    stuck = [name for name, v in study.variants.items() if v.mask_accuracy_mean < bigram]
    if not stuck:
        return _fill("study_off_plateau", bigram=_pct(bigram))
    one = len(stuck) == 1
    return _fill("study_on_plateau", stuck=", ".join(stuck), end="ends" if one else "end", bigram=_pct(bigram),
                 steps=study.plan.steps, it_has="it has" if one else "they have", it="it" if one else "them")


def _heldout_se(study: StudyResults) -> str:
    first = study.first_eval
    seeds = len(study.seeds)
    return _fill("study_heldout_se", se=f"{_se(first.mlm_mask_accuracy, first.mask_positions):.1f}",
                 positions=f"{int(first.mask_positions):,}", seeds=seeds, times="times" if seeds > 1 else "time",
                 seed_list=", ".join(map(str, study.seeds)))


def _study_scale(st: StudyResults) -> dict[str, Any]:
    """The placeholders of the study block's **Scale.** paragraph."""
    s, plan = st.settings, st.plan
    tokens = plan.steps * s.batch_size * s.max_seq_length
    train_tokens = st.builds["sop"].splits["train"]["tokens"]
    short = plan.curriculum_steps
    curriculum = _fill("study_curriculum", short=short, short_len=s.curriculum_seq_length,
                       examples=s.batch_size * s.max_seq_length // s.curriculum_seq_length) if short else ""
    return dict(preset=s.preset, hidden=st.hidden, layers=st.layers, steps=plan.steps, batch=s.batch_size,
                seq_len=s.max_seq_length, curriculum=curriculum, optimizer=s.optimizer, lr=f"{s.lr:g}",
                tokens=f"{tokens:,}", paper_share=f"{tokens / PAPER_TOKENS:.1e}",
                epochs=f"{tokens / max(train_tokens, 1):.2f}", train_tokens=f"{train_tokens:,}", corpus=s.corpus,
                pairs=f"{int(st.first_eval.examples):,}")


def _study_tables(st: StudyResults, down: bool) -> tuple[str, str]:
    """Table 3 (E x the swept sharing strategies) and Table 4 (sharing at the base E)."""
    variants, base, hidden = st.variants, st.base_embedding, st.hidden
    sst2 = ["SST-2 dev %"] if down else []
    rows = []
    for sharing in ("none", "all", "attention", "ffn"):
        for e in st.embedding_sizes:
            v = variants.get(f"e{e}-{sharing}")
            if v is None or sharing not in st.settings.table3_sharing:
                continue
            paper_e = 768 if e == hidden else e
            p = PAPER_TABLE3.get((sharing, paper_e))
            rows.append([f"{e}" + (" (=H)" if e == hidden else ""), SHARING_NAMES[sharing], _m(v.backbone),
                         _accuracy(v), _spread(v), f"{v.mask_loss_mean:.3f}"]
                        + ([_downstream(v)] if down else [])
                        + ([f"{p[0]}M" + (" (E=768=H)" if paper_e == 768 else ""), p[1]] if p else ["", ""]))
    head = ["E", "sharing", "params (ours)", "held-out [MASK] acc % (seeds)", "spread", "[MASK] loss", *sst2,
            "paper params", "paper Avg"]
    table3 = _table(head, rows, "llrrrr" + "r" * (len(head) - 6))
    rows = []
    for sharing in ("all", "attention", "ffn", "none"):
        v = variants.get(f"e{base}-{sharing}")
        if v is None:
            continue
        p = PAPER_TABLE4[sharing]
        rows.append([SHARING_NAMES[sharing], _m(v.backbone), _accuracy(v), _spread(v), f"{v.mask_loss_mean:.3f}"]
                    + ([_downstream(v)] if down else []) + [f"{p[0]}M", p[1]])
    head = ["sharing", "params (ours)", "held-out [MASK] acc % (seeds)", "spread", "[MASK] loss", *sst2,
            "paper params", "paper Avg"]
    return table3, _table(head, rows, "lrrrr" + "r" * (len(head) - 5))


def _study(r: Report) -> list[str]:
    st = r.study
    down = any(v.downstream for v in st.variants.values())
    table3, table4 = _study_tables(st, down)
    first = st.first_eval
    return [_fill("study", **_study_scale(st), downstream=r.downstream, table3=table3, base=st.base_embedding,
                  table4=table4, unigram=_pct(first.baseline_unigram_accuracy),
                  bigram=_pct(first.baseline_bigram_accuracy), heldout_se=_heldout_se(st),
                  observed=_study_observed(st.variants, st.base_embedding, st.hidden, st.embedding_sizes),
                  plateau=_plateau_note(st), figure_study=r.figures.study, figure_curves=r.figures.curves)]


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
    table = _table(["trained with", "MLM acc %", "NSP acc %", "SOP acc %", *(["SST-2 dev %"] if down else []),
                    "paper MLM", "paper NSP", "paper SOP", "paper Avg"], rows)
    sop, s = t5["sop"], st.settings
    return [_fill("objectives", base=st.base_embedding, steps=st.plan.steps, seeds=len(st.seeds),
                  heldout_fraction=s.heldout_fraction, n_none=int(sop.per_seed[0].scores["none"].examples),
                  n_nsp=sop.pairs["nsp"], b_nsp=_pct(sop.baseline["nsp"]), n_sop=sop.pairs["sop"],
                  b_sop=_pct(sop.baseline["sop"]), table=table, observed=objectives_observed(t5),
                  batch=s.batch_size, seq_len=s.max_seq_length, figure=r.figures.table5)]


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
    if own_above and not cross_sop_above:
        finding = _fill("objectives_holds")
    else:
        finding = _fill("objectives_not_shown", why="the SOP-trained model is itself at chance on SOP."
                        if not own_above else "the NSP-trained model is above chance on SOP too.")
    return _fill("objectives_observed", facts="; ".join(facts), verdict=finding)


def _smoothness(r: Report) -> list[str]:
    curves = r.study.smoothness
    n = max(c.layers for c in curves.values())
    head = ["model"] + [str(i + 1) for i in range(n)]

    def table(values: dict[str, list[float]], fmt: str) -> str:
        return _table(head, [[label] + [format(v[i], fmt) if i < curves[label].layers else "" for i in range(n)]
                             for label, v in values.items()])

    gap = {k: [(c.distance[-1], c.angle[-1]) for label, c in curves.items()
               if label.startswith(k) and "untrained" not in label] for k in ("all-shared", "not-shared")}
    observed = ""
    if gap["all-shared"] and gap["not-shared"]:
        (da, aa), (dn, an) = gap["all-shared"][0], gap["not-shared"][0]
        observed = " " + _fill("smoothness_observed", da=f"{da:.2f}", aa=f"{aa:.1f}", dn=f"{dn:.2f}",
                                an=f"{an:.1f}")
    hf = " and the --hf-checkpoint model" if any("--hf-checkpoint" in k for k in curves) else ""
    return [_fill("smoothness", tokens=f"{next(iter(curves.values())).tokens:,}",
                  distance=table({k: c.distance for k, c in curves.items()}, ".2f"),
                  angle=table({k: c.angle for k, c in curves.items()}, ".1f"), observed=observed,
                  layers=r.study.layers, hf=hf, figure=r.figures.smoothness)]


def _repro(r: Report) -> list[str]:
    s, env, st = r.settings, r.environment, r.study
    plan, threads = st.plan, r.threads
    steps_from = "fixed by --steps" if plan.steps_from != "the budget" else _fill(
        "repro_steps_budget", pretrain=f"{plan.pretrain_seconds:.0f}", overhead=f"{plan.overhead_seconds:.0f}",
        step=f"{plan.step_seconds:.2f}")
    timed = ": " + ", ".join(f"{n}: {v:.2f} s/step" for n, v in threads.seconds.items()) if threads.seconds else ""
    return [_fill(
        "repro", command=r.command or "albertlm report", mode="quick (tiny budgets, smoke test)" if s.quick else "full",
        budget=f"{s.budget_minutes:g}", wall=" · ".join(f"{k}: {v / 60:.1f} min" for k, v in r.timings.items()),
        per_run=f"{plan.per_run_seconds:.0f}", left=f"{plan.seconds_left_after_setup:.0f}",
        reserve=f"{plan.reserve_seconds:.0f}", runs=len(st.runs), steps=plan.steps, curriculum=plan.curriculum_steps,
        steps_from=steps_from, threads=f"{_threads(threads.chosen)} ({threads.how}{timed})", seed=s.seed,
        seeds=", ".join(map(str, st.seeds)), albertlm=env.albertlm, git=env.git_commit or "unknown", torch=env.torch,
        python=env.python, numpy=env.numpy, sentencepiece=env.sentencepiece, matplotlib=env.matplotlib,
        cpu_model=env.cpu_model, cpu_count=env.cpu_count, cpus=env.cpus_usable,
        torch_threads=_threads(env.torch_threads), ram=f"{(env.memory_bytes or 0) / 2**30:.0f}", platform=env.platform,
        load_start=", ".join(f"{x:.1f}" for x in env.load_average or []),
        load_end=", ".join(f"{x:.1f}" for x in env.load_average_end or []),
        commands="\n".join(pretrain_command(x.recipe, name, "DIR") for name, x in st.runs.items()))]


def render(report: Report) -> str:
    """The whole report.md: every section's blocks, one blank line apart."""
    parts = (_header, _params, _speed, _study, _objectives, _smoothness, _repro)
    return "\n\n".join(block for part in parts for block in part(report)) + "\n"
