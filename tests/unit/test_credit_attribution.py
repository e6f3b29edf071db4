"""The placebo table (`rredcot.reporting.credit_attribution`) on hand-made runs: each method
minus its placebo, paired over (seed, problem), with first-error kinds from labelled responses."""

from __future__ import annotations

import polars as pl
import pytest

from rredcot.reporting.credit_attribution import attribution_table, plot_attribution
from rredcot.reporting.learning_curves import RunScores
from rredcot.workflow.run_params import placebo_pairs

PROBLEMS = ["p0", "p1", "p2", "p3"]
BASE = pl.DataFrame({"problem_id": PROBLEMS, "sample_index": [0] * 4, "reward": [0.0] * 4})


def rewards(values: list[float], step: int | None = None) -> pl.DataFrame:
    df = BASE.with_columns(pl.Series("reward", [float(v) for v in values]))
    return df if step is None else df.with_columns(pl.lit(step, pl.Int64).alias("step"))


def run(name: str, seed: int, mid: list[float], final: list[float]) -> RunScores:
    metrics = pl.DataFrame(
        {"step": [1, 2], "time/step_seconds": [1.0, 1.0], "tokens/seen": [10, 20]}
    )
    return RunScores(name, seed, 2, rewards(mid, 1), rewards(final), metrics)


def labelled(name: str, seed: int, kinds: list[str]) -> pl.DataFrame:
    """One final sample per problem: `right`, `systematic` or `random` (its first error)."""
    return pl.DataFrame(
        {
            "problem_id": PROBLEMS,
            "sample_index": [0] * 4,
            "method": [name] * 4,
            "seed": [seed] * 4,
            "right": [k == "right" for k in kinds],
            "wrong": [k != "right" for k in kinds],
            "lucky": [False] * 4,
            "systematic": [k == "systematic" for k in kinds],
        }
    )


def test_placebo_pairs_come_from_the_variants_with_a_placebo() -> None:
    variants = [
        {"name": "rredcot_center_group", "method": "rredcot", "credit": {"center": "group"}},
        {"name": "rredcot_perm", "method": "rredcot", "credit": {"placebo": "perm"}},
        {"name": "x", "method": "rredcot", "credit": {"placebo": "none"}},
        {"name": "oracle_step_flat", "method": "oracle_step", "credit": {"placebo": "flat"}},
    ]
    assert placebo_pairs(variants) == [
        ("rredcot", "rredcot_perm"),
        ("oracle_step", "oracle_step_flat"),
    ]


def test_method_minus_placebo_by_hand() -> None:
    """Two seeds. Method: curve 0.5 then final 1 on every problem; placebo: 0.5 then 0.5.
    AUC = trapezoid mean over steps 0, 1, 2 of per-problem pass@1, base 0 at step 0:
    method (0 + 0.5)/2·½ + (0.5 + 1)/2·½ = 0.5, placebo (0 + 0.5)/4 + (0.5 + 0.5)/4 = 0.375."""
    half = [1, 0, 1, 0]
    runs = [
        run("rredcot", 1, half, [1, 1, 1, 1]),
        run("rredcot", 2, half, [1, 1, 1, 1]),
        run("rredcot_perm", 1, half, [1, 0, 1, 0]),
        run("rredcot_perm", 2, half, [0, 1, 0, 1]),
    ]
    t1 = pl.concat(
        [
            labelled("rredcot", 1, ["right", "right", "right", "random"]),
            labelled("rredcot", 2, ["right", "right", "right", "right"]),
            labelled("rredcot_perm", 1, ["systematic", "systematic", "right", "random"]),
            labelled("rredcot_perm", 2, ["systematic", "right", "right", "right"]),
        ]
    )
    table = attribution_table(runs, BASE, t1, t1, [("rredcot", "rredcot_perm")], n_resamples=200)
    got = {r["measure"]: r for r in table.iter_rows(named=True)}
    assert list(got) == [
        "auc",
        "final",
        "t1_avoids_systematic",
        "t1_avoids_random",
        "greedy_pass1",
    ]
    assert got["auc"]["endpoint"] == "primary" and got["final"]["endpoint"] == "secondary"
    assert got["auc"]["difference"] == pytest.approx(0.5 - 0.375)
    assert got["final"]["difference"] == pytest.approx(0.5)
    # systematic first errors: method 0 of 8 samples, placebo 3 of 8 -> avoids +3/8
    assert got["t1_avoids_systematic"]["difference"] == pytest.approx(3 / 8)
    assert got["t1_avoids_systematic"]["error_kind"] == "systematic"
    # random first errors: 1 of 8 on both sides
    assert got["t1_avoids_random"]["difference"] == pytest.approx(0.0)
    # greedy right: method 7/8, placebo 4/8
    assert got["greedy_pass1"]["difference"] == pytest.approx(3 / 8)
    assert set(table["seeds"].to_list()) == {2} and set(table["against"]) == {"rredcot_perm"}
    assert set(table["stratum"]) == {"all"}
    # by stratum: p0, p1 (rule) and p2, p3 (no rule) are alike, each +0.125 (0.5 − 0.375)
    strata = {"p0": "rule", "p1": "rule", "p2": "no_rule", "p3": "no_rule"}
    table = attribution_table(
        runs, BASE, t1, t1, [("rredcot", "rredcot_perm")], n_resamples=200, strata=strata
    )
    by = {(r["measure"], r["stratum"]): r for r in table.iter_rows(named=True)}
    assert by[("auc", "rule")]["difference"] == pytest.approx(0.125)
    assert by[("auc", "no_rule")]["difference"] == pytest.approx(0.125)
    assert by[("auc", "rule")]["endpoint"] == "secondary" and by[("auc", "rule")]["problems"] == 2
    assert by[("auc", "all")]["endpoint"] == "primary"


