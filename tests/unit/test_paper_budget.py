"""docs/paper_budget.md: GPU-hours and disk computed from each paper config (hand-checked
numbers below), and the doc is what the script renders."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rredcot.planning.vllm_memory import KNOWN_CONFIGS

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("paper_budget", REPO / "scripts/paper_budget.py")
paper_budget = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(paper_budget)
QWEN = "Qwen/Qwen3-4B-Instruct-2507"


def test_lora_parameters_of_qwen3_4b() -> None:
    # per layer, r x (in + out): q 2560+4096, k and v 2560+1024, o 4096+2560, gate and up
    # 2560+9728, down 9728+2560 = 57,344; x 64 x 36 layers
    assert paper_budget.lora_params(KNOWN_CONFIGS[QWEN], 64) == 64 * 57_344 * 36 == 132_120_576


def test_checkpoint_disk() -> None:
    """Full fine-tuning of 4,022,272,000 parameters: 14 B each = 56.3 GB per checkpoint; two
    kept and the 8.0 GB bf16 final policy = 120.7 GB per run."""
    checkpoint, kept, trained = paper_budget.run_disk({"save_total_limit": 2, "lora": None}, QWEN)
    assert trained == 4_022_272_000
    assert checkpoint == pytest.approx(56.311808)
    assert kept == pytest.approx(2 * 56.311808 + 8.044544)
    lora = {"save_total_limit": 2, "lora": {"r": 64}}
    checkpoint, kept, trained = paper_budget.run_disk(lora, QWEN)
    assert checkpoint == pytest.approx(132_120_576 * 14 / 1e9)
    assert kept == pytest.approx(2 * checkpoint + 8.044544 + 132_120_576 * 2 / 1e9)


def test_gpu_hours_sum_gpus_times_limits() -> None:
    jobs = [
        {"rule": "train_policy", "resources": {"gpu": "8", "runtime": "2880"}},
        {"rule": "train_policy", "resources": {"gpu": "8", "runtime": "2880"}},
        {"rule": "generate", "resources": {"gpu": "1", "runtime": "90"}},
        {"rule": "grade", "resources": {"runtime": "60"}},
    ]
    assert paper_budget.gpu_hours(jobs) == {
        "generate": (1, 1, 1.5, 1.5),
        "train_policy": (2, 8, 48.0, 768.0),
    }


def test_the_doc_is_what_the_configs_give() -> None:
    assert paper_budget.render() == paper_budget.DOC.read_text(), "run scripts/paper_budget.py"
