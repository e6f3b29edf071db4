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
