"""The keys every recorded run's settings hold, frozen, so that a setting added later needs no
list kept by hand: while it holds its default it is left out of each run's settings (the
train_policy job's `--params`, hence its record), so no existing run's parameters change and
nothing reruns; set to anything else, it reaches the runs that set it.

`RECORDED` was generated once, on 2026-12-06, from `TrainingSettings`' fields and its blocks'
(less the four settings added after runs were recorded: `padding_free`, `rule_share`, `oppo`,
`credit.placebo`). It is never extended: a new field of `TrainingSettings` or of one of its
blocks is covered by the rule above without an edit here.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

RECORDED: Mapping[str, tuple[str, ...] | None] = {
    **dict.fromkeys(
        (
            "method",
            "seed",
            "task",
            "max_steps",
            "prompts_per_step",
            "num_generations",
            "max_completion_length",
            "temperature",
            "top_p",
            "learning_rate",
            "lr_scheduler",
            "warmup_ratio",
            "weight_decay",
            "max_grad_norm",
            "kl_beta",
            "epsilon",
            "loss_type",
            "scale_rewards",
            "save_steps",
            "save_total_limit",
            "max_problems",
            "reference_column",
            "reference",
            "mc_batch_size",
            "device",
            "bf16",
            "gradient_checkpointing",
            "per_device_batch_size",
            "gradient_accumulation_steps",
            "use_vllm",
            "vllm_mode",
            "vllm_gpu_memory_utilization",
            "vllm_tensor_parallel_size",
            "vllm_server_host",
            "vllm_server_port",
            "updates_per_generation",
            "num_iterations",
            "mask_truncated_completions",
            "max_prompt_tokens",
            "vllm_max_model_length",
        )  # fmt: skip
    ),
    "segmentation": (
        "strategy",
        "num_segments",
        "keywords",
        "discourse_markers",
        "merge_score",
        "topq",
        "prob_threshold",
    ),  # fmt: skip
    "credit": ("mode", "beta", "eps", "center"),
    "rredcot": (
        "value",
        "w_R",
        "w_v",
        "return_equivalence",
        "answer_now",
        "eps",
        "end_with_eos",
        "join",
        "max_tokens_per_pass",
        "max_resident_tokens",
        "suffixes",
        "prune_nats",
        "prune_first_chunk",
        "prune_max_kept_tokens",
        "layout",
    ),  # fmt: skip
    "mc": ("n_rollouts", "budget", "truncation", "temperature", "top_p"),
    "resets": (
        "max_fresh_attempts",
        "localization_temperature",
        "localization_max_new_tokens",
        "localization_unparsed",
    ),  # fmt: skip
    "lora": ("r", "alpha", "target_modules", "dropout"),
    "misconception": ("rule", "rate"),
}
"""Each run-settings key recorded runs hold: None for a value, the block's keys for a block."""


@functools.cache
def run_defaults() -> dict[str, Any]:
    """Each run-settings key's default, from the config schema (whose defaults equal the
    settings classes': tests/unit/test_defaults.py): config `training`'s keys, and the blocks a
    run takes from elsewhere in the config (segmentation, the estimators, the misconception)."""
    from rredcot.config import schema_defaults

    return {
        **schema_defaults("training"),
        "segmentation": schema_defaults("segmentation"),
        "rredcot": schema_defaults("estimator", "rredcot"),
        "mc": schema_defaults("estimator", "mc"),
        "misconception": schema_defaults("sft", "misconception"),
    }


def omit_unrecorded_defaults(
    settings: Mapping[str, Any],
    defaults: Mapping[str, Any] | None = None,
    recorded: Mapping[str, tuple[str, ...] | None] = RECORDED,
) -> dict[str, Any]:
    """`settings` without the keys outside `recorded` that hold their default (`defaults`,
    by default `run_defaults()`), at the top level and inside the recorded blocks; the blocks
    are copied, never changed in place (they may be the config's own)."""
    defaults = run_defaults() if defaults is None else defaults
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if key in recorded:
            keys, block_defaults = recorded[key], defaults.get(key)
            if (
                keys is not None
                and isinstance(value, Mapping)
                and isinstance(block_defaults, Mapping)
            ):
                value = {
                    k: v
                    for k, v in value.items()
                    if k in keys or k not in block_defaults or v != block_defaults[k]
                }
            out[key] = value
        elif key not in defaults or value != defaults[key]:
            out[key] = value
    return out
