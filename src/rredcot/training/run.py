"""Train one (method, seed) from a base checkpoint: settings, data, checkpoints, metrics.

Setup only; what a method does differently lives in `rredcot.training.methods`. A run writes
into `out`:

    checkpoint-N/        every `save_steps` steps (and `save_minutes`), the last
                         `save_total_limit` kept; a restarted run resumes from the newest complete
                         one (every file whole, trainer_state.json included:
                         `unreadable_checkpoint`); with `lora`, the adapter weights only
    run_record.json      what the run was started with (`run_record`); a directory with another
                         record is moved aside to `<out>.stale-N` (its checkpoints deleted)
    metrics.csv          one row per optimizer step (`CSV_COLUMNS` + the method's metrics)
    final/               the trained policy and tokenizer (save_pretrained); with `lora`, the
                         base merged with the adapter (loads as any checkpoint) and the
                         adapter alone in final/adapter/
    train_summary.json   settings, steps, seconds, where it resumed from

Beside it, `<out>.lock` is held (`fcntl.flock`) for the run's life, so a second trainer on
the same directory stops at once (`RunDirectoryLocked`, naming the holder's host and pid).

A NaN or inf loss stops the run before the optimizer step (`NonFiniteLossError`); the newest
checkpoint then is the last good one and `final/` is not written. SIGTERM or SIGUSR1 (a
scheduler's time limit) finishes the current optimizer step, saves a checkpoint at it and
raises `TrainingInterrupted` (the step script exits with `RETRY_EXIT_CODE`); the rerun resumes
there and ends with the weights of an uninterrupted run.
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import importlib.util
import json
import logging
import math
import os
import shutil
import signal
import socket
import threading
import time
import zipfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, fields
from numbers import Integral, Real
from pathlib import Path
from typing import Any, TextIO

import polars as pl
import torch
from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOConfig
from trl.distributed import DistributedBackend

from rredcot.config import check_choices
from rredcot.credit.advantages import REWARD_SCALES, CreditConfig
from rredcot.credit.mc import MCConfig
from rredcot.credit.rredcot import RREDCoTConfig
from rredcot.machine import machine_info
from rredcot.method_registry import method_spec
from rredcot.segmentation import SegmentationConfig
from rredcot.tasks import get_task
from rredcot.tasks.base import Task
from rredcot.training.curves import CurveSettings, LearningCurve
from rredcot.training.lora import LoraSettings, save_final
from rredcot.training.methods import METHODS, Method, ResetConfig, build_method
from rredcot.training.trainer import CreditGRPOTrainer, correctness_reward
from rredcot.training_rules import process_layout, settings_error
from rredcot.vllm_memory import dims_from_config, kv_cache_error, training_length

log = logging.getLogger(__name__)

LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dr_grpo", "dapo")
LR_SCHEDULERS: tuple[str, ...] = ("constant", "constant_with_warmup", "linear", "cosine")
DEVICES: tuple[str, ...] = ("cpu", "auto")
VLLM_MODES: tuple[str, ...] = ("colocate", "server")
TRAINING_REFERENCES: tuple[str, ...] = ("configured", "own_path")

# metrics.csv column -> key in the trainer's logs (TRL's names, or ours where they match).
CSV_COLUMNS: dict[str, str] = {
    "reward/mean": "reward",
    "reward/std": "reward_std",
    "reward/accuracy": "reward/accuracy",
    "reward/frac_zero_std": "frac_reward_zero_std",
    "loss/policy": "loss",
    "loss/grad_norm": "grad_norm",
    "loss/learning_rate": "learning_rate",
    "loss/clip_ratio": "clip_ratio/region_mean",
    "policy/entropy": "entropy",
    "credit/advantage_mean": "credit/advantage_mean",
    "credit/advantage_std": "credit/advantage_std",
    "credit/advantage_min": "credit/advantage_min",
    "credit/advantage_max": "credit/advantage_max",
    "credit/forward_tokens": "credit/forward_tokens",
    "credit/seconds": "credit/seconds",
    "tokens/completion_mean": "completions/mean_length",
    "tokens/clipped_ratio": "completions/clipped_ratio",
    "tokens/seen": "num_tokens",
    "time/step_seconds": "step_time",
}


def _positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise ValueError(f"training.{name}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


def _finite(name: str, value: object, low: float, high: float = math.inf) -> float:
    ok = isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not low <= value <= high:
        raise ValueError(f"training.{name}: expected a number in [{low}, {high}], got {value!r}")
    return float(value)


@dataclass(frozen=True)
class TrainingSettings:
    """One RL run (config key `training` plus the method and seed); every field has a default.

    Effective batch per optimizer step: `prompts_per_step` problems × `num_generations`
    responses, generated once and used for one gradient step (on-policy, as GRPO's default),
    however it is split over processes and micro-batches (`batch_layout`). The defaults are the
    embedded CPU run; the GPU fields (device … vllm_server_port) change where and how, not what.
    """

    method: str = "grpo"
    """One of `METHODS` (`rredcot.method_registry.METHOD_SPECS`)."""
    seed: int = 0
    """Seed of data order, sampling and the MC rollouts."""
    task: str = "synthetic"
    """Task format (prompt, grading) by name: synthetic | math."""
    max_steps: int = 100
    """Optimizer steps."""
    prompts_per_step: int = 4
    """Distinct problems per step (G groups)."""
    num_generations: int = 8
    """n: responses per problem (the group)."""
    max_completion_length: int = 128
    """New-token budget per response (the longest synthetic solution is ~90 byte tokens)."""
    temperature: float = 1.0
    """Rollout temperature (1.0: sample from π itself)."""
    top_p: float = 1.0
    """Rollout nucleus mass in (0, 1]."""
    learning_rate: float = 1e-4
    """AdamW learning rate."""
    lr_scheduler: str = "constant"
    """One of `LR_SCHEDULERS`."""
    warmup_ratio: float = 0.0
    """Share of max_steps with linear warm-up, in [0, 1); above 0 it needs a scheduler with a
    warm-up (`constant` has none: refused, `training_rules.warmup_error`)."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip; 0 disables it."""
    kl_beta: float = 0.0
    """KL coefficient to the base policy (TRL's `beta`; 0 loads no reference model)."""
    epsilon: float = 0.2
    """PPO clip range ε."""
    loss_type: str = "dapo"
    """TRL loss aggregation, one of `LOSS_TYPES` (dapo: token-level, TRL's default)."""
    scale_rewards: str = "group"
    """Outcome advantage std: group | batch | none (TRL's `scale_rewards`)."""
    save_steps: int = 25
    """Write a checkpoint every this many steps."""
    save_total_limit: int = 2
    """Checkpoints kept (the newest)."""
    max_problems: int | None = None
    """Train on the first N problems of the train table (None: all)."""
    reference_column: str = "solution"
    """Column holding each problem's reference solution U* (synthetic world: `solution`)."""
    reference: str = "configured"
    """RREDCoT's reference: `configured` (the problem's, from `reference_column`) or
    `own_path` (the answer key written on each response's own solution path: an oracle that
    needs the synthetic world's `program` column; it shows how much of a gain needs the key)."""
    mc_batch_size: int = 64
    """MC method: rollout rows per generate call."""
    device: str = "cpu"
    """Where the policy trains: cpu (the embedded default) | auto (accelerate's device: the GPU
    of each process under `accelerate launch`)."""
    bf16: bool = False
    """bf16 mixed precision (TRL's `bf16`); must match the launcher's mixed precision."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (TRL's `activation_checkpointing`, on by default
    in TRL): less memory for long responses, about 20% more time per step."""
    per_device_batch_size: int | None = None
    """Responses per process per forward/backward micro-batch; None: prompts_per_step ×
    num_generations / (processes × gradient_accumulation_steps), i.e. the whole batch on one
    process (as on the CPU)."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step; per_device_batch_size × this × processes must equal
    prompts_per_step × num_generations (one generation batch per optimizer step)."""
    use_vllm: bool = False
    """Sample rollouts with vLLM through TRL (device auto, the `gpu` extra installed)."""
    vllm_mode: str = "colocate"
    """One of `VLLM_MODES`: colocate (an engine inside each training process) | server (a
    separate `trl vllm-serve`)."""
    vllm_gpu_memory_utilization: float = 0.3
    """colocate: share of each GPU's memory vLLM reserves, in (0, 1]."""
    vllm_tensor_parallel_size: int = 1
    """colocate: GPUs one vLLM engine spans (must divide the number of processes)."""
    vllm_server_host: str = "0.0.0.0"
    """server: host of the vLLM server."""
    vllm_server_port: int = 8000
    """server: port of the vLLM server."""
    updates_per_generation: int = 1
    """Optimizer steps one generation's batch is split into (TRL's steps_per_generation /
    gradient_accumulation_steps); max_steps counts optimizer steps."""
    num_iterations: int = 1
    """Passes over each generation's batch (TRL's num_iterations)."""
    mask_truncated_completions: bool = False
    """A response cut at max_completion_length gets no loss (TRL's)."""
    padding_free: bool = False
    """Score each training row on its real tokens only (packed under flash-attention, one row
    at a time under SDPA: `rredcot.training.padding_free`), with no (rows, 1, L, L) mask; the
    same loss as TRL's padded batch to float tolerance. False: TRL's padded batch."""
    max_prompt_tokens: int = 1024
    """Longest prompt the vLLM context is sized for (`vllm_max_model_length` None)."""
    vllm_max_model_length: int | None = None
    """vLLM context (TRL's `vllm_max_model_length`); None: derived from the lengths
    (`rredcot.vllm_memory.training_length`), so vLLM never sizes its cache for the model's whole
    context."""
    segmentation: SegmentationConfig = field(default_factory=SegmentationConfig)
    """Segmentation of responses (METHOD.md §2); rredcot and mc."""
    credit: CreditConfig = field(default_factory=CreditConfig)
    """How segment signals become token advantages (§4); rredcot and mc."""
    rredcot: RREDCoTConfig = field(default_factory=RREDCoTConfig)
    """RREDCoT estimator (§3)."""
    mc: MCConfig = field(default_factory=MCConfig)
    """MC rollouts (§5)."""
    resets: ResetConfig = field(default_factory=ResetConfig)
    """RRPO/SRPO group sampling and self-localization (§6); they need loss_type grpo, kl_beta 0
    and an even num_generations (split 1×(n/2))."""
    lora: LoraSettings | None = None
    """Train LoRA adapters instead of all weights (the official RRPO/SRPO setup, §6); None:
    full fine-tuning."""

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(
                f"training.method: {self.method!r} is not allowed; choose one of {list(METHODS)}"
            )
        for name in ("max_steps", "prompts_per_step", "max_completion_length", "save_steps"):
            object.__setattr__(self, name, _positive_int(name, getattr(self, name)))
        object.__setattr__(self, "seed", _positive_int("seed", self.seed, 0))
        object.__setattr__(
            self, "mc_batch_size", _positive_int("mc_batch_size", self.mc_batch_size)
        )
        object.__setattr__(
            self, "num_generations", _positive_int("num_generations", self.num_generations, 2)
        )
        object.__setattr__(
            self, "save_total_limit", _positive_int("save_total_limit", self.save_total_limit)
        )
        if self.max_problems is not None:
            object.__setattr__(
                self, "max_problems", _positive_int("max_problems", self.max_problems)
            )
        for name in ("gradient_accumulation_steps", "vllm_tensor_parallel_size"):
            object.__setattr__(self, name, _positive_int(name, getattr(self, name)))
        for name in ("updates_per_generation", "num_iterations"):
            object.__setattr__(self, name, _positive_int(name, getattr(self, name)))
        for name in ("max_prompt_tokens", "vllm_max_model_length"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _positive_int(name, getattr(self, name)))
        if self.per_device_batch_size is not None:
            object.__setattr__(
                self,
                "per_device_batch_size",
                _positive_int("per_device_batch_size", self.per_device_batch_size),
            )
        for name in (
            "bf16",
            "gradient_checkpointing",
            "use_vllm",
            "mask_truncated_completions",
            "padding_free",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"training.{name}: expected true or false, got {getattr(self, name)!r}"
                )
        port = self.vllm_server_port
        if isinstance(port, bool) or not isinstance(port, Integral) or not 1 <= port <= 65535:
            raise ValueError(
                f"training.vllm_server_port: expected a port in [1, 65535], got {port!r}"
            )
        if not isinstance(self.vllm_server_host, str) or not self.vllm_server_host.strip():
            raise ValueError(
                f"training.vllm_server_host: expected a host name, got {self.vllm_server_host!r}"
            )
        _finite("vllm_gpu_memory_utilization", self.vllm_gpu_memory_utilization, 1e-6, 1.0)
        _finite("temperature", self.temperature, 1e-6)
        _finite("top_p", self.top_p, 1e-6, 1.0)
        if _finite("learning_rate", self.learning_rate, 0.0) == 0:
            raise ValueError("training.learning_rate: expected a number > 0, got 0")
        _finite("warmup_ratio", self.warmup_ratio, 0.0, 0.999)
        for name in ("weight_decay", "max_grad_norm", "kl_beta", "epsilon"):
            _finite(name, getattr(self, name), 0.0)
        choices = {
            "reference": TRAINING_REFERENCES,
            "loss_type": LOSS_TYPES,
            "scale_rewards": REWARD_SCALES,
            "lr_scheduler": LR_SCHEDULERS,
            "device": DEVICES,
            "vllm_mode": VLLM_MODES,
        }
        check_choices("training", self, choices)
        error = settings_error({f.name: getattr(self, f.name) for f in fields(self)})
        if error is not None:
            raise ValueError(error)

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any]) -> TrainingSettings:
        """From `--params` JSON; nested blocks are mappings, unknown keys are errors."""
        allowed = [f.name for f in fields(cls)]
        unknown = sorted(set(mapping) - set(allowed))
        if unknown:
            raise ValueError(f"unknown training key(s) {unknown}; allowed: {allowed}")
        values = dict(mapping)
        blocks = {
            "segmentation": SegmentationConfig,
            "credit": CreditConfig,
            "rredcot": RREDCoTConfig,
            "mc": MCConfig,
            "resets": ResetConfig,
            "lora": LoraSettings,
        }
        for name, block in blocks.items():
            if name == "lora" and values.get(name) is None:
                continue
            if name in values and not isinstance(values[name], block):
                if not isinstance(values[name], Mapping):
                    raise ValueError(f"training.{name}: expected a mapping, got {values[name]!r}")
                values[name] = block.from_dict(values[name])
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready settings (for the run summary)."""
        return json.loads(json.dumps(asdict(self), default=list))


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


TRACKERS: tuple[str, ...] = ("wandb", "trackio", "tensorboard")
"""TRL's report_to names this workflow offers; each is also the module it needs installed."""


