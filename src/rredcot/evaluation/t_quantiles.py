"""Student's t quantiles from tables (no scipy): the 0.975 quantile of the intervals
(`paired`) and the 0.80 quantile of the power calculation (`power`), for 1 … 30 degrees of
freedom, the normal quantile beyond."""

from __future__ import annotations

# Student's t 0.975 quantiles for 1 … 30 degrees of freedom (the normal 1.960 beyond).
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip


def tabled_quantile(table: tuple[float, ...], df: int, normal: float) -> float:
    """A Student's t quantile from `table` (entries for 1 … len(table) degrees of freedom),
    the normal quantile `normal` beyond."""
    if df < 1:
        raise ValueError(f"df: expected >= 1, got {df}")
    return table[df - 1] if df <= len(table) else normal


def t_quantile_975(df: int) -> float:
    """Student's t 0.975 quantile for `df` ≥ 1 degrees of freedom (1.960 beyond 30)."""
    return tabled_quantile(T975, df, 1.960)


# Student's t 0.80 quantiles for 1 … 30 degrees of freedom (the normal 0.8416 beyond).
T80 = (1.376, 1.061, 0.978, 0.941, 0.920, 0.906, 0.896, 0.889, 0.883, 0.879, 0.876, 0.873,
       0.870, 0.868, 0.866, 0.865, 0.863, 0.862, 0.861, 0.860, 0.859, 0.858, 0.858, 0.857,
       0.856, 0.856, 0.855, 0.855, 0.854, 0.854)  # fmt: skip


def t_quantile_80(df: int) -> float:
    """Student's t 0.80 quantile for `df` ≥ 1 degrees of freedom (0.8416 beyond 30)."""
    return tabled_quantile(T80, df, 0.8416)
