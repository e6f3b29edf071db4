"""rredcot.workflow.runs and .launcher: the runs a config asks for, each one's seeds and
settings, the LoRA target check's keys, and every run's own rendezvous port."""

from __future__ import annotations

import pytest
from workflow_configs import workflow_config

from rredcot.workflow import launcher, runs

LORA = {"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"], "dropout": 0.0}


@pytest.fixture(scope="module")
def full() -> dict:
    return workflow_config("full")


def test_the_default_runs_each_method_on_every_seed():
    config = workflow_config()
    assert runs.training_methods(config) == ["grpo", "oracle_step", "rredcot"]
    assert runs.training_runs(config) == [
        (m, s) for m in ("grpo", "oracle_step", "rredcot") for s in (6, 7, 8, 9, 10)
    ]
    assert runs.methods_and_seeds(config)[0] == (runs.BASE_METHOD, config["seed"])


def test_variants_follow_the_methods_and_stand_for_their_method(full):
    names = runs.training_methods(full)
    assert names[: len(full["training"]["methods"])] == full["training"]["methods"]
    assert "rredcot_center_group" in names[len(full["training"]["methods"]) :]
    assert runs.base_method(full, "rredcot_center_group") == "rredcot"
    assert runs.base_method(full, "grpo") == "grpo"


def test_extra_seeds_come_after_the_shared_ones(full):
    assert runs.seeds_of(full, "grpo") == [6, 7, 8, 9, 10]
    assert runs.seeds_of(full, "mc") == [6, 7, 8]
    assert ("grpo", 10) in runs.training_runs(full)
    assert ("mc", 10) not in runs.training_runs(full)


def test_two_variants_of_one_name_stop_naming_the_key():
    twice = {"name": "twin", "method": "rredcot", "credit": {"center": "group"}}
    config = workflow_config(over={"training": {"variants": [twice, dict(twice)]}})
    with pytest.raises(ValueError, match=r"training\.variants.*share a name"):
        runs.variants(config)


def test_a_variant_runs_its_method_with_its_overrides(full):
    variant = runs.training_settings(full, "rredcot_center_group", 6)
    method = runs.training_settings(full, "rredcot", 6)
    assert variant["credit"]["center"] == "group"
    assert method["credit"]["center"] != "group"
    assert runs.training_settings(full, "mc", 6)["max_steps"] == 30  # per_method


def test_lora_targets_are_keyed_by_the_config_key_that_sets_them():
    assert runs.lora_targets(workflow_config()) == {}  # no LoRA: nothing to check
    shared = workflow_config(over={"training": {"lora": LORA}})
    assert runs.lora_targets(shared) == {"training.lora.target_modules": ["q_proj", "v_proj"]}
    own = workflow_config(over={"training": {"per_method": {"grpo": {"lora": LORA}}}})
    assert runs.lora_targets(own) == {
        "training.per_method.grpo.lora.target_modules": ["q_proj", "v_proj"]
    }
    variant = {"name": "grpo_lora", "method": "grpo", "lora": LORA}
    of_variant = workflow_config(over={"training": {"variants": [variant]}})
    assert runs.lora_targets(of_variant) == {
        "training.variants.0.lora.target_modules": ["q_proj", "v_proj"]
    }


def test_all_linear_needs_no_check():
    config = workflow_config(over={"training": {"lora": {**LORA, "target_modules": "all-linear"}}})
    assert runs.lora_targets(config) == {}


def test_every_run_launches_on_a_port_of_its_own(full):
    full["training"]["accelerate"] = "ddp"
    ports = []
    for method, seed in runs.training_runs(full):
        words = launcher.training_launcher(full, method, seed).split()
        assert words[-1] == "-m" and "launch" in words
        ports.append(int(words[words.index("--main_process_port") + 1]))
    assert len(set(ports)) == len(ports)
    # the base holds place 0 of methods_and_seeds, so the first run gets the next port
    assert ports[0] == launcher.PORT_BASE + 1


def test_without_accelerate_a_run_starts_as_a_module():
    config = workflow_config()
    assert config["training"]["accelerate"] is None
    assert launcher.training_launcher(config, "grpo", 6).startswith("python -m")
