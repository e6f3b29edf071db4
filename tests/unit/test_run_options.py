"""Settings a paper-scale run needs beyond the CPU default: several optimizer updates per
generation, several passes, the truncation mask, the DDP timeout and experiment tracking (run
names from method and seed, the run record unchanged by the last two), trackers checked at load
time, offline tracking, and `device: auto` refused without a GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rredcot.steps.train_policy import build_parser, record_blocks
from rredcot.training.settings import RunOptions, TrainingSettings
from rredcot.training.settings_checks import TRACKERS, settings_error, tracker_error
from rredcot.training.trl_config import grpo_config


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


def test_trackers_pinned_in_the_jobs_env_pass_the_load_time_check(tmp_path: Path) -> None:
    """At Snakemake load time under --use-conda a tracker may live in the jobs' env file only."""
    gpu_env = Path(__file__).resolve().parents[2] / "envs" / "rredcot-gpu.yaml"
    assert tracker_error(list(TRACKERS), gpu_env) is None
    bare = tmp_path / "bare.yaml"
    bare.write_text("dependencies:\n  - pip:\n      - torch==2.13.0\n")
    missing = [t for t in TRACKERS if not _installed(t)]
    if missing:
        error = tracker_error(missing[:1], bare)
        assert error is not None and f"['{missing[0]}'] not installed here nor pinned" in error


def test_report_offline_keeps_the_trackers_local() -> None:
    environ = {"TRACKIO_SPACE_ID": "me/runs"}
    RunOptions(report_offline=True).environment(environ)
    assert environ == {"WANDB_MODE": "offline"}
    online = {"TRACKIO_SPACE_ID": "me/runs"}
    RunOptions().environment(online)
    assert online == {"TRACKIO_SPACE_ID": "me/runs"}
    with pytest.raises(ValueError, match="training.report_offline: expected true or false"):
        RunOptions(report_offline="yes")


def test_device_auto_without_cuda_is_refused_before_training(
    tiny_checkpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU config on a machine where torch sees no GPU stops, instead of training on the CPU."""
    import torch

    from rredcot.data.synthetic import WorldConfig, generate_split
    from rredcot.models.loading import load_model, load_tokenizer
    from rredcot.training.run import train_policy

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    path = tiny_checkpoint("device_auto")
    table = generate_split(
        4,
        [2],
        3,
        "train",
        WorldConfig(modulus=2, chain="any", shape="chain", avoid_misconception=None),
    )
    settings = TrainingSettings(
        device="auto", prompts_per_step=2, num_generations=2, max_completion_length=8,
        max_steps=1,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"training.device: 'auto' .* no CUDA device"):
        train_policy(load_model(path), load_tokenizer(path), table, settings, tmp_path / "run")
    assert not (tmp_path / "run" / "final").exists()


def test_allow_cpu_lets_the_cpu_rehearsal_train_a_gpu_config(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """training.allow_cpu (the rehearsal's): device auto without CUDA warns instead."""
    import torch

    from rredcot.training.trl_config import check_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    settings = TrainingSettings(device="auto")
    with pytest.raises(ValueError, match="training.device"):
        check_device(settings)
    check_device(settings, allow_cpu=RunOptions(allow_cpu=True).allow_cpu)
    assert "training.allow_cpu" in caplog.text
    with pytest.raises(ValueError, match="training.allow_cpu: expected true or false"):
        RunOptions(allow_cpu="yes")


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
