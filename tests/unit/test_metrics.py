"""Evaluation metrics: pass@1 / avg@k by hand, bootstrap CI on known cases, seed spread."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rredcot.evaluation.metrics import avg_at_k, bootstrap_ci, mean_std_over_seeds, pass_at_1


def _rewards(rows: list[tuple[str, int, float | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows,
        schema={"problem_id": pl.String, "sample_index": pl.Int64, "reward": pl.Float64},
        orient="row",
    )


def test_pass_at_1_and_avg_at_k_by_hand() -> None:
    rewards = _rewards(
        [("b", 0, 1.0), ("a", 0, 0.0), ("b", 1, 0.0), ("b", 2, 1.0), ("b", 3, 1.0), ("a", 1, 0.0)]
    )
    per_problem = pass_at_1(rewards)
    assert per_problem.to_dicts() == [
        {"problem_id": "b", "k": 4, "pass_at_1": 0.75},
        {"problem_id": "a", "k": 2, "pass_at_1": 0.0},
    ]
    assert avg_at_k(rewards) == pytest.approx(0.375)  # problems weigh the same, not samples


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([("a", 0, None)], "rewards.reward: 1 null"),
        ([("a", 0, 1.5)], r"outside \[0, 1\]"),
        ([("a", 0, float("nan"))], r"outside \[0, 1\]"),
        ([("a", 0, 1.0), ("a", 0, 0.0)], "share a \\(problem_id, sample_index\\)"),
        ([], "no rows"),
    ],
)
def test_pass_at_1_rejects_bad_rewards(rows: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pass_at_1(_rewards(rows))


def test_pass_at_1_names_missing_columns() -> None:
    with pytest.raises(ValueError, match=r"missing column\(s\) \['sample_index'\]"):
        pass_at_1(pl.DataFrame({"problem_id": ["a"], "reward": [1.0]}))


@pytest.mark.parametrize("value", [0.5, 0.25, 1.0])
def test_bootstrap_ci_of_constant_values_is_degenerate(value: float) -> None:
    assert bootstrap_ci(np.full(40, value)) == (value, value)


def test_bootstrap_ci_matches_normal_approximation_for_coin_flips() -> None:
    values = np.array([0.0, 1.0] * 50)  # mean 0.5, standard error sqrt(0.25 / 100) = 0.05
    low, high = bootstrap_ci(values, n_resamples=10_000, alpha=0.05, seed=0)
    assert low == pytest.approx(0.5 - 1.96 * 0.05, abs=0.015)
    assert high == pytest.approx(0.5 + 1.96 * 0.05, abs=0.015)
    narrower = bootstrap_ci(values, alpha=0.32, seed=0)  # ~ ± 1 standard error
    assert narrower[0] == pytest.approx(0.45, abs=0.015)
    assert narrower[1] == pytest.approx(0.55, abs=0.015)


def test_bootstrap_ci_is_seeded() -> None:
    values = np.random.default_rng(1).random(30)
    assert bootstrap_ci(values, seed=3) == bootstrap_ci(values, seed=3)
    assert bootstrap_ci(values, seed=3) != bootstrap_ci(values, seed=4)


def test_bootstrap_ci_blocks_give_the_same_answer_as_one_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = np.random.default_rng(2).random(50)
    whole = bootstrap_ci(values, n_resamples=500, seed=9)
    monkeypatch.setattr("rredcot.evaluation.metrics._BOOTSTRAP_BLOCK", 50 * 7)
    assert bootstrap_ci(values, n_resamples=500, seed=9) == whole


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"values": np.array([])}, "non-empty 1-D"),
        ({"values": np.ones((2, 2))}, "non-empty 1-D"),
        ({"values": np.array([1.0, np.nan])}, "non-finite"),
        ({"values": np.ones(3), "alpha": 1.0}, "alpha"),
        ({"values": np.ones(3), "n_resamples": 0}, "n_resamples"),
    ],
)
def test_bootstrap_ci_rejects_bad_input(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bootstrap_ci(**kwargs)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=30), st.integers(0, 2**32 - 1))
def test_bootstrap_ci_is_an_ordered_interval_inside_the_data(values: list, seed: int) -> None:
    low, high = bootstrap_ci(np.array(values), n_resamples=200, seed=seed)
    assert min(values) - 1e-12 <= low <= high <= max(values) + 1e-12


def test_mean_std_over_seeds() -> None:
    mean, std = mean_std_over_seeds([1.0, 2.0, 3.0])
    assert (mean, std) == (2.0, 1.0)  # sample std: sqrt(((1 + 0 + 1) / (3 - 1)))
    mean, std = mean_std_over_seeds(np.array([0.4]))
    assert mean == 0.4 and math.isnan(std)
    with pytest.raises(ValueError, match="non-empty"):
        mean_std_over_seeds([])


def test_a_methods_ci_does_not_depend_on_the_row_order() -> None:
    """The same grades in another order give the same table row (the bootstrap indexes the
    per-problem array, so it must come in one order: problem ids sorted)."""
    import polars as pl

    from rredcot.evaluation.tables import method_row

    rng = np.random.default_rng(3)
    grades = pl.DataFrame(
        {
            "problem_id": [f"p{i:02d}" for i in range(40) for _ in range(2)],
            "sample_index": [j for _ in range(40) for j in range(2)],
            "reward": rng.integers(0, 2, 80).astype(float),
            "method": ["grpo"] * 80,
            "seed": [0] * 80,
            "num_tokens": [10] * 80,
            "finish_reason": ["stop"] * 80,
            "status": ["ok"] * 80,
        }
    )
    want = method_row(grades, n_resamples=300, seed=0)
    for order in range(3):
        shuffled = grades.sample(fraction=1.0, shuffle=True, seed=order)
        got = method_row(shuffled, n_resamples=300, seed=0)
        assert (got["ci95_low"], got["ci95_high"]) == (want["ci95_low"], want["ci95_high"])
        assert got["pass_at_1"] == want["pass_at_1"]
