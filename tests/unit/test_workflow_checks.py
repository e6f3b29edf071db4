"""rredcot.workflow.checks: the shipped configs pass the parse-time checks, and each mistake
stops the workflow naming the key to change."""

from __future__ import annotations

from pathlib import Path

import pytest
from workflow_configs import REPO, workflow_config

from rredcot.config import ConfigError
from rredcot.workflow import checks
from rredcot.workflow.paths import STAND_IN_MODEL


@pytest.fixture()
def default() -> dict:
    return workflow_config()


@pytest.mark.parametrize("names", [(), ("smoke",), ("full",), ("attribution",)], ids=str)
def test_shipped_configs_pass(names):
    checks.check_config(workflow_config(*names), REPO, use_conda=False)


def test_a_conda_env_outside_the_repository_lists_the_env_files(default, tmp_path: Path):
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "cpu.yaml").write_text("name: cpu\n")
    with pytest.raises(ValueError, match=r"'conda_env'.*\['envs/cpu\.yaml'\]"):
        checks.check_conda_env(default, tmp_path)
    checks.check_conda_env(default, REPO)


def test_an_unknown_tracker_stops_with_the_trackers_key(default):
    default["training"]["report_to"] = ["carrier_pigeon"]
    with pytest.raises(ConfigError, match=r"training\.report_to.*carrier_pigeon"):
        checks.check_trackers(default, REPO, use_conda=False)


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [("data", "train", "data.train"), ("studies", "split", "studies.split")],
)
def test_an_unknown_problem_set_names_its_key(default, key, value, named):
    default[key][value] = "synth_typo"
    default["studies"]["pool"] = None
    with pytest.raises(ValueError, match=rf"config key '{named}': unknown problem set"):
        checks.check_problem_sets(default)


def test_the_stand_ins_go_where_the_workflow_builds_them(default):
    default["stand_in"]["model"] = True
    with pytest.raises(ConfigError, match=r"'model\.name_or_path'.*stand_in\.model"):
        checks.check_stand_in(default)
    default["model"]["name_or_path"] = STAND_IN_MODEL
    checks.check_stand_in(default)
    default["stand_in"]["training_rows"] = 8  # the default trains on a world table
    with pytest.raises(ConfigError, match=r"'stand_in\.training_rows'.*set it to null"):
        checks.check_stand_in(default)


def test_a_local_model_path_must_hold_a_checkpoint(default, tmp_path: Path):
    default["model"]["name_or_path"] = str(tmp_path / "nothing_here")
    with pytest.raises(ConfigError, match=r"'model\.name_or_path'.*does not exist"):
        checks.check_local_paths(default)
    default["stand_in"]["model"] = True  # the stand-in is built by a rule: not checked here
    checks.check_local_paths(default)


def test_the_mirror_is_checked_only_when_a_registry_set_is_read(default, monkeypatch, tmp_path):
    monkeypatch.setenv("RREDCOT_MIRROR", str(tmp_path / "missing"))
    checks.check_local_paths(default)  # world tables only
    default["benchmarks"] = [*default["benchmarks"], "aime24"]
    with pytest.raises(ConfigError, match="missing"):
        checks.check_local_paths(default)


def test_a_run_s_settings_are_checked_with_its_overrides():
    config = workflow_config("smoke")
    config["training"]["per_method"]["rrpo"] = {"num_generations": 7}
    with pytest.raises(ConfigError, match=r"run rrpo.*per_method and variant overrides"):
        checks.check_training_runs(config)


def test_the_curve_split_is_a_world_split(default):
    default["training"]["curve"]["split"] = "train"
    with pytest.raises(ValueError, match=r"'training\.curve\.split': 'train' is not a world"):
        checks.check_curve_split(default)


def test_the_regime_table_needs_the_curve_split_at_t1(default):
    split = default["training"]["curve"]["split"]
    default["evaluation"]["per_benchmark"][split] = {"temperature": 0.6, "top_p": 1.0}
    with pytest.raises(ConfigError, match=rf"'evaluation\.per_benchmark\.{split}'.*0\.6"):
        checks.check_regime_protocol(default)
    default["training"]["curve"]["split"] = None  # no regime table: nothing to check
    checks.check_regime_protocol(default)


def test_the_first_mistake_in_order_is_the_one_reported(default):
    default["training"]["curve"]["split"] = "train"
    default["data"]["train"] = "synth_typo"
    with pytest.raises(ValueError, match="data.train"):
        checks.check_config(default, REPO, use_conda=False)
