"""rredcot.workflow.dose_inputs: what the dose-response table reads of every dose, and the
targets of a dose-response."""

from __future__ import annotations

import pytest
from workflow_configs import SCHEMA, workflow_config

from rredcot.workflow import dose_inputs
from rredcot.workflow.dose_response import DOSE_FIGURE, DOSE_TABLE, dose_configs
from rredcot.workflow.paths import REGIME_TABLE


@pytest.fixture(scope="module")
def rule_share() -> tuple[dict, list]:
    """A dose of training.rule_share: every dose draws the same world."""
    config = workflow_config("dose_rule_share")
    return config, dose_configs(config, SCHEMA)


def test_doses_that_share_the_world_have_every_copy_compared(rule_share):
    config, doses = rule_share
    tables = dose_inputs.shared_world_tables(config, doses)
    assert tables == ["train", *config["world"]["splits"]]
    worlds = dose_inputs.credit_regime_inputs(config, doses, regime=False)["worlds"]
    assert len(worlds) == len(doses) * len(tables)
    assert worlds[0] == f"{doses[0].root}data/world/train.parquet"


def test_a_dose_of_the_world_itself_compares_no_copy():
    config = workflow_config(
        over={"doses": {"key": "world.seed", "levels": [1, 2], "mde_target": 0.02}}
    )
    doses = dose_configs(config, SCHEMA)
    assert dose_inputs.shared_world_tables(config, doses) == []
    assert dose_inputs.credit_regime_inputs(config, doses, regime=False)["worlds"] == []


def test_every_dose_s_comparison_and_regime_table_are_read(rule_share):
    config, doses = rule_share
    found = dose_inputs.credit_regime_inputs(config, doses, regime=True)
    assert found["comparisons"] == [d.path("results/method_comparison.csv") for d in doses]
    assert found["regimes"] == [d.path(REGIME_TABLE) for d in doses]
    assert "regimes" not in dose_inputs.credit_regime_inputs(config, doses, regime=False)


def test_a_dose_response_builds_its_table_and_every_dose_s_summary(rule_share):
    _, doses = rule_share
    built = dose_inputs.dose_targets(doses)
    assert built[:2] == [DOSE_TABLE, DOSE_FIGURE]
    assert built[2:] == [f"{d.root}SUMMARY.md" for d in doses]
