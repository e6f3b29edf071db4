"""The dose-response's own inputs and targets (config key `doses`): the workflow runs once per
dose (`rredcot.workflow.dose_response.Dose`), each in a directory of its own, and the dose-response
table reads what every dose wrote."""

from __future__ import annotations

from collections.abc import Sequence

from rredcot.workflow import Config
from rredcot.workflow.dose_response import DOSE_FIGURE, DOSE_TABLE, Dose, share_world
from rredcot.workflow.paths import REGIME_TABLE, SUMMARY
from rredcot.workflow.problem_sets import world_tables


def shared_world_tables(config: Config, doses: Sequence[Dose]) -> list[str]:
    """The world tables every dose's copy of the world must hold alike: all of them when the
    doses share the world's settings, none when the dose varies the world itself."""
    return world_tables(config) if share_world(list(doses)) else []


def credit_regime_inputs(
    config: Config, doses: Sequence[Dose], regime: bool
) -> dict[str, list[str]]:
    """Every dose's comparison, its regime table when every dose builds one (`regime`), and its
    world when the doses share one."""
    inputs = {
        "comparisons": [d.path("results/method_comparison.csv") for d in doses],
        "worlds": [
            d.path(f"results/data/world/{t}.parquet")
            for d in doses
            for t in shared_world_tables(config, doses)
        ],
    }
    if regime:
        inputs["regimes"] = [d.path(REGIME_TABLE) for d in doses]
    return inputs


def dose_targets(doses: Sequence[Dose]) -> list[str]:
    """The targets of a dose-response, the table and figure and each dose's summary, which its
    workflow writes last."""
    return [DOSE_TABLE, DOSE_FIGURE, *(d.path(SUMMARY) for d in doses)]
