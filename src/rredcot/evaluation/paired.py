"""Paired comparisons of two policies on the same problems and seeds (bootstrap over both).

The unit of pairing is (seed, problem): both policies were trained with the same training
seed index and evaluated on the same problem with the same sampling seeds, so the per-unit
difference d[s, i] = score_A[s, i] − score_B[s, i] removes the problem's difficulty from the
comparison. The 95% CI comes from a two-level percentile bootstrap: each resample draws the
seeds with replacement and, independently, the problems with replacement, and averages d over
the drawn grid; so both the spread between training runs and the spread between problems
widen the interval. A difference whose interval holds 0 is reported as no difference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PairedDifference:
    """Mean of A − B over seeds and problems, its percentile bootstrap CI, and the verdict."""

    mean: float
    ci_low: float
    ci_high: float
    n_seeds: int
    n_problems: int

    @property
    def verdict(self) -> str:
        """`better` / `worse` when the CI excludes 0, else `no difference`."""
        if self.ci_low > 0:
            return "better"
        if self.ci_high < 0:
            return "worse"
        return "no difference"


def paired_bootstrap(
    a: np.ndarray,
    b: np.ndarray,
    n_resamples: int = 10_000,
    alpha: float = 0.05,
    seed: int = 0,
) -> PairedDifference:
    """Paired bootstrap of mean(a − b); a and b are (seeds, problems) arrays on the same grid.

    Rows are training seeds, columns problems, both in the same order in a and b. A 1-D input
    is one seed. NaN anywhere is an error: a unit missing for one policy is not dropped for it
    alone. With one seed only the problems are resampled.
    """
    a, b = np.atleast_2d(np.asarray(a, dtype=np.float64)), np.atleast_2d(np.asarray(b, np.float64))
    if a.shape != b.shape or a.size == 0:
        raise ValueError(
            "a and b: expected the same non-empty (seeds, problems) shape, got "
            f"{a.shape} and {b.shape}"
        )
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("a and b: non-finite score(s); every (seed, problem) needs both scores")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise ValueError(f"n_resamples: expected an integer >= 1, got {n_resamples!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: expected a number in (0, 1), got {alpha!r}")
    d = a - b  # (S, P)
    n_seeds, n_problems = d.shape
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    block = max(1, 2_000_000 // (n_seeds * n_problems))
    for start in range(0, n_resamples, block):
        stop = min(start + block, n_resamples)
        rows = rng.integers(0, n_seeds, size=(stop - start, n_seeds))  # (R, S)
        cols = rng.integers(0, n_problems, size=(stop - start, n_problems))  # (R, P)
        picked = d[rows[:, :, None], cols[:, None, :]]  # (R, S, P)
        means[start:stop] = picked.mean(axis=(1, 2))
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return PairedDifference(float(d.mean()), float(low), float(high), n_seeds, n_problems)
