"""rredcot.reporting.credit_contrasts: a treatment dose's attribution rows per level and each later
level's contrast with the first, on hand-made runs whose areas are known (as in
test_credit_bases: a run at pass@1 v on a problem has area 0.75 v there, from a base at 0)."""

from __future__ import annotations

import json
import sys

import numpy as np
import polars as pl
import pytest
from test_credit_bases import PAIRS, STRATA, base_runs, lay_out

from rredcot.evaluation.paired import paired_comparison
from rredcot.reporting.credit_bases import BaseRuns, bases_table
from rredcot.reporting.credit_contrasts import (
    COLUMNS,
    contrasts_table,
    headline,
    plot_contrasts,
)

# Three levels of one base (every level's bootstrap seed is the config's, 0). Per seed 6, 7, 8,
# rredcot − rredcot_perm in pass@1 on the rule problems: (0.04, 0.04, 0.04) at level 0, (0.10,
# 0.12, 0.14) at 0.5, (0.20, 0.24, 0.28) at 1; on the other problems every run scores 0.4.
LEVELS = [0.0, 0.5, 1.0]
DOSE0 = base_runs(0, {"rredcot": [0.04, 0.08, 0.12], "rredcot_perm": [0.0, 0.04, 0.08]})
DOSE1 = base_runs(0, {"rredcot": [0.10, 0.14, 0.18], "rredcot_perm": [0.0, 0.02, 0.04]})
DOSE2 = base_runs(0, {"rredcot": [0.20, 0.24, 0.28], "rredcot_perm": [0.0, 0.0, 0.0]})
DOSES = [DOSE0, DOSE1, DOSE2]


@pytest.fixture(scope="module")
def table() -> pl.DataFrame:
    return contrasts_table(DOSES, LEVELS, "training.rule_share", PAIRS, n_resamples=500, seed=0)


def test_rows_per_level_then_contrasts_per_comparison_and_stratum(table):
    assert table.columns == list(COLUMNS)
    keys = table.select("method", "against", "stratum", "kind", "dose", "versus_dose").rows()
    per_stratum = [
        ("at_dose", "0", "n/a"), ("at_dose", "0.5", "n/a"), ("at_dose", "1", "n/a"),
        ("contrast", "0.5", "0"), ("contrast", "1", "0"),
    ]  # fmt: skip
    assert keys[:15] == [
        ("rredcot", "rredcot_perm", s, *k) for s in ("all", "rule", "no_rule") for k in per_stratum
    ]
    assert table.height == 2 * 15 and set(table["dose_key"]) == {"training.rule_share"}
    primary = table.filter(pl.col("endpoint") == "primary")
    assert primary.select("method", "against", "stratum", "kind", "dose").rows() == [
        ("rredcot", "rredcot_perm", "rule", "contrast", "1")
    ]


def test_the_differences_and_the_contrasts_by_hand(table):
    rule = table.filter((pl.col("against") == "rredcot_perm") & (pl.col("stratum") == "rule"))
    # at each level the seeds' rule-problem gains times 0.75 (the area), meaned over seeds
    assert rule["difference"].to_list()[:3] == pytest.approx([0.03, 0.09, 0.18])
    # contrasts: per seed 0.75 * ((0.10, 0.12, 0.14) - 0.04) and 0.75 * ((0.20, 0.24, 0.28) - 0.04)
    contrast = rule.filter(pl.col("kind") == "contrast")
    assert contrast["difference"].to_list() == pytest.approx([0.06, 0.15])
    assert contrast["method_score"].to_list() == pytest.approx([0.09, 0.18])
    assert contrast["against_score"].to_list() == pytest.approx([0.03, 0.03])
    # the t interval over seeds of (0.12, 0.15, 0.18): SD 0.03, half-width t(2) * 0.03 / sqrt 3
    half = 4.303 * 0.03 / np.sqrt(3)  # t(2) as tabled
    last = contrast.row(1, named=True)
    assert (last["seed_t_ci95_low"], last["seed_t_ci95_high"]) == pytest.approx(
        (0.15 - half, 0.15 + half)
    )
    assert last["seed_sd"] == pytest.approx(0.03) and last["verdict"] == "better"
    # on all problems the rule problems are half: half of each difference
    everything = table.filter((pl.col("against") == "rredcot_perm") & (pl.col("stratum") == "all"))
    assert everything["difference"].to_list() == pytest.approx([0.015, 0.045, 0.09, 0.03, 0.075])
    other = table.filter((pl.col("against") == "rredcot_perm") & (pl.col("stratum") == "no_rule"))
    assert other["difference"].to_list() == pytest.approx([0.0] * 5)
    assert set(other["verdict"]) == {"no difference"}


