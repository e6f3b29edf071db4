"""The one-call GPU check (scripts/gpu_check.py) and what it needs of the library: the
checkpointing keyword of an older transformers (a GPU image's 5.17), the CUDA allocator setting
of GPU train jobs, and the whole check on the CPU with its GPU rows skipped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rredcot.steps.train_policy import CUDA_ALLOC_CONF, set_cuda_allocator
from rredcot.training import TrainingSettings, trl_config, trl_support

REPO = Path(__file__).resolve().parents[2]


def test_checkpointing_keyword_follows_the_installed_transformers():
    assert trl_support.checkpointing_argument(True) == {"activation_checkpointing": True}
    old = {"output_dir", "gradient_checkpointing", "gradient_checkpointing_kwargs"}
    assert trl_support.checkpointing_argument(False, old) == {"gradient_checkpointing": False}


def test_grpo_config_builds_where_transformers_lacks_activation_checkpointing(monkeypatch):
    """transformers 5.17's TrainingArguments has no `activation_checkpointing`: passing it
    raised TypeError before any GPU work."""
    built = {}
    real = trl_config.RREDCoTConfig

    def grpo_config_517(**kwargs):  # the public GRPOConfig over transformers 5.17
        if "activation_checkpointing" in kwargs:
            raise TypeError("__init__() got an unexpected keyword 'activation_checkpointing'")
        built.update(kwargs)
        return real(**kwargs)

    names = trl_support.training_argument_names() - {"activation_checkpointing"}
    monkeypatch.setattr(trl_support, "training_argument_names", lambda: names)
    monkeypatch.setattr(trl_config, "RREDCoTConfig", grpo_config_517)
    settings = TrainingSettings.from_dict(
        {"method": "grpo", "seed": 0, "device": "cpu", "gradient_checkpointing": True}
    )
    config = trl_config.grpo_config(settings, "/tmp/unused", num_processes=1)
    assert built["gradient_checkpointing"] is True and config.gradient_checkpointing


def test_gpu_train_jobs_get_the_expandable_allocator():
    gpu = TrainingSettings.from_dict({"method": "grpo", "seed": 0, "device": "auto"})
    cpu = TrainingSettings.from_dict({"method": "grpo", "seed": 0, "device": "cpu"})
    environ: dict[str, str] = {}
    set_cuda_allocator(gpu, environ)
    assert environ == {"PYTORCH_CUDA_ALLOC_CONF": CUDA_ALLOC_CONF}
    assert CUDA_ALLOC_CONF == "expandable_segments:True"
    own = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}
    set_cuda_allocator(gpu, own)  # the job's own setting stays
    assert own == {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}
    none: dict[str, str] = {}
    set_cuda_allocator(cpu, none)
    assert none == {}


@pytest.mark.slow
def test_gpu_check_runs_tiny_on_the_cpu(tmp_path):
    """`scripts/gpu_check.py --device cpu --tiny`: every row runs or says why not; the GPU
    rows are skipped, every method trains two steps through a SIGTERM and a resume."""
    out = tmp_path / "table.md"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    env["TQDM_DISABLE"] = "1"
    run = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--device", "cpu", "--tiny", "--table", str(out)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = [line.split(" | ") for line in out.read_text().splitlines()[2:]]
    status = {r[0].removeprefix("| "): r[1] for r in rows}
    assert status.pop("packages") == "ok"
    for name in ("device", "sdpa train", "sdpa credit encode", "sdpa credit row"):
        assert status.pop(name) == "skipped", name
    for method in ("grpo", "rredcot", "mc", "rrpo", "srpo"):
        assert status.pop(f"train {method}") == "ok", method
    assert status == {"paper credit": "ok", "paper train": "ok"}
    detail = {r[0].removeprefix("| "): r[2] for r in rows}
    assert "resumed -> step 2" in detail["train rredcot"]
    assert "vocab 151,936" in detail["train grpo"] and "loaded float32" in detail["train grpo"]
    assert "LoRA" in detail["train srpo"]
    assert "planner" in detail["paper train"]
