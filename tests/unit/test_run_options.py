"""Settings a paper-scale run needs beyond the CPU default: several optimizer updates per
generation, several passes, the truncation mask, the DDP timeout and experiment tracking (run
names from method and seed, the run record unchanged by the last two)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rredcot.steps.train_policy import build_parser, record_blocks
from rredcot.training.settings import RunOptions, TrainingSettings
from rredcot.training.trl_config import grpo_config
from rredcot.training_rules import settings_error


def test_four_updates_per_generation(tmp_path: Path) -> None:
    """The official SRPO layout: a generation of 32 responses (8 prompts x 4) split into 4
    optimizer steps of 8."""
    settings = TrainingSettings(prompts_per_step=8, num_generations=4, updates_per_generation=4)
    config = grpo_config(settings, tmp_path, 1)
    assert config.per_device_train_batch_size == 8 and config.gradient_accumulation_steps == 1
    assert config.steps_per_generation == 4 and config.generation_batch_size == 32
    two = TrainingSettings(
        prompts_per_step=8, num_generations=4, updates_per_generation=2,
        gradient_accumulation_steps=2,
    )  # fmt: skip
    config = grpo_config(two, tmp_path, 1)  # 16 per update, 8 per micro-batch
    assert (config.per_device_train_batch_size, config.steps_per_generation) == (8, 4)
    assert config.generation_batch_size == 32


def test_passes_and_truncation_mask_reach_trl(tmp_path: Path) -> None:
    settings = TrainingSettings(num_iterations=2, mask_truncated_completions=True)
    config = grpo_config(settings, tmp_path, 1)
    assert config.num_iterations == 2 and config.mask_truncated_completions is True
    default = grpo_config(TrainingSettings(), tmp_path, 1)
    assert default.num_iterations == 1 and default.mask_truncated_completions is False
    assert default.steps_per_generation == default.gradient_accumulation_steps


def test_updates_must_divide_the_generation() -> None:
    with pytest.raises(ValueError, match=r"training.updates_per_generation: 3 must divide .* 32"):
        TrainingSettings(prompts_per_step=4, num_generations=8, updates_per_generation=3)


@pytest.mark.parametrize(
    "change",
    [{"updates_per_generation": 2}, {"num_iterations": 2}, {"mask_truncated_completions": True}],
)
def test_reset_methods_keep_their_on_policy_loss(change: dict) -> None:
    values = {**TrainingSettings(method="rrpo", loss_type="grpo").to_dict(), **change}
    error = settings_error(values)
    assert error is not None and error.startswith(f"training.{next(iter(change))}: method 'rrpo'")


def test_ddp_timeout_and_run_name(tmp_path: Path) -> None:
    settings = TrainingSettings(method="rredcot", seed=3)
    config = grpo_config(settings, tmp_path, 1, RunOptions(ddp_timeout=7200))
    assert config.ddp_timeout == 7200 and config.run_name == "rredcot-seed3"
    assert config.report_to == []  # none by default
    assert grpo_config(settings, tmp_path, 1).ddp_timeout == 1800


def test_trackers_are_checked() -> None:
    with pytest.raises(ValueError, match=r"training.report_to: \['mlflow'\] are not trackers"):
        RunOptions(report_to=("mlflow",))
    missing = [t for t in ("wandb", "trackio", "tensorboard") if not _installed(t)]
    if missing:  # on this machine: named as not installed
        with pytest.raises(ValueError, match=rf"\['{missing[0]}'\] not installed"):
            RunOptions(report_to=(missing[0],))


def _installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_the_run_record_is_unchanged_by_the_options(tmp_path: Path) -> None:
    model, train = tmp_path / "model", tmp_path / "train.parquet"
    model.mkdir()
    (model / "w.bin").write_bytes(b"w")
    train.write_bytes(b"t")
    argv = ["--model", str(model), "--train", str(train), "--out", str(tmp_path / "run")]
    plain = record_blocks(build_parser().parse_args(argv))
    runtime = json.dumps({"ddp_timeout": 7200, "report_to": ["wandb"]})
    watched = build_parser().parse_args([*argv, "--runtime", runtime])
    assert watched.runtime["ddp_timeout"] == 7200
    assert record_blocks(watched) == plain
