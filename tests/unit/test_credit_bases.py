"""rredcot.reporting.credit_bases: the main attribution rows on several SFT bases, on hand-made
runs whose areas are known: each base's row is its own tables' row, the pooled row is the mean
over bases with both intervals, the strata select their problems, and a base whose tables are
not its runs' is refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from rredcot.evaluation.hierarchical import pooled_comparison
from rredcot.evaluation.paired import paired_comparison
from rredcot.reporting.credit_bases import (
    COLUMNS,
    BaseRuns,
    bases_table,
    check_base_rows,
    headline,
    plot_bases,
)
from rredcot.reporting.learning_curves import RunScores, method_comparison

PROBLEMS = ["p0", "p1", "p2", "p3"]
STRATA = {"p0": "rule", "p1": "rule", "p2": "no_rule", "p3": "no_rule"}
SEEDS = [6, 7, 8]
PAIRS = [("rredcot", "rredcot_perm", "placebo"), ("rredcot", "grpo", "baseline")]


def rewards(values: list[float], step: int | None = None) -> pl.DataFrame:
    """One sample per problem with reward `values[i]` (at `step` for a curve)."""
    frame = pl.DataFrame(
        {"problem_id": PROBLEMS, "sample_index": [0] * len(PROBLEMS), "reward": values}
    )
    return frame if step is None else frame.with_columns(pl.lit(step).alias("step"))


def run(method: str, seed: int, values: list[float]) -> RunScores:
    """A two-step run at pass@1 `values` per problem at steps 1 and 2 from a base at 0: its area
    per problem is (0 / 2 + v + v / 2) / 2 = 0.75 v."""
    curve = rewards(values, 1).select("step", *rewards(values).columns)
    metrics = {"step": [1, 2], "time/step_seconds": [1.0, 1.0], "tokens/seen": [8, 16]}
    return RunScores(method, seed, 2, curve, rewards(values), pl.DataFrame(metrics))


def base_runs(seed: int, gains: dict[str, list[float]]) -> BaseRuns:
    """A base whose GRPO runs score 0.4 everywhere and whose other runs score 0.4 + the seed's
    gain on the rule problems and 0.4 on the others (`gains`: run -> gain per seed)."""
    runs = [run("grpo", s, [0.4] * 4) for s in SEEDS]
    for name, per_seed in gains.items():
        for s, g in zip(SEEDS, per_seed, strict=True):
            runs.append(run(name, s, [0.4 + g, 0.4 + g, 0.4, 0.4]))
    return BaseRuns(seed, tuple(runs), rewards([0.0] * 4), STRATA, f"base{seed}")


BASE0 = base_runs(0, {"rredcot": [0.04, 0.08, 0.12], "rredcot_perm": [0.0, 0.04, 0.08]})
BASE1 = base_runs(1, {"rredcot": [0.20, 0.24, 0.28], "rredcot_perm": [0.0, 0.0, 0.0]})


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return bases_table([BASE0, BASE1], PAIRS, n_resamples=500, seed=0)


def test_rows_per_base_then_pooled_per_comparison_and_stratum(table):
    assert table.columns == list(COLUMNS)
    keys = table.select("method", "against", "stratum", "base_seed").rows()
    assert keys[:9] == [
        ("rredcot", "rredcot_perm", s, b)
        for s in ("all", "rule", "no_rule")
        for b in ("0", "1", "all")
    ]
    assert len(keys) == 18
    pooled = table.filter(pl.col("base_seed") == "all")
    assert pooled["endpoint"].to_list() == ["primary"] + ["secondary"] * 5
    assert set(pooled["bases"]) == {2} and set(pooled["seeds"]) == {6}
    assert set(table.filter(pl.col("base_seed") != "all")["bases"]) == {1}


def test_the_areas_by_hand(table):
    """rredcot − rredcot_perm: the rule problems' gain 0.04 on every seed of base 0 and
    0.24 (mean) on base 1; the area is 0.75 of it, and half of that over all four problems."""
    rows = {
        (r["stratum"], r["base_seed"]): r
        for r in table.filter(pl.col("against") == "rredcot_perm").iter_rows(named=True)
    }
    assert rows["rule", "0"]["difference"] == pytest.approx(0.75 * 0.04)
    assert rows["rule", "1"]["difference"] == pytest.approx(0.75 * 0.24)
    assert rows["rule", "all"]["difference"] == pytest.approx(0.75 * 0.14)
    assert rows["all", "all"]["difference"] == pytest.approx(0.75 * 0.07)
    assert rows["no_rule", "all"]["difference"] == pytest.approx(0.0)
    assert rows["all", "0"]["seed_sd"] == pytest.approx(0.0)  # 0.04 on every seed
    pooled = rows["rule", "all"]
    assert pooled["base_sd"] == pytest.approx(0.75 * 0.20 / np.sqrt(2))
    half = 12.706 * pooled["base_sd"] / np.sqrt(2)
    assert pooled["base_t_ci95_low"] == pytest.approx(0.75 * 0.14 - half)
    assert np.isnan(pooled["seed_t_ci95_low"]) and pooled["seed_t_verdict"] == "n/a"
    assert np.isnan(rows["rule", "0"]["base_t_ci95_low"])
    assert pooled["method_score"] == pytest.approx(0.75 * (0.4 + (0.08 + 0.24) / 2))


def row(table: pl.DataFrame, **where: str) -> dict:
    """The one row of `table` whose columns hold the values `where` gives."""
    return table.filter(**where).row(0, named=True)


def areas(base: BaseRuns, method: str) -> np.ndarray:
    """(seeds, problems) areas of a method's runs by hand: 0.75 of its pass@1 (`run`)."""
    return np.array([0.75 * r.final["reward"].to_numpy() for r in base.runs if r.method == method])


