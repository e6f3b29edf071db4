"""rredcot.workflow.base_inputs: a dose of the global seed pools its bases (and no other dose
does), what the pooled table reads of every base, its arguments and settings; and
configs/attribution_bases.yaml's base 0 is the run of configs/attribution_stage2.yaml, so its
runs can be reused."""

from __future__ import annotations

import pytest
from workflow_configs import SCHEMA, workflow_config

from rredcot.config import ConfigError
from rredcot.workflow import base_inputs
from rredcot.workflow.dose_response import dose_configs, share_world
from rredcot.workflow.paths import ATTRIBUTION_TABLE


@pytest.fixture(scope="module")
def config() -> dict:
    return workflow_config("attribution_bases")


@pytest.fixture(scope="module")
def doses(config) -> list:
    return dose_configs(config, SCHEMA)


def test_only_a_dose_of_the_global_seed_pools_its_levels(config, doses):
    assert base_inputs.pools_bases(config)
    assert base_inputs.credit_bases_targets(config) == [
        base_inputs.BASES_TABLE,
        base_inputs.BASES_FIGURE,
    ]
    assert [d.config["seed"] for d in doses] == [0, 1, 2]
    assert share_world(doses)  # one world: credit_regimes compares every base's copy of it
    for name in ("dose_rule_share", "credit_regimes"):
        assert base_inputs.credit_bases_targets(workflow_config(name)) == []
    assert base_inputs.credit_bases_targets(workflow_config()) == []  # no dose at all
    assert base_inputs.credit_contrasts_targets(config, doses) == []  # bases are pooled


def test_a_treatment_dose_with_placebo_arms_is_contrasted():
    """The rule-share dose trains placebo arms at every level: its levels are contrasted. The
    misconception-rate dose trains none: no contrasts."""
    shares = workflow_config("dose_rule_share")
    levels = dose_configs(shares, SCHEMA)
    assert base_inputs.credit_contrasts_targets(shares, levels) == [
        base_inputs.CONTRASTS_TABLE,
        base_inputs.CONTRASTS_FIGURE,
    ]
    settings = base_inputs.credit_contrasts_settings(shares, levels)
    assert settings["key"] == "training.rule_share" and settings["levels"] == [0, 0.5, 1]
    assert settings["level_seeds"] == [0, 0, 0] and settings["seed"] == 0
    assert ("rredcot", "rredcot_perm", "placebo") in settings["pairs"] and "bases" not in settings
    rates = workflow_config("credit_regimes")
    assert base_inputs.credit_contrasts_targets(rates, dose_configs(rates, SCHEMA)) == []


def test_the_pairs_are_the_placebo_pairs_then_every_run_against_grpo(doses):
    assert base_inputs.bases_pairs(doses[0].config) == [
        ("rredcot", "rredcot_perm", "placebo"),
        ("oracle_rule", "oracle_rule_perm", "placebo"),
        ("oracle_rule", "grpo", "baseline"),
        ("rredcot", "grpo", "baseline"),
        ("rredcot_perm", "grpo", "baseline"),
        ("oracle_rule_perm", "grpo", "baseline"),
    ]
    base_inputs.check_bases(doses)


def test_every_base_s_runs_and_its_placebo_table_are_read(doses):
    found = base_inputs.credit_bases_inputs(doses)
    assert len(found) == 5 * len(doses)
    for dose in doses:
        summaries = found[f"summaries_{dose.module}"]
        runs = 50 if dose.config["seed"] == 0 else 25  # the new bases on five seeds
        assert len(summaries) == len(found[f"grades_{dose.module}"]) == runs
        assert all(p.startswith(dose.root + "train/") for p in summaries)
        assert found[f"attribution_{dose.module}"] == dose.path(ATTRIBUTION_TABLE)
        # the base policy's grades under the base's own seed, not a fixed one
        seed = dose.config["seed"]
        assert (
            found[f"base_{dose.module}"]
            == f"{dose.root}eval/base/seed{seed}/synth_id/grades.parquet"
        )
        assert found[f"problems_{dose.module}"] == f"{dose.root}data/world/synth_id.parquet"


def test_the_arguments_group_each_base_s_runs(doses):
    paths = {
        **{f"{n}_{d.module}": [f"{d.label}/{n}{i}" for i in range(2)] for d in doses
           for n in ("summaries", "grades")},
        **{f"{n}_{d.module}": f"{d.label}/{n}" for d in doses
           for n in ("base", "problems", "attribution")},
    }  # fmt: skip
    args = base_inputs.credit_bases_args(paths, doses)
    assert args.startswith(
        "--summaries seed0/summaries0 seed0/summaries1 --grades seed0/grades0 seed0/grades1 "
        "--summaries seed1/summaries0"
    )
    assert args.endswith("--attribution seed0/attribution seed1/attribution seed2/attribution")
    assert args.count("--summaries") == 3 and args.count("--base ") == 1


def test_the_settings_name_the_bases_and_the_pooled_bootstrap_seed(config, doses):
    settings = base_inputs.credit_bases_settings(config, doses)
    assert settings["bases"] == [0, 1, 2]
    assert settings["seed"] == 0 and settings["bootstrap_resamples"] == 10_000
    assert settings["misconception"] == config["sft"]["misconception"]
    assert settings["pairs"] == base_inputs.bases_pairs(doses[0].config)


def test_a_dose_of_bases_without_a_placebo_is_refused_naming_the_key():
    config = workflow_config(over={"doses": {"key": "seed", "levels": [0, 1], "mde_target": 0.02}})
    with pytest.raises(ConfigError, match="config key .training.variants.: dose seed0"):
        base_inputs.check_bases(dose_configs(config, SCHEMA))


def test_base_0_is_the_frozen_base_run_of_stage_2(doses):
    """The dose at seed 0 is the config configs/attribution_stage2.yaml ran (over
    configs/attribution.yaml), key for key: its runs, SFT, evaluations and tables are the same
    jobs with the same settings, under the dose's directory; the other bases differ only in
    the seed and their five training seeds."""
    stage2 = workflow_config("attribution", "attribution_stage2")
    assert doses[0].config == stage2
    five = {**stage2["training"], "seeds": [6, 7, 8, 9, 10]}
    for dose in doses[1:]:
        assert dose.config == {**stage2, "seed": dose.config["seed"], "training": five}
