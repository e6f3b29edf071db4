"""Figures of the estimator studies (seaborn on matplotlib's Agg backend, no display needed).

One function per artifact, each taking the study's CSV table (a polars DataFrame) and a path.
Every figure has labelled axes with units, a legend where colours or markers carry meaning, and
readable estimator names (`display_name`). Files are written as PNG at 150 dpi unless the path
says otherwise (the suffix picks the format).
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import seaborn as sns  # noqa: E402

FAMILY_COLORS: dict[str, str] = {
    "mc": "#4c72b0",
    "rredcot": "#c44e52",
    "attribution": "#55a868",
    "ground_truth": "#8172b2",
    "baseline": "#7f7f7f",
}
FAMILY_LABELS: dict[str, str] = {
    "mc": "Monte Carlo (N rollouts/state)",
    "rredcot": "RREDCoT value variants",
    "attribution": "attribution baselines",
    "ground_truth": "MC ground truth",
    "baseline": "random segment",
}
_NAMES: dict[str, str] = {
    "loo": "leave-one-out",
    "shapley": "Shapley (permutations)",
    "grad_x_input": "gradient × input",
    "attention": "attention mass",
    "ground_truth": "MC ground truth",
    "ground_truth_split_half": "ground truth, split half",
    "random": "random segment",
}
_RREDCOT_MARKERS = ["o", "s", "D", "^", "v", "P", "X", "*"]


def display_name(estimator: str) -> str:
    """`mc_n4` -> "MC N=4", `rredcot_ref_suffix_sum` -> "RREDCoT ref_suffix_sum", …"""
    if m := re.fullmatch(r"mc_n(\d+)", estimator):
        return f"MC N={m.group(1)}"
    if estimator.startswith("rredcot_"):
        return "RREDCoT " + estimator.removeprefix("rredcot_")
    return _NAMES.get(estimator, estimator)


def save_figure(fig: plt.Figure, path: str | Path) -> Path:
    """Write `fig` to `path` (its folder made), 150 dpi, tight, and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return path


def _err(rows: pl.DataFrame, mean: str, low: str, high: str) -> np.ndarray:
    """(2, n) asymmetric error bars from CI columns (NaN-safe)."""
    m = rows[mean].to_numpy()
    return np.nan_to_num(np.vstack([m - rows[low].to_numpy(), rows[high].to_numpy() - m]))


def estimator_agreement_figure(
    table: pl.DataFrame, path: str | Path, *, n_traces: int | None = None
) -> Path:
    """Mean per-trace Spearman with the ground truth (95% CI) against cost per trace.

    Two panels share the y axis: forward tokens per trace and seconds per trace (log scales).
    MC is one line through N = 1, 2, 4, …; every other estimator is one marker; the ground
    truth's split-half agreement (if present) is a dashed line: the noise ceiling.
    """
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2), sharey=True)
    costs = [
        ("forward_tokens_per_trace", "forward tokens per trace (log scale)"),
        ("seconds_per_trace", "wall time per trace, seconds (log scale)"),
    ]
    ceiling = table.filter(pl.col("family") == "ground_truth")
    costed = table.filter(pl.col("family") != "ground_truth")
    for ax, (cost, xlabel) in zip(axes, costs, strict=True):
        mc = costed.filter(pl.col("family") == "mc").sort("n_rollouts")
        if mc.height:
            ax.errorbar(
                mc[cost].to_numpy(),
                mc["spearman_mean"].to_numpy(),
                yerr=_err(mc, "spearman_mean", "ci95_low", "ci95_high"),
                color=FAMILY_COLORS["mc"],
                marker="o",
                capsize=3,
                label=FAMILY_LABELS["mc"],
            )
            for x, y, n in zip(mc[cost], mc["spearman_mean"], mc["n_rollouts"], strict=True):
                ax.annotate(
                    f"N={n}",
                    (x, y),
                    textcoords="offset points",
                    xytext=(4, -12),
                    fontsize=8,
                    color=FAMILY_COLORS["mc"],
                )
        others = costed.filter(pl.col("family") != "mc")
        for i, row in enumerate(others.iter_rows(named=True)):
            color = FAMILY_COLORS.get(row["family"], "black")
            marker = _RREDCOT_MARKERS[i % len(_RREDCOT_MARKERS)]
            mean = row["spearman_mean"]
            yerr = np.nan_to_num([[mean - row["ci95_low"]], [row["ci95_high"] - mean]])
            ax.errorbar(
                [row[cost]],
                [mean],
                yerr=yerr,
                color=color,
                marker=marker,
                markersize=8,
                capsize=3,
                linestyle="none",
                label=display_name(row["estimator"]),
            )
        for row in ceiling.iter_rows(named=True):
            ax.axhline(
                row["spearman_mean"],
                color=FAMILY_COLORS["ground_truth"],
                linestyle="--",
                label=display_name(row["estimator"]) + " (noise ceiling)",
            )
        ax.axhline(0.0, color="black", linewidth=0.8)
        x = costed[cost].cast(pl.Float64).to_numpy()
        y = costed["spearman_mean"].cast(pl.Float64).to_numpy()
        if np.any((x > 0) & np.isfinite(y)):
            ax.set_xscale("log")
        else:  # nothing to place on a log axis: say so instead of failing
            xlabel = xlabel.replace(" (log scale)", "")
            ax.text(
                0.5,
                0.5,
                "no trace with a defined Spearman ρ",
                transform=ax.transAxes,
                ha="center",
                va="center",
                color="gray",
            )
        ax.set_xlabel(xlabel)
    axes[0].set_ylabel("Spearman ρ with MC ground truth\n(mean over traces, 95% CI)")
    lows = table["ci95_low"].cast(pl.Float64).drop_nans().drop_nulls()
    bottom = min(-0.25, float(lows.min()) - 0.05) if lows.len() else -1.05
    axes[0].set_ylim(max(bottom, -1.05), 1.05)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
        frameon=False,
        title="estimator",
    )
    title = "Segment credit: agreement with the Monte Carlo ground truth vs cost"
    fig.suptitle(title + (f" ({n_traces} traces)" if n_traces else ""))
    fig.tight_layout()
    return save_figure(fig, path)


