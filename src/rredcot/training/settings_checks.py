"""Rules that tie a run's training settings together, and the batch layout they imply: what
`TrainingSettings` and `batch_layout` apply in the job, and the config check at Snakemake load
time before any job. Torch- and TRL-free (`rredcot.training` loads its exports on first use), so
the config check imports it without the trainer."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rredcot.training.method_registry import RESET_METHODS, method_spec


def _batch_words(updates: int) -> str:
    """How the batch of one optimizer step is named in messages."""
    return "prompts_per_step × num_generations" + " / updates_per_generation" * (updates > 1)


def optimizer_batch(values: Mapping[str, Any]) -> int:
    """Responses per optimizer step: one generation's prompts_per_step × num_generations,
    split over `updates_per_generation` optimizer steps (TRL's steps_per_generation /
    gradient_accumulation_steps)."""
    total = values["prompts_per_step"] * values["num_generations"]
    return total // values.get("updates_per_generation", 1)


TRACKERS: tuple[str, ...] = ("wandb", "trackio", "tensorboard")
"""TRL's report_to names this workflow offers; each is also the module it needs installed (the
`tracking` extra of pyproject.toml and envs/rredcot-gpu.yaml pin them)."""


def tracker_error(report_to: Sequence[str], conda_env: str | Path | None = None) -> str | None:
    """Why `training.report_to` cannot report, or None: each tracker must be one of `TRACKERS`
    and importable here, or pinned in `conda_env` (the env file the jobs run in under
    `snakemake --use-conda`). Checked when Snakemake loads the config, so a missing tracker
    stops the workflow before any job waits in a queue, and again in the job (`RunOptions`)."""
    import importlib.util

    unknown = [t for t in report_to if t not in TRACKERS]
    if unknown:
        return f"training.report_to: {unknown} are not trackers; choose from {list(TRACKERS)}"
    pinned: set[str] = set()
    if conda_env is not None:
        text = Path(conda_env).read_text()
        pinned = {t for t in report_to if re.search(rf"^\s*-\s*{t}==", text, re.MULTILINE)}
    missing = [t for t in report_to if t not in pinned and importlib.util.find_spec(t) is None]
    if missing:
        where = f" nor pinned in {Path(conda_env).name}" if conda_env is not None else ""
        return (
            f"training.report_to: {missing} not installed here{where} (pip install -e "
            "'.[tracking]', or use envs/rredcot-gpu.yaml) or leave them out"
        )
    return None


def device_error(device: str, cuda_available: bool) -> str | None:
    """`training.device` auto (the GPU of each process) where torch sees no CUDA device: an error
    instead of a silent CPU run of a GPU config (a CPU run says `device: cpu`)."""
    if device == "auto" and not cuda_available:
        return (
            "training.device: 'auto' trains on the GPU of each process, but torch sees no CUDA "
            "device here (no GPU allocated, CUDA_VISIBLE_DEVICES empty, a CPU build of torch, or "
            "an NVIDIA driver older than the CUDA build needs: docs/cluster_and_gpu.md#install); "
            "set training.device to cpu to train on the CPU"
        )
    return None


WARMUP_IGNORED: tuple[str, ...] = ("constant",)
"""LR schedulers without a warm-up phase: TRL's `constant` ignores `warmup_steps`."""


def warmup_error(scheduler: str, warmup_ratio: float) -> str | None:
    """A warm-up ratio the scheduler would ignore (a setting that does nothing), or None."""
    if scheduler in WARMUP_IGNORED and warmup_ratio > 0:
        return (
            f"training.warmup_ratio: {warmup_ratio} asks for a warm-up, but training.lr_scheduler "
            f"{scheduler!r} has none (it ignores the ratio); set warmup_ratio to 0, or "
            "lr_scheduler to constant_with_warmup, linear or cosine"
        )
    return None


