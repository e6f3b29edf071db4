"""Pre-registered rules that read a study table before any RL run, never decided by RL: the
answer-now form (off the agreement table; docs/archive/testbed_choices.md, config.yaml) and the
cheaper estimator form `rredcot_fast` (off the cost–agreement frontier;
docs/frontier/preregistration.md)."""

from __future__ import annotations

from typing import Any

import polars as pl


def preregistered_answer_now(table: pl.DataFrame, value: str) -> dict[str, Any]:
    """The answer-now form the pre-registered rule picks (docs/archive/testbed_choices.md,
    config.yaml): the one with the higher per-trace credit agreement with the MC ground truth,
    RREDCoT's `value` variant on the configured (dataset) references over all agreement traces,
    when the paired 95% CI of joint − conditional excludes zero; otherwise `conditional`. Decided
    before any RL run, never by RL.

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


FAST_MEASURE = "cosine_workflow"
"""The frontier measure the fast pick reads: the cosine of the token advantages a form builds
under the workflow's own transform with the ground truth's (what training consumes)."""


def preregistered_fast_estimator(
    table: pl.DataFrame, configured: str, measure: str = FAST_MEASURE
) -> dict[str, Any]:
    """The pre-registered pick of `rredcot_fast` (docs/frontier/preregistration.md), from the
    frontier table (`results/estimator_frontier.csv`) before any RL run that uses it.

    Within the reference-conditioned family (`reference_conditioned` rows: RREDCoT's forms and
    OPPO's Bayes value on the configured reference; the K-forms and the oracle key are not in
    it), on `measure`: the members whose paired 95% CI of (member − the family's best) holds 0
    (or that are the best) qualify; the pick is the one with the fewest forward tokens per trace;
    a tie in tokens keeps `configured` (RREDCoT's configured form), else the higher agreement.
    When the pick is `configured`, `rredcot_fast` is the default itself.
    """
    rows = table.filter((pl.col("measure") == measure) & pl.col("reference_conditioned"))
    if rows.height == 0:
        raise ValueError(f"frontier table: no reference-conditioned row of measure {measure!r}")
    names = rows["estimator"].to_list()
    if configured not in names:
        raise ValueError(f"frontier table: the configured form {configured!r} is not among {names}")
    qualified = rows.filter(pl.col("within_ci_of_family_best"))
    ranked = sorted(
        qualified.iter_rows(named=True),
        key=lambda r: (
            r["forward_tokens_per_trace"],
            r["estimator"] != configured,
            -r["agreement"],
        ),
    )
    pick = ranked[0]
    current = rows.filter(pl.col("estimator") == configured).row(0, named=True)
    return {
        "choice": pick["estimator"],
        "is_configured": pick["estimator"] == configured,
        "configured": configured,
        "measure": measure,
        "family_best": pick["family_best"],
        "agreement": pick["agreement"],
        "diff_vs_family_best": pick["diff_vs_family_best"],
        "diff_ci95_low": pick["family_diff_ci95_low"],
        "diff_ci95_high": pick["family_diff_ci95_high"],
        "forward_tokens_per_trace": pick["forward_tokens_per_trace"],
        "seconds_per_trace": pick["seconds_per_trace"],
        "configured_agreement": current["agreement"],
        "configured_forward_tokens_per_trace": current["forward_tokens_per_trace"],
        "qualified": [r["estimator"] for r in ranked],
        "n_traces": pick["n_traces"],
        "rule": (
            "the reference-conditioned form with the fewest forward tokens per trace whose "
            f"paired 95% CI of {measure} minus the family's best holds 0; a tie keeps the "
            "configured form"
        ),
    }
