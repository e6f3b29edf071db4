"""The dose-response table on hand-made method_comparison tables: the primary (area) and final
rows per dose and method, their CIs, verdicts and MDEs carried, the seeds for a target MDE, the
base's regime figures, and every missing piece named."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from rredcot.evaluation.power import mde_from_sd, seeds_for_mde
from rredcot.reporting.credit_regimes import (
    DoseResults,
    check_same_world,
    credit_regimes,
    dose_rows,
    headline,
    plot_credit_regimes,
    read_dose,
)


def row(method: str, measure: str, diff: float, half: float, sd: float = 0.01, **kw) -> dict:
    """One pooled row against GRPO (5 seeds) with a symmetric interval of half-width `half`."""
    low, high = diff - half, diff + half
    verdict = "better" if low > 0 else "worse" if high < 0 else "no difference"
    steps = 30 if measure.endswith("_equal_steps") else 60
    return {
        "method": method, "against": kw.get("against", "grpo"), "measure": measure,
        "endpoint": "primary" if measure == "auc" else "secondary", "seed": kw.get("seed", "all"),
        "method_score": 0.5 + diff, "against_score": 0.5, "difference": diff, "ci95_low": low,
        "ci95_high": high, "seed_t_ci95_low": low, "seed_t_ci95_high": high, "verdict": verdict,
        "seeds": 5, "problems": 200, "seed_sd": sd, "mde80": mde_from_sd(sd, 5),
        "method_step": steps, "against_step": steps,
    }  # fmt: skip


def comparison(*rows: dict) -> pl.DataFrame:
    """A method_comparison table: the given rows plus rows the dose-response must skip (against
    the base, one seed, and GRPO's own)."""
    noise = [
        row("grpo", "final", 0.2, 0.01, against="base"),
        row("oracle_step", "final", 0.3, 0.01, against="base"),
        row("oracle_step", "final", 0.9, 0.01, seed="1"),
    ]
    return pl.DataFrame([*rows, *noise])


def full(oracle_auc: float, rredcot_auc: float) -> pl.DataFrame:
    return comparison(
        row("oracle_step", "final", oracle_auc + 0.01, 0.03),
        row("oracle_step", "auc", oracle_auc, 0.01),
        row("rredcot", "final", 0.0, 0.03),
        row("rredcot", "auc", rredcot_auc, 0.01, sd=0.007),
    )


def dose(level: float, table: pl.DataFrame, **kw) -> DoseResults:
    return DoseResults(level, table, f"rate{level:g}/method_comparison.csv", **kw)


def test_each_dose_gives_the_area_then_the_final_row_per_method():
    out = dose_rows(dose(0.8, full(0.03, 0.0)), "grpo")
    assert out["method"].to_list() == ["oracle_step"] * 2 + ["rredcot"] * 2
    assert out["measure"].to_list() == ["auc", "final", "auc", "final"]
    assert out["endpoint"].to_list() == ["primary", "secondary"] * 2
    assert set(out["dose"].to_list()) == {0.8} and set(out["against"].to_list()) == {"grpo"}


def test_a_ci_above_zero_is_a_better_verdict_and_the_mde_comes_with_it():
    table = credit_regimes(
        [dose(0.0, full(0.005, 0.0)), dose(0.8, full(0.03, 0.002))],
        "sft.misconception.rate",
        0.02,
        "grpo",
    )
    primary = table.filter(pl.col("endpoint") == "primary")
    oracle = primary.filter(pl.col("method") == "oracle_step").sort("dose")
    assert oracle["ci95_low"].to_list() == pytest.approx([-0.005, 0.02])
    assert oracle["verdict"].to_list() == ["no difference", "better"]
    assert oracle["mde80"].to_list() == pytest.approx([mde_from_sd(0.01, 5)] * 2)
    # the seeds that bring each row's MDE to the target, from its own seed SD
    rred = primary.filter(pl.col("method") == "rredcot")
    assert rred["seeds_for_mde_0.02"].to_list() == [seeds_for_mde(0.007, 0.02)] * 2
    assert table.columns[:2] == ["dose_key", "dose"]
    assert set(table["dose_key"].to_list()) == {"sft.misconception.rate"}
    assert headline(table)["oracle_step"] == "better at doses ['0.8'], worse at []"


def test_a_shorter_run_gives_its_area_over_its_own_steps():
    """MC, cut for cost, has no primary row: its area over its 30 steps against GRPO's first 30
    stands in, named by its measure."""
    table = full(0.03, 0.0).vstack(
        comparison(
            row("mc", "final_equal_steps", 0.01, 0.05), row("mc", "auc_equal_steps", 0.02, 0.03)
        ).head(2)
    )
    out = dose_rows(dose(0.8, table), "grpo").filter(pl.col("method") == "mc")
    assert out["measure"].to_list() == ["auc_equal_steps", "final_equal_steps"]
    assert out["method_step"].to_list() == [30, 30]


def test_a_method_without_its_area_row_is_named_with_the_file():
    table = comparison(row("rredcot", "final", 0.0, 0.03))
    with pytest.raises(ValueError, match=r"rate0.6/method_comparison.csv: rredcot - grpo has 0"):
        dose_rows(dose(0.6, table), "grpo")


def test_a_table_without_a_comparison_with_grpo_is_named():
    with pytest.raises(ValueError, match="rate0/method_comparison.csv: no method is compared"):
        dose_rows(dose(0.0, comparison().filter(pl.col("against") == "base")), "grpo")


def test_a_missing_dose_fails_naming_the_file(tmp_path):
    (tmp_path / "rate0").mkdir()
    full(0.0, 0.0).write_csv(tmp_path / "rate0" / "method_comparison.csv")
    assert read_dose(tmp_path / "rate0", 0.0, regime=False).level == 0.0
    missing = tmp_path / "rate0.6" / "method_comparison.csv"
    with pytest.raises(FileNotFoundError, match=f"dose 0.6: {missing} does not exist"):
        read_dose(tmp_path / "rate0.6", 0.6, regime=False)
    with pytest.raises(FileNotFoundError, match="rate0/regime_table.csv does not exist"):
        read_dose(tmp_path / "rate0", 0.0, regime=True)


def regime(greedy: float, t1: float) -> pl.DataFrame:
    cols = ("greedy_pass1", "t1_pass1", "greedy_systematic_share", "t1_systematic_share")
    rows = [
        {"method": "base", "seed": "0", **dict(zip(cols, (greedy, t1, 0.9, 0.5), strict=True))},
        {"method": "base", "seed": "all", **dict(zip(cols, (greedy, t1, 0.9, 0.5), strict=True))},
        {"method": "grpo", "seed": "all", **dict(zip(cols, (0.7, 0.6, 0.6, 0.6), strict=True))},
    ]
    return pl.DataFrame(rows)


def test_the_bases_regime_figures_join_their_dose():
    doses = [
        dose(0.0, full(0.0, 0.0), regime=regime(1.0, 0.59), regime_source="r0"),
        dose(0.8, full(0.03, 0.0), regime=regime(0.51, 0.36), regime_source="r8"),
    ]
    table = credit_regimes(doses, "sft.misconception.rate", 0.02, "grpo")
    by_dose = table.group_by("dose").agg(pl.col("base_greedy_pass1").first()).sort("dose")
    assert by_dose["base_greedy_pass1"].to_list() == [1.0, 0.51]
    assert set(table["base_t1_systematic_share"].to_list()) == {0.5}
    # without regime tables the columns are left out; with some only, it is an error
    plain = credit_regimes([dose(0.0, full(0.0, 0.0))], "k", 0.02, "grpo")
    assert "base_greedy_pass1" not in plain.columns
    with pytest.raises(ValueError, match="some have a regime table and some not"):
        credit_regimes([doses[0], dose(0.6, full(0.0, 0.0))], "k", 0.02, "grpo")


def test_a_regime_table_without_the_columns_is_named():
    bad = dose(0.0, full(0.0, 0.0), regime=regime(1.0, 0.6).drop("t1_pass1"), regime_source="r0")
    with pytest.raises(ValueError, match=r"r0: missing column\(s\) \['t1_pass1'\]"):
        credit_regimes([bad], "k", 0.02, "grpo")


def test_the_doses_must_share_one_world(tmp_path: Path):
    worlds = {}
    for label, text in (("rate0", b"same"), ("rate0.6", b"same"), ("rate0.8", b"other")):
        (tmp_path / label).mkdir()
        (tmp_path / label / "train.parquet").write_bytes(text)
        worlds[label] = [tmp_path / label / "train.parquet"]
    check_same_world({k: worlds[k] for k in ("rate0", "rate0.6")})
    with pytest.raises(ValueError, match=r"dose rate0.8: .*rate0.8/train.parquet differs"):
        check_same_world(worlds)


def test_the_figure_is_written(tmp_path):
    table = credit_regimes(
        [dose(0.0, full(0.0, 0.0)), dose(0.8, full(0.03, 0.0))], "k", 0.02, "grpo"
    )
    path = plot_credit_regimes(table, tmp_path / "figures" / "credit_regimes.png")
    assert path.is_file() and path.stat().st_size > 0
