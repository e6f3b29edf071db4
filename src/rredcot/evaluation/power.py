"""Power of a comparison over training seeds: the minimum detectable effect (METHOD.md §7).

A comparison of two training methods has the seed as its unit of replication: the per-seed mean
differences d_1 … d_n (A − B, each over the same problems) are the sample. A two-sided paired
t test at level α = 0.05 detects a true difference δ with 80% power when

    δ ≥ MDE = (t_{0.975, n−1} + t_{0.80, n−1}) · s_d / √n,

with s_d the standard deviation of the d_s (the usual normal-approximation formula with t
quantiles, the noncentral t's own power formula to within a few percent for n ≥ 3). A "no
difference" verdict says little about effects below the MDE; a row reports both. The seed SD is
measured, so the MDE is itself an estimate (it is not a prior power analysis, which needs an SD
from other runs: `seeds_for_mde` gives the seeds that would reach a target from a given SD).
"""

from __future__ import annotations

import math

import numpy as np

from rredcot.evaluation.t_quantiles import t_quantile_80, t_quantile_975


def mde_from_sd(sd: float, n_seeds: int) -> float:
    """MDE at 80% power, α = 0.05 two-sided, for `n_seeds` replicates of SD `sd` (NaN with fewer
    than 2 seeds or an undefined SD)."""
    if n_seeds < 2 or not math.isfinite(sd):
        return float("nan")
    df = n_seeds - 1
    return (t_quantile_975(df) + t_quantile_80(df)) * sd / math.sqrt(n_seeds)


def seed_sd(a: np.ndarray, b: np.ndarray) -> float:
    """s_d: the SD (ddof 1) over seeds of the per-seed mean of a − b ((seeds, problems) arrays);
    NaN with one seed."""
    d = np.atleast_2d(np.asarray(a, np.float64)) - np.atleast_2d(np.asarray(b, np.float64))
    per_seed = d.mean(axis=1)
    return float(per_seed.std(ddof=1)) if per_seed.size > 1 else float("nan")


def minimum_detectable_effect(a: np.ndarray, b: np.ndarray) -> float:
    """The MDE of the comparison a − b on a (seeds, problems) grid, from its own seed SD."""
    return mde_from_sd(seed_sd(a, b), np.atleast_2d(a).shape[0])


def seeds_for_mde(sd: float, target: float, max_seeds: int = 1000) -> int:
    """The fewest seeds n ≥ 2 whose MDE at SD `sd` is at most `target` (a planning figure)."""
    if not (sd >= 0 and target > 0):
        raise ValueError(f"sd, target: expected sd >= 0 and target > 0, got {sd!r}, {target!r}")
    for n in range(2, max_seeds + 1):
        if mde_from_sd(sd, n) <= target:
            return n
    raise ValueError(f"no n <= {max_seeds} seeds reaches an MDE of {target} at SD {sd}")
