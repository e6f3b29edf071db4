"""Agreement of each estimator with the MC ground truth, on one common set, with paired CIs.

METHOD.md §5 asks for statistics that mean what they say; this module implements them:

- **Two targets.** `values`: the estimator's state values (Φ_k for RREDCoT, V̂(s_k) for MC, a
  constant for the null row) against V_gt(s_k), k = 0 … K−1; `credits`: its σ_k against
  σ_gt,k, k = 1 … K. Attributions have credits only (their `values` are null: not applicable).
- **Two aggregations.** `per_trace`: the mean over traces of Spearman ρ within a trace;
  `pooled`: one ρ over all (trace, state) pairs (between-trace differences count too).
- **One common set.** Per target, the traces every estimator is scored on: those with at least
  2 entries, a finite ground truth that is not constant (a flat V_gt or σ_gt orders nothing, for
  any estimator), and a finite estimate from every estimator. A flat *estimate* is scored as it
  is, ρ = 0 (`spearman_flat0`), never dropped for that estimator alone. What was left out, and
  why, is counted in the `excluded_*` columns.
- **Paired CIs.** One bootstrap draw of traces (`bootstrap_indices`) serves every estimator, so
  each estimator's difference from the reference (RREDCoT's default) is a paired difference,
  with a percentile CI and a verdict (a CI that spans 0 is "no difference").
- **The ground truth's own noise.** The split-half agreement of the two halves of the
  ground-truth rollouts (N/2 each) on the same common set and resamples, stepped up with
  Spearman–Brown to the full N, is the reliability of the ground truth; √reliability is the
  ceiling no estimator can beat in expectation, and ρ/√reliability the disattenuated agreement.
  The step-up treats the mean per-trace ρ like a correlation; said in docs/statistics.md.

Read off the table beside it: the cost at equal agreement (`rredcot.studies.cost_match`) and the
pre-registered answer-now rule (`rredcot.studies.preregistered`); the null row's estimates are
built by `rredcot.studies.null_estimator`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from rredcot.studies.statistics import (
    bootstrap_indices,
    ceiling,
    disattenuate,
    kendall_flat0,
    percentile_ci,
    rank_correlation,
    spearman_brown,
    spearman_flat0,
    verdict,
)

TARGETS: tuple[str, ...] = ("values", "credits")
AGGREGATIONS: tuple[str, ...] = ("per_trace", "pooled")
EXCLUSIONS: tuple[str, ...] = (
    "single_entry",
    "missing_ground_truth",
    "flat_ground_truth",
    "missing_estimate",
)

Vectors = dict[int, np.ndarray]  # trace_index -> one trace's vector of a target


def vectors(table: pl.DataFrame, column: str) -> dict[str, Vectors]:
    """estimator -> trace_index -> array of `column` (sigma or values); null lists skipped."""
    out: dict[str, Vectors] = {}
    for name, t, v in table.select("estimator", "trace_index", column).iter_rows():
        if v is not None:
            out.setdefault(name, {})[t] = np.asarray(v, dtype=np.float64)
    return out


@dataclass(frozen=True)
class CommonSet:
    """The traces every estimator of one target is scored on, and what was left out why."""

    traces: list[int]
    excluded: dict[str, int]


def common_set(truth: Vectors, estimates: Mapping[str, Vectors]) -> CommonSet:
    """Traces (ascending) with ≥ 2 entries, a finite and non-constant ground truth, and a finite
    estimate of the same length from every estimator (see the module docstring)."""
    excluded = dict.fromkeys(EXCLUSIONS, 0)
    kept = []
    for t in sorted(truth):
        g = truth[t]
        if g.size < 2:
            excluded["single_entry"] += 1
        elif not np.isfinite(g).all():
            excluded["missing_ground_truth"] += 1
        elif np.all(g == g[0]):
            excluded["flat_ground_truth"] += 1
        elif any(
            t not in est or est[t].shape != g.shape or not np.isfinite(est[t]).all()
            for est in estimates.values()
        ):
            excluded["missing_estimate"] += 1
        else:
            kept.append(t)
    return CommonSet(kept, excluded)


class _Pooled:
    """Pooled ρ over resampled traces: the states of each resample's traces are gathered by one
    index array per resample, built once and shared by every estimator."""

    def __init__(self, traces: list[int], truth: Vectors, indices: np.ndarray) -> None:
        lengths = np.array([truth[t].size for t in traces])
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        self.rows = [
            np.concatenate([np.arange(starts[i], starts[i] + lengths[i]) for i in draw])
            for draw in indices
        ]
        self.traces = traces

    def flat(self, vecs: Vectors) -> np.ndarray:
        return np.concatenate([vecs[t] for t in self.traces])

    def samples(self, x: np.ndarray, y: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
        """ρ(x, y) per resample; `keep` (a mask over states) leaves states out of every one."""
        rows = self.rows if keep is None else [r[keep[r]] for r in self.rows]
        return np.array([rank_correlation(x[r], y[r]) for r in rows])


def _basis(estimates: pl.DataFrame, name: str) -> str | None:
    if "cost_basis" not in estimates.columns:
        return None
    return estimates.filter(pl.col("estimator") == name)["cost_basis"][0]


def _cost(estimates: pl.DataFrame, name: str, traces: list[int], column: str) -> float:
    mine = estimates.filter((pl.col("estimator") == name) & pl.col("trace_index").is_in(traces))
    if mine.height == 0 or mine[column].null_count() == mine.height:
        return float("nan")
    return float(mine[column].cast(pl.Float64).mean())


STATISTICS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "spearman": spearman_flat0,
    "kendall": kendall_flat0,
}
"""Per-trace agreement statistics (a flat vector scores 0): Spearman where K is fixed, Kendall's
τ-b where cells of different K are compared (its expectation does not depend on K)."""

Resamples = dict[tuple[str, str], dict[str, np.ndarray]]
"""(target, aggregation) -> estimator -> the statistic on each shared bootstrap resample."""


def agreement_with_resamples(
    estimates: pl.DataFrame,
    truth: pl.DataFrame,
    halves: tuple[pl.DataFrame, pl.DataFrame],
    *,
    baseline_estimator: str,
    resamples: int,
    seed: int,
    step_up: float,
    statistic: str = "spearman",
) -> tuple[pl.DataFrame, Resamples]:
    """One row per (target, aggregation, estimator), every estimator on the target's common set,
    and every estimator's statistic on the shared bootstrap resamples (for
    `rredcot.studies.cost_match`).

    estimates: the long table of `rredcot.studies.estimators` (sigma, values, costs per trace);
    truth: trace_index, sigma, values of the ground truth (full N); halves: the same from the
    first and the second half of its rollouts; step_up: n_total / n_half of those rollouts
    (`split_half_factor`); statistic: the per-trace statistic (`STATISTICS`; pooled is always
    Spearman). baseline_estimator: the estimator the paired differences are taken against (the
    table calls it the reference). Columns:
    target, aggregation, statistic, estimator, family, n_rollouts, rho, ci95_low, ci95_high,
    ci_dropped_share, diff_vs_reference, diff_ci95_low, diff_ci95_high, verdict,
    disattenuated, reliability, step_up, ceiling, ceiling_ci95_low, ceiling_ci95_high,
    split_half_rho, split_half_excluded (traces, or states when pooled, whose halves could not
    be scored: left out of the split half, never scored 0), n_traces, n_states,
    n_flat_estimate, excluded_<reason>, forward_tokens_per_trace, backward_tokens_per_trace,
    seconds_per_trace, cost_basis.
    """
    if statistic not in STATISTICS:
        raise ValueError(f"statistic: expected one of {sorted(STATISTICS)}, got {statistic!r}")
    per_trace_stat = STATISTICS[statistic]
    names = estimates["estimator"].unique(maintain_order=True).to_list()
    if baseline_estimator not in names:
        raise ValueError(
            f"baseline_estimator: {baseline_estimator!r} is not an estimator; have {names}"
        )
    out = []
    all_samples: Resamples = {}
    for target_index, target in enumerate(TARGETS):
        column = "sigma" if target == "credits" else "values"
        est = vectors(estimates, column)
        gt = vectors(truth.with_columns(estimator=pl.lit("gt")), column).get("gt", {})
        first = vectors(halves[0].with_columns(estimator=pl.lit("a")), column).get("a", {})
        second = vectors(halves[1].with_columns(estimator=pl.lit("b")), column).get("b", {})
        scored = {n: est[n] for n in names if n in est}
        common = common_set(gt, scored)
        traces = common.traces
        if not traces or not scored:  # e.g. values, when only attributions were given
            continue
        idx = bootstrap_indices(len(traces), resamples, seed + target_index)
        pooled = _Pooled(traces, gt, idx)

        per_trace = {
            n: np.array([per_trace_stat(scored[n][t], gt[t]) for t in traces]) for n in scored
        }
        # A half with an unfinished state (NaN) cannot be scored: out of the split half, counted.
        half = np.array(
            [per_trace_stat(_or_nan(first, t, gt[t]), _or_nan(second, t, gt[t])) for t in traces]
        )
        a_flat = np.concatenate([_or_nan(first, t, gt[t]) for t in traces])
        b_flat = np.concatenate([_or_nan(second, t, gt[t]) for t in traces])
        finite = np.isfinite(a_flat) & np.isfinite(b_flat)
        gt_flat = pooled.flat(gt)
        flat_of = {n: pooled.flat(scored[n]) for n in scored}
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a resample of only NaN halves
            half_samples = np.nanmean(half[idx], axis=1)
        stats = {
            "per_trace": {
                "point": {n: float(v.mean()) for n, v in per_trace.items()},
                "samples": {n: v[idx].mean(axis=1) for n, v in per_trace.items()},
                "half": (_nanmean(half), half_samples, int(np.isnan(half).sum())),
            },
            "pooled": {
                "point": {n: rank_correlation(flat_of[n], gt_flat) for n in scored},
                "samples": {n: pooled.samples(flat_of[n], gt_flat) for n in scored},
                "half": (
                    rank_correlation(a_flat[finite], b_flat[finite])
                    if finite.sum() >= 2
                    else float("nan"),
                    pooled.samples(a_flat, b_flat, keep=finite),
                    int((~finite).sum()),
                ),
            },
        }
        for aggregation in AGGREGATIONS:
            st = stats[aggregation]
            all_samples[(target, aggregation)] = st["samples"]
            half_point, half_samples, half_excluded = st["half"]
            reliability = spearman_brown(half_point, step_up)
            ceil_ci = percentile_ci(
                np.array([ceiling(spearman_brown(h, step_up)) for h in half_samples])
            )
            has_ref = baseline_estimator in scored  # the baseline may lack this target
            ref_samples = st["samples"].get(baseline_estimator)
            for name in scored:
                family, n_rollouts = (
                    estimates.filter(pl.col("estimator") == name)
                    .select("family", "n_rollouts")
                    .row(0)
                )
                ci = percentile_ci(st["samples"][name])
                if has_ref:
                    diff = st["point"][name] - st["point"][baseline_estimator]
                    d_ci = percentile_ci(st["samples"][name] - ref_samples)
                    d_low, d_high = d_ci.low, d_ci.high
                else:
                    diff = d_low = d_high = float("nan")
                flat = sum(1 for t in traces if np.all(scored[name][t] == scored[name][t][0]))
                out.append(
                    {
                        "target": target,
                        "aggregation": aggregation,
                        "statistic": statistic if aggregation == "per_trace" else "spearman",
                        "estimator": name,
                        "family": family,
                        "n_rollouts": n_rollouts,
                        "rho": st["point"][name],
                        "ci95_low": ci.low,
                        "ci95_high": ci.high,
                        "ci_dropped_share": ci.dropped_share,
                        "diff_vs_reference": diff,
                        "diff_ci95_low": d_low,
                        "diff_ci95_high": d_high,
                        "verdict": (
                            "reference"
                            if name == baseline_estimator
                            else verdict(d_low, d_high)
                            if has_ref
                            else "no reference"
                        ),
                        "disattenuated": disattenuate(st["point"][name], reliability),
                        "reliability": reliability,
                        "step_up": step_up,
                        "ceiling": ceiling(reliability),
                        "ceiling_ci95_low": ceil_ci.low,
                        "ceiling_ci95_high": ceil_ci.high,
                        "ceiling_ci_dropped_share": ceil_ci.dropped_share,
                        "split_half_rho": half_point,
                        "split_half_excluded": half_excluded,
                        "n_traces": len(traces),
                        "n_states": int(gt_flat.size),
                        "n_flat_estimate": flat,
                        **{f"excluded_{k}": v for k, v in common.excluded.items()},
                        "forward_tokens_per_trace": _cost(
                            estimates, name, traces, "forward_tokens"
                        ),
                        "backward_tokens_per_trace": _cost(
                            estimates, name, traces, "backward_tokens"
                        ),
                        "seconds_per_trace": _cost(estimates, name, traces, "seconds"),
                        "cost_basis": _basis(estimates, name),
                    }
                )
    return pl.DataFrame(out, infer_schema_length=None), all_samples


def agreement_table(
    estimates: pl.DataFrame,
    truth: pl.DataFrame,
    halves: tuple[pl.DataFrame, pl.DataFrame],
    **kwargs: Any,
) -> pl.DataFrame:
    """The table of `agreement_with_resamples` alone (same arguments)."""
    return agreement_with_resamples(estimates, truth, halves, **kwargs)[0]


def _nanmean(x: np.ndarray) -> float:
    finite = x[np.isfinite(x)]
    return float(finite.mean()) if finite.size else float("nan")


def _or_nan(vecs: Vectors, t: int, like: np.ndarray) -> np.ndarray:
    """vecs[t], or NaNs shaped like `like` when trace t has no vector there."""
    v = vecs.get(t)
    return v if v is not None else np.full(like.shape, np.nan)


def correlation_matrix(estimates: pl.DataFrame, order: Sequence[str] | None = None) -> pl.DataFrame:
    """Mean over the common traces of ρ(σ_a, σ_b) (flat = 0) for every pair of estimators.

    The common set is the traces where every estimator has a finite σ of the same length with
    K ≥ 2; a flat σ is scored 0 against anything (1 on the diagonal only when it varies).
    """
    names = (
        list(order)
        if order is not None
        else estimates["estimator"].unique(maintain_order=True).to_list()
    )
    sig = vectors(estimates, "sigma")
    traces = sorted(set.intersection(*(set(sig.get(n, {})) for n in names))) if names else []
    traces = [
        t
        for t in traces
        if all(
            sig[n][t].size >= 2
            and sig[n][t].size == sig[names[0]][t].size
            and np.isfinite(sig[n][t]).all()
            for n in names
        )
    ]
    matrix = np.full((len(names), len(names)), np.nan)
    for i, a in enumerate(names):
        for j, b in enumerate(names[i:], start=i):
            vals = [spearman_flat0(sig[a][t], sig[b][t]) for t in traces]
            matrix[i, j] = matrix[j, i] = float(np.mean(vals)) if vals else np.nan
    return pl.DataFrame(
        {
            "estimator": names,
            **{b: matrix[:, j] for j, b in enumerate(names)},
            "n_traces": [len(traces)] * len(names),
        }
    )


__all__ = [
    "AGGREGATIONS",
    "EXCLUSIONS",
    "TARGETS",
    "CommonSet",
    "Resamples",
    "agreement_table",
    "agreement_with_resamples",
    "common_set",
    "correlation_matrix",
    "vectors",
]