def correlation_heatmap(matrix: pl.DataFrame, path: str | Path) -> Path:
    """Heatmap of the mean per-trace Spearman ρ between every pair of estimators."""
    sns.set_theme(style="white", context="notebook")
    names = matrix["estimator"].to_list()
    values = matrix.select(names).to_numpy()
    labels = [display_name(n) for n in names]
    size = max(6.0, 0.55 * len(names) + 2)
    fig, ax = plt.subplots(figsize=(size + 1.5, size))
    sns.heatmap(
        values,
        ax=ax,
        vmin=-1,
        vmax=1,
        center=0,
        cmap="vlag",
        annot=len(names) <= 20,
        fmt=".2f",
        annot_kws={"fontsize": 7},
        xticklabels=labels,
        yticklabels=labels,
        square=True,
        cbar_kws={"label": "Spearman ρ (mean over traces, unitless)"},
    )
    ax.set_xlabel("estimator")
    ax.set_ylabel("estimator")
    ax.set_title("Correlation of segment credit between estimators")
    plt.setp(ax.get_xticklabels(), rotation=45, ha="right")
    fig.tight_layout()
    return save_figure(fig, path)


def segmentation_sweep_figure(table: pl.DataFrame, path: str | Path, *, estimator: str) -> Path:
    """Per strategy, against K: RREDCoT's agreement with the ground truth, and its top-1 error
    localization next to the ground truth's and a random segment's."""
    sns.set_theme(style="whitegrid", context="notebook")
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    strategies = table["strategy"].unique(maintain_order=True).to_list()
    palette = dict(zip(strategies, sns.color_palette("colorblind", len(strategies)), strict=True))
    top1 = f"top1_{estimator}"
    for i, s in enumerate(strategies):
        rows = table.filter(pl.col("strategy") == s).sort("requested_segments")
        k = rows["requested_segments"].to_numpy()
        dodge = 0.06 * (i - (len(strategies) - 1) / 2)  # keep the CIs apart
        left.errorbar(
            k + dodge,
            rows["spearman_mean"].to_numpy(),
            yerr=_err(rows, "spearman_mean", "ci95_low", "ci95_high"),
            marker="o",
            capsize=3,
            color=palette[s],
            label=s,
        )
        right.plot(k, rows[top1].to_numpy(), marker="o", color=palette[s], label=s)
        right.plot(
            k,
            rows["top1_ground_truth"].to_numpy(),
            marker="x",
            linestyle=":",
            color=palette[s],
            alpha=0.7,
        )
    by_k = (
        table.group_by("requested_segments")
        .agg(pl.col("top1_random").mean())
        .sort("requested_segments")
    )
    right.plot(
        by_k["requested_segments"],
        by_k["top1_random"],
        color="black",
        linestyle="--",
        label="random segment",
    )
    right.plot([], [], color="gray", marker="o", label=f"{display_name(estimator)} (solid)")
    right.plot([], [], color="gray", marker="x", linestyle=":", label="MC ground truth (dotted)")
    left.set_xlabel("requested segments K")
    left.set_ylabel("Spearman ρ of RREDCoT vs ground truth\n(mean over traces, 95% CI)")
    lows = table["ci95_low"].cast(pl.Float64).drop_nans().drop_nulls()
    bottom = min(-0.25, float(lows.min()) - 0.05) if lows.len() else -1.05
    left.set_ylim(max(bottom, -1.05), 1.05)
    left.axhline(0.0, color="black", linewidth=0.8)
    left.set_title("Agreement with MC ground truth")
    left.legend(title="segmentation strategy", frameon=False)
    right.set_xlabel("requested segments K")
    right.set_ylabel("share of incorrect traces (0–1)")
    right.set_ylim(0, 1.05)
    right.set_title("Lowest-credit segment holds the first error (top-1)")
    right.legend(frameon=False, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    for ax in (left, right):
        ax.set_xticks(sorted(set(table["requested_segments"].to_list())))
    fig.tight_layout()
    return save_figure(fig, path)


def mc_truncation_figure(table: pl.DataFrame, path: str | Path) -> Path:
    """Against the rollout budget L: the share of rollouts cut (and of states left without an
    estimate), and the mean shift of V̂ from the ground truth, per truncation mode."""
    sns.set_theme(style="whitegrid", context="notebook")
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = {"drop": "#dd8452", "zero": "#4c72b0"}
    drop = table.filter(pl.col("truncation") == "drop").sort("budget")
    left.plot(
        drop["budget"],
        drop["truncated_share"],
        marker="o",
        color="black",
        label="rollouts cut at L (dropped or scored 0)",
    )
    left.plot(
        drop["budget"],
        drop["no_estimate_share"],
        marker="s",
        linestyle="--",
        color=colors["drop"],
        label="states with no estimate (drop)",
    )
    left.set_ylabel("share (0–1)")
    left.set_ylim(-0.02, 1.02)
    left.set_title("Truncation")
    for mode in table["truncation"].unique(maintain_order=True).to_list():
        rows = table.filter(pl.col("truncation") == mode).sort("budget")
        right.errorbar(
            rows["budget"].to_numpy(),
            rows["mean_value_shift"].to_numpy(),
            yerr=_err(rows, "mean_value_shift", "ci95_low", "ci95_high"),
            marker="o",
            capsize=3,
            color=colors.get(mode, "gray"),
            label=f"truncation = {mode}",
        )
    right.axhline(0.0, color="black", linewidth=0.8)
    right.set_ylabel("mean V̂_L − V_gt (reward units, 95% CI)")
    right.set_title("Bias of the truncated value estimate")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(set(table["budget"].to_list())))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("rollout budget L (new tokens, log scale)")
        ax.legend(frameon=False)
    fig.tight_layout()
    return save_figure(fig, path)