@dataclass(frozen=True)
class RunOptions:
    """How a run is launched and watched, not what it computes (config keys
    `training.ddp_timeout` and `training.report_to`): left out of the run record, so a run
    resumes whatever they are."""

    ddp_timeout: int = 1800
    """Seconds a rank waits at a collective (TRL's `ddp_timeout`)."""
    report_to: tuple[str, ...] = ()
    """Experiment trackers (`TRACKERS`); empty: none."""

    def __post_init__(self) -> None:
        _positive_int("ddp_timeout", self.ddp_timeout)
        object.__setattr__(self, "report_to", tuple(self.report_to))
        unknown = [t for t in self.report_to if t not in TRACKERS]
        if unknown:
            raise ValueError(
                f"training.report_to: {unknown} are not trackers; choose from {list(TRACKERS)}"
            )
        missing = [t for t in self.report_to if importlib.util.find_spec(t) is None]
        if missing:
            raise ValueError(
                f"training.report_to: {missing} not installed here (pip install {' '.join(missing)}"
                ") or leave them out"
            )

    def trainer_args(self, run_name: str) -> dict[str, Any]:
        """The TrainingArguments these options set."""
        return {
            "ddp_timeout": self.ddp_timeout,
            "report_to": list(self.report_to) or "none",
            "run_name": run_name,
        }


