"""rredcot.evaluation.hierarchical: a paired comparison pooled over SFT bases, on hand-computed
grids: the pooled mean, the t interval over bases, the SDs, and the hierarchical bootstrap's
determinism, its independent seed draws and its width against the bases' spread."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rredcot.evaluation.hierarchical import (
    between_base_sd,
    hierarchical_bootstrap,
    pooled_comparison,
    resampled_means,
    within_base_seed_sd,
)
from rredcot.evaluation.paired import paired_bootstrap


def grid(seed_means: list[float], spread: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) over two problems whose per-seed mean difference is each of `seed_means`
    (a − b = m − spread, m + spread on the two problems)."""
    a = np.array([[m - spread, m + spread] for m in seed_means]) + 0.5
    return a, np.full_like(a, 0.5)


# Two bases of three seeds: per-seed differences 0.01, 0.02, 0.03 (mean 0.02, seed SD 0.01) and
# 0.03, 0.05, 0.07 (mean 0.05, seed SD 0.02).
TWO_BASES = [grid([0.01, 0.02, 0.03]), grid([0.03, 0.05, 0.07])]


def test_two_bases_by_hand():
    row = pooled_comparison(TWO_BASES, n_resamples=2000, seed=0)
    assert row["difference"] == pytest.approx(0.035)  # (0.02 + 0.05) / 2
    means_sd = 0.03 / math.sqrt(2)  # SD of 0.02 and 0.05 (ddof 1)
    half = 12.706 * means_sd / math.sqrt(2)  # t_{0.975, 1} * s / sqrt(bases)
    assert row["base_t_ci95_low"] == pytest.approx(0.035 - half)
    assert row["base_t_ci95_high"] == pytest.approx(0.035 + half)
    assert row["base_t_verdict"] == "no difference"
    assert row["verdict"] == "no difference"  # the more conservative of the two
    assert row["base_sd"] == pytest.approx(means_sd)
    within = math.sqrt((2 * 0.01**2 + 2 * 0.02**2) / 4)  # pooled by degrees of freedom
    assert row["seed_sd"] == pytest.approx(within)
    assert row["between_base_sd"] == pytest.approx(math.sqrt(means_sd**2 - within**2 / 3))
    assert row["mde80"] == pytest.approx((12.706 + 1.376) * means_sd / math.sqrt(2))
    assert (row["bases"], row["seeds"], row["problems"]) == (2, 6, 2)
    assert row["ci95_low"] <= 0.035 <= row["ci95_high"]


def test_the_pooled_mean_weights_every_base_alike():
    """Four seeds on one base and two on the other: the mean of the two bases' means, not of
    the six seeds."""
    grids = [grid([0.0, 0.0, 0.0, 0.0]), grid([0.06, 0.06])]
    assert hierarchical_bootstrap(grids, n_resamples=100).mean == pytest.approx(0.03)
    assert within_base_seed_sd([0.01, float("nan")], [4, 1]) == pytest.approx(0.01)
    assert math.isnan(within_base_seed_sd([float("nan")], [1]))


def test_between_base_sd_is_zero_when_seed_noise_explains_the_bases():
    assert between_base_sd(0.01, 0.03, [3, 3]) == 0.0  # 0.01² < 0.03² / 3
    assert between_base_sd(0.02, 0.0, [3, 3]) == pytest.approx(0.02)
    assert math.isnan(between_base_sd(float("nan"), 0.01, [3]))


def test_the_bootstrap_is_deterministic_under_its_seed():
    first = hierarchical_bootstrap(TWO_BASES, n_resamples=500, seed=3)
    assert hierarchical_bootstrap(TWO_BASES, n_resamples=500, seed=3) == first
    assert hierarchical_bootstrap(TWO_BASES, n_resamples=500, seed=4) != first


def test_it_widens_with_the_spread_between_bases():
    """The same seeds' spread (SD 0.01) within each base, no problem's; the bases' means 0.02
    and 0.05 against both 0.035."""
    apart = hierarchical_bootstrap(
        [grid([0.01, 0.02, 0.03], 0.0), grid([0.04, 0.05, 0.06], 0.0)], n_resamples=4000
    )
    together = hierarchical_bootstrap([grid([0.025, 0.035, 0.045], 0.0)] * 2, n_resamples=4000)
    assert together.mean == pytest.approx(apart.mean)
    assert apart.ci_high - apart.ci_low > 2 * (together.ci_high - together.ci_low)


def test_a_base_drawn_twice_draws_its_seeds_twice():
    """Two identical bases of two seeds (per-seed differences 0 and 1, one problem): with
    independent seed draws per drawn base the resampled mean is that of four fair coins
    (variance 1/16); shared draws for a base drawn twice would give 3/32."""
    one = (np.array([[0.0], [1.0]]), np.zeros((2, 1)))
    means = resampled_means([one, one], n_resamples=40_000, seed=0)
    assert means.mean() == pytest.approx(0.5, abs=0.01)
    assert means.var() == pytest.approx(1 / 16, abs=0.003)


def test_one_base_is_the_paired_bootstrap():
    rng = np.random.default_rng(0)
    a = rng.normal(0.1, 0.2, size=(8, 40)) + rng.normal(0, 0.05, size=(8, 1))
    b = rng.normal(0.0, 0.2, size=(8, 40))
    pooled = hierarchical_bootstrap([(a, b)], n_resamples=20_000, seed=1)
    paired = paired_bootstrap(a, b, n_resamples=20_000, seed=1)
    width = paired.ci_high - paired.ci_low
    assert pooled.mean == pytest.approx(paired.mean)
    assert pooled.ci_low == pytest.approx(paired.ci_low, abs=0.05 * width)
    assert pooled.ci_high == pytest.approx(paired.ci_high, abs=0.05 * width)
    row = pooled_comparison([(a, b)], n_resamples=200)
    assert math.isnan(row["base_t_ci95_low"]) and row["base_t_verdict"] == "n/a"
    assert row["verdict"] == row["bootstrap_verdict"]  # one base: the bootstrap alone


@pytest.mark.parametrize(
    ("grids", "named"),
    [
        ([], "no base given"),
        ([(np.zeros((2, 3)), np.zeros((2, 2)))], "base 0: expected a and b of the same"),
        ([grid([0.1]), (np.zeros((1, 3)), np.zeros((1, 3)))], "expected one split"),
        ([grid([0.1]), (np.full((1, 2), np.nan), np.zeros((1, 2)))], "base 1: non-finite"),
    ],
)
def test_a_bad_grid_is_named(grids, named):
    with pytest.raises(ValueError, match=named):
        hierarchical_bootstrap(grids, n_resamples=10)


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="n_resamples"):
        resampled_means(TWO_BASES, n_resamples=0)
    with pytest.raises(ValueError, match="alpha"):
        hierarchical_bootstrap(TWO_BASES, alpha=1.0)
