"""Benchmark metrics (METHOD.md §7): pass@1 averaged over k samples, bootstrap CI, seed spread.

pass@1 of problem i from k samples is the mean reward over its samples,
    pass@1_i = (1/k_i) * sum_j r_ij;
avg@k is the mean of pass@1_i over problems (every problem weighs the same), and its 95%
confidence interval is a percentile bootstrap over problems. Across training seeds the
table reports mean ± sample standard deviation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

REWARD_COLUMNS: tuple[str, ...] = ("problem_id", "sample_index", "reward")

# Resample in blocks of at most this many drawn indices, so memory stays bounded for big sets.
_BOOTSTRAP_BLOCK = 4_000_000


def pass_at_1(rewards: pl.DataFrame) -> pl.DataFrame:
    """Per-problem pass@1 = mean reward over the problem's samples.

    `rewards` has one row per (problem_id, sample_index) with a reward in [0, 1].
    Returns columns `problem_id`, `k` (samples of that problem), `pass_at_1`, one row per
    problem in first-appearance order. Missing columns, nulls, NaNs, rewards outside [0, 1] and
    duplicated (problem_id, sample_index) pairs raise ValueError.
    """
    missing = [c for c in REWARD_COLUMNS if c not in rewards.columns]
    if missing:
        raise ValueError(
            f"rewards: missing column(s) {missing}; expected columns {list(REWARD_COLUMNS)}"
        )
    if rewards.height == 0:
        raise ValueError("rewards: no rows; pass@1 needs at least one sample")
    for column in REWARD_COLUMNS:
        nulls = rewards[column].null_count()
        if nulls:
            raise ValueError(f"rewards.{column}: {nulls} null value(s)")
    reward = rewards["reward"].cast(pl.Float64)
    bad = rewards.filter(reward.is_nan() | (reward < 0) | (reward > 1))
    if bad.height:
        raise ValueError(
            f"rewards.reward: {bad.height} value(s) outside [0, 1], e.g. rows "
            f"{bad.head(3).select(REWARD_COLUMNS).to_dicts()}"
        )
    duplicated = rewards.filter(pl.struct("problem_id", "sample_index").is_duplicated())
    if duplicated.height:
        raise ValueError(
            f"rewards: {duplicated.height} rows share a (problem_id, sample_index), e.g. "
            f"{duplicated.head(3).select(REWARD_COLUMNS).to_dicts()}"
        )
    return rewards.group_by("problem_id", maintain_order=True).agg(
        pl.len().alias("k"), pl.col("reward").cast(pl.Float64).mean().alias("pass_at_1")
    )


def avg_at_k(rewards: pl.DataFrame) -> float:
    """avg@k: mean over problems of per-problem pass@1 (see `pass_at_1` for the input)."""
    return float(pass_at_1(rewards)["pass_at_1"].mean())


def bootstrap_ci(
    values: np.ndarray, n_resamples: int = 10_000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap (1 - alpha) CI of the mean of `values` (one value per problem).

    Draws `n_resamples` resamples of len(values) problems with replacement (vectorized, in
    blocks) from `np.random.default_rng(seed)`, and returns the alpha/2 and 1 - alpha/2
    quantiles of their means. Same inputs and seed give the same interval.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"values: expected a non-empty 1-D array, got shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"values: {int(np.sum(~np.isfinite(values)))} non-finite value(s)")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise ValueError(f"n_resamples: expected an integer >= 1, got {n_resamples!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: expected a number in (0, 1), got {alpha!r}")
    rng = np.random.default_rng(seed)
    n = values.size
    block = max(1, _BOOTSTRAP_BLOCK // n)
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, block):
        stop = min(start + block, n_resamples)
        idx = rng.integers(0, n, size=(stop - start, n))  # (resamples, problems)
        means[start:stop] = values[idx].mean(axis=1)
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def mean_std_over_seeds(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1) of one metric over training seeds.

    With a single seed the spread is unknown and the std is NaN (not 0), so a table never
    shows a one-seed result as if it had no variance.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"values: expected a non-empty 1-D sequence, got shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"values: {int(np.sum(~np.isfinite(values)))} non-finite value(s)")
    std = float(np.std(values, ddof=1)) if values.size > 1 else float("nan")
    return float(np.mean(values)), std
