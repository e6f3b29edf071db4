"""Statistics of the estimator studies: Spearman per trace, bootstrap CIs, localization hits.

Everything is a pure numpy function so that the analysis steps can be checked by hand. The
conventions the CSVs report (METHOD.md §5):

- Spearman ρ = Pearson correlation of average ranks (ties share the mean of their ranks). It is
  *undefined* (NaN) when either vector is constant or shorter than 2, or holds a NaN: a trace
  whose ground-truth credit is flat says nothing about an estimator's ordering. Undefined traces
  are counted and left out of the mean, never scored as 0.
- Means over traces get a percentile bootstrap 95% CI (resampling traces with replacement).
- The lowest-credit segment of a trace is argmin σ; when several segments tie for the minimum
  the hit counts fractionally (1/|ties| for each tied segment that qualifies), i.e. the expected
  hit under a uniformly random tie-break, so a flat σ scores exactly like a random guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from rredcot.evaluation.paired import interval_verdict


def rankdata(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """1-based average ranks: rankdata([10, 30, 20, 20]) = [1, 4, 2.5, 2.5]."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"values: expected a 1-D array, got shape {x.shape}")
    return average_ranks(x)


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based average ranks of a 1-D array without checks (runs of equal values share the mean
    of the ranks they span); `rankdata` is the checked entry point."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    upper = np.cumsum(counts)  # rank of the last member of each tie group
    return (upper - (counts - 1) / 2.0)[inverse]


def rank_correlation(x: np.ndarray, y: np.ndarray, flat: float = 0.0) -> float:
    """Pearson correlation of the average ranks of two checked, equal-length, NaN-free 1-D
    arrays; `flat` when either is constant (the callers say what a constant vector scores)."""
    rx, ry = average_ranks(x), average_ranks(y)
    rx -= rx.mean()
    ry -= ry.mean()
    denom = float(np.sqrt((rx * rx).sum() * (ry * ry).sum()))
    if denom == 0.0:
        return float(flat)
    return float(np.clip((rx * ry).sum() / denom, -1.0, 1.0))


def kendall_tau_b(x: np.ndarray, y: np.ndarray, flat: float = 0.0) -> float:
    """Kendall's τ-b of two checked, equal-length, NaN-free 1-D arrays (ties corrected:
    (n_c − n_d) / √((n_0 − n_x)(n_0 − n_y))); `flat` when either is constant. Its expectation
    under a given agreement does not depend on the length, unlike Spearman's on short vectors,
    so cells with different numbers of states can be compared (METHOD.md §5, the sweep)."""
    dx = np.sign(x[:, None] - x[None, :])
    dy = np.sign(y[:, None] - y[None, :])
    upper = np.triu_indices(x.size, k=1)
    sx, sy = dx[upper], dy[upper]
    n_x, n_y = float(np.count_nonzero(sx)), float(np.count_nonzero(sy))
    if n_x == 0.0 or n_y == 0.0:
        return float(flat)
    return float(np.clip((sx * sy).sum() / np.sqrt(n_x * n_y), -1.0, 1.0))


def _checked_pair(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> tuple:
    """(x, y) as float64 arrays, or None when they cannot be ranked (< 2 entries, a NaN)."""
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"a/b: expected two 1-D arrays of equal length, got {x.shape}, {y.shape}")
    if len(x) < 2 or np.isnan(x).any() or np.isnan(y).any():
        return None
    return x, y