def settings_error(values: Mapping[str, Any]) -> str | None:
    """What is wrong with a run's settings taken together (`TrainingSettings` fields), or None."""
    method, n = values["method"], values["num_generations"]
    loss_type, kl_beta = values["loss_type"], values["kl_beta"]
    if method in RESET_METHODS and (loss_type != "grpo" or kl_beta != 0 or n % 2):
        return (
            f"training: method {method!r} needs loss_type 'grpo', kl_beta 0 and an even "
            f"num_generations; got {loss_type!r}, {kl_beta}, {n}"
        )
    if method_spec(method).analysis_only and values["task"] != "synthetic":
        return (
            f"training.methods: {method!r} reads the synthetic world's step checker, an oracle "
            f"no real dataset has; it cannot train on task {values['task']!r}"
        )
    off_policy = {
        k: values.get(k, d)
        for k, d in (("updates_per_generation", 1), ("num_iterations", 1))
        if values.get(k, d) != 1
    }
    if values.get("mask_truncated_completions"):
        off_policy["mask_truncated_completions"] = True
    if method in RESET_METHODS and off_policy:
        key = next(iter(off_policy))
        return (
            f"training.{key}: method {method!r} trains with the on-policy loss (one pass, one "
            f"update per generation, every token counted); got {off_policy}"
        )
    warmup = warmup_error(values["lr_scheduler"], values["warmup_ratio"])
    if warmup is not None:
        return warmup
    if values["use_vllm"] and values["device"] == "cpu":
        return (
            "training.use_vllm: vLLM samples on GPUs; set training.device to 'auto' (and "
            "install the `gpu` extra) or use_vllm to false"
        )
    updates = values.get("updates_per_generation", 1)
    if (values["prompts_per_step"] * n) % updates:
        return (
            f"training.updates_per_generation: {updates} must divide prompts_per_step × "
            f"num_generations = {values['prompts_per_step'] * n} (one generation's batch)"
        )
    # Whatever the number of processes, micro-batches must tile the step's batch.
    total = optimizer_batch(values)
    accumulation, per_device = (
        values["gradient_accumulation_steps"],
        values["per_device_batch_size"],
    )
    if per_device is None and total % accumulation:
        return (
            f"training.gradient_accumulation_steps: {accumulation} must divide "
            f"{_batch_words(updates)} = {total} (the batch of one optimizer step)"
        )
    if per_device is not None and total % (per_device * accumulation):
        return (
            f"training.per_device_batch_size: {per_device} × gradient_accumulation_steps "
            f"{accumulation} must divide {_batch_words(updates)} = {total} (the batch of one "
            "optimizer step)"
        )
    return None


def process_layout(
    values: Mapping[str, Any], num_processes: int, whole_groups: bool
) -> tuple[int, int]:
    """(per-device micro-batch, gradient-accumulation steps) for `num_processes` processes.

    One generation samples prompts_per_step × num_generations responses once, and
    `updates_per_generation` optimizer steps (default 1) share them: one optimizer step sees
    per_device × processes × accumulation of them (`optimizer_batch`), TRL's generation batch
    is that × updates_per_generation. A method that pools group statistics (`whole_groups`:
    all but grpo) needs each process's generation batch (per_device × accumulation ×
    updates_per_generation rows) to hold whole groups of num_generations.
    """
    n = values["num_generations"]
    updates = values.get("updates_per_generation", 1)
    total = optimizer_batch(values)
    accumulation, per_device = (
        values["gradient_accumulation_steps"],
        values["per_device_batch_size"],
    )
    if per_device is None:
        if total % (num_processes * accumulation):
            raise ValueError(
                f"training.per_device_batch_size: null splits {_batch_words(updates)} "
                f"= {total} over {num_processes} process(es) × gradient_accumulation_steps "
                f"{accumulation}, which does not divide it; set per_device_batch_size so that "
                f"per_device_batch_size × gradient_accumulation_steps × processes = {total}"
            )
        per_device = total // (num_processes * accumulation)
    elif per_device * accumulation * num_processes != total:
        raise ValueError(
            f"training.per_device_batch_size: {per_device} × gradient_accumulation_steps "
            f"{accumulation} × {num_processes} process(es) = "
            f"{per_device * accumulation * num_processes}, but one optimizer step takes "
            f"{_batch_words(updates)} = {total} responses"
        )
    local = per_device * accumulation * updates
    if num_processes > 1 and whole_groups and local % n:
        raise ValueError(
            f"training.per_device_batch_size: method {values['method']!r} pools each group's "
            f"statistics, so a group must sit on one process: per_device_batch_size × "
            f"gradient_accumulation_steps{' × updates_per_generation' * (updates > 1)} = "
            f"{local} must be a multiple of num_generations = {n}"
        )
    return per_device, accumulation