def run_name(settings: TrainingSettings) -> str:
    """The name trackers show: method and seed."""
    return f"{settings.method}-seed{settings.seed}"


def grpo_config(
    settings: TrainingSettings,
    output_dir: str | Path,
    num_processes: int | None = None,
    options: RunOptions | None = None,
) -> GRPOConfig:
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
    config = GRPOConfig(
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
        activation_checkpointing=settings.gradient_checkpointing,
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


def training_rows(
    table: pl.DataFrame, task: Task, tokenizer: PreTrainedTokenizerBase, settings: TrainingSettings
) -> tuple[Dataset, list[str]]:
    """Dataset rows `prompt` (task.build_prompt), `problem`, `answer`, `reference`, `problem_id`.

    A problem without a reference (null or blank in `reference_column`, as the reference-solution
    step leaves problems it could not verify) is left out for every method, so all methods train
    on the same problems; their ids are returned and logged. Other blank fields are errors.
    """
    ref = settings.reference_column
    need = ["id", "problem", "answer", ref]
    missing = [c for c in need if c not in table.columns]
    if missing:
        raise ValueError(f"train table: lacks column(s) {missing}; has {table.columns}")
    if settings.max_problems is not None:
        table = table.head(settings.max_problems)
    oracle = method_spec(settings.method).analysis_only
    keyed = oracle or settings.reference == "own_path"
    if keyed and "program" not in table.columns:
        why = (
            f"training.method: {settings.method} reads the world's step checker"
            if oracle
            else "training.reference: own_path writes the key on each response's path"
        )
        raise ValueError(
            f"{why} and needs the synthetic world's `program` column; the train table has "
            f"{table.columns}"
        )
    rows, without_reference = [], []
    for row in table.iter_rows(named=True):
        for key in need[:3]:
            if not isinstance(row[key], str) or not row[key].strip():
                raise ValueError(
                    f"train table row {row['id']!r}: {key!r} must be a non-empty string"
                )
        if not isinstance(row[ref], str) or not row[ref].strip():
            without_reference.append(row["id"])
            continue
        rows.append(
            {
                "prompt": task.build_prompt(row["problem"], tokenizer),
                "problem": row["problem"],
                "answer": row["answer"],
                "reference": row[ref],
                "problem_id": row["id"],
                **({"program": row["program"]} if keyed else {}),
            }
        )
    if without_reference:
        log.warning(
            "%d problem(s) have no reference in %r and are left out: %s",
            len(without_reference),
            ref,
            without_reference[:20],
        )
    if not rows:
        raise ValueError(f"train table: no problem with a reference in {ref!r} to train on")
    return Dataset.from_list(rows), without_reference


# --------------------------------------------------------------------------- checkpoints


def _step_of(path: Path) -> int:
    return int(path.name.removeprefix(f"{PREFIX_CHECKPOINT_DIR}-"))


def complete_checkpoints(out: str | Path) -> list[Path]:
    """checkpoint-N directories whose trainer state was written (the last file saved), by N."""
    out = Path(out)
    if not out.is_dir():
        return []
    found = [
        p
        for p in out.glob(f"{PREFIX_CHECKPOINT_DIR}-*")
        if p.is_dir() and p.name.removeprefix(f"{PREFIX_CHECKPOINT_DIR}-").isdigit()
    ]
    return sorted((p for p in found if (p / "trainer_state.json").is_file()), key=_step_of)


def unreadable_checkpoint(checkpoint: Path) -> str | None:
    """Why a checkpoint cannot be loaded (the file and what is wrong), or None.

    Cheap checks that catch a file cut short (a kill or a full disk while saving): a
    safetensors file must be as long as its header says; a torch zip file (optimizer,
    scheduler, RNG state) must have its central directory, written last, at its end; a JSON
    file (trainer_state.json, the configs) must parse, and the trainer state must be an object
    whose `global_step` is the directory's step (it is the file HF writes last)."""
    for f in sorted(checkpoint.rglob("*")):
        if not f.is_file():
            continue
        try:
            if f.suffix == ".json":
                state = json.loads(f.read_text())
                if f.name == "trainer_state.json" and f.parent == checkpoint:
                    step = state.get("global_step") if isinstance(state, dict) else None
                    if step != _step_of(checkpoint):
                        return f"{f}: global_step {step!r}, not the checkpoint's {checkpoint.name}"
            elif f.suffix == ".safetensors":
                size = f.stat().st_size
                with f.open("rb") as fh:
                    n = int.from_bytes(fh.read(8), "little")
                    header = json.loads(fh.read(n)) if 8 + n <= size else None
                if header is None:
                    return f"{f}: {size} bytes, shorter than its header"
                ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
                if size != 8 + n + max(ends, default=0):
                    return f"{f}: {size} bytes, its header says {8 + n + max(ends, default=0)}"
            elif f.suffix in (".pt", ".pth", ".bin") and not zipfile.is_zipfile(f):
                return f"{f}: not a readable torch file (no zip directory at its end)"
        except (OSError, ValueError, KeyError, TypeError) as err:  # JSONDecodeError: ValueError
            return f"{f}: {type(err).__name__}: {err}"
    return None


def resume_point(out: str | Path, remove_incomplete: bool = True) -> Path | None:
    """The newest complete checkpoint whose files are readable (`unreadable_checkpoint`; else a
    warning names the file); newer ones, incomplete (killed while saving) or unreadable, are
    removed (by one process only when several run: `remove_incomplete`)."""
    complete = complete_checkpoints(out)
    while complete and (why := unreadable_checkpoint(complete[-1])) is not None:
        log.warning("checkpoint %s is unreadable (%s); trying the one before", complete[-1], why)
        complete.pop()
    last = complete[-1] if complete else None
    newest = _step_of(last) if last else -1
    if not remove_incomplete:
        return last
    for p in Path(out).glob(f"{PREFIX_CHECKPOINT_DIR}-*") if Path(out).is_dir() else []:
        name = p.name.removeprefix(f"{PREFIX_CHECKPOINT_DIR}-")
        if p.is_dir() and name.isdigit() and int(name) > newest:
            log.warning("removing incomplete or unreadable checkpoint %s", p)
            shutil.rmtree(p)
    return last


# --------------------------------------------------------------------------- one trainer per run


class RunDirectoryLocked(RuntimeError):
    """Another trainer holds the run directory's lock (`run_dir_lock`)."""


def lock_path(out: str | Path) -> Path:
    """The lock file of run directory `out`: beside it, so it stays put when `claim_run_dir`
    moves the directory aside."""
    out = Path(out)
    return out.with_name(f"{out.name}.lock")


@contextmanager
def run_dir_lock(out: str | Path) -> Iterator[TextIO]:
    """Hold an exclusive `fcntl.flock` on `lock_path(out)` while the block runs.

    The kernel releases it when the holder dies (SIGKILL included), so no stale lock outlives a
    job, and an orphaned job that is still running (after `snakemake --unlock`) keeps it: a
    second trainer raises `RunDirectoryLocked` at once, naming the holder's host and pid (written
    into the file). Across nodes it needs a file system whose flock is cluster-wide (NFSv4,
    Lustre mounted with `-o flock`, GPFS).
    """
    path = lock_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = path.open("a+")
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "a process that has not written its name yet"
            raise RunDirectoryLocked(
                f"run directory {out} is in use by another trainer ({holder}; lock {path}); "
                "stop that job or wait for it to end, then rerun"
            ) from None
        fh.truncate(0)
        fh.write(f"host {socket.gethostname()} pid {os.getpid()}\n")
        fh.flush()
        yield fh
    finally:
        fh.close()  # closing the last descriptor releases the lock


# --------------------------------------------------------------------------- stopping on a signal

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGUSR1)
"""Signals that stop training at the end of the current optimizer step, after a checkpoint:
SLURM sends SIGTERM at the time limit (SIGKILL follows after its KillWait) and any signal
earlier with `sbatch --signal`."""
RETRY_EXIT_CODE = 75
"""The step script's exit status after such a stop (EX_TEMPFAIL: try again); like any nonzero
status it makes Snakemake retry the job (`--retries`), which resumes from the checkpoint."""