def test_a_level_s_rows_are_its_own_tables_and_a_contrast_the_paired_statistics(table):
    """An at_dose row is what the level's own comparison gives (bases_table's per-base row, its
    bootstrap seed the level's); a contrast is paired_comparison of the two levels' grids."""
    single = bases_table([DOSE1], PAIRS, n_resamples=500, seed=0)
    mine = table.filter((pl.col("kind") == "at_dose") & (pl.col("dose") == "0.5"))
    theirs = single.filter(pl.col("base_seed") == "0")
    for column in ("difference", "ci95_low", "ci95_high", "seed_t_ci95_low", "mde80"):
        assert mine[column].to_list() == pytest.approx(theirs[column].to_list()), column
    grid = np.array([[0.75 * g, 0.75 * g] for g in (0.20, 0.24, 0.28)])  # the rule problems
    first = np.full((3, 2), 0.75 * 0.04)
    want = paired_comparison(grid, first, n_resamples=500, seed=0)
    row = table.filter(
        (pl.col("against") == "rredcot_perm") & (pl.col("stratum") == "rule")
        & (pl.col("kind") == "contrast") & (pl.col("dose") == "1")
    ).row(0, named=True)  # fmt: skip
    for key in ("difference", "ci95_low", "ci95_high", "seed_t_ci95_high", "seed_sd", "mde80"):
        assert row[key] == pytest.approx(want[key]), key


def test_levels_that_do_not_pair_are_refused():
    with pytest.raises(ValueError, match="levels: 2 given for 3 doses"):
        contrasts_table(DOSES, [0.0, 1.0], "k", PAIRS, n_resamples=10)
    with pytest.raises(ValueError, match="repeat"):
        contrasts_table(DOSES, [0.0, 0.5, 0.5], "k", PAIRS, n_resamples=10)
    kept = tuple(r for r in DOSE2.runs if r.seed != 8)
    fewer = BaseRuns(0, kept, DOSE2.base, STRATA, "dose1")
    with pytest.raises(ValueError, match="dose1: rredcot - rredcot_perm ran seeds \\[6, 7\\]"):
        contrasts_table([DOSE0, fewer], [0.0, 1.0], "k", PAIRS, n_resamples=10)
    other = BaseRuns(0, DOSE2.runs, DOSE2.base, {**STRATA, "p3": "rule"}, "dose1")
    with pytest.raises(ValueError, match="dose1: its held-out problems or their strata"):
        contrasts_table([DOSE0, other], [0.0, 1.0], "k", PAIRS, n_resamples=10)


def test_the_figure_and_the_headline(table, tmp_path):
    assert plot_contrasts(table, tmp_path / "c.png").stat().st_size > 0
    assert plot_contrasts(table.clear(), tmp_path / "empty.png").is_file()
    line = headline(table)["rredcot - rredcot_perm (rule)"]
    assert line.startswith("0: +0.0300, 0.5: +0.0900, 1: +0.1800; 1 - 0: +0.1500")
    assert line.endswith("better")