def test_each_base_s_row_is_its_own_tables_and_the_pooled_row_the_pooled_statistics(table):
    """Per base: method_comparison's area row against GRPO (its bootstrap seeded by the base's
    own seed); pooled: pooled_comparison on the per-base grids."""
    grids = []
    for base in (BASE0, BASE1):
        runs = list(base.runs)
        theirs = method_comparison(runs, base.base, "grpo", n_resamples=500, seed=base.seed)
        want = row(theirs, method="rredcot", against="grpo", measure="auc")
        mine = row(table, against="grpo", stratum="all", base_seed=str(base.seed))
        for key in ("difference", "ci95_low", "ci95_high", "seed_t_ci95_low", "mde80"):
            assert mine[key] == pytest.approx(want[key]), key
        grids.append((areas(base, "rredcot"), areas(base, "grpo")))
        assert mine == {**mine, **paired_comparison(*grids[-1], 500, base.seed)}
    pooled = row(table, against="grpo", stratum="all", base_seed="all")
    assert pooled == {**pooled, **pooled_comparison(grids, 500, 0)}


def test_a_base_s_placebo_rows_are_checked_against_its_credit_attribution(table):
    rows = table.filter((pl.col("base_seed") == "0") & (pl.col("comparison") == "placebo"))
    attribution = rows.select("method", "against", "measure", "stratum", "difference")
    final = attribution.head(1).with_columns(pl.lit("final").alias("measure"))
    assert check_base_rows(table, 0, pl.concat([attribution, final]), "base0/ca.csv") == 3
    shifted = attribution.with_columns(pl.col("difference") + 0.001)
    with pytest.raises(ValueError, match="base0/ca.csv: differences .* older than its runs"):
        check_base_rows(table, 0, shifted, "base0/ca.csv")
    with pytest.raises(ValueError, match="no row of"):
        check_base_rows(table, 0, attribution.filter(pl.col("stratum") != "all"), "x")


def test_bases_of_other_worlds_or_unpaired_runs_are_refused():
    other = BaseRuns(2, BASE1.runs, BASE1.base, {**STRATA, "p3": "rule"}, "base2")
    with pytest.raises(ValueError, match="base2: its held-out problems or their strata"):
        bases_table([BASE0, other], PAIRS, n_resamples=10)
    kept = tuple(r for r in BASE1.runs if (r.method, r.seed) != ("grpo", 8))
    short = BaseRuns(2, kept, BASE1.base, STRATA, "base2")
    with pytest.raises(ValueError, match="base2: rredcot - grpo .* grpo lacks seeds \\[8\\]"):
        bases_table([BASE0, short], PAIRS, n_resamples=10)
    with pytest.raises(ValueError, match="repeat"):
        bases_table([BASE0, BASE0], PAIRS, n_resamples=10)


def test_without_a_misconception_only_all_problems(tmp_path):
    plain = [BaseRuns(b.seed, b.runs, b.base, {}, b.source) for b in (BASE0, BASE1)]
    table = bases_table(plain, PAIRS, n_resamples=10)
    assert set(table["stratum"]) == {"all"} and table.height == 6
    assert plot_bases(table, tmp_path / "f.png").is_file()
    assert set(headline(table)) == {"rredcot - rredcot_perm", "rredcot - grpo"}


def test_the_figure_draws_every_stratum(table, tmp_path):
    assert plot_bases(table, tmp_path / "bases.png").stat().st_size > 0
    assert plot_bases(table.clear(), tmp_path / "empty.png").is_file()


def lay_out(roots: list[Path], bases: list[BaseRuns], rows: list[pl.DataFrame]) -> list[str]:
    """Each base's runs written under its root as its workflow lays them out, with its
    credit_attribution.csv holding `rows`' all-problems rows; the step's file arguments."""
    argv = []
    for root, base, mine in zip(roots, bases, rows, strict=True):
        summaries, grades = [], []
        for r in base.runs:
            run_dir = root / "train" / r.method / f"seed{r.seed}"
            run_dir.mkdir(parents=True)
            (run_dir / "train_summary.json").write_text(
                json.dumps({"steps": r.steps, "settings": {"seed": r.seed}})
            )
            r.metrics.write_csv(run_dir / "metrics.csv")
            r.curve.write_csv(run_dir / "curve.csv")
            r.final.write_parquet(run_dir / "grades.parquet")
            summaries.append(str(run_dir / "train_summary.json"))
            grades.append(str(run_dir / "grades.parquet"))
        base.base.write_parquet(root / "base.parquet")
        mine.filter(pl.col("stratum") == "all").write_csv(root / "credit_attribution.csv")
        argv += ["--summaries", *summaries, "--grades", *grades]
    argv += ["--base", *[str(r / "base.parquet") for r in roots]]
    argv += ["--problems", *[str(r / "none.parquet") for r in roots]]
    argv += ["--attribution", *[str(r / "credit_attribution.csv") for r in roots]]
    return argv


