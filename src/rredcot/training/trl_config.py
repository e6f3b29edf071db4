"""The TRL configuration of a run on this launch: `TrainingSettings` → `RREDCoTConfig`, the
public `GRPOConfig` a TRL script builds (`rredcot.trl`), so the workflow trains through the same
config and trainer as a user's script (`credit_arguments`: the run's credit settings as its fields).

The batch is laid out over the launch's processes (`batch_layout`), and launches that would
hang, split groups or overflow a GPU are refused before the trainer starts (`check_collectives`,
`check_vllm_memory`, the checks at the end of `grpo_config`).
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from transformers import PreTrainedModel

from rredcot.planning.vllm_memory import dims_from_config, kv_cache_error, training_length
from rredcot.training.method_registry import method_spec
from rredcot.training.methods import METHODS
from rredcot.training.settings import RunOptions, TrainingSettings
from rredcot.training.settings_checks import device_error, process_layout
from rredcot.training.trl_support import checkpointing_argument
from rredcot.trl import ESTIMATOR_EXTRAS, ESTIMATORS, RREDCoTConfig

log = logging.getLogger(__name__)


def launched_processes(device: str = "cpu") -> int:
    """Processes of this launch as accelerate sees them: N under `accelerate launch
    --num_processes N` (or torchrun), 1 for a plain `python -m` run.

    accelerate's shared state is set up here with the same `cpu` flag TRL's config uses;
    `TrainingArguments` resets and rebuilds it right after, as it does for any script that
    touched `PartialState` first.
    """
    from accelerate import PartialState

    return PartialState(cpu=device == "cpu").num_processes


def batch_layout(settings: TrainingSettings, num_processes: int) -> tuple[int, int]:
    """(per-device micro-batch, gradient-accumulation steps) for `num_processes` processes
    (`process_layout`, with whether the method pools group statistics)."""
    whole_groups = METHODS[settings.method].needs_whole_groups
    return process_layout(asdict(settings), num_processes, whole_groups)


def check_collectives(settings: TrainingSettings, num_processes: int) -> None:
    """Refuse launches where RRPO/SRPO/MC would hang or mix up rows rather than fail.

    Their rollouts call `trainer.sample` with data-dependent batch sizes (RRPO/SRPO also a
    data-dependent number of times; MC once per step, with as many states as its traces have);
    vLLM in server mode (prompts gathered over all processes, the answers sliced back in equal
    shares) and colocated vLLM with tensor parallelism (gathered over the TP group) need every
    process to make the same calls with the same sizes. (ZeRO-3 is refused by the trainer for
    RRPO/SRPO.)
    """
    if not method_spec(settings.method).own_rollouts or num_processes == 1:
        return
    if not settings.use_vllm:
        return
    if settings.vllm_mode == "server" or settings.vllm_tensor_parallel_size > 1:
        raise ValueError(
            f"training.vllm_mode: method {settings.method!r} samples different numbers of "
            f"rollouts on each process, so with {num_processes} processes it needs vllm_mode "
            f"'colocate' with vllm_tensor_parallel_size 1 (got {settings.vllm_mode!r}, "
            f"{settings.vllm_tensor_parallel_size}), or use_vllm false"
        )


def run_name(settings: TrainingSettings) -> str:
    """The name trackers show: method and seed."""
    return f"{settings.method}-seed{settings.seed}"


def credit_arguments(settings: TrainingSettings) -> dict[str, Any]:
    """`RREDCoTConfig`'s credit fields for the run's settings, every block whole (so no default
    of the public config's stands in for the run's) and the rows as `training_rows` writes them:
    the reference text in `reference`, y* in `answer`."""
    estimator = {}
    if settings.method in ESTIMATORS:
        estimator = asdict(getattr(settings, ESTIMATORS[settings.method][1]))
        for key, attribute in ESTIMATOR_EXTRAS.get(settings.method, {}).items():
            estimator[key] = getattr(settings, attribute)
    misconception = settings.misconception
    return {
        "credit": settings.method,
        "segmentation": asdict(settings.segmentation),
        "estimator": estimator,
        "transform": asdict(settings.credit),
        "task": settings.task,
        "reference_column": "reference",
        "answer_column": "answer",
        "reference": settings.reference,
        "misconception": asdict(misconception) if misconception is not None else None,
        "padding_free": settings.padding_free,
    }


def grpo_config(
    settings: TrainingSettings,
    output_dir: str | Path,
    num_processes: int | None = None,
    options: RunOptions | None = None,
) -> RREDCoTConfig:
    """TRL's config: a generation's batch split into `updates_per_generation` optimizer steps
    (one by default), reporting as `options` say (none by default); CPU and HF generate by
    default, GPUs (`device` auto, under `accelerate launch` for several), bf16, activation
    checkpointing and vLLM rollouts as the settings say.

    `num_processes` defaults to this launch's (`launched_processes`); TRL's own count must agree.
    """
    options = RunOptions() if options is None else options
    if num_processes is None:
        num_processes = launched_processes(settings.device)
    per_device, accumulation = batch_layout(settings, num_processes)
    check_collectives(settings, num_processes)
    resets = method_spec(settings.method).resets
    config = RREDCoTConfig(
        **credit_arguments(settings),
        output_dir=str(output_dir),
        max_steps=settings.max_steps,
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accumulation,
        steps_per_generation=accumulation * settings.updates_per_generation,
        num_iterations=settings.num_iterations,
        mask_truncated_completions=settings.mask_truncated_completions,
        num_generations=settings.num_generations,
        max_completion_length=settings.max_completion_length,
        temperature=settings.temperature,
        top_p=settings.top_p,
        learning_rate=settings.learning_rate,
        lr_scheduler_type=settings.lr_scheduler,
        warmup_steps=float(settings.warmup_ratio),  # a float in [0, 1) is a ratio of max_steps
        weight_decay=settings.weight_decay,
        max_grad_norm=settings.max_grad_norm,
        beta=settings.kl_beta,
        epsilon=settings.epsilon,
        loss_type=settings.loss_type,
        scale_rewards=settings.scale_rewards,
        seed=settings.seed,
        data_seed=settings.seed,
        logging_steps=1,
        save_strategy="steps",
        save_steps=settings.save_steps,
        save_total_limit=settings.save_total_limit,
        **options.trainer_args(run_name(settings)),
        use_cpu=settings.device == "cpu",
        bf16=settings.bf16,
        fp16=False,
        # TRL defaults to on; off it costs no time and the tiny model needs no memory saving
        **checkpointing_argument(settings.gradient_checkpointing),
        use_vllm=settings.use_vllm,
        vllm_mode=settings.vllm_mode,
        vllm_gpu_memory_utilization=settings.vllm_gpu_memory_utilization,
        vllm_tensor_parallel_size=settings.vllm_tensor_parallel_size,
        vllm_server_host=settings.vllm_server_host,
        vllm_server_port=settings.vllm_server_port,
        vllm_max_model_length=training_length(asdict(settings)) if settings.use_vllm else None,
        # RRPO/SRPO train on-policy without a ratio (their rollout returns no logprobs); the other
        # methods keep TRL's correction for the vLLM/training logprob mismatch.
        vllm_importance_sampling_correction=not (resets and settings.use_vllm),
        log_completions=False,
        dataloader_num_workers=0,
        disable_tqdm=False,
    )
    if config.world_size != num_processes:
        raise ValueError(
            f"training: the batch was laid out for {num_processes} process(es), but this launch "
            f"has {config.world_size} (accelerate launch --num_processes)"
        )
    if config.n_gpu > 1:
        raise ValueError(
            f"training.device: this single process sees {config.n_gpu} GPUs, which the HF Trainer "
            "would split with DataParallel (breaking the group layout); launch one process per "
            "GPU with `accelerate launch` or expose one GPU (CUDA_VISIBLE_DEVICES)"
        )
    precision = "bf16" if settings.bf16 else "no"
    if config.mixed_precision != precision:
        raise ValueError(
            f"training.bf16: is {settings.bf16}, but the launch asks for mixed precision "
            f"{config.mixed_precision!r} (ACCELERATE_MIXED_PRECISION, set by the accelerate "
            f"config); make them agree (accelerate launch --mixed_precision {precision})"
        )
    return config


def check_device(settings: TrainingSettings, allow_cpu: bool = False) -> None:
    """Refuse `training.device` auto where torch sees no CUDA device (`device_error`): a GPU
    config would otherwise train on the CPU without a word. Checked in the job, before the
    model loads: the machine that parses the config (a login node) need not have a GPU.
    `allow_cpu` (`training.allow_cpu`, the CPU rehearsal): a warning instead."""
    import torch

    error = device_error(settings.device, torch.cuda.is_available())
    if error is not None and allow_cpu:
        log.warning("training.allow_cpu: %s", error.split(";")[0])
    elif error is not None:
        raise ValueError(error)


def check_vllm_memory(model: PreTrainedModel, settings: TrainingSettings) -> None:
    """Refuse, before the engine starts, a colocated vLLM context whose one sequence does not
    fit the share of this GPU (the Snakefile checked the config's `devices.memory_gb`; this is
    the device's own memory and the loaded model's shape)."""
    import torch

    if not (settings.use_vllm and settings.vllm_mode == "colocate" and torch.cuda.is_available()):
        return
    memory_gb = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / 1e9
    dims = dims_from_config(model.config.to_dict(), "loaded model's config")
    error = kv_cache_error(
        dims,
        training_length(asdict(settings)),
        settings.vllm_gpu_memory_utilization,
        memory_gb,
        "bfloat16" if settings.bf16 else str(model.dtype).removeprefix("torch."),
        ("training.vllm_max_model_length", "training.vllm_gpu_memory_utilization"),
        "this device's memory",
    )
    if error is not None:
        raise ValueError(error)
