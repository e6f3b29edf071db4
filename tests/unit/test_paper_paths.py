"""The paper-scale paths of the one trainer, on the CPU: a chat model loaded like a Hub id trains
every method on math problems; GPU settings (bf16, accumulation, vLLM) reach TRL's config; the
batch is laid out over processes; bad values and launches are refused by name."""

from __future__ import annotations

import csv
import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml
from accelerate.commands.config.config_args import load_config_from_file
from datasets import Dataset

from rredcot.credit.references import compose_reference
from rredcot.data.schema import write_parquet
from rredcot.models.loading import load_model, load_tokenizer
from rredcot.models.tokenizer import CHATML, build_chat_tokenizer
from rredcot.tasks import get_task
from rredcot.tasks.math import INSTRUCTION
from rredcot.training import CreditGRPOTrainer, TrainingSettings, build_method, grpo_config
from rredcot.training.launch import (
    ACCELERATE_CONFIGS,
    accelerate_command,
    shutdown_timeout,
    signal_lead,
)
from rredcot.training.run import train_policy
from rredcot.training.trl_config import batch_layout, check_collectives

pytestmark = pytest.mark.usefixtures("one_thread")

PROBLEMS = [  # id, problem, gold answer, a worked solution in the dataset's \boxed{} style
    ("p0", "What is 2 + 3?", "5", "Add the two numbers: 2 + 3 = 5.\nSo the sum is $\\boxed{5}$."),
    (
        "p1",
        "What is 4 times 6?",
        "24",
        "Four sixes: 6 + 6 + 6 + 6 = 24.\nThe product is $\\boxed{24}$.",
    ),
]


@pytest.fixture(scope="module")
def chat_model(tiny_checkpoint) -> Path:
    """A tiny random Qwen3 whose tokenizer carries a Qwen-style chat template, saved as a Hub
    checkpoint is (config, weights, tokenizer files)."""
    path = tiny_checkpoint("chat_qwen3", max_position_embeddings=1024)
    build_chat_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def math_table() -> pl.DataFrame:
    task = get_task("math")
    return pl.DataFrame(
        {
            "id": [p[0] for p in PROBLEMS],
            "problem": [p[1] for p in PROBLEMS],
            "answer": [p[2] for p in PROBLEMS],
            "reference": [compose_reference(task, p[3], p[2]) for p in PROBLEMS],
        }
    )


def settings(**kw) -> TrainingSettings:
    base = {
        "task": "math",
        "reference_column": "reference",
        "prompts_per_step": 2,
        "num_generations": 2,
        "max_completion_length": 24,
        "max_steps": 1,
        "save_steps": 100,
        "learning_rate": 1e-3,
        "segmentation": {"num_segments": 2},
        "mc": {"n_rollouts": 2, "budget": 12},
        "resets": {"max_fresh_attempts": 2, "localization_max_new_tokens": 6},
    }
    return TrainingSettings.from_dict({**base, **kw})


# --- one step of every method on a chat model ----------------------------------------------------


