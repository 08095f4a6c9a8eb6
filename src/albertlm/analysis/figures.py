"""The report's PNG figures (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from albertlm.analysis.results import SpeedResults, Table5Row, VariantSummary


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path: str | Path) -> None:
    """Write a figure to `path` atomically (`utils.atomic_path`: a killed report leaves the old PNG
    or the new one, and a name that is a link is replaced, never written through), then close it."""
    from albertlm.utils import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    _plt().close(fig)


def plot_speed(speed: SpeedResults, path: Path) -> None:
    """Training throughput relative to the reference: measured, FLOP ratio, the paper's column."""
    plt = _plt()
    rows = speed.training
    names = [r.name for r in rows]
    series = [("measured here (fwd+bwd)", [r.speedup for r in rows]),
              ("FLOP ratio (analytic)", [r.flops_speedup for r in rows]),
              ("paper Table 2", [r.paper_speedup or np.nan for r in rows])]
    x = np.arange(len(names))
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(9, 4))
    for k, (label, values) in enumerate(series):
        bars = ax.bar(x + (k - 1) * width, values, width, label=label)
        for b, v in zip(bars, values):
            if np.isfinite(v):
                ax.annotate(f"{v:.2g}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=7)
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(x, names, rotation=15)
    ax.set_ylabel(f"training throughput / {speed.reference}'s")
    ax.set_title("Training throughput relative to BERT-large (Table 2 'Speedup')", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path)


def plot_study(variants: dict[str, VariantSummary], path: Path, title: str) -> None:
    """Held-out [MASK] accuracy against parameters, one point per Table 3/4 variant (the mean over
    seeds, with a bar from the lowest to the highest seed); a line joins each sharing strategy's E sweep."""
    plt = _plt()
    from matplotlib.ticker import FuncFormatter

    style = {"all": ("C0", "o"), "none": ("C1", "s"), "attention": ("C2", "^"), "ffn": ("C3", "v")}
    names = {"all": "all-shared", "none": "not-shared", "attention": "shared-attention", "ffn": "shared-FFN"}
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for sharing, (color, marker) in style.items():
        points = sorted((v.variant.embedding_size, v.backbone / 1e6, 100 * v.mask_accuracy_mean,
                         100 * min(v.mask_accuracy), 100 * max(v.mask_accuracy)) for v in variants.values()
                        if v.variant.objective == "sop" and v.variant.sharing == sharing)
        if not points:
            continue
        _, xs, ys, lo, hi = map(np.asarray, zip(*points))
        ax.errorbar(xs, ys, yerr=[ys - lo, hi - ys], color=color, marker=marker, ms=7, lw=1, capsize=3,
                    label=names[sharing])
        for e, x, y, _, _ in points:
            ax.annotate(f"E={e}", (x, y), textcoords="offset points", xytext=(5, 4), fontsize=7, color=color)
    ax.set_xscale("log")
    ticks = sorted({round(v.backbone / 1e6, 2) for v in variants.values()})
    ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(fontsize=8, title="sharing (bars: seed range)", title_fontsize=8)
    ax.set_xlabel("backbone parameters (millions, log scale)")
    ax.set_ylabel("held-out accuracy at [MASK] positions (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    save_png(fig, path)


def plot_table5(table5: dict[str, Table5Row], paper: dict[str, tuple[float, float, float]], path: Path) -> None:
    """Intrinsic accuracies of each objective's model, ours (solid) beside the paper's (hatched)."""
    plt = _plt()
    tasks = ("mlm_accuracy", "nsp_accuracy", "sop_accuracy")
    objectives = list(table5)
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6), sharey=True)
    for ax, task, title in zip(axes, tasks, ("MLM accuracy", "NSP accuracy", "SOP accuracy")):
        x = np.arange(len(objectives))
        ours = [100 * getattr(table5[o], task) for o in objectives]
        seeds = [[100 * getattr(r, task) for r in table5[o].per_seed] or [v] for o, v in zip(objectives, ours)]
        spread = np.array([[v - min(s) for v, s in zip(ours, seeds)], [max(s) - v for v, s in zip(ours, seeds)]])
        theirs = [paper[o][tasks.index(task)] for o in objectives]
        ax.bar(x - 0.2, ours, 0.4, yerr=spread, capsize=3, label="ours (mean; bars: seed range)")
        ax.bar(x + 0.2, theirs, 0.4, label="paper", hatch="//", alpha=0.5)
        for xi, v in zip(x, ours):
            ax.annotate(f"{v:.1f}", (xi - 0.2, v), ha="center", va="bottom", fontsize=7)
        if task != "mlm_accuracy":
            ax.axhline(50, color="grey", lw=0.8, ls="--")
        ax.set_xticks(x, [f"trained: {o}" for o in objectives], fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_ylim(0, 100)
    axes[0].set_ylabel("held-out accuracy (%)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path)


def plot_curves(curves: dict[str, list[tuple[int, float]]], path: Path, window: int = 5) -> None:
    """Training MLM loss against step, one line per run (a running mean over `window` logged points).

    The MLM loss is comparable across objectives; the total loss is not (the `none` objective's
    constant label makes its sentence-level loss vanish)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for name, points in curves.items():
        if points:
            steps, losses = map(np.asarray, zip(*points))
            k = max(1, min(window, len(losses)))
            smooth = np.convolve(losses, np.ones(k) / k, mode="valid")
            ax.plot(steps[k - 1:], smooth, label=name, lw=1.2)
    ax.set_xlabel("step")
    ax.set_ylabel(f"training MLM loss (running mean of {window} logs)")
    ax.set_title("Pretraining MLM loss of every variant (first seed)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    save_png(fig, path)