def test_the_step_reads_every_base_s_runs_and_checks_its_placebo_rows(tmp_path, monkeypatch):
    """Each base's runs as its workflow lays them out, one group of files per base on the
    command line; the table and figure written; a base whose credit_attribution.csv is not its
    runs' stops the step naming the file."""
    from rredcot.steps import credit_bases as step

    want = bases_table([BASE0, BASE1], PAIRS, n_resamples=50, seed=0)
    roots = [tmp_path / "seed0", tmp_path / "seed1"]
    argv = lay_out(roots, [BASE0, BASE1], [want.filter(pl.col("base_seed") == s) for s in "01"])
    params = {"bases": [0, 1], "pairs": PAIRS, "misconception": None}
    params |= {"bootstrap_resamples": 50, "seed": 0}
    out = ["--table", str(tmp_path / "t.csv"), "--figure", str(tmp_path / "f.png")]
    monkeypatch.setattr(sys, "argv", ["x", *argv, "--params", json.dumps(params), *out])
    step.main()
    table = pl.read_csv(tmp_path / "t.csv", schema_overrides={"base_seed": pl.String})
    plain = bases_table(
        [BaseRuns(b.seed, b.runs, b.base, {}, "") for b in (BASE0, BASE1)], PAIRS, 50, 0
    )
    assert table["difference"].to_list() == pytest.approx(plain["difference"].to_list())
    assert (tmp_path / "f.png").is_file()
    bad = pl.read_csv(roots[1] / "credit_attribution.csv").with_columns(pl.col("difference") + 1)
    bad.write_csv(roots[1] / "credit_attribution.csv")
    with pytest.raises(ValueError, match="seed1/credit_attribution.csv: differences"):
        step.main()


def test_a_bases_snapshot_holds_every_row_and_each_base_s_regime(table, tmp_path):
    """take_dose_snapshot on a bases run: each base's row and the pooled row under
    bases/<method>/<against>/<stratum>/<base_seed> (by hand: rule stratum 0.75 × 0.04 on base 0,
    0.75 × 0.24 on base 1, pooled their mean), each base's regime; refused with a regime table
    whose level describes two bases."""
    from rredcot.reporting.snapshot import take_dose_snapshot

    results = tmp_path / "results"
    results.mkdir()
    table.write_csv(results / "credit_bases.csv")
    regimes = pl.DataFrame(
        {"dose_key": "seed", "dose": [0, 0, 1], "method": ["rredcot", "rredcot_perm", "rredcot"]}
        | {c: [0.44, 0.44, 0.5] for c in ("base_greedy_pass1", "base_t1_pass1")}
        | {c: [0.9, 0.9, 0.6] for c in ("base_greedy_systematic_share", "base_t1_systematic_share")}
    )
    regimes.write_csv(results / "credit_regimes.csv")
    run = results / "credit_regimes" / "seed0" / "train" / "grpo" / "seed6"
    run.mkdir(parents=True)
    machine = {"cpu_model": "CPU X", "torch": "2.13.0+cpu", "torch_cpu_capability": "AVX2"}
    (run / "train_summary.json").write_text(json.dumps({"machine": machine}))
    values = json.loads(
        (take_dose_snapshot(results, tmp_path / "s", "b") / "values.json").read_text()
    )
    key = "bases/rredcot/rredcot_perm/rule"
    assert values[f"{key}/0/difference"] == "+0.030" and values[f"{key}/0/seeds"] == "3"
    assert values[f"{key}/1/difference"] == "+0.180"
    assert values[f"{key}/all/difference"] == "+0.105" and values[f"{key}/all/bases"] == "2"
    assert values[f"{key}/all/seeds"] == "6"
    assert values[f"{key}/all/base_t_ci"] == "−0.848 … +1.058"  # 0.105 ± 12.706 × 0.075
    assert values["bases/rredcot/grpo/no_rule/all/difference"] == "+0.000"
    assert values["regimes/0/base_t1_pass1"] == "0.440"
    assert values["regimes/1/base_greedy_systematic_share"] == "0.600"
    assert not any(k.startswith("contrasts/") for k in values)
    regimes.with_columns(base_t1_pass1=pl.Series([0.44, 0.45, 0.5])).write_csv(
        results / "credit_regimes.csv"
    )
    with pytest.raises(ValueError, match="level 0 has several base_t1_pass1"):
        take_dose_snapshot(results, tmp_path / "s2", "b")