class TrainingInterrupted(RuntimeError):
    """Training stopped on a signal after saving a checkpoint at the current step."""

    def __init__(self, signal_name: str, step: int, checkpoint: Path) -> None:
        super().__init__(
            f"{signal_name} received: stopped after optimizer step {step} with checkpoint "
            f"{checkpoint}; rerun to resume from it"
        )
        self.signal_name, self.step, self.checkpoint = signal_name, step, checkpoint


class CheckpointGuard(TrainerCallback):
    """Checkpoints a cluster needs besides `save_steps`: one every `save_minutes` of wall time
    (None: none), and one at the current step when a `STOP_SIGNALS` signal arrives, after which
    training stops.

    The signal handler only records the signal; the step under way finishes (a half-done step
    cannot be saved) and `on_step_end` asks the HF loop to save and stop. On several processes
    each one's decision is combined (max over processes, one small all-reduce per step), so all
    save and stop at the same step even if the signal or the clock reaches them apart.
    """

    def __init__(self, save_minutes: float | None = None) -> None:
        if save_minutes is not None and not (
            isinstance(save_minutes, Real) and math.isfinite(save_minutes) and save_minutes > 0
        ):
            raise ValueError(
                f"training.save_minutes: expected a positive number or null, got {save_minutes!r}"
            )
        self.save_seconds = None if save_minutes is None else 60.0 * save_minutes
        self.received: signal.Signals | None = None
        self.stopped_at: int | None = None
        self.accelerator: Any = None  # set by train_policy once the trainer exists
        self._last_save = time.monotonic()
        self._previous: dict[signal.Signals, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signal.Signals(signum)

    @contextmanager
    def installed(self) -> Iterator[CheckpointGuard]:
        """The signal handlers, in place while the block runs (main thread only: Python
        delivers signals there)."""
        if threading.current_thread() is not threading.main_thread():
            log.warning("not the main thread: SIGTERM/SIGUSR1 will not save a checkpoint")
            yield self
            return
        self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        try:
            yield self
        finally:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)

    def _agreed(self, stop: bool, due: bool) -> tuple[bool, bool]:
        accelerator = self.accelerator
        if accelerator is None or accelerator.num_processes == 1:
            return stop, due
        flags = torch.tensor([float(stop), float(due)], device=accelerator.device)
        flags = accelerator.reduce(flags, reduction="max")
        return bool(flags[0]), bool(flags[1])

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201 (HF's signature)
        due = (
            self.save_seconds is not None
            and time.monotonic() - self._last_save >= self.save_seconds
        )
        stop, due = self._agreed(self.received is not None, due)
        if due:
            log.info("step %d: %s minutes since the last checkpoint: saving", state.global_step,
                     self.save_seconds / 60)  # fmt: skip
        if stop:
            why = self.received.name if self.received is not None else "another process's signal"
            log.warning(
                "%s received: step %d done; saving a checkpoint at it and stopping (exit %d, "
                "a rerun resumes here)",
                why,
                state.global_step,
                RETRY_EXIT_CODE,
            )
            self.stopped_at = state.global_step
            control.should_training_stop = True
        if stop or due:
            control.should_save = True
        return control

    def on_save(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201 (HF's signature)
        self._last_save = time.monotonic()


# --------------------------------------------------------------------------- metrics


class MetricsCSV(TrainerCallback):
    """Appends one row per logged optimizer step to a CSV; on resume, rows after the checkpoint
    (steps that will be run again) are dropped first, so each step appears once."""

    def __init__(self, path: Path, extra: Sequence[str], resume_step: int | None) -> None:
        self.path = path
        self.columns = {**CSV_COLUMNS, **{name: name for name in extra if name not in CSV_COLUMNS}}
        self.header = ["step", *self.columns]
        kept: list[dict[str, str]] = []
        if resume_step is not None and path.is_file():
            with path.open(newline="") as fh:
                kept = [r for r in csv.DictReader(fh) if int(r["step"]) <= resume_step]
        with path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, self.header)
            writer.writeheader()
            writer.writerows(kept)

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001, ANN201 (HF's signature)
        if not logs or "loss" not in logs:
            return
        row = {"step": state.global_step}
        for column, key in self.columns.items():
            value = logs.get(key)
            row[column] = "" if value is None else value
        with self.path.open("a", newline="") as fh:
            csv.DictWriter(fh, self.header).writerow(row)


# --------------------------------------------------------------------------- the run


def build_trainer(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train: Dataset,
    settings: TrainingSettings,
    out: str | Path,
    method: Method | None = None,
    callbacks: Sequence[TrainerCallback] = (),
    options: RunOptions | None = None,
) -> CreditGRPOTrainer:
    """The trainer for `settings` (method built from them unless given), launched and
    reporting as `options` say."""
    task = get_task(settings.task)
    eos = model.generation_config.eos_token_id
    eos_ids = [eos] if isinstance(eos, int) else list(eos or [tokenizer.eos_token_id])
    if method is None:
        method = build_method(settings.method, task, tokenizer, eos_ids, settings)
    trainer = CreditGRPOTrainer(
        model=model,
        reward_funcs=[correctness_reward(task)],
        args=grpo_config(settings, out, options=options),  # checks the layout against this launch
        train_dataset=train,
        processing_class=tokenizer,
        callbacks=list(callbacks),
        method=method,
        padding_free=settings.padding_free,
        peft_config=settings.lora.peft_config() if settings.lora is not None else None,
    )
    if settings.lora is not None and _is_zero3(trainer):
        raise ValueError(
            "training.lora: LoRA runs are not launched under DeepSpeed ZeRO-3 here (the final "
            "merge needs the whole weights on one process); use training.accelerate ddp or "
            "zero2 (the adapters and their optimizer state are small)"
        )
    return trainer


RUN_RECORD = "run_record.json"
_FINGERPRINT_CHUNK = 1 << 20


def fingerprint(path: str | Path) -> str:
    """A content fingerprint of a file or directory (a Hub id that is no local path: the id).

    sha256 over every file's relative path, size, first and last MiB: cheap for multi-GB
    checkpoints and changed by any retraining or re-export in practice."""
    path = Path(path)
    if not path.exists():
        return f"id:{path}"
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        size = f.stat().st_size
        digest.update(f"{f.relative_to(path) if path.is_dir() else f.name}:{size}".encode())
        with f.open("rb") as fh:
            digest.update(fh.read(_FINGERPRINT_CHUNK))
            if size > 2 * _FINGERPRINT_CHUNK:
                fh.seek(-_FINGERPRINT_CHUNK, 2)
                digest.update(fh.read())
    return digest.hexdigest()


def job_record(
    arguments: Mapping[str, Any], inputs: Collection[str], not_identity: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str | None]]:
    """A job's arguments as the (arguments, inputs) blocks of its run record.

    Every argument is in one of them unless `not_identity` names it, with the reason (a
    setting that does not change what the run computes): so an argument added to a step
    script is compared without anyone listing it. `inputs` (paths) are recorded by content
    (`fingerprint`; None when not given); another argument that is a path is an error, as it
    would be compared by name only.
    """
    unknown = sorted(set(inputs) - set(arguments))
    if unknown:
        raise ValueError(f"job_record: input(s) {unknown} are not arguments {sorted(arguments)}")
    fingerprints = {k: None if arguments[k] is None else fingerprint(arguments[k]) for k in inputs}
    rest = {k: v for k, v in arguments.items() if k not in inputs and k not in not_identity}
    paths = sorted(k for k, v in rest.items() if isinstance(v, Path))
    if paths:
        raise ValueError(
            f"job_record: argument(s) {paths} are paths; declare them inputs (fingerprinted) "
            "or not identity (with the reason)"
        )
    return json.loads(json.dumps(rest)), fingerprints


def launch_info(policy: PreTrainedModel, device: str) -> dict[str, Any]:
    """How this process was launched and what it trains: processes, accelerate's distributed
    type and ZeRO stage (they decide the checkpoints' layout and the data each process sees), and
    the dtype the policy was loaded in."""
    from accelerate import PartialState

    state = PartialState(cpu=device == "cpu")
    plugin = getattr(state, "deepspeed_plugin", None)
    return {
        "processes": state.num_processes,
        "distributed_type": str(state.distributed_type),
        "zero_stage": getattr(plugin, "zero_stage", None),
        "policy_dtype": str(policy.dtype).removeprefix("torch."),
    }


def run_record(
    settings: TrainingSettings,
    fingerprints: Mapping[str, str | None],
    arguments: Mapping[str, Any] | None = None,
    launch: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What a run directory was started with: the settings, the job's other arguments (e.g. the
    policy's dtype), the inputs' fingerprints and the launch (its identity, `RECORD_IDENTITY`),
    and the machine it started on (recorded, not compared: a run may resume on another node)."""
    return {
        "settings": settings.to_dict(),
        "arguments": dict(sorted((arguments or {}).items())),
        "inputs": dict(sorted(fingerprints.items())),
        "launch": dict(sorted((launch or {}).items())),
        "machine": machine_info(),
    }


RECORD_IDENTITY: tuple[str, ...] = ("settings", "arguments", "inputs", "launch")


def _identity(record: Any) -> Any:
    """The blocks of a run record that decide whether a directory belongs to a run."""
    if not isinstance(record, dict):
        return record
    return {k: record.get(k) for k in RECORD_IDENTITY}


def _changed_keys(old: Any, new: Mapping[str, Any]) -> list[str]:
    """`<block>.<key>` entries that differ between two run records (`<block>` alone when the old
    record lacks the block: it was written before the block existed)."""
    if not isinstance(old, dict):
        return ["no record"]
    keys = []
    for block in RECORD_IDENTITY:
        if block not in old:
            keys += [f"{block} (not in the old record)"] * (block in new)
            continue
        a, b = old[block], json.loads(json.dumps(new.get(block, {})))
        keys += [f"{block}.{k}" for k in sorted({*a, *b}) if a.get(k) != b.get(k)]
    return keys


def _stale_copies(out: Path) -> list[Path]:
    """`out.stale-N` directories, by N."""
    found = [
        p
        for p in out.parent.glob(f"{out.name}.stale-*")
        if p.is_dir() and p.name.removeprefix(f"{out.name}.stale-").isdigit()
    ]
    return sorted(found, key=lambda p: int(p.name.removeprefix(f"{out.name}.stale-")))


def prune_stale(out: Path) -> None:
    """Delete the intermediate checkpoints of every `out.stale-N` (at paper scale hundreds of
    GB that no run resumes from), keeping what tells the old run apart (final/, metrics,
    curve, record, summary); each deletion is logged."""
    for stale in _stale_copies(out):
        for p in sorted(
            stale.glob(f"{PREFIX_CHECKPOINT_DIR}-*"), key=lambda p: (len(p.name), p.name)
        ):
            if p.is_dir():
                size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
                log.warning("deleting checkpoint %s of a stale run (%.1f MB)", p, size / 1e6)
                shutil.rmtree(p)


def claim_run_dir(
    out: Path, record: Mapping[str, Any], main: bool = True, keep_stale_checkpoints: bool = False
) -> None:
    """Make `out` a directory of this run: checkpoints left by a run with another record
    (other settings, arguments, base model, training data or launch) are moved aside to
    `out.stale-N`, with a log line naming the changed keys, so that a run never resumes from
    them; then the checkpoints of every stale copy are deleted (`prune_stale`) unless
    `keep_stale_checkpoints`. Then the record is written."""
    path = out / RUN_RECORD
    if not main:
        return
    if out.is_dir() and any(out.iterdir()):
        old = json.loads(path.read_text()) if path.is_file() else None
        if _identity(old) != _identity(json.loads(json.dumps(record))):
            changed = _changed_keys(old, record)
            n = 0
            while out.with_name(f"{out.name}.stale-{n}").exists():
                n += 1
            stale = out.with_name(f"{out.name}.stale-{n}")
            log.warning(
                "run directory %s was started with other settings or inputs (%s): moved to %s; "
                "starting fresh",
                out,
                ", ".join(changed),
                stale,
            )
            out.rename(stale)
            if not keep_stale_checkpoints:
                prune_stale(out)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=True))


def _is_zero3(trainer: CreditGRPOTrainer) -> bool:
    return DistributedBackend(trainer.accelerator).is_zero3


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


def train_policy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    table: pl.DataFrame,
    settings: TrainingSettings,
    out: str | Path,
    callbacks: Sequence[TrainerCallback] = (),
    curve: tuple[pl.DataFrame, CurveSettings] | None = None,
    fingerprints: Mapping[str, str | None] | None = None,
    arguments: Mapping[str, Any] | None = None,
    keep_stale_checkpoints: bool = False,
    options: RunOptions | None = None,
    save_minutes: float | None = None,
) -> dict[str, Any]:
    """Train `model` on the problems of `table`; resume from `out`'s newest checkpoint if any.
    `options` (ddp timeout, trackers) are not part of the run record.

    `curve` (held-out problems, settings): evaluate the policy on them during the run into
    `out/curve.csv` (`rredcot.training.curves`). `fingerprints` name the inputs (base model,
    training data, curve problems) and `arguments` the job's other arguments (`job_record`);
    with the settings and the launch (`launch_info`: processes, the policy's dtype) they form
    the run record, and a directory left by a run with another record is moved aside
    (`claim_run_dir`, which deletes stale checkpoints unless `keep_stale_checkpoints`) instead
    of resumed. A run whose newest checkpoint is already at max_steps takes no further step.

    The main process holds `run_dir_lock(out)` throughout (`RunDirectoryLocked` if another
    trainer does). Besides every `save_steps`, a checkpoint is written every `save_minutes` of
    wall time (None: never) and, on SIGTERM/SIGUSR1, at the end of the step under way, after
    which `TrainingInterrupted` is raised and `final/` is not written (`CheckpointGuard`).

    Writes checkpoints, metrics.csv, final/ and train_summary.json into `out` (module
    docstring). Returns the summary. Under `accelerate launch` every process runs this; the
    main one alone removes, appends and writes files.
    """
    out = Path(out)
    from accelerate import PartialState

    main = PartialState(cpu=settings.device == "cpu").is_main_process
    with run_dir_lock(out) if main else nullcontext():
        return _train_policy(
            model,
            tokenizer,
            table,
            settings,
            out,
            callbacks,
            curve,
            fingerprints,
            arguments,
            keep_stale_checkpoints,
            save_minutes,
            options,
        )


def _train_policy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    table: pl.DataFrame,
    settings: TrainingSettings,
    out: Path,
    callbacks: Sequence[TrainerCallback],
    curve: tuple[pl.DataFrame, CurveSettings] | None,
    fingerprints: Mapping[str, str | None] | None,
    arguments: Mapping[str, Any] | None,
    keep_stale_checkpoints: bool,
    save_minutes: float | None,
    options: RunOptions | None,
) -> dict[str, Any]:
    """`train_policy` with the lock held (by the main process)."""
    check_vllm_memory(model, settings)
    task = get_task(settings.task)
    train, without_reference = training_rows(table, task, tokenizer, settings)
    from accelerate import PartialState

    main = PartialState(cpu=settings.device == "cpu").is_main_process
    record = run_record(
        settings, fingerprints or {}, arguments, launch_info(model, settings.device)
    )
    claim_run_dir(out, record, main=main, keep_stale_checkpoints=keep_stale_checkpoints)
    PartialState().wait_for_everyone()
    guard = CheckpointGuard(save_minutes)
    trainer = build_trainer(
        model, tokenizer, train, settings, out, callbacks=[*callbacks, guard], options=options
    )
    accelerator = trainer.accelerator
    guard.accelerator = accelerator
    checkpoint = resume_point(out, remove_incomplete=main)
    accelerator.wait_for_everyone()
    resume_step = _step_of(checkpoint) if checkpoint else None
    if checkpoint:
        log.info("resuming from %s", checkpoint)
    if main:
        metrics = MetricsCSV(out / "metrics.csv", trainer.method.metric_names, resume_step)
        trainer.add_callback(metrics)
    if main and curve is not None:
        problems, curve_settings = curve
        trainer.add_callback(
            LearningCurve(out / "curve.csv", problems, task, tokenizer, curve_settings, resume_step)
        )
    start = time.perf_counter()
    if resume_step is not None and resume_step >= settings.max_steps:
        # Already done: load the checkpoint's weights and publish them, without a step more.
        log.info(
            "checkpoint %s is at max_steps %d: no further step", checkpoint, settings.max_steps
        )
        trainer._load_from_checkpoint(str(checkpoint))
        trainer.state.global_step = resume_step
    else:
        with guard.installed():
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    seconds = time.perf_counter() - start
    if guard.stopped_at is not None:
        accelerator.wait_for_everyone()
        why = guard.received.name if guard.received is not None else "another process's signal"
        stopped = out / f"{PREFIX_CHECKPOINT_DIR}-{guard.stopped_at}"
        raise TrainingInterrupted(why, guard.stopped_at, stopped)
    final = out / "final"
    # ZeRO-3 shards the weights: gather them (a collective, on every process; needs the config's
    # zero3_save_16bit_model). Otherwise every process holds them whole.
    state_dict = accelerator.get_state_dict(trainer.model_wrapped) if _is_zero3(trainer) else None
    if main:
        policy = accelerator.unwrap_model(trainer.model)
        if settings.lora is not None:
            save_final(policy, final)  # merged weights, and the adapter in final/adapter/
        else:
            policy.save_pretrained(final, state_dict=state_dict)
        tokenizer.save_pretrained(final)
    summary = {
        "settings": settings.to_dict(),
        "steps": int(trainer.state.global_step),
        "problems": len(train),
        "problems_without_reference": without_reference,
        "resumed_from_step": resume_step,
        "seconds_this_session": seconds,
        "machine": machine_info(),
    }
    if main:
        (out / "train_summary.json").write_text(json.dumps(summary, indent=2))
    accelerator.wait_for_everyone()
    log.info("training done: %s", json.dumps({k: v for k, v in summary.items() if k != "settings"}))
    return summary
