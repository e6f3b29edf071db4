"""A paired comparison pooled over bases: the same comparison made on several SFT bases (each a
replicate of the whole pipeline: its own SFT, then RL on its own training seeds), pooled into one
difference with a two-level interval over bases and seeds.

Each base b gives a paired grid d_b = a_b − b_b of (seeds, problems) (`rredcot.evaluation.paired`:
the unit of pairing is (seed, problem)); the problems are the same held-out split on every base
(one world), the seeds are each base's own training runs. The pooled difference is the mean of
the per-base mean differences, every base weighted alike (it is the unit the claim generalises
over). Two intervals, as `paired` gives one comparison two:

- the hierarchical bootstrap (`hierarchical_bootstrap`): each resample draws the bases with
  replacement, then, for every drawn base independently, its seeds with replacement, and the
  problems with replacement once for the whole resample (the problems are crossed with bases and
  seeds, as `paired_bootstrap` draws one set of columns for every seed); its mean is the mean
  over the drawn bases of each one's mean over its drawn seeds and problems. Percentile interval,
  seeded, as `paired_bootstrap`'s;
- the t interval over the per-base means (df = bases − 1), the replicate of a claim about bases,
  which the bootstrap understates with few bases as it does with few seeds.

`conservative_verdict` keeps a direction only when both exclude 0 on the same side. Beside them:
the within-base seed SD (the bases' seed SDs pooled by their degrees of freedom), the SD of the
per-base means (the t interval's), and the between-base SD net of seed noise (the one-way
random-effects moment estimate √max(0, SD²(means) − s²_within / S̃), S̃ the harmonic mean of the
seeds per base): 0 when the bases differ no more than their seeds' noise explains.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rredcot.evaluation.paired import conservative_verdict, interval_verdict, t_interval
from rredcot.evaluation.power import mde_from_sd, seed_sd


@dataclass(frozen=True)
class PooledDifference:
    """The mean over bases of each base's mean a − b, and its hierarchical bootstrap CI."""

    mean: float
    ci_low: float
    ci_high: float
    n_bases: int
    n_seeds: int  # summed over the bases
    n_problems: int

    @property
    def verdict(self) -> str:
        """`better` / `worse` when the CI excludes 0, else `no difference`."""
        return interval_verdict(self.ci_low, self.ci_high)


Grids = Sequence[tuple[np.ndarray, np.ndarray]]
"""Per base, its (a, b) arrays of (seeds, problems), as `paired_bootstrap` takes them."""


def base_differences(grids: Grids) -> list[np.ndarray]:
    """Each base's (seeds, problems) grid of a − b; raises ValueError when there is no base, when
    a base's a and b differ in shape or hold a non-finite score, or when the bases' problems
    differ in number (they must be one held-out split)."""
    if not grids:
        raise ValueError("grids: no base given")
    out = []
    for i, (a, b) in enumerate(grids):
        a, b = np.atleast_2d(np.asarray(a, np.float64)), np.atleast_2d(np.asarray(b, np.float64))
        if a.shape != b.shape or a.size == 0:
            raise ValueError(
                f"base {i}: expected a and b of the same non-empty (seeds, problems) shape, got "
                f"{a.shape} and {b.shape}"
            )
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
            raise ValueError(f"base {i}: non-finite score(s); every (seed, problem) needs both")
        out.append(a - b)
    problems = {d.shape[1] for d in out}
    if len(problems) != 1:
        raise ValueError(f"grids: the bases hold {sorted(problems)} problems; expected one split")
    return out


