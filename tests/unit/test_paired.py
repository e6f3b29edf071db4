"""Paired bootstrap over (seed, problem) units: hand-made cases, pairing, verdicts, errors."""

from __future__ import annotations

import numpy as np
import pytest

from rredcot.evaluation.paired import PairedDifference, paired_bootstrap


def test_constant_difference_has_a_point_interval() -> None:
    a = np.array([[0.5, 1.0, 0.25], [0.0, 0.75, 1.0]])
    diff = paired_bootstrap(a, a - 0.25, n_resamples=500)
    assert diff.mean == pytest.approx(0.25)
    assert diff.ci_low == pytest.approx(0.25) and diff.ci_high == pytest.approx(0.25)
    assert diff.verdict == "better" and (diff.n_seeds, diff.n_problems) == (2, 3)


def test_pairing_removes_problem_difficulty() -> None:
    """Problems differ wildly in difficulty but A beats B by 0.05 on each: the paired CI
    excludes 0, while an unpaired bootstrap of the two means would not."""
    rng = np.random.default_rng(0)
    difficulty = rng.uniform(0, 0.9, size=(3, 200))
    a, b = difficulty + 0.05 + rng.normal(0, 0.01, (3, 200)), difficulty
    diff = paired_bootstrap(a, b, n_resamples=2000)
    assert diff.ci_low > 0.04 and diff.ci_high < 0.06 and diff.verdict == "better"


def test_hand_case_two_problems_one_seed() -> None:
    """d = (1, 0): a resample draws each problem twice with prob. 1/4 each, or both once; the
    means are 1, 0 and 0.5, so the 95% interval spans [0, 1]."""
    diff = paired_bootstrap(np.array([1.0, 0.0]), np.array([0.0, 0.0]), n_resamples=4000)
    assert diff.mean == 0.5 and diff.ci_low == 0.0 and diff.ci_high == 1.0
    assert diff.verdict == "no difference"


def test_hand_case_two_seeds_two_problems_enumerated() -> None:
    """Both levels, enumerated: a resample draws 2 of 2 seeds and, independently, 2 of 2
    problems with replacement, 4 × 4 equally likely draws. On d = [[0.8, 0.4], [0.2, 0.0]] the
    grid means are, with their counts of 16: 0.0 (1), 0.1 (2), 0.2 (3), 0.35 (4), 0.4 (1),
    0.5 (2), 0.6 (2), 0.8 (1). The 2.5% / 97.5% points lie inside the first and last atoms, so
    the 95% interval is (0.0, 0.8); the 15.625% / 84.375% points (α = 5/16) lie inside the
    atoms 0.1 and 0.6, mid-way from their edges, so that interval is (0.1, 0.6)."""
    d = np.array([[0.8, 0.4], [0.2, 0.0]])
    pairs = [(0, 0), (0, 1), (1, 0), (1, 1)]
    means = sorted(float(d[np.ix_(s, p)].mean()) for s in pairs for p in pairs)
    assert means == pytest.approx(
        [0.0, 0.1, 0.1, 0.2, 0.2, 0.2, 0.35, 0.35, 0.35, 0.35, 0.4, 0.5, 0.5, 0.6, 0.6, 0.8]
    )
    # 20,000 resamples: each quantile is ≥ 11 standard errors of the empirical CDF from an edge
    wide = paired_bootstrap(d, np.zeros_like(d), n_resamples=20_000, seed=0)
    assert (wide.mean, wide.ci_low, wide.ci_high) == pytest.approx((0.35, 0.0, 0.8))
    narrow = paired_bootstrap(d, np.zeros_like(d), n_resamples=20_000, alpha=5 / 16, seed=0)
    assert (narrow.ci_low, narrow.ci_high) == pytest.approx((0.1, 0.6))
    assert (narrow.n_seeds, narrow.n_problems) == (2, 2)


def test_seed_spread_widens_the_interval() -> None:
    """Same per-seed means, but one setting's seeds disagree: its CI is wider."""
    problems = np.linspace(0, 1, 100)
    agree = np.stack([problems + 0.1] * 3)
    disagree = np.stack([problems + 0.3, problems + 0.1, problems - 0.1])
    base = np.stack([problems] * 3)
    narrow = paired_bootstrap(agree, base, n_resamples=2000)
    wide = paired_bootstrap(disagree, base, n_resamples=2000)
    assert narrow.mean == pytest.approx(wide.mean)
    assert (wide.ci_high - wide.ci_low) > 10 * (narrow.ci_high - narrow.ci_low + 1e-12)


def test_worse_verdict_and_determinism() -> None:
    rng = np.random.default_rng(1)
    b = rng.uniform(size=(2, 50))
    first = paired_bootstrap(b - 0.2, b, seed=3)
    assert first == paired_bootstrap(b - 0.2, b, seed=3)
    assert first.verdict == "worse"
    assert PairedDifference(0.0, -0.1, 0.1, 1, 1).verdict == "no difference"


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [
        (np.ones((2, 3)), np.ones((3, 2)), "shape"),
        (np.array([[1.0, np.nan]]), np.ones((1, 2)), "non-finite"),
        (np.ones((0, 3)), np.ones((0, 3)), "shape"),
    ],
)
def test_bad_inputs_are_errors(a: np.ndarray, b: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        paired_bootstrap(a, b)
