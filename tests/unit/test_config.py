"""Config schema: the defaults validate, and every kind of mistake names the key."""

from __future__ import annotations

import copy

import pytest
import yaml

from rredcot.config import ConfigError, load_schema, validate_config


@pytest.fixture(scope="module")
def schema(repo):
    return load_schema(repo / "workflow" / "schemas" / "config.schema.yaml")


@pytest.fixture()
def default(repo):
    return yaml.safe_load((repo / "config.yaml").read_text())


@pytest.mark.parametrize("name", ["config.yaml", "configs/smoke.yaml"])
def test_shipped_configs_validate(repo, schema, name):
    config = yaml.safe_load((repo / name).read_text())
    validate_config(config, schema)


def test_defaults_are_filled(schema, default):
    del default["evaluation"]["top_p"]
    del default["seed"]
    validate_config(default, schema)
    assert default["evaluation"]["top_p"] == 0.95
    assert default["seed"] == 0


def test_unknown_key_is_named_with_allowed_keys(schema, default):
    default["evaluation"]["temprature"] = 0.5
    with pytest.raises(ConfigError) as err:
        validate_config(default, schema)
    msg = str(err.value)
    assert "temprature" in msg and "evaluation" in msg and "'temperature'" in msg


def test_wrong_type_names_the_key(schema, default):
    default["sft"]["max_steps"] = "many"
    with pytest.raises(ConfigError, match=r"sft\.max_steps"):
        validate_config(default, schema)


def test_out_of_range_names_the_key(schema, default):
    default["evaluation"]["temperature"] = -1
    with pytest.raises(ConfigError, match=r"evaluation\.temperature.*minimum"):
        validate_config(default, schema)


def test_bad_enum_lists_the_choices(schema, default):
    default["evaluation"]["backend"] = "tgi"
    with pytest.raises(ConfigError) as err:
        validate_config(default, schema)
    assert "evaluation.backend" in str(err.value) and "'hf'" in str(err.value)


def test_missing_required_key(schema, default):
    del default["world"]
    with pytest.raises(ConfigError, match="world"):
        validate_config(default, schema)


def test_every_error_is_reported_at_once(schema, default):
    bad = copy.deepcopy(default)
    bad["world"]["splits"]["synth_id"]["n"] = 0
    bad["resources"]["generate"]["gpus"] = 1
    with pytest.raises(ConfigError) as err:
        validate_config(bad, schema)
    msg = str(err.value)
    assert "2 error(s)" in msg
    assert "world.splits.synth_id.n" in msg and "gpus" in msg


def test_a_typo_in_the_mc_training_overrides_is_named(schema, default):
    """training.mc is closed: a misspelt key stops at load time, not inside train_policy."""
    default["training"]["mc"]["n_rolouts"] = 2
    with pytest.raises(ConfigError) as err:
        validate_config(default, schema)
    assert "n_rolouts" in str(err.value) and "training.mc" in str(err.value)


def test_a_variant_needs_a_known_method(schema, default):
    default["training"]["variants"] = [{"name": "x", "method": "ppo"}]
    with pytest.raises(ConfigError, match=r"training\.variants\.0\.method"):
        validate_config(default, schema)
