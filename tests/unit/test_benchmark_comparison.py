"""The per-benchmark paired comparison: method − GRPO and − base on final grades."""

from __future__ import annotations

import polars as pl
import pytest

from rredcot.reporting.benchmark_comparison import benchmark_comparison


def grades(method: str, seed: int, rewards: dict[str, list[float]]) -> pl.DataFrame:
    rows = [
        {"method": method, "seed": seed, "problem_id": p, "sample_index": i, "reward": r}
        for p, rs in rewards.items()
        for i, r in enumerate(rs)
    ]
    return pl.DataFrame(rows)


BASE = grades("base", 0, {"p1": [0, 0], "p2": [1, 0]})  # pass@1 0, 0.5
GRPO = [
    grades("grpo", 1, {"p1": [1, 0], "p2": [1, 0]}),
    grades("grpo", 2, {"p1": [0, 0], "p2": [1, 1]}),
]
RRED = [
    grades("rredcot", 1, {"p1": [1, 1], "p2": [1, 0]}),
    grades("rredcot", 2, {"p1": [1, 0], "p2": [1, 1]}),
]


def test_differences_are_paired_per_seed_and_problem_by_hand() -> None:
    table = benchmark_comparison(
        "b", pl.concat([BASE, *GRPO, *RRED]), ["grpo", "rredcot"], "grpo", n_resamples=200
    )
    rows = {(r["method"], r["against"]): r for r in table.iter_rows(named=True)}
    assert set(rows) == {("grpo", "base"), ("rredcot", "base"), ("rredcot", "grpo")}
    # grpo: seed 1 (0.5, 0.5), seed 2 (0, 1) against the base (0, 0.5): mean difference 0.25
    assert rows[("grpo", "base")]["difference"] == pytest.approx(0.25)
    # rredcot − grpo: seed 1 (1 − 0.5, 0.5 − 0.5), seed 2 (0.5 − 0, 1 − 1): mean 0.25
    got = rows[("rredcot", "grpo")]
    assert got["difference"] == pytest.approx(0.25)
    assert (got["method_score"], got["against_score"]) == pytest.approx((0.75, 0.5))
    assert (got["seeds"], got["problems"], got["benchmark"]) == (2, 2, "b")
    # both seeds differ by 0.25: the t interval is a point, so the t verdict is "better"
    assert got["seed_t_ci95_low"] == pytest.approx(0.25) and got["seed_t_verdict"] == "better"
    assert got["verdict"] in {"better", "no difference"}
    assert got["ci95_low"] <= got["difference"] <= got["ci95_high"]


def test_a_problem_missing_for_one_run_is_an_error_not_dropped() -> None:
    short = grades("rredcot", 1, {"p1": [1, 1]})
    with pytest.raises(ValueError, match="missing \\(seed, problem\\) units \\[\\(1, 'p2'\\)\\]"):
        benchmark_comparison(
            "b", pl.concat([BASE, *GRPO, short, RRED[1]]), ["grpo", "rredcot"], "grpo"
        )


def test_a_seed_without_a_grpo_run_is_an_error() -> None:
    extra = grades("rredcot", 3, {"p1": [1, 1], "p2": [1, 1]})
    with pytest.raises(ValueError, match="rredcot seeds \\[3\\] have no grpo run"):
        benchmark_comparison(
            "b", pl.concat([BASE, *GRPO, *RRED, extra]), ["grpo", "rredcot"], "grpo"
        )


def test_without_grpo_only_the_base_rows() -> None:
    table = benchmark_comparison("b", pl.concat([BASE, *RRED]), ["rredcot"], "grpo", n_resamples=50)
    assert table.select("method", "against").rows() == [("rredcot", "base")]