def test_unpaired_seeds_and_missing_kinds_are_errors(tmp_path) -> None:
    runs = [run("rredcot", 1, [0] * 4, [1] * 4), run("rredcot_perm", 2, [0] * 4, [0] * 4)]
    t1 = pl.concat(
        [labelled("rredcot", 1, ["right"] * 4), labelled("rredcot_perm", 2, ["right"] * 4)]
    )
    with pytest.raises(ValueError, match="share their seeds"):
        attribution_table(runs, BASE, t1, t1, [("rredcot", "rredcot_perm")], n_resamples=50)
    with pytest.raises(ValueError, match="no placebo"):
        attribution_table(runs, BASE, t1, t1, [], n_resamples=50)
    blind = t1.with_columns(pl.lit(None, pl.Boolean).alias("systematic"))
    with pytest.raises(ValueError, match="misconception"):
        attribution_table(runs, BASE, blind, blind, [("rredcot", "rredcot_perm")])


def test_the_figure_has_one_panel_per_pair(tmp_path) -> None:
    runs = [
        run(name, s, [0, 1, 0, 1], final)
        for s in (1, 2)
        for name, final in (("rredcot", [1, 1, 0, 1]), ("rredcot_perm", [0, 1, 0, 1]))
    ]
    t1 = pl.concat(
        [labelled(n, s, ["right", "random", "systematic", "right"]) for n, s in
         [("rredcot", 1), ("rredcot", 2), ("rredcot_perm", 1), ("rredcot_perm", 2)]]
    )  # fmt: skip
    table = attribution_table(runs, BASE, t1, t1, [("rredcot", "rredcot_perm")], n_resamples=50)
    path = plot_attribution(table, tmp_path / "f.png")
    assert path.stat().st_size > 0


