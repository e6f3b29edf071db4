"""What one RL run computes (`TrainingSettings`) and how it is launched and watched (`RunOptions`).

The config's `training` block plus the method and seed, checked once here (each error names the
field); cross-field rules live in `rredcot.training.settings_checks`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import asdict, dataclass, field, fields
from numbers import Integral, Real
from typing import Any

from rredcot.block_checks import check_choices, check_known_keys
from rredcot.credit.advantages import REWARD_SCALES, CreditConfig
from rredcot.credit.bayes import OPPOConfig
from rredcot.credit.mc import MCConfig
from rredcot.credit.rredcot import RREDCoTConfig
from rredcot.credit.segmentation import SegmentationConfig
from rredcot.data.misconceptions import Misconception
from rredcot.training.lora import LoraSettings
from rredcot.training.method_registry import METHOD_SPECS
from rredcot.training.reset_config import ResetConfig
from rredcot.training.settings_checks import settings_error, tracker_error

LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dr_grpo", "dapo")
LR_SCHEDULERS: tuple[str, ...] = ("constant", "constant_with_warmup", "linear", "cosine")
DEVICES: tuple[str, ...] = ("cpu", "auto")
VLLM_MODES: tuple[str, ...] = ("colocate", "server")
TRAINING_REFERENCES: tuple[str, ...] = ("configured", "own_path")


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
    """One of the training methods (`rredcot.training.method_registry.METHOD_SPECS`)."""
    seed: int = 0
    """Seed of data order, sampling and the MC rollouts."""
    task: str = "synthetic"
    """Task format (prompt, grading) by name: synthetic | math."""
    max_steps: int = 60
    """Optimizer steps."""
    prompts_per_step: int = 8
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
    warm-up (`constant` has none: refused, `settings_checks.warmup_error`)."""
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
    save_steps: int = 20
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
    (`rredcot.planning.vllm_memory.training_length`), so vLLM never sizes its cache for the model's
    whole context."""
    segmentation: SegmentationConfig = field(default_factory=SegmentationConfig)
    """Segmentation of responses (METHOD.md §2); rredcot and mc."""
    credit: CreditConfig = field(default_factory=CreditConfig)
    """How segment signals become token advantages (§4); rredcot and mc."""
    rredcot: RREDCoTConfig = field(default_factory=RREDCoTConfig)
    """RREDCoT estimator (§3)."""
    mc: MCConfig = field(default_factory=MCConfig)
    """MC rollouts (§5)."""
    oppo: OPPOConfig = field(default_factory=OPPOConfig)
    """OPPO's one-pass Bayes value (§8, a reconstruction): token or segment level, prior, form
    of the token advantage, clipping."""
    resets: ResetConfig = field(default_factory=ResetConfig)
    """RRPO/SRPO group sampling and self-localization (§6); they need loss_type grpo, kl_beta 0
    and an even num_generations (split 1×(n/2))."""
    lora: LoraSettings | None = None
    """Train LoRA adapters instead of all weights (the official RRPO/SRPO setup, §6); None:
    full fine-tuning."""
    misconception: Misconception | None = None
    """The world's misconception (`sft.misconception`), set by the workflow only for the runs
    that read it (`MethodSpec.reads_misconception`: the rule-aware oracle; `rule_share`)."""
    rule_share: float | None = None
    """Train on the largest subset of the problems in which this share has a step where the
    misconception's rule applies (`rule_share_selection`; the synthetic world); None: all."""

    def __post_init__(self) -> None:
        if self.method not in METHOD_SPECS:
            raise ValueError(
                f"training.method: {self.method!r} is not allowed; choose one of "
                f"{list(METHOD_SPECS)}"
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
        if isinstance(self.misconception, Mapping):
            object.__setattr__(self, "misconception", Misconception(**self.misconception))
        if self.rule_share is not None:
            _finite("rule_share", self.rule_share, 0.0, 1.0)
            if self.misconception is None:
                raise ValueError(
                    "training.rule_share: needs the world's misconception (sft.misconception)"
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
        check_known_keys("training", cls, mapping)
        values = dict(mapping)
        blocks = {
            "segmentation": SegmentationConfig,
            "credit": CreditConfig,
            "rredcot": RREDCoTConfig,
            "mc": MCConfig,
            "oppo": OPPOConfig,
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


@dataclass(frozen=True)
class RunOptions:
    """How a run is launched and watched, not what it computes (config keys
    `training.ddp_timeout`, `training.report_to`, `training.report_offline` and
    `training.allow_cpu`): left out of the
    run record, so a run resumes whatever they are."""

    ddp_timeout: int = 1800
    """Seconds a rank waits at a collective (TRL's `ddp_timeout`)."""
    report_to: tuple[str, ...] = ()
    """Experiment trackers (`rredcot.training.settings_checks.TRACKERS`); empty: none."""
    report_offline: bool = False
    """Trackers write locally only (`environment`): wandb in offline mode (`wandb sync` later),
    trackio without a Space (`TRACKIO_SPACE_ID` dropped); tensorboard is always local. For
    compute nodes without internet access."""
    allow_cpu: bool = False
    """`training.device` auto may fall back to the CPU (`check_device`): the CPU rehearsal of a
    GPU config; false: an error instead of a silent CPU run."""

    def __post_init__(self) -> None:
        _positive_int("ddp_timeout", self.ddp_timeout)
        object.__setattr__(self, "report_to", tuple(self.report_to))
        for name in ("report_offline", "allow_cpu"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"training.{name}: expected true or false, got {getattr(self, name)!r}"
                )
        error = tracker_error(self.report_to)
        if error is not None:
            raise ValueError(error)

    def environment(self, environ: MutableMapping[str, str] = os.environ) -> None:
        """Set `environ` for `report_offline` (before the trackers start); online: unchanged."""
        if self.report_offline:
            environ["WANDB_MODE"] = "offline"
            environ.pop("TRACKIO_SPACE_ID", None)

    def trainer_args(self, run_name: str) -> dict[str, Any]:
        """The TrainingArguments these options set."""
        return {
            "ddp_timeout": self.ddp_timeout,
            "report_to": list(self.report_to) or "none",
            "run_name": run_name,
        }
