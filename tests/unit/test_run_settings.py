"""`run_settings`: one RL run's settings, built the same way by the workflow and the
development search."""

from __future__ import annotations

from rredcot.training_rules import NOT_RUN_SETTINGS, merged, run_settings

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
    from rredcot.training_rules import OMITTED_AT_DEFAULT

    default = dataclasses.asdict(OPPOConfig())
    assert OMITTED_AT_DEFAULT["oppo"] == default
    at_default = {**CONFIG, "training": {**CONFIG["training"], "oppo": default}}
    for method in ("grpo", "rredcot", "oppo"):
        assert "oppo" not in run_settings(at_default, method, 1, task="synthetic")
    segment = merged(at_default, {"training": {"oppo": {"level": "segment"}}})
    assert run_settings(segment, "oppo", 1, task="synthetic")["oppo"]["level"] == "segment"