def test_a_baseline_given_the_methods_budget_is_compared_at_equal_compute() -> None:
    """rredcot: 2 steps of 2 s; grpo_long: 4 steps of 1 s, evaluated at step 2 and at its end.
    Equal seconds (4 s): both at their ends. Equal tokens: rredcot's 2 steps saw 20 tokens,
    grpo_long's step 2 as many: rredcot's final against grpo_long's curve point."""

    def long_run(seed: int) -> RunScores:
        metrics = pl.DataFrame(
            {"step": [1, 2, 3, 4], "time/step_seconds": [1.0] * 4, "tokens/seen": [10, 20, 30, 40]}
        )
        return RunScores(
            "grpo_long", seed, 4, rewards([0, 0, 1, 1], 2), rewards([0, 1, 1, 1]), metrics
        )

    def credit_run(name: str, seed: int) -> RunScores:
        metrics = pl.DataFrame(
            {"step": [1, 2], "time/step_seconds": [2.0, 2.0], "tokens/seen": [10, 20]}
        )
        return RunScores(name, seed, 2, rewards([0, 1, 0, 1], 1), rewards([1, 1, 1, 1]), metrics)

    runs = [credit_run(n, s) for n in ("rredcot", "rredcot_perm") for s in (1, 2)]
    runs += [long_run(1), long_run(2)]
    t1 = pl.concat(
        [labelled(n, s, ["right"] * 4) for n in ("rredcot", "rredcot_perm") for s in (1, 2)]
        + [labelled("grpo_long", s, ["systematic", "right", "right", "right"]) for s in (1, 2)]
    )
    table = attribution_table(
        runs, BASE, t1, t1, [("rredcot", "rredcot_perm")], n_resamples=50,
        budget_pairs=[("rredcot", "grpo_long")],
    )  # fmt: skip
    budget = {
        r["measure"]: r
        for r in table.filter(pl.col("against") == "grpo_long").iter_rows(named=True)
    }
    assert list(budget) == [
        "final_equal_seconds", "final_equal_tokens", "auc_equal_seconds",
        "t1_avoids_systematic", "t1_avoids_random", "greedy_pass1",
    ]  # fmt: skip
    # at both ends: grpo_long's one systematic first error in four problems, rredcot's none
    assert budget["t1_avoids_systematic"]["difference"] == pytest.approx(0.25)
    assert budget["t1_avoids_random"]["difference"] == pytest.approx(0.0)
    assert budget["greedy_pass1"]["difference"] == pytest.approx(0.25)
    assert budget["final_equal_seconds"]["difference"] == pytest.approx(1 - 0.75)
    assert budget["final_equal_tokens"]["difference"] == pytest.approx(1 - 0.5)
    # area against seconds to the common 4 s: rredcot's steps at 0, 2, 4 s, problems
    # (0,0,1) ×2 → 1/4 and (0,1,1) ×2 → 3/4: 0.5; grpo_long's evaluated steps 0, 2, 4 at
    # 0, 2, 4 s: (0,0,0) 0, (0,0,1) 1/4, (0,1,1) ×2 3/4: 0.4375
    assert budget["auc_equal_seconds"]["difference"] == pytest.approx(0.5 - 0.4375)


def test_the_area_against_seconds_interpolates_at_the_budget() -> None:
    """Steps 0, 10, 20 at 0, 5, 10 s with pass@1 0.2, 0.4, 0.6; budget 7.5 s: the curve at
    7.5 s is 0.5, the area (0.2+0.4)/2·5 + (0.4+0.5)/2·2.5 = 2.625, its mean 0.35; a budget
    past the run's end is an error, never extrapolated."""
    from rredcot.reporting.learning_curves import seconds_area

    points = pl.DataFrame(
        {
            "seed": [1] * 3,
            "problem_id": ["p"] * 3,
            "step": [0, 10, 20],
            "pass_at_1": [0.2, 0.4, 0.6],
        }
    )
    seconds = {0: 0.0, 10: 5.0, 20: 10.0}
    assert seconds_area(points, seconds, 7.5)["auc"].to_list() == [pytest.approx(0.35)]
    assert seconds_area(points, seconds, 10.0)["auc"].to_list() == [pytest.approx(0.4)]
    with pytest.raises(ValueError, match="before the budget"):
        seconds_area(points, seconds, 12.0)


def test_every_run_is_also_set_against_the_reference_per_first_error_kind() -> None:
    """With `reference` grpo: rredcot and rredcot_perm each get the kind and greedy rows
    against grpo (grpo: 2 systematic first errors of 4 per seed; rredcot: none)."""
    runs = [
        run(n, s, [0] * 4, [1] * 4) for n in ("grpo", "rredcot", "rredcot_perm") for s in (1, 2)
    ]
    t1 = pl.concat(
        [labelled("grpo", s, ["systematic", "systematic", "right", "right"]) for s in (1, 2)]
        + [labelled(n, s, ["right"] * 4) for n in ("rredcot", "rredcot_perm") for s in (1, 2)]
    )
    table = attribution_table(
        runs, BASE, t1, t1, [("rredcot", "rredcot_perm")], n_resamples=50, reference="grpo"
    )
    against = table.filter(pl.col("against") == "grpo")
    assert against.select("method", "measure").rows() == [
        (m, x)
        for m in ("rredcot", "rredcot_perm")
        for x in ("t1_avoids_systematic", "t1_avoids_random", "greedy_pass1")
    ]
    first = against.row(0, named=True)
    assert first["difference"] == pytest.approx(0.5) and first["error_kind"] == "systematic"
    with pytest.raises(ValueError, match="no grpo run"):
        attribution_table(
            runs[1:], BASE, t1, t1, [("rredcot", "rredcot_perm")], n_resamples=50,
            reference="grpo",
        )  # fmt: skip
