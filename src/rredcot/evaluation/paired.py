"""Paired comparisons of two policies on the same problems and seeds (bootstrap over both).

The unit of pairing is (seed, problem): both policies were trained with the same training
seed index and evaluated on the same problem with the same sampling seeds, so the per-unit
difference d[s, i] = score_A[s, i] − score_B[s, i] removes the problem's difficulty from the
comparison. The 95% CI comes from a two-level percentile bootstrap: each resample draws the
seeds with replacement and, independently, the problems with replacement, and averages d over
the drawn grid; so both the spread between training runs and the spread between problems
widen the interval. A difference whose interval holds 0 is reported as no difference.

With few seeds that bootstrap understates the spread between training runs: drawing 3 seeds
with replacement shrinks their variance by 2/3 and its percentiles behave like normal
quantiles, not Student's t with 2 degrees of freedom (coverage ~75% when seed variance
dominates). Seeds are the unit of replication for a training claim, so `seed_t_interval` gives
the t interval over the per-seed mean differences (df = seeds − 1) beside it, and
`conservative_verdict` keeps a direction only when both intervals exclude 0 on the same side.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rredcot.evaluation.power import mde_from_sd, seed_sd
from rredcot.evaluation.t_quantiles import t_quantile_975


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
        return interval_verdict(self.ci_low, self.ci_high)


def t_interval(values: np.ndarray) -> tuple[float, float]:
    """Mean ± t_{0.975, n−1} · s/√n of the finite `values` (NaN with fewer than 2: the spread
    is unknown)."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return float("nan"), float("nan")
    half = t_quantile_975(x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)
    return float(x.mean() - half), float(x.mean() + half)


def seed_t_interval(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """The t interval over seeds of the per-seed mean of a − b ((seeds, problems) arrays): each
    training seed is one replicate; NaN with one seed."""
    d = np.atleast_2d(np.asarray(a, np.float64)) - np.atleast_2d(np.asarray(b, np.float64))
    return t_interval(d.mean(axis=1))


def interval_verdict(low: float, high: float) -> str:
    """`better` / `worse` when an interval excludes 0, `no difference` when it holds 0, `n/a`
    when it is undefined (NaN)."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return "n/a"
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    return "no difference"


def conservative_verdict(*verdicts: str) -> str:
    """The verdict all defined intervals agree on; `no difference` when any holds 0 or two
    disagree (`n/a` ones are ignored; all `n/a` gives `n/a`)."""
    defined = {v for v in verdicts if v != "n/a"}
    if not defined:
        return "n/a"
    return defined.pop() if len(defined) == 1 else "no difference"


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


def paired_comparison(
    a: np.ndarray, b: np.ndarray, n_resamples: int = 10_000, seed: int = 0
) -> dict[str, float | int | str]:
    """The statistics of one paired comparison row, A − B on a (seeds, problems) grid: mean
    difference, bootstrap CI and verdict, the t interval over seeds and its verdict, the more
    conservative of the two, the grid's size, and the power: the SD over seeds of the per-seed
    mean difference and the minimum detectable effect at 80% power (`power`). One definition
    for every comparison table."""
    diff = paired_bootstrap(a, b, n_resamples=n_resamples, seed=seed)
    sd = seed_sd(a, b)
    t_low, t_high = seed_t_interval(a, b)
    t_verdict = interval_verdict(t_low, t_high)
    return {
        "difference": diff.mean,
        "ci95_low": diff.ci_low,
        "ci95_high": diff.ci_high,
        "bootstrap_verdict": diff.verdict,
        "seed_t_ci95_low": t_low,
        "seed_t_ci95_high": t_high,
        "seed_t_verdict": t_verdict,
        "verdict": conservative_verdict(diff.verdict, t_verdict),
        "seeds": diff.n_seeds,
        "problems": diff.n_problems,
        "seed_sd": sd,
        "mde80": mde_from_sd(sd, diff.n_seeds),
    }
