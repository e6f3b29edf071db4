"""The minimum detectable effect of a comparison over seeds (rredcot.evaluation.power)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rredcot.evaluation.paired import paired_comparison
from rredcot.evaluation.power import (
    mde_from_sd,
    minimum_detectable_effect,
    seed_sd,
    seeds_for_mde,
)
from rredcot.evaluation.t_quantiles import t_quantile_80


def test_mde_by_hand():
    # 5 seeds, s_d = 0.026: (t_.975,4 + t_.80,4) · 0.026 / √5 = (2.776 + 0.941) · 0.026 / √5
    assert mde_from_sd(0.026, 5) == pytest.approx(3.717 * 0.026 / math.sqrt(5))
    assert mde_from_sd(0.026, 5) == pytest.approx(0.04322, abs=1e-5)
    # beyond 30 degrees of freedom: the normal quantiles 1.960 + 0.8416
    assert mde_from_sd(1.0, 101) == pytest.approx(2.8016 / math.sqrt(101))
    assert math.isnan(mde_from_sd(0.1, 1)) and math.isnan(mde_from_sd(float("nan"), 5))


def test_t80_quantiles_decrease_to_the_normal():
    values = [t_quantile_80(df) for df in range(1, 32)]
    assert values == sorted(values, reverse=True) and values[-1] == 0.8416
    assert t_quantile_80(1) == 1.376  # tan(0.3π): the Cauchy's 0.80 quantile
    assert math.tan(0.3 * math.pi) == pytest.approx(1.376, abs=5e-4)
    with pytest.raises(ValueError):
        t_quantile_80(0)


def test_seed_sd_is_over_per_seed_means():
    a = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])  # per-seed means of a − b: .5, 1, 0
    b = np.zeros((3, 2))
    assert seed_sd(a, b) == pytest.approx(0.5)  # SD (ddof 1) of 0.5, 1, 0
    assert minimum_detectable_effect(a, b) == pytest.approx((4.303 + 1.061) * 0.5 / math.sqrt(3))
    assert math.isnan(seed_sd(a[:1], b[:1]))


def test_seeds_for_mde_is_the_first_n_that_reaches_the_target():
    n = seeds_for_mde(0.026, 0.02)
    assert mde_from_sd(0.026, n) <= 0.02 < mde_from_sd(0.026, n - 1)
    assert n == 16  # (2.131 + 0.866) · 0.026 / 4 = 0.0195; at 15: 0.0202
    with pytest.raises(ValueError):
        seeds_for_mde(0.026, 0.0)


def test_every_comparison_row_carries_its_mde():
    a = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    row = paired_comparison(a, np.zeros((3, 2)), n_resamples=50)
    assert row["seed_sd"] == pytest.approx(0.5)
    assert row["mde80"] == pytest.approx(minimum_detectable_effect(a, np.zeros((3, 2))))
    assert math.isnan(paired_comparison(a[:1], np.zeros((1, 2)), n_resamples=50)["mde80"])