def spearman(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Spearman ρ of two equal-length vectors; NaN when undefined (see the module docstring)."""
    pair = _checked_pair(a, b)
    return float("nan") if pair is None else rank_correlation(*pair, flat=float("nan"))


def kendall_flat0(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Kendall's τ-b with a constant vector scored 0; NaN, as `spearman_flat0`, only for what
    cannot be scored (fewer than 2 entries, a NaN)."""
    pair = _checked_pair(a, b)
    return float("nan") if pair is None else kendall_tau_b(*pair, flat=0.0)


def spearman_flat0(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Spearman ρ with a constant vector scored 0 (it orders nothing), the convention of the
    studies' common set (METHOD.md §5): flat or tied estimates are scored, never dropped.

    NaN only for what cannot be scored at all: unequal shapes raise, fewer than 2 entries or a
    NaN entry give NaN (the common set leaves such traces out for every estimator).
    """
    pair = _checked_pair(a, b)
    return float("nan") if pair is None else rank_correlation(*pair, flat=0.0)


def spearman_brown(r_half: float, factor: float) -> float:
    """Reliability of a measurement `factor` times as long as one whose reliability is r_half:
    factor·r / (1 + (factor − 1)·r). The split-half agreement of two halves of the ground truth
    (n_half rollouts each), stepped up with factor n_total / n_half (`split_half_factor`), is
    the reliability of the n_total-rollout ground truth."""
    if factor <= 0:
        raise ValueError(f"factor: expected a number > 0, got {factor!r}")
    if not np.isfinite(r_half):
        return float("nan")
    denom = 1.0 + (factor - 1.0) * r_half
    return float(factor * r_half / denom) if denom > 0 else float("nan")


def split_half_factor(n_total: int, n_half: int) -> float:
    """The Spearman–Brown step-up from one half (n_half rollouts) to the whole (n_total)."""
    if n_half < 1 or n_total < n_half:
        raise ValueError(
            f"n_half / n_total: expected 1 <= n_half <= n_total, got {n_half} / {n_total}"
        )
    return n_total / n_half


def ceiling(reliability: float) -> float:
    """The highest correlation any estimator can have with a reference of this reliability:
    √reliability (classical test theory); NaN when the reliability is not positive."""
    return float(np.sqrt(reliability)) if np.isfinite(reliability) and reliability > 0 else np.nan


def disattenuate(rho: float, reliability: float) -> float:
    """ρ / √reliability: the agreement with a noise-free reference (only the reference's own
    noise is corrected for; the estimator's is part of what it is)."""
    c = ceiling(reliability)
    return float(rho / c) if np.isfinite(c) and np.isfinite(rho) else float("nan")


def bootstrap_indices(n: int, resamples: int, seed: int) -> np.ndarray:
    """(resamples, n) row indices drawn with replacement: one shared draw per analysis, so every
    estimator's statistic (and every paired difference) is computed on the same resamples."""
    if resamples < 1:
        raise ValueError(f"resamples: expected an integer >= 1, got {resamples!r}")
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


class PercentileCI(NamedTuple):
    """A percentile interval and the share of resamples that had no finite value (left out of
    the percentiles; a table reports the share beside the interval so none is dropped unseen)."""

    low: float
    high: float
    dropped_share: float


def percentile_ci(samples: np.ndarray, level: float = 0.95) -> PercentileCI:
    """The central `level` percentile interval of the finite bootstrap samples, and the share of
    non-finite ones (NaN interval when none is finite)."""
    x = np.asarray(samples, dtype=np.float64).ravel()
    finite = np.isfinite(x)
    dropped = float(1.0 - finite.mean()) if x.size else float("nan")
    x = x[finite]
    if x.size == 0:
        return PercentileCI(float("nan"), float("nan"), dropped)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(x, [tail, 100 - tail])
    return PercentileCI(float(low), float(high), dropped)


def verdict(low: float, high: float) -> str:
    """`better` / `worse` when a difference's CI excludes 0, else `no difference` (`n/a` for
    an undefined CI): the one rule of `rredcot.evaluation.paired.interval_verdict`."""
    return interval_verdict(low, high)


def bootstrap_mean_ci(
    values: Sequence[float] | np.ndarray, resamples: int, seed: int, level: float = 0.95
) -> tuple[float, float, float]:
    """(mean, low, high): the mean of the finite `values` and its percentile bootstrap CI.

    NaN entries are left out first (undefined traces). No finite value: (nan, nan, nan); one
    value: the CI collapses to it.
    """
    if resamples < 1:
        raise ValueError(f"resamples: expected an integer >= 1, got {resamples!r}")
    if not 0 < level < 1:
        raise ValueError(f"level: expected a number in (0, 1), got {level!r}")
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(x.mean()), float(low), float(high)


def argmin_set(sigma: Sequence[float] | np.ndarray) -> np.ndarray:
    """Indices of the lowest entries of σ (all ties); empty when σ holds a NaN or is empty."""
    s = np.asarray(sigma, dtype=np.float64)
    if s.size == 0 or np.isnan(s).any():
        return np.array([], dtype=np.int64)
    return np.flatnonzero(s == s.min())


def localization_hits(
    sigma: Sequence[float] | np.ndarray, true_segment: int
) -> tuple[float, float]:
    """(top-1, within-one) for one trace: does the lowest-credit segment hold the first error?

    top-1 = share of the tied argmins equal to `true_segment`; within-one = share of them with
    |argmin − true_segment| ≤ 1. NaN for both when σ is unusable (NaN entries).
    """
    s = np.asarray(sigma, dtype=np.float64)
    if not 0 <= true_segment < s.size:
        raise ValueError(f"true_segment: expected 0 … {s.size - 1}, got {true_segment}")
    low = argmin_set(s)
    if low.size == 0:
        return float("nan"), float("nan")
    return float(np.mean(low == true_segment)), float(np.mean(np.abs(low - true_segment) <= 1))


def random_localization(num_segments: int, true_segment: int) -> tuple[float, float]:
    """Expected (top-1, within-one) of a uniformly random segment: 1/K and |{k: |k−t| ≤ 1}|/K."""
    if num_segments < 1 or not 0 <= true_segment < num_segments:
        raise ValueError(
            f"true_segment: expected 0 … num_segments − 1 = {num_segments - 1}, got {true_segment}"
        )
    near = min(true_segment + 1, num_segments - 1) - max(true_segment - 1, 0) + 1
    return 1.0 / num_segments, near / num_segments


__all__ = [
    "PercentileCI",
    "argmin_set",
    "average_ranks",
    "bootstrap_indices",
    "bootstrap_mean_ci",
    "ceiling",
    "disattenuate",
    "kendall_flat0",
    "kendall_tau_b",
    "percentile_ci",
    "rank_correlation",
    "spearman_brown",
    "spearman_flat0",
    "verdict",
    "localization_hits",
    "random_localization",
    "rankdata",
    "spearman",
    "split_half_factor",
]
