"""The vLLM context length from the config's lengths, and the check that one full-length
sequence's KV cache fits the engine's memory share (numbers computed by hand below)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

from rredcot.config import validate_config
from rredcot.planning.vllm_memory import (
    KNOWN_MODELS,
    config_errors,
    context_errors,
    dims_from_config,
    generation_engine,
    kv_cache_error,
    model_dims,
    training_length,
)
from rredcot.workflow.run_params import run_settings

REPO = Path(__file__).resolve().parents[2]
KEYS = ("training.vllm_max_model_length", "training.vllm_gpu_memory_utilization")
QWEN3_4B = KNOWN_MODELS["Qwen/Qwen3-4B-Instruct-2507"]


def paper_config(name: str = "paper_qwen3_4b.yaml", **training) -> dict:
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    update_config(config, yaml.safe_load((REPO / "configs" / name).read_text()))
    update_config(config, {"training": training})
    return validate_config(config)


def test_qwen3_4b_shape() -> None:
    # 2 (K, V) x 36 layers x 8 KV heads x 128 x 2 bytes (bf16)
    assert QWEN3_4B.kv_bytes_per_token(2) == 147_456
    # embeddings 151936 x 2560 (tied) + 36 x (attention 2560 x 128 x (2*32 + 2*8) + MLP 3 x 2560
    # x 9728) = 388,956,160 + 36 x 100,925,440
    assert QWEN3_4B.num_params == 4_022_272_000


def test_a_262k_context_does_not_fit_a_0p3_share_of_80_gb() -> None:
    """The issue's case: 262,144 tokens x 147,456 B = 36.0 GiB of KV cache beside 8.0 GB of
    weights, in 0.3 x 80 GB = 24 GB; at most (24e9 - 8,044,544,000) // 147,456 = 108,204
    tokens fit."""
    error = kv_cache_error(QWEN3_4B, 262_144, 0.3, 80, "bfloat16", KEYS)
    assert error is not None
    assert error.startswith("config key 'training.vllm_max_model_length'")
    assert "36.0 GiB" in error and "at most 108,204 tokens" in error
    assert "training.vllm_gpu_memory_utilization" in error
    assert kv_cache_error(QWEN3_4B, 108_204, 0.3, 80, "bfloat16", KEYS) is None
    assert kv_cache_error(QWEN3_4B, 108_205, 0.3, 80, "bfloat16", KEYS) is not None


@pytest.mark.parametrize(
    ("method", "want"),
    [
        ("grpo", 1024 + 3584),  # open-rs's vllm_max_model_len 4608
        ("rredcot", 1024 + 3584),
        ("rrpo", 1024 + 2 * 3584),  # a suffix of L new tokens after a prefix of up to L
        ("srpo", 1024 + 3584 + 4096),  # the whole chain, then the localization's 4096
        ("mc", 1024 + 3584 + 2048),  # a late state, then mc.budget 2048
    ],
)
def test_training_length_per_method(method: str, want: int) -> None:
    config = paper_config("paper_r1_distill_1p5b.yaml")
    assert training_length(run_settings(config, method, 0, task="math")) == want


def test_the_length_can_be_set() -> None:
    config = paper_config(vllm_max_model_length=30000)
    assert training_length(run_settings(config, "rrpo", 0, task="math")) == 30000


def test_config_errors_name_the_run_and_the_key() -> None:
    config = paper_config(vllm_max_model_length=262_144)
    runs = {m: run_settings(config, m, 0, task="math") for m in ("grpo", "rrpo")}
    errors = config_errors(config, runs)
    assert [e.split(":")[0] for e in errors] == ["run grpo", "run rrpo"]
    assert all("'training.vllm_max_model_length'" in e for e in errors)
    shipped = paper_config()
    runs = {m: run_settings(shipped, m, 0, task="math") for m in shipped["training"]["methods"]}
    assert config_errors(shipped, runs) == []  # the shipped paper config fits


def test_a_context_set_shorter_than_its_jobs_need_is_refused_naming_the_key() -> None:
    """one_gpu.yaml's 6144-token context could not hold its studies' 2048-token traces plus
    4096-token rollouts after a 1024-token prompt (issue 46, item 5)."""
    config = paper_config("one_gpu.yaml")
    runs = {m: run_settings(config, m, 0, task="math") for m in config["training"]["methods"]}
    assert context_errors(config, runs) == []  # as shipped: 7168
    config["evaluation"]["vllm"]["max_model_len"] = 6144
    (error,) = context_errors(config, runs)
    assert error.startswith("config key 'evaluation.vllm.max_model_len': 6,144 tokens")
    assert "set it to at least 7,168" in error
    paper = paper_config(use_vllm=True, vllm_max_model_length=20_000)
    runs = {"grpo": run_settings(paper, "grpo", 0, task="math")}
    (error,) = context_errors(paper, runs)
    assert error.startswith("run grpo: config key 'training.vllm_max_model_length': 20,000")
    assert "at least 26,024" in error  # 1024 + 25000


def test_generation_engine_gets_a_length() -> None:
    config = paper_config()
    config["evaluation"]["vllm"]["max_model_len"] = None
    # 1024 + max(25000 evaluation, 25000 references, 8192 traces + 16384 ground-truth rollouts)
    assert generation_engine(config)["max_model_len"] == 1024 + 25000
    config["evaluation"]["backend"] = "hf"
    assert generation_engine(config)["max_model_len"] is None  # hf: its params as they were


def test_dims_come_from_config_json_first(tmp_path: Path) -> None:
    cfg = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 100,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    dims = model_dims("Qwen/Qwen3-4B", tmp_path)
    # head_dim 64 / 4 = 16; params 100 x 64 x 2 (untied) + 2 x (64 x 16 x 12 + 3 x 64 x 128)
    assert (dims.num_layers, dims.num_kv_heads, dims.head_dim) == (2, 2, 16)
    assert dims.num_params == 12_800 + 2 * (12_288 + 24_576)
    assert model_dims("Qwen/Qwen3-4B", tmp_path / "absent") == KNOWN_MODELS["Qwen/Qwen3-4B"]
    assert model_dims("someone/unknown-model") is None
    assert dims_from_config(cfg, "x").kv_bytes_per_token(2) == 2 * 2 * 2 * 16 * 2


def test_trl_gets_the_derived_length(tmp_path: Path) -> None:
    from rredcot.training.settings import TrainingSettings
    from rredcot.training.trl_config import grpo_config

    vllm = {"use_vllm": True, "device": "auto", "max_completion_length": 100}
    rrpo = TrainingSettings(method="rrpo", loss_type="grpo", **vllm)
    assert grpo_config(rrpo, tmp_path, 1).vllm_max_model_length == 1024 + 2 * 100
    grpo = TrainingSettings(max_prompt_tokens=50, **vllm)
    assert grpo_config(grpo, tmp_path, 1).vllm_max_model_length == 150
    assert grpo_config(TrainingSettings(), tmp_path, 1).vllm_max_model_length is None