def error_localization_figure(table: pl.DataFrame, path: str | Path) -> Path:
    """Per estimator: share of incorrect traces whose lowest-credit segment holds the first
    erroneous step (top-1) or is next to it (within one), with 95% CIs; random as reference."""
    sns.set_theme(style="whitegrid", context="notebook")
    rows = table.sort("top1")
    names = [display_name(n) for n in rows["estimator"]]
    y = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(names) + 1.8))
    ax.barh(
        y + 0.2,
        rows["within_one"].to_numpy(),
        height=0.4,
        color="#a1c9f4",
        xerr=_err(rows, "within_one", "within_one_ci95_low", "within_one_ci95_high"),
        capsize=2,
        label="within one segment",
    )
    ax.barh(
        y - 0.2,
        rows["top1"].to_numpy(),
        height=0.4,
        color="#1f4e79",
        xerr=_err(rows, "top1", "top1_ci95_low", "top1_ci95_high"),
        capsize=2,
        label="top-1 (exact segment)",
    )
    rand = table.filter(pl.col("estimator") == "random")
    if rand.height:
        ax.axvline(rand["top1"][0], color="black", linestyle="--", label="random segment, top-1")
    ax.set_yticks(y, names)
    ax.set_xlim(0, 1.05)
    n = int(table["n_traces"].max()) if table.height else 0
    ax.set_xlabel(f"share of incorrect traces (0–1; n = {n})")
    ax.set_ylabel("estimator")
    ax.set_title("Error localization: lowest-credit segment vs first wrong step")
    ax.legend(loc="lower right", frameon=True)
    fig.tight_layout()
    return save_figure(fig, path)


__all__ = [
    "FAMILY_COLORS",
    "correlation_heatmap",
    "display_name",
    "error_localization_figure",
    "estimator_agreement_figure",
    "mc_truncation_figure",
    "segmentation_sweep_figure",
]
