"""The memory planner on configs: the load-time refusal of a GPU run that does not fit one GPU,
and every shipped config fitting (rredcot.planning.memory_plan; the credit estimate against measured
peaks is tests/unit/test_memory.py and bench/check_memory_plan.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from snakemake.utils import update_config

from rredcot.config import validate_config
from rredcot.planning import memory_plan
from rredcot.planning.vllm_memory import QWEN3_4B_SHAPE
from rredcot.workflow.run_params import run_settings

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(REPO.glob("configs/*.yaml"))
PAPER = REPO / "configs" / "paper_qwen3_4b.yaml"
EIGHT_ROWS = {"training": {"per_device_batch_size": 8, "gradient_accumulation_steps": 4}}


def loaded(*overlays: Path | dict[str, Any]) -> dict[str, Any]:
    """config.yaml with `overlays` merged over it (as `--configfile`), validated with defaults."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    for overlay in overlays:
        top = overlay if isinstance(overlay, dict) else yaml.safe_load(overlay.read_text())
        update_config(config, top)
    return validate_config(config)


def runs_of(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every run's settings, as the workflow's `training_settings` builds them."""
    seed = config["training"]["seeds"][0]
    runs = {m: run_settings(config, m, seed, task="math") for m in config["training"]["methods"]}
    for variant in config["training"]["variants"]:
        runs[variant["name"]] = run_settings(
            config, variant["method"], seed, task="math", variant=variant
        )
    return runs


def test_a_micro_batch_too_large_for_the_gpu_is_refused_naming_the_key():
    # the paper config's former layout: 8 rows of 25k tokens a micro-batch (~109 GB estimated)
    config = loaded(PAPER, EIGHT_ROWS)
    errors = memory_plan.config_errors(config, runs_of(config))
    assert len(errors) == len(config["training"]["methods"])  # every run, one line each
    grpo = next(e for e in errors if e.startswith("run grpo: "))
    assert "config key 'training.per_device_batch_size'" in grpo
    assert "one training micro-batch" in grpo and "80 GB of one GPU" in grpo
    assert "'devices.memory_gb'" in grpo
    phases = memory_plan.rule_phases(config, "grpo", 80 * 10**9)
    assert f"estimated at {phases['peak'] / 1e9:.1f} GB" in grpo
    # the same layout on a GPU twice as large fits
    bigger = loaded(PAPER, EIGHT_ROWS, {"devices": {"memory_gb": 160}})
    assert memory_plan.config_errors(bigger, runs_of(bigger)) == []


def test_a_credit_too_large_for_the_gpu_names_its_budget():
    config = loaded(PAPER, {"estimator": {"rredcot": {"max_resident_tokens": None}}})
    errors = memory_plan.config_errors(config, runs_of(config))
    assert [e.partition(":")[0] for e in errors] == ["run rredcot"]
    assert "config key 'estimator.rredcot.max_resident_tokens'" in errors[0]
    assert "the RREDCoT credit" in errors[0]


def test_cpu_runs_and_unknown_models_are_not_checked():
    config = loaded(PAPER, EIGHT_ROWS)
    cpu = {name: {**values, "device": "cpu"} for name, values in runs_of(config).items()}
    assert memory_plan.config_errors(config, cpu) == []
    unknown = {**config, "model": {**config["model"], "name_or_path": "someone/else"}}
    assert memory_plan.config_errors(unknown, runs_of(config)) == []


def test_a_fetched_model_is_planned_from_its_config_json(tmp_path):
    config = loaded(PAPER, EIGHT_ROWS)
    runs = runs_of(config)
    local = tmp_path / "base"
    local.mkdir()
    small = {**QWEN3_4B_SHAPE, "num_hidden_layers": 4, "hidden_size": 256}
    small.update(intermediate_size=768, num_attention_heads=4, num_key_value_heads=2)
    small.update(head_dim=64, vocab_size=32_000)
    (local / "config.json").write_text(json.dumps(small))
    shape = memory_plan.shape_of(config, local)
    assert (shape.layers, shape.vocab, shape.hidden, shape.head_dim) == (4, 32_000, 256, 64)
    # a model of this size takes 8 rows of 25k tokens on 80 GB, where Qwen3-4B does not
    assert memory_plan.config_errors(config, runs, local) == []
    (local / "config.json").write_text(json.dumps({"model_type": "something_else"}))
    assert memory_plan.shape_of(config, local) is None


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_config_fits_by_the_planner(path: Path):
    overlays = [path]
    if path.stem == "rehearsal_vllm":  # an overlay on the rehearsal config
        overlays = [REPO / "configs" / "rehearsal.yaml", path]
    config = loaded(*overlays)
    runs = runs_of(config)
    assert memory_plan.config_errors(config, runs) == []
    gpu_runs = [v for v in runs.values() if v["device"] != "cpu"]
    if gpu_runs:  # a GPU config: its runs were checked, not skipped
        assert memory_plan.shape_of(config) is not None, config["model"]["name_or_path"]
        gpu = int(config["devices"]["memory_gb"] * 1e9)
        for name, values in runs.items():
            phases = memory_plan.run_phases(
                memory_plan.shape_of(config),
                values,
                gpu,
                accelerate=memory_plan.launcher_of(config, values["method"]),
                num_processes=config["training"]["num_processes"],
            )
            assert 0 < phases["peak"] <= gpu, name


def test_paper_layout_keeps_the_papers_batch():
    config = loaded(PAPER)
    tr = config["training"]
    assert tr["prompts_per_step"] * tr["num_generations"] == 32 * 8  # METHOD.md §6
    rows = tr["per_device_batch_size"] * tr["gradient_accumulation_steps"] * tr["num_processes"]
    assert rows == 32 * 8


def test_the_fused_head_and_padding_free_terms_by_hand():
    # 2 layers, hidden 32, vocab 259, 4 bytes; 2 rows of 10 tokens, 6 of them completion
    shape = memory_plan.ModelShape(2, 32, 64, 2, 1, 16, 259, True, 4)
    padded = memory_plan.training_phases(shape, 2, 10, 6)
    assert padded["layer_inputs"] == 2 * 2 * 10 * 32 * 4
    assert padded["layer"] == 2 * shape.layer_activation_bytes(20)  # and their gradients
    assert padded["mask"] == 2 * 10 * 10 * (1 + 4)
    tile = 4096 * 259 * 4  # one projection tile (vocabulary narrower than TRL's 32768)
    head = 12 * 32 * (4 + 4) + 12 * 4 * 8 + tile
    assert padded["head"] == head + 259 * 32 * 4  # and the head's float32 gradient
    free = memory_plan.training_phases(shape, 2, 10, 6, padding_free=True, head_trained=False)
    assert free["mask"] == 0 and free["head"] == head
    assert free["layer_inputs"] == padded["layer_inputs"]
    assert free["layer"] == 2 * shape.layer_activation_bytes(10)  # one row at a time
    unchecked = memory_plan.training_phases(shape, 2, 10, 6, checkpointing=False)
    assert unchecked["layer"] == 2 * padded["layer"]


def _one_gpu_config(**training: Any) -> dict[str, Any]:
    return {
        "model": {"name_or_path": "Qwen/Qwen2.5-0.5B-Instruct", "dtype": "bfloat16"},
        "training": {
            "num_processes": 1,
            "use_vllm": False,
            "per_device_batch_size": 1,
            "gradient_accumulation_steps": 1,
            "max_completion_length": 1024,
            "gradient_checkpointing": True,
            **training,
        },
        "estimator": {"rredcot": {}},
        "segmentation": {"num_segments": 4},
    }


def test_training_without_deepspeed_counts_float32_master_weights():
    """rredcot.training.precision trains a bf16 model in float32 without DeepSpeed: 4-byte
    weights and gradients, AdamW's two moments, a float32 residual stream under autocast."""
    config = _one_gpu_config()
    shape = memory_plan.shape_of(config)
    n, gpu = shape.parameters, 80 * 10**9
    phases = memory_plan.rule_phases(config, "grpo", gpu)
    assert (phases["weights"], phases["gradients"], phases["optimizer"]) == (4 * n, 4 * n, 8 * n)
    assert phases["gathered"] == 0
    bf16 = memory_plan.training_phases(shape, 1, 512 + 1024, 1024)
    assert phases["training"] > sum(bf16.values())  # the kept layer inputs are float32
    lora = memory_plan.rule_phases(_one_gpu_config(lora={"r": 8}), "grpo", gpu)
    assert lora["weights"] == 2 * n  # peft's float32 adapters on the bf16 base
    zero2 = {**config, "training": {**config["training"], "accelerate": "zero2"}}
    ds = memory_plan.rule_phases(zero2, "grpo", gpu)
    assert (ds["weights"], ds["gradients"], ds["optimizer"]) == (2 * n, 2 * n, 12 * n)


def test_the_plan_states_its_kernel_assumption_and_the_real_memory():
    run = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "memory_plan.py"), "--configfile", str(PAPER)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    assert "memory-efficient kernel" in run.stdout and memory_plan.SDPA_ASSUMPTION in run.stdout
    assert "85.9 GB real memory" in run.stdout
    assert memory_plan.device_bytes(80 * 10**9) == 80 * 2**30
