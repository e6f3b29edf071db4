"""The pre-registered answer-now rule: joint or conditional, read off the agreement table
before any RL run (docs/testbed.md, config.yaml), never decided by RL."""

from __future__ import annotations

from typing import Any

import polars as pl


def preregistered_answer_now(table: pl.DataFrame, value: str) -> dict[str, Any]:
    """The answer-now form the pre-registered rule picks (docs/testbed.md, config.yaml): the one
    with the higher per-trace credit agreement with the MC ground truth, RREDCoT's `value`
    variant on the configured (dataset) references over all agreement traces, when the paired
    95% CI of joint − conditional excludes zero; otherwise `conditional`. Decided before any RL
    run, never by RL.

    table: `results/estimator_agreement.csv` (one of the two forms is its reference, the other
    carries the paired difference). Returns the choice and the figures it used.
    """
    names = {"conditional": f"rredcot_{value}", "joint": f"rredcot_{value}_joint"}
    part = table.filter(
        (pl.col("target") == "credits")
        & (pl.col("aggregation") == "per_trace")
        & pl.col("estimator").is_in(list(names.values()))
    )
    if "traces" in part.columns:
        part = part.filter(pl.col("traces") == "all")
    rows = {r["estimator"]: r for r in part.iter_rows(named=True)}
    missing = [n for n in names.values() if n not in rows]
    if missing:
        raise ValueError(f"agreement table: no per-trace credit row for {missing}")
    joint, conditional = rows[names["joint"]], rows[names["conditional"]]
    if joint["verdict"] == "reference":  # the difference is stored as conditional − joint
        low, high = -conditional["diff_ci95_high"], -conditional["diff_ci95_low"]
        diff = -conditional["diff_vs_reference"]
    elif conditional["verdict"] == "reference":
        low, high, diff = (
            joint["diff_ci95_low"],
            joint["diff_ci95_high"],
            joint["diff_vs_reference"],
        )
    else:
        raise ValueError(f"agreement table: neither {list(names.values())} is the reference row")
    choice = "joint" if low > 0 else "conditional"
    return {
        "choice": choice,
        "rho_conditional": conditional["rho"],
        "rho_joint": joint["rho"],
        "diff_joint_minus_conditional": diff,
        "diff_ci95_low": low,
        "diff_ci95_high": high,
        "n_traces": joint["n_traces"],
        "rule": "joint if the paired 95% CI of joint - conditional is above 0, else conditional",
    }
