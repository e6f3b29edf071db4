"""Figures of the estimator studies (seaborn on matplotlib's Agg backend, no display needed).

One function per artifact, each taking the study's CSV table (a polars DataFrame) and a path.
Every figure has labelled axes with units, a legend where colours or markers carry meaning, and
readable estimator names (`display_name`). Files are written as PNG at 150 dpi unless the path
says otherwise (the suffix picks the format). A table without rows (a study writes its header
only when no trace qualifies) gives a figure that says so (`says_no_rows`), not an error.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import seaborn as sns  # noqa: E402

from rredcot.studies import families

FAMILY_COLORS: dict[str, str] = {
    families.MC: "#4c72b0",
    families.RREDCOT: "#c44e52",
    families.ATTRIBUTION: "#55a868",
    families.GROUND_TRUTH: "#8172b2",
    families.BASELINE: "#7f7f7f",
    families.NULL: "#000000",
    families.BAYES: "#dd8452",
}
FAMILY_LABELS: dict[str, str] = {
    families.MC: "Monte Carlo (N rollouts/state)",
    families.RREDCOT: "RREDCoT value variants",
    families.ATTRIBUTION: "attribution baselines",
    families.GROUND_TRUTH: "MC ground truth",
    families.BASELINE: "random segment",
    families.BAYES: "one-pass Bayes value (OPPO)",
    families.NULL: "null (knows only R)",
}
_NAMES: dict[str, str] = {
    "loo": "leave-one-out",
    "shapley": "Shapley (permutations)",
    "grad_x_input": "gradient × input",
    "attention": "attention mass",
    families.GROUND_TRUTH: "MC ground truth",
    "random": "random segment",
    "null_R_only": "null (knows only R)",
    "oppo_bayes": "OPPO Bayes value",
    "oppo_bayes_token": "OPPO Bayes value, per token",
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


def no_rows_figure(path: str | Path, title: str) -> Path:
    """A figure that states its table has no rows: the artifact exists and says why it is empty."""
    fig, ax = plt.subplots(figsize=(6.4, 2.0))
    ax.axis("off")
    ax.text(0.5, 0.5, f"{title}\n\nno rows in this run's table", ha="center", va="center")
    return save_figure(fig, path)


def says_no_rows(title: str) -> Callable[[Callable[..., Path]], Callable[..., Path]]:
    """Decorate a figure function `(table, path, **options) -> Path` so that a table without rows
    (header only, or no columns at all) draws `no_rows_figure` instead of failing on a column
    the empty table lacks: a run must not end on a figure of a study that found nothing."""

    def decorate(draw: Callable[..., Path]) -> Callable[..., Path]:
        @functools.wraps(draw)
        def figure(table: pl.DataFrame, path: str | Path, **options: object) -> Path:
            if table.is_empty():
                return no_rows_figure(path, title)
            return draw(table, path, **options)

        return figure

    return decorate


def legend_right(fig: plt.Figure, ax: plt.Axes, title: str) -> None:
    """One legend entry per label of `ax`, right of the figure."""
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles, strict=True))
    fig.legend(
        list(seen.values()),
        list(seen.keys()),
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
        frameon=False,
        title=title,
    )


def ci_error_bars(rows: pl.DataFrame, mean: str, low: str, high: str) -> np.ndarray:
    """(2, n) asymmetric error bars from CI columns (NaN-safe)."""
    m = rows[mean].to_numpy()
    return np.nan_to_num(np.vstack([m - rows[low].to_numpy(), rows[high].to_numpy() - m]))


@says_no_rows("Credit estimators vs the Monte Carlo ground truth")
def estimator_agreement_figure(
    table: pl.DataFrame, path: str | Path, *, baseline_estimator: str | None = None
) -> Path:
    """Spearman ρ with the MC ground truth (95% CI) against forward tokens per trace, one panel
    per target (values, credits) × aggregation (per trace, pooled).

    MC is one line through N = 1, 2, 4, …; RREDCoT variants are filled markers (conditional
    answer-now) or open ones (joint); attributions are green markers; the null row (a constant
    potential: what R alone explains) is a dotted line, the ground truth's ceiling √reliability
    (Spearman–Brown from its split halves) a dashed line with its CI shaded.
    """
    sns.set_theme(style="whitegrid", context="notebook")
    targets = [t for t in ("values", "credits") if t in table["target"].to_list()]
    aggregations = ("per_trace", "pooled")
    fig, axes = plt.subplots(
        max(len(targets), 1), 2, figsize=(14, 5 * max(len(targets), 1)), squeeze=False
    )
    for r, target in enumerate(targets):
        for c, aggregation in enumerate(aggregations):
            ax = axes[r][c]
            part = table.filter(
                (pl.col("target") == target) & (pl.col("aggregation") == aggregation)
            )
            cost = "forward_tokens_per_trace"
            mc = part.filter(pl.col("family") == families.MC).sort("n_rollouts")
            if mc.height:
                ax.errorbar(
                    mc[cost].to_numpy(),
                    mc["rho"].to_numpy(),
                    yerr=ci_error_bars(mc, "rho", "ci95_low", "ci95_high"),
                    color=FAMILY_COLORS[families.MC],
                    marker="o",
                    capsize=3,
                    label=FAMILY_LABELS[families.MC],
                )
                for x, y, n in zip(mc[cost], mc["rho"], mc["n_rollouts"], strict=True):
                    ax.annotate(
                        f"N={n}",
                        (x, y),
                        textcoords="offset points",
                        xytext=(4, -12),
                        fontsize=8,
                        color=FAMILY_COLORS[families.MC],
                    )
            markers = iter(_RREDCOT_MARKERS * 4)
            shapes: dict[str, str] = {}
            scored = pl.col("family").is_in(
                [families.RREDCOT, families.BAYES, families.ATTRIBUTION]
            )
            for row in part.filter(scored).iter_rows(named=True):
                name = row["estimator"]
                base = name.removesuffix("_joint")
                shapes.setdefault(base, next(markers))
                joint = name.endswith("_joint")
                color = FAMILY_COLORS.get(row["family"], "black")
                yerr = np.nan_to_num(
                    [[row["rho"] - row["ci95_low"]], [row["ci95_high"] - row["rho"]]]
                )
                ax.errorbar(
                    [row[cost]],
                    [row["rho"]],
                    yerr=yerr,
                    color=color,
                    marker=shapes[base],
                    markerfacecolor="white" if joint else color,
                    markersize=9 if name == baseline_estimator else 7,
                    markeredgewidth=2.0 if name == baseline_estimator else 1.0,
                    capsize=3,
                    linestyle="none",
                    label=display_name(name)
                    + (" (reference)" if name == baseline_estimator else ""),
                )
            for row in part.filter(pl.col("family") == families.NULL).iter_rows(named=True):
                ax.axhline(row["rho"], color="black", linestyle=":", label="null: knows only R")
            if part.height and np.isfinite(part["ceiling"][0]):
                ceil = part.row(0, named=True)
                ax.axhline(
                    ceil["ceiling"],
                    color=FAMILY_COLORS[families.GROUND_TRUTH],
                    linestyle="--",
                    label="ceiling √reliability of the ground truth",
                )
                if np.isfinite(ceil["ceiling_ci95_low"]):
                    ax.axhspan(
                        ceil["ceiling_ci95_low"],
                        min(ceil["ceiling_ci95_high"], 1.0),
                        color=FAMILY_COLORS[families.GROUND_TRUTH],
                        alpha=0.12,
                    )
            ax.axhline(0.0, color="black", linewidth=0.8)
            x = part[cost].cast(pl.Float64).to_numpy()
            if np.any(x > 0):
                ax.set_xscale("log")
            ax.set_xlabel("forward tokens per trace (log scale)")
            what = "state values V(s_k)" if target == "values" else "segment credits σ_k"
            how = "mean over traces" if aggregation == "per_trace" else "pooled over all states"
            ax.set_ylabel(f"Spearman ρ with MC ground truth\n({how}, 95% CI)")
            n = int(part["n_traces"][0]) if part.height else 0
            ax.set_title(f"{what}, {how} ({n} traces)")
            ax.set_ylim(-0.3, 1.05)
    legend_right(fig, axes[0][0], "estimator (open marker: joint answer-now)")
    fig.suptitle("Credit estimators vs the Monte Carlo ground truth, on one common set of traces")
    fig.tight_layout()
    return save_figure(fig, path)


@says_no_rows("Correlation of segment credit between estimators")
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


@says_no_rows("Segmentation sweep")
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
            rows["credits_tau_b"].to_numpy(),
            yerr=ci_error_bars(rows, "credits_tau_b", "credits_ci95_low", "credits_ci95_high"),
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
    left.set_ylabel("Kendall τ-b of RREDCoT credits vs ground truth\n(mean over traces, 95% CI)")
    lows = table["credits_ci95_low"].cast(pl.Float64).drop_nans().drop_nulls()
    bottom = min(-0.25, float(lows.min()) - 0.05) if lows.len() else -1.05
    left.set_ylim(max(bottom, -1.05), 1.05)
    left.axhline(0.0, color="black", linewidth=0.8)
    left.set_title("Credit agreement with MC ground truth (all states; see n_mid_line_states)")
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


@says_no_rows("MC rollouts truncated at a budget")
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
            yerr=ci_error_bars(rows, "mean_value_shift", "ci95_low", "ci95_high"),
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


@says_no_rows("Error localization")
def error_localization_figure(table: pl.DataFrame, path: str | Path) -> Path:
    """Per trace set (one panel each) and estimator: share of incorrect traces whose
    lowest-credit segment holds the first erroneous step (top-1) or is next to it (within
    one), with 95% CIs; the random segment's top-1 as a dashed line."""
    sns.set_theme(style="whitegrid", context="notebook")
    if "trace_set" not in table.columns:
        table = table.with_columns(trace_set=pl.lit("all"))
    parts = {label: part for (label,), part in table.group_by("trace_set", maintain_order=True)}
    heights = [max(part.height, 1) for part in parts.values()]
    fig, axes = plt.subplots(
        len(parts),
        1,
        figsize=(9, 0.42 * sum(heights) + 2.2 * len(parts)),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    for ax, (label, part) in zip(axes[:, 0], parts.items(), strict=True):
        rows = part.sort("top1")
        names = [display_name(n) for n in rows["estimator"]]
        y = np.arange(len(names))
        ax.barh(
            y + 0.2,
            rows["within_one"].to_numpy(),
            height=0.4,
            color="#a1c9f4",
            xerr=ci_error_bars(rows, "within_one", "within_one_ci95_low", "within_one_ci95_high"),
            capsize=2,
            label="within one segment",
        )
        ax.barh(
            y - 0.2,
            rows["top1"].to_numpy(),
            height=0.4,
            color="#1f4e79",
            xerr=ci_error_bars(rows, "top1", "top1_ci95_low", "top1_ci95_high"),
            capsize=2,
            label="top-1 (exact segment)",
        )
        rand = part.filter(pl.col("estimator") == "random")
        if rand.height:
            ax.axvline(rand["top1"][0], color="black", linestyle="--", label="random, top-1")
        ax.set_yticks(y, names)
        ax.set_xlim(0, 1.05)
        n = int(part["n_traces"].max()) if part.height else 0
        ax.set_xlabel(f"share of incorrect traces (0–1; n = {n})")
        ax.set_title(f"trace set: {label.replace('_', ' ')}")
        ax.legend(loc="lower right", frameon=True, fontsize=8)
    fig.suptitle("Error localization: lowest-credit segment vs first wrong step")
    fig.tight_layout()
    return save_figure(fig, path)


def _frontier_label(name: str, configured: str | None) -> str:
    """A frontier point's label: a form of the configured RREDCoT by what differs from it."""
    if configured and name.startswith(configured):
        rest = name.removeprefix(configured).removeprefix("_")
        return "RREDCoT" + (f" {rest.replace('_', ' ')}" if rest else " (configured)")
    return display_name(name)


MEASURE_TITLES = {"spearman_credits": "per-trace Spearman ρ of credits σ"}


@says_no_rows("Credit estimators: agreement with the MC ground truth against cost")
def estimator_frontier_figure(
    table: pl.DataFrame, path: str | Path, *, configured: str | None = None
) -> Path:
    """One panel per measure (rows) × cost (columns: forward tokens, seconds per trace, log
    scale): every estimator's mean agreement; the best (dashed line) with its own 95% CI, every
    other estimator with the paired 95% CI of its difference from the best drawn around its
    point (a bar that reaches the dashed line: within the CI of the best); the Pareto front
    (non-oracle estimators) as a step line through ringed points; oracles hollow. A cost of 0
    (the null row) sits at the left edge, labelled."""
    sns.set_theme(style="whitegrid", context="notebook")
    measures = table["measure"].unique(maintain_order=True).to_list()
    axes_of = (
        ("forward_tokens_per_trace", "tokens", "forward tokens per trace"),
        ("seconds_per_trace", "seconds", "seconds per trace (this run's machine and load)"),
    )
    fig, axes = plt.subplots(
        len(measures), len(axes_of), figsize=(16, 5.5 * len(measures)), squeeze=False
    )
    for r, measure in enumerate(measures):
        part = table.filter(pl.col("measure") == measure)
        for c, (column, axis, xlabel) in enumerate(axes_of):
            ax = axes[r][c]
            cost = part[column].cast(pl.Float64).to_numpy()
            positive = cost[np.isfinite(cost) & (cost > 0)]
            floor = positive.min() / 3 if positive.size else 1.0
            x = np.where(np.isfinite(cost) & (cost > 0), cost, floor)
            for i, row in enumerate(part.iter_rows(named=True)):
                if not np.isfinite(cost[i]):
                    continue
                best = row["verdict_vs_best"] == "best"
                y = row["agreement"]
                low, high = (
                    (row["ci95_low"], row["ci95_high"])
                    if best
                    else (
                        y + row["diff_ci95_low"] - row["diff_vs_best"],
                        y + row["diff_ci95_high"] - row["diff_vs_best"],
                    )
                )
                color = FAMILY_COLORS.get(row["family"], "grey")
                ax.errorbar(
                    [x[i]],
                    [y],
                    yerr=np.nan_to_num([[y - low], [high - y]]),
                    color=color,
                    marker="D" if best else "o",
                    markerfacecolor="white" if row["oracle"] else color,
                    markeredgecolor="black" if row[f"pareto_{axis}"] else color,
                    markeredgewidth=2.0 if row[f"pareto_{axis}"] else 1.0,
                    markersize=8,
                    capsize=3,
                    linestyle="none",
                    label="oracle (the key on the trace's own path)"
                    if row["oracle"]
                    else FAMILY_LABELS.get(row["family"], row["family"]),
                )
                label = _frontier_label(row["estimator"], configured)
                if cost[i] == 0:
                    label += " (cost 0)"
                ax.annotate(
                    label,
                    (x[i], y),
                    textcoords="offset points",
                    xytext=(5, 4),
                    fontsize=7,
                    color=color,
                )
            front = part.with_columns(x=pl.Series(x)).filter(pl.col(f"pareto_{axis}")).sort("x")
            if front.height:
                ax.step(
                    front["x"].to_numpy(),
                    front["agreement"].to_numpy(),
                    where="post",
                    color="black",
                    linewidth=1.0,
                    alpha=0.6,
                    label="Pareto front",
                )
            top = part.filter(pl.col("verdict_vs_best") == "best")
            if top.height:
                ax.axhline(
                    top["agreement"][0],
                    color="black",
                    linestyle="--",
                    linewidth=0.8,
                    label="best (non-oracle)",
                )
            ax.axhline(0.0, color="grey", linewidth=0.6)
            ax.set_xscale("log")
            ax.set_xlabel(f"{xlabel} (log scale)")
            title = MEASURE_TITLES.get(measure, "cosine of token advantages")
            transform = part["transform"][0] if "transform" in part.columns else ""
            ax.set_ylabel(f"{title}\n(mean over {int(part['n_traces'][0])} traces)")
            ax.set_title(f"{measure}: {transform}", fontsize=10)
    legend_right(fig, axes[0][0], "family (ringed: Pareto front; hollow: oracle)")
    fig.suptitle(
        "Credit estimators: agreement with the MC ground truth against cost "
        "(bars: 95% CI of the difference from the best, paired over traces)"
    )
    fig.tight_layout()
    return save_figure(fig, path)


__all__ = [
    "FAMILY_COLORS",
    "correlation_heatmap",
    "display_name",
    "error_localization_figure",
    "estimator_agreement_figure",
    "estimator_frontier_figure",
    "mc_truncation_figure",
    "segmentation_sweep_figure",
]
