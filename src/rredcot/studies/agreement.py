"""Agreement of each estimator with the ground truth, and the estimators' correlation matrix.

Per trace, Spearman ρ(σ_est, σ_gt) over its K segments; per estimator, the mean over the traces
where ρ is defined with a percentile bootstrap 95% CI over traces (METHOD.md §5). Undefined
traces are counted by reason, never scored:

- `single_segment`: K < 2 (nothing to rank);
- `missing`: σ holds NaN (an MC state whose rollouts were all dropped);
- `flat_ground_truth`: σ_gt is constant (e.g. every state of a sure-thing trace has V_gt = 1);
- `flat_estimate`: σ_est is constant (e.g. MC with N = 1 often is).

Leaving flat estimates out selects the traces where a coarse estimator (MC with small N) happens
to vary, so `spearman_mean_flat_as_zero` also reports the mean with a flat estimate scored as
ρ = 0 (no ordering information); flat ground truth and NaN stay excluded there too.

`pooled_spearman` is one ρ over all (trace, segment) pairs of the traces where the estimator has
no NaN: defined even when most traces are flat, but it mixes between-trace scale into the ranking.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from rredcot.studies.metrics import bootstrap_mean_ci, spearman

UNDEFINED_REASONS: tuple[str, ...] = (
    "single_segment",
    "missing",
    "flat_ground_truth",
    "flat_estimate",
)


def undefined_reason(sigma: Sequence[float], sigma_gt: Sequence[float]) -> str | None:
    """Why ρ(σ, σ_gt) of one trace is undefined (`UNDEFINED_REASONS`), or None when it is not."""
    s, g = np.asarray(sigma, dtype=np.float64), np.asarray(sigma_gt, dtype=np.float64)
    if s.shape != g.shape:
        raise ValueError(f"sigma/sigma_gt: K differs ({s.shape} vs {g.shape})")
    if s.size < 2:
        return "single_segment"
    if np.isnan(s).any() or np.isnan(g).any():
        return "missing"
    if np.all(g == g[0]):
        return "flat_ground_truth"
    if np.all(s == s[0]):
        return "flat_estimate"
    return None


def per_trace_spearman(estimates: pl.DataFrame, ground_truth: pl.DataFrame) -> pl.DataFrame:
    """trace_index, estimator, spearman (NaN when undefined), reason (null when defined).

    estimates: trace_index, estimator, sigma; ground_truth: trace_index, sigma (same segmentation).
    """
    gt = dict(ground_truth.select("trace_index", "sigma").iter_rows())
    rows = []
    for t, name, sigma in estimates.select("trace_index", "estimator", "sigma").iter_rows():
        if t not in gt:
            raise ValueError(f"ground_truth: no σ_gt for trace {t}")
        reason = undefined_reason(sigma, gt[t])
        rho = spearman(sigma, gt[t]) if reason is None else float("nan")
        rows.append({"trace_index": t, "estimator": name, "spearman": rho, "reason": reason})
    schema = {
        "trace_index": pl.Int64,
        "estimator": pl.String,
        "spearman": pl.Float64,
        "reason": pl.String,
    }
    return pl.DataFrame(rows, schema=schema)


def pooled_spearman(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> float:
    """One ρ over the concatenated (σ, σ_gt) of every trace without NaN."""
    xs, ys = [], []
    for s, g in pairs:
        s, g = np.asarray(s, dtype=np.float64), np.asarray(g, dtype=np.float64)
        if np.isnan(s).any() or np.isnan(g).any():
            continue
        xs.append(s)
        ys.append(g)
    if not xs:
        return float("nan")
    return spearman(np.concatenate(xs), np.concatenate(ys))


def _flat_as_zero_mean(rho: pl.DataFrame) -> float:
    """Mean ρ over the defined traces plus the flat-estimate ones scored 0."""
    values = rho.filter(pl.col("reason").is_null() | (pl.col("reason") == "flat_estimate"))
    if values.height == 0:
        return float("nan")
    return float(values["spearman"].fill_nan(0.0).mean())


def agreement_table(
    estimates: pl.DataFrame, ground_truth: pl.DataFrame, *, resamples: int, seed: int
) -> pl.DataFrame:
    """One row per estimator: agreement with σ_gt, its CI, undefined counts and costs per trace.

    estimates: the long table of `rredcot.studies.estimators` (trace_index, estimator, family,
    n_rollouts, sigma, forward_tokens, backward_tokens, seconds); ground_truth: trace_index,
    sigma on the same segmentation. Columns: estimator, family, n_rollouts, spearman_mean,
    ci95_low, ci95_high, n_traces, n_defined, n_undefined, undefined_<reason> for each reason,
    spearman_mean_flat_as_zero, pooled_spearman, forward_tokens_per_trace,
    backward_tokens_per_trace, seconds_per_trace.
    """
    rho = per_trace_spearman(estimates, ground_truth)
    gt = dict(ground_truth.select("trace_index", "sigma").iter_rows())
    out = []
    for i, name in enumerate(estimates["estimator"].unique(maintain_order=True).to_list()):
        mine = estimates.filter(pl.col("estimator") == name)
        r = rho.filter(pl.col("estimator") == name)
        mean, low, high = bootstrap_mean_ci(r["spearman"].to_numpy(), resamples, seed + i)
        reasons = r["reason"].drop_nulls().to_list()
        out.append(
            {
                "estimator": name,
                "family": mine["family"][0],
                "n_rollouts": mine["n_rollouts"][0],
                "spearman_mean": mean,
                "ci95_low": low,
                "ci95_high": high,
                "n_traces": r.height,
                "n_defined": r.height - len(reasons),
                "n_undefined": len(reasons),
                **{f"undefined_{k}": reasons.count(k) for k in UNDEFINED_REASONS},
                "spearman_mean_flat_as_zero": _flat_as_zero_mean(r),
                "pooled_spearman": pooled_spearman(
                    [(s, gt[t]) for t, s in mine.select("trace_index", "sigma").iter_rows()]
                ),
                "forward_tokens_per_trace": mine["forward_tokens"].cast(pl.Float64).mean(),
                "backward_tokens_per_trace": mine["backward_tokens"].cast(pl.Float64).mean(),
                "seconds_per_trace": mine["seconds"].cast(pl.Float64).mean(),
            }
        )
    schema = {
        "estimator": pl.String,
        "family": pl.String,
        "n_rollouts": pl.Int64,
        "spearman_mean": pl.Float64,
        "ci95_low": pl.Float64,
        "ci95_high": pl.Float64,
        "n_traces": pl.Int64,
        "n_defined": pl.Int64,
        "n_undefined": pl.Int64,
        **{f"undefined_{k}": pl.Int64 for k in UNDEFINED_REASONS},
        "spearman_mean_flat_as_zero": pl.Float64,
        "pooled_spearman": pl.Float64,
        "forward_tokens_per_trace": pl.Float64,
        "backward_tokens_per_trace": pl.Float64,
        "seconds_per_trace": pl.Float64,
    }
    return pl.DataFrame(out, schema=schema)


def matching_mc_n(table: pl.DataFrame, target: float, column: str = "spearman_mean") -> float:
    """The MC N at which `column` (a mean Spearman) first reaches `target`, linear in log2 N
    between the measured N (NaN when no measured N reaches it; the smallest N when all do)."""
    mc = (
        table.filter((pl.col("family") == "mc") & pl.col(column).is_not_nan())
        .sort("n_rollouts")
        .select("n_rollouts", column)
        .rows()
    )
    if not mc or not np.isfinite(target):
        return float("nan")
    if mc[0][1] >= target:
        return float(mc[0][0])
    for (n0, r0), (n1, r1) in zip(mc, mc[1:], strict=False):
        if r1 >= target > r0:
            frac = (target - r0) / (r1 - r0)
            return float(2 ** (np.log2(n0) + frac * (np.log2(n1) - np.log2(n0))))
    return float("nan")


def correlation_matrix(estimates: pl.DataFrame, order: Sequence[str] | None = None) -> pl.DataFrame:
    """Mean over traces of ρ(σ_a, σ_b) for every pair of estimators (wide: one column each).

    A pair's undefined traces (constant or NaN σ on that trace) are left out of its mean; the
    diagonal is 1 wherever an estimator's σ is ever non-constant.
    """
    names = (
        list(order)
        if order is not None
        else estimates["estimator"].unique(maintain_order=True).to_list()
    )
    sig = {
        name: dict(
            estimates.filter(pl.col("estimator") == name).select("trace_index", "sigma").iter_rows()
        )
        for name in names
    }
    matrix = np.full((len(names), len(names)), np.nan)
    for i, a in enumerate(names):
        for j, b in enumerate(names[i:], start=i):
            common = sorted(set(sig[a]) & set(sig[b]))
            vals = [spearman(sig[a][t], sig[b][t]) for t in common]
            vals = [v for v in vals if np.isfinite(v)]
            matrix[i, j] = matrix[j, i] = float(np.mean(vals)) if vals else np.nan
    return pl.DataFrame({"estimator": names, **{b: matrix[:, j] for j, b in enumerate(names)}})


__all__ = [
    "UNDEFINED_REASONS",
    "agreement_table",
    "correlation_matrix",
    "matching_mc_n",
    "per_trace_spearman",
    "pooled_spearman",
    "undefined_reason",
]