def resampled_means(grids: Grids, n_resamples: int = 10_000, seed: int = 0) -> np.ndarray:
    """The `n_resamples` bootstrap means of the mean over bases of mean(a − b): bases, then seeds
    within each drawn base (a base drawn twice draws its seeds twice, independently), then the
    problems once per resample, all with replacement (module docstring). Deterministic under
    `seed`."""
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise ValueError(f"n_resamples: expected an integer >= 1, got {n_resamples!r}")
    diffs = base_differences(grids)
    n_bases, n_problems = len(diffs), diffs[0].shape[1]
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    block = max(1, 2_000_000 // (n_problems * max(d.shape[0] for d in diffs)))
    for start in range(0, n_resamples, block):
        size = min(start + block, n_resamples) - start
        drawn = rng.integers(0, n_bases, size=(size, n_bases))  # (R, B): the bases drawn
        cols = rng.integers(0, n_problems, size=(size, n_problems))  # (R, P): the problems drawn
        # how often each problem was drawn, / P: a resample's mean over its problems is a dot
        flat = (np.arange(size)[:, None] * n_problems + cols).ravel()
        weights = np.bincount(flat, minlength=size * n_problems).reshape(size, n_problems)
        weights = weights / n_problems
        # each seed's mean over the drawn problems, per base: (S_b, R)
        seed_means = [d @ weights.T for d in diffs]
        total = np.zeros(size)
        for slot in range(n_bases):  # each drawn base draws its own seeds
            for base, per_seed in enumerate(seed_means):
                rows = np.flatnonzero(drawn[:, slot] == base)
                if rows.size:
                    picks = rng.integers(0, per_seed.shape[0], size=(rows.size, per_seed.shape[0]))
                    total[rows] += per_seed[picks, rows[:, None]].mean(axis=1)
        means[start : start + size] = total / n_bases
    return means


def hierarchical_bootstrap(
    grids: Grids, n_resamples: int = 10_000, alpha: float = 0.05, seed: int = 0
) -> PooledDifference:
    """Percentile interval of `resampled_means` and the pooled difference (the mean over bases of
    each base's mean a − b). With one base it is `paired_bootstrap`'s two-level scheme."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: expected a number in (0, 1), got {alpha!r}")
    means = resampled_means(grids, n_resamples, seed)
    diffs = base_differences(grids)
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    mean = float(np.mean([d.mean() for d in diffs]))
    n_seeds = sum(d.shape[0] for d in diffs)
    return PooledDifference(mean, float(low), float(high), len(diffs), n_seeds, diffs[0].shape[1])


def within_base_seed_sd(sds: Sequence[float], seeds: Sequence[int]) -> float:
    """The bases' seed SDs pooled by their degrees of freedom: √(Σ (S_b − 1) s_b² / Σ (S_b − 1));
    a base with one seed adds nothing; NaN when none has two."""
    pairs = [(s, n - 1) for s, n in zip(sds, seeds, strict=True) if n > 1 and np.isfinite(s)]
    df = sum(k for _, k in pairs)
    return float(np.sqrt(sum(k * s * s for s, k in pairs) / df)) if df else float("nan")


def between_base_sd(means_sd: float, within_sd: float, seeds: Sequence[int]) -> float:
    """The between-base SD net of seed noise: √max(0, means_sd² − within_sd² / S̃), S̃ the
    harmonic mean of the bases' seed counts (one-way random effects, method of moments); NaN when
    either SD is unknown."""
    if not (np.isfinite(means_sd) and np.isfinite(within_sd)):
        return float("nan")
    harmonic = len(seeds) / sum(1.0 / n for n in seeds)
    return float(np.sqrt(max(0.0, means_sd**2 - within_sd**2 / harmonic)))


def pooled_comparison(
    grids: Grids, n_resamples: int = 10_000, seed: int = 0
) -> dict[str, float | int | str]:
    """The statistics of one comparison pooled over bases (module docstring): the mean over
    bases, the hierarchical bootstrap CI and its verdict, the t interval over the per-base means
    (df = bases − 1) and its verdict, the more conservative of the two, the counts, the
    within-base seed SD, the SD of the per-base means and the between-base SD, and the minimum
    detectable effect at 80% power of the t test over bases (`mde80`, from the SD of the
    per-base means)."""
    boot = hierarchical_bootstrap(grids, n_resamples=n_resamples, seed=seed)
    base_means = np.array([float((np.asarray(a) - np.asarray(b)).mean()) for a, b in grids])
    t_low, t_high = t_interval(base_means)
    t_verdict = interval_verdict(t_low, t_high)
    seeds = [np.atleast_2d(a).shape[0] for a, _ in grids]
    within = within_base_seed_sd([seed_sd(a, b) for a, b in grids], seeds)
    means_sd = float(base_means.std(ddof=1)) if base_means.size > 1 else float("nan")
    return {
        "difference": boot.mean,
        "ci95_low": boot.ci_low,
        "ci95_high": boot.ci_high,
        "bootstrap_verdict": boot.verdict,
        "base_t_ci95_low": t_low,
        "base_t_ci95_high": t_high,
        "base_t_verdict": t_verdict,
        "verdict": conservative_verdict(boot.verdict, t_verdict),
        "bases": boot.n_bases,
        "seeds": boot.n_seeds,
        "problems": boot.n_problems,
        "seed_sd": within,
        "base_sd": means_sd,
        "between_base_sd": between_base_sd(means_sd, within, seeds),
        "mde80": mde_from_sd(means_sd, boot.n_bases),
    }
