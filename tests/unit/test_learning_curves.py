"""Learning curves and the paired method comparison on hand-made runs."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from rredcot.evaluation.paired import (
    conservative_verdict,
    paired_bootstrap,
    seed_t_interval,
    t_interval,
)
from rredcot.evaluation.t_quantiles import t_quantile_975
from rredcot.reporting.learning_curves import (
    RunScores,
    cumulative_compute,
    equal_compute_steps,
    learning_curves,
    method_comparison,
    plot_learning_curves,
)
from rredcot.training.curves import CurveSettings

PROBLEMS = [f"p{i}" for i in range(4)]


def rewards(values: list[float], step: int | None = None) -> pl.DataFrame:
    """One sample per problem with the given rewards."""
    df = pl.DataFrame(
        {"problem_id": PROBLEMS, "sample_index": [0] * 4, "reward": [float(v) for v in values]}
    )
    return df if step is None else df.with_columns(pl.lit(step, pl.Int64).alias("step"))


def metrics(steps: int, seconds: float, tokens: int, credit: int = 0) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "step": list(range(1, steps + 1)),
            "time/step_seconds": [seconds] * steps,
            "tokens/seen": [tokens * s for s in range(1, steps + 1)],
            "credit/forward_tokens": [credit] * steps,
        }
    )


def run(method: str, seed: int, mid: list[float], final: list[float], steps: int = 4) -> RunScores:
    return RunScores(
        method, seed, steps, rewards(mid, steps // 2), rewards(final), metrics(steps, 1.0, 10)
    )


BASE = rewards([0, 0, 1, 0])


def test_cumulative_compute_adds_credit_tokens_and_starts_at_zero() -> None:
    out = cumulative_compute(metrics(3, 2.0, 100, credit=5))
    assert out["step"].to_list() == [0, 1, 2, 3]
    assert out["seconds"].to_list() == [0.0, 2.0, 4.0, 6.0]
    assert out["forward_tokens"].to_list() == [0, 105, 210, 315]


def test_learning_curves_join_base_curve_and_final() -> None:
    runs = [run("grpo", 1, [0, 1, 1, 0], [1, 1, 1, 0]), run("grpo", 2, [0, 0, 1, 0], [1, 1, 1, 1])]
    per_run, summary = learning_curves(runs, BASE)
    grpo = summary.filter(pl.col("method") == "grpo").sort("step")
    assert grpo["step"].to_list() == [0, 2, 4]
    assert grpo["pass_at_1"].to_list() == pytest.approx([0.25, 0.375, 0.875])
    assert grpo["seconds"].to_list() == [0.0, 2.0, 4.0]
    assert grpo["seeds"].to_list() == [2, 2, 2]
    low, high = grpo.filter(pl.col("step") == 4)[["ci95_low", "ci95_high"]].row(0)
    assert low < 0.875 < high  # t interval over the two seeds (0.75, 1.0)
    assert per_run.height == 6


def test_comparison_pairs_methods_and_reads_no_difference() -> None:
    grpo = [run("grpo", s, [0, 0, 1, 0], [1, 0, 1, 0]) for s in (1, 2)]
    same = [run("rredcot", s, [0, 0, 1, 0], [1, 0, 1, 0]) for s in (1, 2)]
    better = [run("mc", s, [1, 1, 1, 1], [1, 1, 1, 1]) for s in (1, 2)]
    table = method_comparison([*grpo, *same, *better], BASE, "grpo", n_resamples=500)
    row = table.filter((pl.col("method") == "rredcot") & (pl.col("against") == "grpo"))
    final = row.filter(pl.col("measure") == "final").row(0, named=True)
    assert final["difference"] == 0 and final["verdict"] == "no difference"
    mc = table.filter((pl.col("method") == "mc") & (pl.col("against") == "grpo"))
    assert mc.filter(pl.col("measure") == "final")["difference"][0] == pytest.approx(0.5)
    # AUC: trapezoid over steps 0, 2, 4 of per-problem pass@1, normalised by 4 steps
    auc = mc.filter(pl.col("measure") == "auc").row(0, named=True)
    mc_auc = np.mean([np.trapezoid([b, 1, 1], [0, 2, 4]) / 4 for b in (0, 0, 1, 0)])
    grpo_auc = np.mean(
        [
            np.trapezoid([b, m, f], [0, 2, 4]) / 4
            for b, m, f in zip((0, 0, 1, 0), (0, 0, 1, 0), (1, 0, 1, 0), strict=True)
        ]
    )
    assert auc["difference"] == pytest.approx(mc_auc - grpo_auc)
    vs_base = table.filter((pl.col("method") == "grpo") & (pl.col("against") == "base"))
    assert vs_base["seed"].to_list() == ["all", "1", "2"]
    assert vs_base["difference"].to_list() == pytest.approx([0.25] * 3)
    assert vs_base.filter(pl.col("seed") == "1")["seeds"][0] == 1


def test_fewer_steps_compared_at_equal_steps_and_equal_compute() -> None:
    grpo = [run("grpo", s, [0, 0, 1, 0], [1, 1, 1, 0], steps=4) for s in (1,)]
    empty = rewards([0] * 4, 0).head(0)
    mc = RunScores("mc", 1, 2, empty, rewards([1, 1, 1, 1]), metrics(2, 2.0, 10))
    table = method_comparison([*grpo, mc], BASE, "grpo", n_resamples=200)
    measures = table.filter(pl.col("against") == "grpo")["measure"].to_list()
    assert measures == [
        "final_equal_steps",
        "auc_equal_steps",
        "final_equal_seconds",
        "final_equal_tokens",
    ]
    seconds = table.filter(pl.col("measure") == "final_equal_seconds").row(0, named=True)
    # mc's 2 steps cost 4 s = grpo's 4 steps of 1 s: both at their ends, the same budget
    assert (seconds["method_step"], seconds["against_step"]) == (2, 4)
    assert seconds["method_seconds"] == seconds["against_seconds"] == 4.0
    assert seconds["note"] == ""
    tokens = table.filter(pl.col("measure") == "final_equal_tokens").row(0, named=True)
    # tokens/seen grows 10 per step for both: mc's 2 steps = grpo's step 2 (its mid-run curve)
    assert (tokens["method_step"], tokens["against_step"]) == (2, 2)
    assert tokens["method_forward_tokens"] == tokens["against_forward_tokens"] == 20.0
    assert tokens["difference"] == pytest.approx(1.0 - 0.25)


def test_equal_compute_never_credits_unspent_compute() -> None:
    # The MC − GRPO case of the default: MC's 30 steps cost 380 s, GRPO's whole run 112 s.
    mc = {0: 0.0, 15: 190.0, 30: 380.0}
    grpo = {0: 0.0, 15: 28.0, 30: 56.0, 45: 84.0, 60: 112.0}
    match = equal_compute_steps(mc, grpo, list(mc), list(grpo), "s")
    assert (match.method_step, match.against_step) == (15, 60)
    assert match.note.startswith("reference exhausted")
    # The reference spent more: the method at its end, the reference where it had spent as much
    cheap = {0: 0.0, 2: 4.0}
    dear = {0: 0.0, 2: 2.0, 4: 4.0, 6: 6.0, 8: 8.0}
    match = equal_compute_steps(cheap, dear, list(cheap), list(dear), "s")
    assert (match.method_step, match.against_step) == (2, 4)
    assert match.note.startswith("reference at its step nearest")
    # A tie between two reference steps takes the earlier one
    match = equal_compute_steps({0: 0.0, 1: 3.0}, dear, [0, 1], list(dear), "s")
    assert match.against_step == 2


def test_comparison_has_per_seed_rows_against_grpo_and_a_t_interval() -> None:
    grpo = [run("grpo", s, [0, 0, 1, 0], [1, 0, 1, 0]) for s in (1, 2, 3)]
    finals = {1: [1, 1, 1, 0], 2: [1, 0, 1, 1], 3: [1, 1, 1, 1]}
    other = [run("rredcot", s, [0, 0, 1, 0], finals[s]) for s in (1, 2, 3)]
    table = method_comparison([*grpo, *other], BASE, "grpo", n_resamples=300)
    vs = table.filter(
        (pl.col("method") == "rredcot")
        & (pl.col("against") == "grpo")
        & (pl.col("measure") == "final")
    )
    assert vs["seed"].to_list() == ["all", "1", "2", "3"]
    assert vs["difference"].to_list() == pytest.approx([1 / 3, 0.25, 0.25, 0.5])
    pooled = vs.row(0, named=True)
    # per-seed mean differences 0.25, 0.25, 0.5: mean 1/3, s = 0.1443, t(2) = 4.303
    half = 4.303 * np.std([0.25, 0.25, 0.5], ddof=1) / np.sqrt(3)
    assert pooled["seed_t_ci95_low"] == pytest.approx(1 / 3 - half)
    assert pooled["seed_t_ci95_high"] == pytest.approx(1 / 3 + half)
    # 0.333 ± 0.359 holds 0 over seeds: whatever the bootstrap says, the verdict cannot be
    # "better" (the conservative one of the two)
    assert pooled["seed_t_verdict"] == "no difference"
    assert pooled["verdict"] == "no difference"
    per_seed = vs.filter(pl.col("seed") != "all")
    assert per_seed["seed_t_verdict"].to_list() == ["n/a"] * 3
    assert per_seed["seeds"].to_list() == [1, 1, 1]


def test_t_interval_uses_students_t_not_the_normal() -> None:
    low, high = t_interval(np.array([0.1, 0.2, 0.3]))
    assert (low, high) == pytest.approx(
        (0.2 - 4.303 * 0.1 / np.sqrt(3), 0.2 + 4.303 * 0.1 / np.sqrt(3))
    )
    assert t_quantile_975(1) == 12.706 and t_quantile_975(30) == 2.042
    assert t_quantile_975(200) == 1.960
    assert all(np.isnan(t_interval(np.array([0.4]))))


def test_seed_t_interval_covers_a_known_difference_when_seed_variance_dominates() -> None:
    """Simulated 3-seed experiments where the seeds alone vary: d = δ + e_s on every problem of
    seed s, e_s ~ N(0, 0.05²). The t interval over the seed means (t_2 = 4.303) covers δ in
    exactly 95% of experiments. The two-level bootstrap's interval is the range of the three
    seed means (a resample of three equal seeds has probability 1/27 > 2.5%), which misses δ
    when all three fall on one side of it: coverage 1 − 2·(1/2)³ = 75%. Over 2,000 experiments
    each observed coverage lies within 4 standard errors of its exact value."""
    rng = np.random.default_rng(7)
    delta, n = 0.03, 2000
    covered_t = covered_boot = 0
    for i in range(n):
        d = delta + np.repeat(rng.normal(0.0, 0.05, size=(3, 1)), 10, axis=1)  # (seeds, problems)
        low, high = seed_t_interval(d, np.zeros_like(d))
        covered_t += low <= delta <= high
        boot = paired_bootstrap(d, np.zeros_like(d), n_resamples=2000, seed=i)
        covered_boot += boot.ci_low <= delta <= boot.ci_high
    for covered, exact in ((covered_t, 0.95), (covered_boot, 0.75)):
        assert abs(covered / n - exact) < 4 * np.sqrt(exact * (1 - exact) / n), (covered, exact)


def test_conservative_verdict_needs_both_intervals() -> None:
    assert conservative_verdict("better", "better") == "better"
    assert conservative_verdict("better", "no difference") == "no difference"
    assert conservative_verdict("worse", "better") == "no difference"
    assert conservative_verdict("worse", "n/a") == "worse"
    assert conservative_verdict("n/a", "n/a") == "n/a"


def test_a_method_pairs_with_grpo_on_its_own_seeds_and_needs_each_of_them() -> None:
    # GRPO on five seeds (the main claim), srpo on three: srpo pairs with GRPO seeds 1-3 only
    grpo = [run("grpo", s, [0] * 4, [1, 0, 1, 0]) for s in (1, 2, 3, 4, 5)]
    grpo[3] = run("grpo", 4, [0] * 4, [0, 0, 0, 0])  # seed 4 would lower GRPO if it were used
    srpo = [run("srpo", s, [0] * 4, [1, 1, 1, 0]) for s in (1, 2, 3)]
    table = method_comparison([*grpo, *srpo], BASE, "grpo", n_resamples=50)
    vs = table.filter((pl.col("method") == "srpo") & (pl.col("against") == "grpo"))
    final = vs.filter(pl.col("measure") == "final")
    assert final["seed"].to_list() == ["all", "1", "2", "3"]
    assert final["seeds"][0] == 3 and final["against_score"][0] == pytest.approx(0.5)
    grpo_rows = table.filter((pl.col("method") == "grpo") & (pl.col("seed") != "all"))
    assert grpo_rows["seed"].to_list() == ["1", "2", "3", "4", "5"]  # against the base
    # a seed GRPO lacks cannot be paired: an error, never a silently dropped run
    runs = [run("grpo", 1, [0] * 4, [1] * 4), run("grpo", 2, [0] * 4, [1] * 4)]
    runs.append(run("rredcot", 3, [0] * 4, [1] * 4))
    with pytest.raises(ValueError, match="rredcot: seeds \\[3\\] have no grpo run"):
        method_comparison(runs, BASE, "grpo", n_resamples=10)


def test_plot_writes_a_png(tmp_path) -> None:
    _, summary = learning_curves([run("grpo", 1, [0, 1, 1, 0], [1, 1, 1, 0])], BASE)
    path = plot_learning_curves(summary, tmp_path / "curves.png")
    assert path.stat().st_size > 1000


def test_curve_settings_take_the_splits_evaluation_protocol() -> None:
    evaluation = {
        "samples_per_problem": 4, "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 128,
        "batch_size": 64, "backend": "hf",
        "per_benchmark": {"synth_id": {"temperature": 1.0, "top_p": 1.0}},
    }  # fmt: skip
    curve = CurveSettings.from_evaluation(evaluation, "synth_id", every=15, seed=3)
    assert (curve.temperature, curve.top_p, curve.samples_per_problem) == (1.0, 1.0, 4)
    assert (curve.every, curve.seed, curve.max_new_tokens) == (15, 3, 128)
    assert CurveSettings.from_evaluation(evaluation, "other", 5, 0).temperature == 0.6


def test_the_primary_endpoint_is_the_area_against_grpo_with_its_mde() -> None:
    grpo = [run("grpo", s, [0, 0, 1, 0], [1, 0, 1, 0]) for s in (1, 2, 3)]
    mc = [run("mc", 1, [1, 1, 1, 1], [1, 1, 1, 1]), run("mc", 2, [1, 0, 1, 1], [1, 1, 1, 1])]
    mc.append(run("mc", 3, [0, 0, 1, 0], [1, 0, 1, 0]))
    table = method_comparison([*grpo, *mc], BASE, "grpo", n_resamples=50)
    primary = table.filter(pl.col("endpoint") == "primary")
    assert primary.select("method", "against", "measure", "seed").rows() == [
        ("mc", "grpo", "auc", "all")
    ]
    row = primary.row(0, named=True)
    # per-seed AUC differences (trapezoid over steps 0, 2, 4; / 4 steps), SD over the 3 seeds
    base, g_mid, g_fin = (0, 0, 1, 0), (0, 0, 1, 0), (1, 0, 1, 0)
    auc = lambda mid, fin: np.mean(  # noqa: E731
        [np.trapezoid([b, m, f], [0, 2, 4]) / 4 for b, m, f in zip(base, mid, fin, strict=True)]
    )
    d = [
        auc(m, f) - auc(g_mid, g_fin)
        for m, f in (((1, 1, 1, 1), (1, 1, 1, 1)), ((1, 0, 1, 1), (1, 1, 1, 1)), (g_mid, g_fin))
    ]
    assert row["seed_sd"] == pytest.approx(np.std(d, ddof=1))
    assert row["mde80"] == pytest.approx((4.303 + 1.061) * np.std(d, ddof=1) / np.sqrt(3))