def test_the_step_reads_every_level_and_checks_its_placebo_rows(tmp_path, monkeypatch):
    """Each level's runs as its workflow lays them out; the table written with its at_dose rows
    checked against each level's credit_attribution.csv, which a wrong one stops."""
    from rredcot.steps import credit_contrasts as step

    plain = [BaseRuns(d.seed, d.runs, d.base, {}, "") for d in DOSES]
    want = contrasts_table(plain, LEVELS, "k", PAIRS, n_resamples=50, seed=0)
    roots = [tmp_path / f"rule_share{v:g}" for v in LEVELS]
    at = want.filter(pl.col("kind") == "at_dose")
    argv = lay_out(roots, DOSES, [at.filter(pl.col("dose") == f"{v:g}") for v in LEVELS])
    params = {"key": "k", "levels": LEVELS, "level_seeds": [0, 0, 0], "pairs": PAIRS}
    params |= {"misconception": None, "bootstrap_resamples": 50, "seed": 0}
    out = ["--table", str(tmp_path / "t.csv"), "--figure", str(tmp_path / "f.png")]
    monkeypatch.setattr(sys, "argv", ["x", *argv, "--params", json.dumps(params), *out])
    step.main()
    got = pl.read_csv(tmp_path / "t.csv", schema_overrides={"dose": pl.String})
    assert got["difference"].to_list() == pytest.approx(want["difference"].to_list())
    assert got["dose"].to_list() == want["dose"].to_list()
    bad = pl.read_csv(roots[2] / "credit_attribution.csv").with_columns(pl.col("difference") + 1)
    bad.write_csv(roots[2] / "credit_attribution.csv")
    with pytest.raises(ValueError, match="rule_share1/credit_attribution.csv: differences"):
        step.main()


def test_a_dose_snapshot_holds_every_row_under_its_key(table, tmp_path):
    """take_dose_snapshot: the contrasts table's rows in values.json as the summaries format
    them, the machine of the runs, the levels' job times; refused without the table or with
    runs on two machines."""
    from rredcot.reporting.snapshot import take_dose_snapshot

    results = tmp_path / "results"
    with pytest.raises(FileNotFoundError, match="no contrasts table .* or bases table"):
        take_dose_snapshot(results, tmp_path / "snap", "dose")
    results.mkdir()
    table.write_csv(results / "credit_contrasts.csv")
    machine = {"cpu_model": "CPU X", "torch": "2.13.0+cpu", "torch_cpu_capability": "AVX2"}
    for level in ("rule_share0", "rule_share1"):
        run = results / "credit_regimes" / level / "train" / "grpo" / "seed6"
        run.mkdir(parents=True)
        (run / "train_summary.json").write_text(json.dumps({"machine": machine}))
        bench = results / "credit_regimes" / level / "benchmarks" / "train_policy" / "grpo"
        bench.mkdir(parents=True)
        (bench / "seed6.tsv").write_text("s\th:m:s\tcpu_time\n100.0\t0:01:40\t90.0\n")
    dest = take_dose_snapshot(results, tmp_path / "snap", "dose")
    values = json.loads((dest / "values.json").read_text())
    key = "contrasts/rredcot/rredcot_perm/rule"
    assert values[f"{key}/1-0/difference"] == "+0.150"
    assert values[f"{key}/1-0/verdict"] == "better" and values[f"{key}/1-0/seeds"] == "3"
    assert values[f"{key}/0.5/difference"] == "+0.090"
    assert values["contrasts/rredcot/grpo/no_rule/0/difference"] == "+0.000"
    assert values["machine"].startswith("CPU X; torch 2.13.0+cpu AVX2")
    assert values["jobs"] == "2" and values["cpu_seconds"].startswith("180 s")
    assert (dest / "credit_contrasts.csv").read_text() == (
        results / "credit_contrasts.csv"
    ).read_text()
    assert len((dest / "job_times.csv").read_text().splitlines()) == 3
    other = results / "credit_regimes" / "rule_share1" / "train" / "grpo" / "seed6"
    (other / "train_summary.json").write_text(
        json.dumps({"machine": {**machine, "cpu_model": "Y"}})
    )
    with pytest.raises(ValueError, match="several machines"):
        take_dose_snapshot(results, tmp_path / "snap2", "dose")
