"""The dose-response's configs (config key `doses`): one plain config per level, the key set,
single-dose overrides merged at their level only, every mistake named."""

from __future__ import annotations

import copy

import pytest
import yaml

from rredcot.config import ConfigError, load_schema, validate_config
from rredcot.workflow.dose_response import Dose, dose_configs, merge, share_world


@pytest.fixture(scope="module")
def schema(repo):
    return load_schema(repo / "workflow" / "schemas" / "config.schema.yaml")


@pytest.fixture(scope="module")
def shipped(repo, schema) -> dict:
    """config.yaml, then configs/credit_regimes.yaml, merged as Snakemake merges them,
    validated."""
    config: dict = {}
    for name in ("config.yaml", "configs/credit_regimes.yaml"):
        config = merge(config, yaml.safe_load((repo / name).read_text()))
    return validate_config(config, schema)


@pytest.fixture()
def config(shipped) -> dict:
    return copy.deepcopy(shipped)


def test_each_level_sets_the_key_and_only_its_own_overrides(config, schema):
    doses = dose_configs(config, schema)
    assert [d.level for d in doses] == [0.0, 0.6, 0.8]
    assert [d.label for d in doses] == ["rate0", "rate0.6", "rate0.8"]
    assert [d.module for d in doses] == ["rate0", "rate0p6", "rate0p8"]
    for d in doses:
        assert d.config["sft"]["misconception"] == {"rule": "smaller_from_larger", "rate": d.level}
        assert d.config["doses"] is None and d.config["extends"] is None  # a plain config
        # everything else is the positive control's
        assert d.config["world"] == config["world"]
        assert d.config["training"]["credit"] == config["training"]["credit"]
    low, _, high = doses
    assert low.config["training"]["methods"] == ["grpo", "oracle_step", "rredcot"]
    assert low.config["training"]["seeds"] == [6, 7, 8, 9, 10]  # the positive control's
    assert high.config["training"]["seeds"] == [6, 7, 8]  # mc's three; the others add 9 and 10
    assert low.config["training"]["mc"]["n_rollouts"] == config["training"]["mc"]["n_rollouts"]
    assert high.config["training"]["methods"] == ["grpo", "oracle_step", "rredcot", "mc"]
    assert high.config["training"]["mc"] == {**config["training"]["mc"], "n_rollouts": 8}
    assert high.config["training"]["per_method"]["mc"]["max_steps"] == 30  # config.yaml's
    assert config["doses"]["key"] == "sft.misconception.rate"  # the given config is not changed


def test_a_dose_writes_under_its_own_directory(config, schema):
    dose = dose_configs(config, schema)[1]
    assert dose.root == "results/credit_regimes/rate0.6/"
    assert dose.path("results/method_comparison.csv") == (
        "results/credit_regimes/rate0.6/method_comparison.csv"
    )
    with pytest.raises(ValueError, match="under results/"):
        dose.path("data/x.csv")


def test_merge_takes_mappings_key_by_key_and_replaces_lists():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 0}
    out = merge(base, {"a": {"c": [3]}, "e": {"f": 1}})
    assert out == {"a": {"b": 1, "c": [3]}, "d": 0, "e": {"f": 1}}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 0}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"key": "sft.misconception.dose"}, "config key 'doses.key': 'sft.misconception.dose'"),
        ({"key": "sft.nothing.rate"}, "needs 'sft.nothing' to be a block"),
        ({"at": [{"level": 0.7, "config": {}}]}, "config key 'doses.at.0.level': 0.7"),
        ({"levels": [0, 1.5], "at": []}, "dose sft.misconception.rate = 1.5"),
        ({"levels": [0.1, 0.1000001], "at": []}, "two levels that print alike"),
    ],
)
def test_a_bad_dose_is_named(config, schema, change, named):
    config["doses"] = {**config["doses"], **change}
    with pytest.raises(ConfigError) as err:
        dose_configs(config, schema)
    assert named in str(err.value)


def test_a_dose_config_error_names_the_dose_and_the_key(config, schema):
    config["doses"]["at"] = [{"level": 0.6, "config": {"training": {"max_steps": 0}}}]
    with pytest.raises(ConfigError) as err:
        dose_configs(config, schema)
    assert "dose sft.misconception.rate = 0.6" in str(err.value)
    assert "training.max_steps" in str(err.value)


def test_the_schema_refuses_a_single_level(config, schema):
    config["doses"]["levels"] = [0.8]
    with pytest.raises(ConfigError, match="doses.levels"):
        validate_config(config, schema)


def test_a_dose_is_plain_data():
    dose = Dose(0.5, "rate0.5", "rate0p5", {})
    assert dose.root == "results/credit_regimes/rate0.5/"


def test_a_dose_of_the_world_itself_is_set_as_written_and_shares_no_world(config, schema):
    """Doses of the misconception rate share the world; doses of a world setting do not, and an
    integer key stays an integer."""
    assert share_world(dose_configs(config, schema))
    config["doses"] = {"key": "world.seed", "levels": [1234, 99], "at": []}
    doses = dose_configs(config, schema)
    assert [d.config["world"]["seed"] for d in doses] == [1234, 99]
    assert all(isinstance(d.config["world"]["seed"], int) for d in doses)
    assert [d.label for d in doses] == ["seed1234", "seed99"]
    assert not share_world(doses)


def test_a_dose_of_the_global_seed_is_another_base_of_one_world(config, schema):
    """The top-level `seed` (SFT, sampling and bootstrap) can be dosed: each level is another SFT
    base of the same world (so the doses share it), set as an integer; the world's own seed and
    every other setting stay."""
    config["doses"] = {"key": "seed", "levels": [0, 1, 2], "at": []}
    doses = dose_configs(config, schema)
    assert [d.config["seed"] for d in doses] == [0, 1, 2]
    assert all(isinstance(d.config["seed"], int) for d in doses)
    assert [(d.label, d.module) for d in doses] == [("seed0", "seed0"), ("seed1", "seed1"),
                                                    ("seed2", "seed2")]  # fmt: skip
    assert all(d.config["world"] == config["world"] for d in doses)
    assert share_world(doses)
    config["doses"]["key"] = "sed"
    with pytest.raises(ConfigError, match="'sed' is not a key of the config \\(the config's top"):
        dose_configs(config, schema)