@pytest.mark.parametrize("method", ["grpo", "rredcot", "mc", "rrpo", "srpo"])
def test_every_method_trains_a_chat_model_on_math(
    chat_model, math_table, tmp_path, monkeypatch, method
):
    seen: list[str] = []
    generate = CreditGRPOTrainer._generate_and_score_completions

    def record(self, inputs):
        seen.extend(row["prompt"] for row in inputs)
        return generate(self, inputs)

    monkeypatch.setattr(CreditGRPOTrainer, "_generate_and_score_completions", record)
    extra = {"loss_type": "grpo"} if method in ("rrpo", "srpo") else {}
    tokenizer = load_tokenizer(chat_model)  # by path, through the same code as a Hub id
    model = load_model(chat_model)
    summary = train_policy(model, tokenizer, math_table, settings(method=method, **extra), tmp_path)
    assert summary["steps"] == 1 and summary["problems"] == 2
    assert len(seen) == 4  # 2 problems × 2 responses, one generation batch
    for problem, prompt in zip([p[1] for p in PROBLEMS], sorted(set(seen)), strict=True):
        assert (
            prompt
            == f"<|im_start|>user\n{problem}\n{INSTRUCTION}<|im_end|>\n<|im_start|>assistant\n"
        )
    with (tmp_path / "metrics.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == [1]
    assert math.isfinite(float(rows[0]["loss/policy"]))
    if method != "grpo":
        assert float(rows[0]["credit/forward_tokens"]) > 0
    final = load_model(tmp_path / "final")  # the trained policy opens like the base did
    assert sum(p.numel() for p in final.parameters()) == sum(p.numel() for p in model.parameters())
    assert load_tokenizer(tmp_path / "final").chat_template == CHATML


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_the_step_runs_on_two_processes(chat_model, math_table, tmp_path):
    """torchrun × 2 on the CPU (gloo DDP), as `accelerate launch` runs it on GPUs: each process
    samples and scores its own whole groups; one metrics row per step and one final policy."""
    train = tmp_path / "train.parquet"
    solutions = pl.Series("solution", [p[3] for p in PROBLEMS])
    write_parquet(math_table.with_columns(solutions, source=pl.lit("hand")), train)
    params = settings(method="rredcot", save_steps=1).to_dict()
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_port", str(free_port()), "-m", "rredcot.steps.train_policy",
        "--model", str(chat_model), "--train", str(train), "--out", str(out),
        "--params", json.dumps(params),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    with (out / "metrics.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == [1]  # written by the main process only
    assert all(float(r["credit/forward_tokens"]) > 0 for r in rows)
    assert json.loads((out / "train_summary.json").read_text())["steps"] == 1
    assert (out / "final" / "config.json").is_file() and (out / "checkpoint-1").is_dir()


# --- GPU settings reach TRL's config ------------------------------------------------------------


def test_grpo_config_maps_precision_checkpointing_and_accumulation(tmp_path):
    config = grpo_config(
        settings(
            bf16=True,
            gradient_checkpointing=True,
            prompts_per_step=2,
            num_generations=4,
            per_device_batch_size=4,
            gradient_accumulation_steps=2,
        ),
        tmp_path,
    )
    assert config.use_cpu and config.bf16 and not config.fp16
    assert config.activation_checkpointing and config.gradient_checkpointing
    assert config.per_device_train_batch_size == 4 and config.gradient_accumulation_steps == 2
    # one generation of the whole step's batch per optimizer step (on-policy)
    assert config.steps_per_generation == 2 and config.generation_batch_size == 8
    default = grpo_config(settings(), tmp_path)
    assert not default.bf16 and not default.activation_checkpointing
    assert default.per_device_train_batch_size == 4 and default.gradient_accumulation_steps == 1


@pytest.mark.parametrize("method", ["grpo", "rrpo"])
def test_grpo_config_maps_vllm(tmp_path, method):
    s = settings(
        method=method,
        loss_type="grpo",
        device="auto",
        use_vllm=True,
        vllm_mode="server",
        vllm_gpu_memory_utilization=0.5,
        vllm_tensor_parallel_size=2,
        vllm_server_host="10.0.0.7",
        vllm_server_port=8123,
    )
    config = grpo_config(s, tmp_path)
    assert not config.use_cpu and config.use_vllm and config.vllm_mode == "server"
    assert config.vllm_gpu_memory_utilization == 0.5 and config.vllm_tensor_parallel_size == 2
    assert (config.vllm_server_host, config.vllm_server_port) == ("10.0.0.7", 8123)
    # RRPO/SRPO return no sampling logprobs and train without a ratio
    assert config.vllm_importance_sampling_correction == (method == "grpo")


# --- batch layout over processes ----------------------------------------------------------------


def test_batch_layout_keeps_the_step_batch_over_processes():
    paper = {"prompts_per_step": 4, "num_generations": 8}
    assert batch_layout(settings(**paper), 1) == (32, 1)  # today's CPU layout
    assert batch_layout(settings(**paper), 8) == (4, 1)
    assert batch_layout(settings(**paper, gradient_accumulation_steps=2), 4) == (4, 2)
    assert batch_layout(
        settings(**paper, per_device_batch_size=2, gradient_accumulation_steps=2), 8
    ) == (2, 2)
    with pytest.raises(ValueError, match="training.per_device_batch_size: 2 × .* = 16, but"):
        batch_layout(settings(**paper, per_device_batch_size=2), 8)
    with pytest.raises(ValueError, match="training.per_device_batch_size: null splits .* 24"):
        batch_layout(settings(prompts_per_step=3, num_generations=8), 16)
    # 8 processes × 4 rows: a group of 8 would straddle two processes
    split = {"prompts_per_step": 4, "num_generations": 8}
    assert batch_layout(settings(method="grpo", **split), 8) == (4, 1)  # GRPO pools globally
    with pytest.raises(ValueError, match="'rredcot' pools each group's statistics"):
        batch_layout(settings(method="rredcot", **split), 8)
    assert batch_layout(settings(method="rredcot", **split, gradient_accumulation_steps=2), 4) == (
        4,
        2,
    )


def test_a_launch_with_other_processes_or_precision_is_refused(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="laid out for 2 process.*this launch has 1"):
        grpo_config(settings(), tmp_path, num_processes=2)
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    with pytest.raises(ValueError, match="training.bf16: is False.*'bf16'"):
        grpo_config(settings(), tmp_path)
    assert grpo_config(settings(bf16=True), tmp_path).bf16


def test_resets_refuse_collective_sampling(chat_model, tmp_path, monkeypatch):
    resets = {"method": "srpo", "loss_type": "grpo", "device": "auto", "use_vllm": True}
    with pytest.raises(ValueError, match="training.vllm_mode: method 'srpo'"):
        check_collectives(settings(**resets, vllm_mode="server"), 2)
    with pytest.raises(ValueError, match="training.vllm_mode"):
        check_collectives(settings(**resets, vllm_tensor_parallel_size=2), 2)
    check_collectives(settings(**resets), 2)  # colocated, one GPU per engine: no collective
    check_collectives(settings(**resets, vllm_mode="server"), 1)
    # ZeRO-3 gathers the weights on every sampling call: refused when the trainer is built
    from trl.distributed import DistributedBackend

    monkeypatch.setattr(DistributedBackend, "is_zero3", property(lambda self: True))
    model, tokenizer = load_model(chat_model), load_tokenizer(chat_model)
    s = settings(method="rrpo", loss_type="grpo")
    method = build_method("rrpo", get_task("math"), tokenizer, [tokenizer.eos_token_id])
    with pytest.raises(ValueError, match="'rrpo' samples a data-dependent .* ZeRO-3"):
        CreditGRPOTrainer(
            model=model,
            reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
            args=grpo_config(s, tmp_path),
            train_dataset=Dataset.from_list([{"prompt": "x"}]),
            processing_class=tokenizer,
            method=method,
        )


# --- settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"device": "cuda"}, "training.device"),
        ({"bf16": "yes"}, "training.bf16"),
        ({"gradient_checkpointing": 1}, "training.gradient_checkpointing"),
        ({"per_device_batch_size": 0}, "training.per_device_batch_size"),
        ({"per_device_batch_size": 3}, "training.per_device_batch_size"),  # 3 ∤ 2 × 2
        ({"gradient_accumulation_steps": 0}, "training.gradient_accumulation_steps"),
        ({"gradient_accumulation_steps": 3}, "training.gradient_accumulation_steps"),
        ({"use_vllm": True}, "training.use_vllm"),  # on the CPU
        ({"vllm_mode": "remote"}, "training.vllm_mode"),
        ({"vllm_gpu_memory_utilization": 0.0}, "training.vllm_gpu_memory_utilization"),
        ({"vllm_gpu_memory_utilization": 1.5}, "training.vllm_gpu_memory_utilization"),
        ({"vllm_tensor_parallel_size": 0}, "training.vllm_tensor_parallel_size"),
        ({"vllm_server_host": " "}, "training.vllm_server_host"),
        ({"vllm_server_port": 70000}, "training.vllm_server_port"),
    ],
)
def test_bad_gpu_settings_name_the_key(values, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        settings(**values)


def test_launch_keys_are_not_training_settings():
    """`accelerate` / `num_processes` decide the launch, not the run (the workflow drops them)."""
    with pytest.raises(
        ValueError, match=r"unknown training key\(s\) \['accelerate', 'num_processes'\]"
    ):
        TrainingSettings.from_dict({"accelerate": "ddp", "num_processes": 8})


# --- launch -----------------------------------------------------------------------------------


def test_accelerate_command_builds_the_argv_prefix():
    assert accelerate_command(None, 1, None) == ["python", "-m"]
    zero2 = str(ACCELERATE_CONFIGS / "zero2.yaml")
    assert accelerate_command("zero2", 4, 29501) == [
        "env", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=900", "accelerate", "launch",
        "--config_file", zero2, "--num_processes", "4", "--main_process_port", "29501", "-m",
    ]  # fmt: skip
    assert accelerate_command("ddp", 2, None, shutdown_s=1800)[1] == (
        "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=1800"
    )
    assert accelerate_command("ddp", 2, None, mixed_precision="no")[-3:] == [
        "--mixed_precision", "no", "-m",
    ]  # fmt: skip
    with pytest.raises(ValueError, match=r"no config 'zero9'.*\['ddp', 'zero2', 'zero3'\]"):
        accelerate_command("zero9", 8, None)
    with pytest.raises(ValueError, match="num_processes: 2 processes need an accelerate config"):
        accelerate_command(None, 2, None)
    with pytest.raises(ValueError, match="num_processes"):
        accelerate_command("ddp", 0, None)
    with pytest.raises(ValueError, match="shutdown_s"):
        accelerate_command("ddp", 2, None, shutdown_s=0)


def test_the_elastic_agent_waits_the_signal_lead():
    """`accelerate launch`'s agent gives the ranks the job's `sbatch --signal` lead to save
    (sbatch's default 60 s without `@`), at least 900 s."""
    assert signal_lead("'--signal=TERM@900'") == 900
    assert signal_lead("--qos=long --signal B:USR1@1800") == 1800
    assert signal_lead("--signal=TERM") == 60 and signal_lead(None) is None
    assert shutdown_timeout("--signal=R:TERM@2400") == 2400
    assert shutdown_timeout("--signal=TERM@120") == shutdown_timeout(None) == 900


@pytest.mark.parametrize(
    ("name", "distributed", "stage"),
    [("ddp", "MULTI_GPU", None), ("zero2", "DEEPSPEED", 2), ("zero3", "DEEPSPEED", 3)],
)
def test_shipped_accelerate_configs_load(name, distributed, stage):
    path = ACCELERATE_CONFIGS / f"{name}.yaml"
    config = load_config_from_file(str(path))  # accelerate's own loader and checks
    assert config.distributed_type.value == distributed and config.mixed_precision == "bf16"
    assert yaml.safe_load(path.read_text())["num_processes"] == 8
    assert config.deepspeed_config.get("zero_stage") == stage
    if stage == 3:  # train_policy gathers the final weights; needs the 16-bit save
        assert config.deepspeed_config["zero3_save_16bit_model"] is True
