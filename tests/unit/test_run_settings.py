"""`run_settings`: one RL run's settings, built the same way by the workflow and the
development search."""

from __future__ import annotations

from rredcot.workflow.run_params import NOT_RUN_SETTINGS, merged, run_settings

CONFIG = {
    "training": {
        "methods": ["grpo", "rredcot", "rrpo"],
        "seeds": [1, 2],
        "extra_seeds": [],
        "variants": [],
        "curve": {"every": 15},
        "accelerate": None,
        "num_processes": 1,
        "keep_stale_checkpoints": False,
        "learning_rate": 1e-4,
        "loss_type": "dr_grpo",
        "kl_beta": 0.01,
        "credit": {"center": "none", "scale": 1.0},
        "mc": {"n_rollouts": 2},
        "per_method": {
            "rredcot": {"learning_rate": 3e-4, "rredcot": {"suffixes": 4}, "accelerate": "ddp"}
        },
    },
    "estimator": {"rredcot": {"suffixes": 8, "answer_now": "joint"}, "mc": {"n_rollouts": 4}},
    "segmentation": {"strategy": "newline"},
}


def test_merged_merges_nested_blocks_and_replaces_the_rest() -> None:
    assert merged({"a": {"x": 1, "y": 2}, "b": 1}, {"a": {"y": 3}, "b": {"z": 1}}) == {
        "a": {"x": 1, "y": 3},
        "b": {"z": 1},
    }


def test_layers_per_method_then_variant_and_keeps_the_shared_blocks() -> None:
    variant = {
        "name": "v",
        "method": "rredcot",
        "credit": {"center": "group"},
        "rredcot": {"answer_now": "conditional"},
    }
    got = run_settings(CONFIG, "rredcot", 5, task="synthetic", variant=variant)
    assert not (set(NOT_RUN_SETTINGS) - {"mc"}) & set(got)  # mc comes back merged, below
    assert "name" not in got and got["method"] == "rredcot" and got["seed"] == 5
    assert got["learning_rate"] == 3e-4  # per_method over training
    assert got["credit"] == {"center": "group", "scale": 1.0}  # the variant's, merged
    # estimator.rredcot, then per_method's rredcot, then the variant's
    assert got["rredcot"] == {"suffixes": 4, "answer_now": "conditional"}
    assert got["mc"] == {"n_rollouts": 2}  # training.mc over estimator.mc
    assert got["segmentation"] == {"strategy": "newline"}
    assert (got["task"], got["reference_column"]) == ("synthetic", "reference")


def test_reset_methods_run_on_policy_without_kl() -> None:
    got = run_settings(CONFIG, "rrpo", 1, task="synthetic", reference_column="solution")
    assert (got["loss_type"], got["kl_beta"], got["reference_column"]) == ("grpo", 0.0, "solution")
    grpo = run_settings(CONFIG, "grpo", 1, task="synthetic")
    assert (grpo["loss_type"], grpo["kl_beta"]) == ("dr_grpo", 0.01)
    assert grpo["rredcot"] == CONFIG["estimator"]["rredcot"]


def test_padding_free_is_left_out_at_its_default_and_kept_when_on() -> None:
    """A key added after runs were recorded leaves their settings (and records) as they were."""
    off = {**CONFIG, "training": {**CONFIG["training"], "padding_free": False}}
    assert "padding_free" not in run_settings(off, "grpo", 1, task="synthetic")
    on = {**CONFIG, "training": {**CONFIG["training"], "padding_free": True}}
    assert run_settings(on, "grpo", 1, task="synthetic")["padding_free"] is True
    own = merged(off, {"training": {"per_method": {"grpo": {"padding_free": True}}}})
    assert run_settings(own, "grpo", 1, task="synthetic")["padding_free"] is True
    assert "padding_free" not in run_settings(own, "rredcot", 1, task="synthetic")


def test_the_oppo_block_is_left_out_at_its_defaults_and_kept_when_changed() -> None:
    """training.oppo (METHOD.md §8) came after runs were recorded: at its defaults (the
    class's) no run's settings change; a changed block reaches the runs."""
    import dataclasses

    from rredcot.credit.bayes import OPPOConfig

    default = dataclasses.asdict(OPPOConfig())
    at_default = {**CONFIG, "training": {**CONFIG["training"], "oppo": default}}
    for method in ("grpo", "rredcot", "oppo"):
        assert "oppo" not in run_settings(at_default, method, 1, task="synthetic")
    segment = merged(at_default, {"training": {"oppo": {"level": "segment"}}})
    assert run_settings(segment, "oppo", 1, task="synthetic")["oppo"]["level"] == "segment"


def test_the_recorded_keys_are_the_settings_fields() -> None:
    """Every key `RECORDED` names is still a field of `TrainingSettings` or of its block (a
    renamed field would otherwise be omitted at its default from then on)."""
    import dataclasses

    from rredcot.training.settings import TrainingSettings
    from rredcot.workflow.recorded_settings import RECORDED

    fields = {f.name: f for f in dataclasses.fields(TrainingSettings)}
    assert set(RECORDED) <= set(fields)
    for name, keys in RECORDED.items():
        if keys is None:
            continue
        block = fields[name]
        default = (
            block.default_factory() if block.default_factory is not dataclasses.MISSING else None
        )
        block_type = type(default) if default is not None else None
        if block_type is None:  # lora, misconception: None by default
            from rredcot.data.misconceptions import Misconception
            from rredcot.training.lora import LoraSettings

            block_type = {"lora": LoraSettings, "misconception": Misconception}[name]
        assert set(keys) <= {f.name for f in dataclasses.fields(block_type)}, name


def test_a_new_setting_at_its_default_changes_no_run(monkeypatch) -> None:
    """A key added to config `training` and to a block (as the schema would fill them in)
    leaves every run of every config as it was while it holds its default, with no list to
    edit; set to another value, it reaches the runs that set it."""
    from pathlib import Path

    import yaml
    from snakemake.utils import update_config

    from rredcot.config import validate_config
    from rredcot.workflow import recorded_settings
    from rredcot.workflow.runs import training_runs, training_settings

    repo = Path(__file__).resolve().parents[2]

    def load_validated(path: Path | None) -> dict:
        config = yaml.safe_load((repo / "config.yaml").read_text())
        for overlay in [path] if path is not None else []:
            update_config(config, yaml.safe_load(overlay.read_text()))
        return validate_config(config)

    defaults = recorded_settings.run_defaults()
    grown = {
        **defaults,
        "new_setting": 3,
        "rredcot": {**defaults["rredcot"], "new_knob": "off"},
    }
    for path in [None, *sorted(repo.glob("configs/*.yaml"))]:
        config = load_validated(path)
        before = {run: training_settings(config, *run) for run in training_runs(config)}
        monkeypatch.setattr(recorded_settings, "run_defaults", lambda: grown)
        config = merged(
            config,
            {"training": {"new_setting": 3}, "estimator": {"rredcot": {"new_knob": "off"}}},
        )
        after = {run: training_settings(config, *run) for run in training_runs(config)}
        assert after == before, path
        changed = merged(config, {"training": {"new_setting": 4}})
        for run in training_runs(changed):
            assert training_settings(changed, *run)["new_setting"] == 4, (path, run)
        monkeypatch.undo()
