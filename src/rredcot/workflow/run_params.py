"""The settings of each RL run, its step's `--params`, as the workflow and the development
scripts build them from the config (`run_settings`), and the variant pairs the workflow compares
(`placebo_pairs`, `budget_pairs`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rredcot.training.method_registry import RESET_METHODS, method_spec
from rredcot.workflow.recorded_settings import omit_unrecorded_defaults

NOT_RUN_SETTINGS: tuple[str, ...] = (
    "methods",
    "seeds",
    "extra_seeds",
    "per_method",
    "variants",
    "baseline",
    "mc",
    "curve",
    # how a run is launched (the launcher), not what it does
    "accelerate",
    "num_processes",
    # what happens to other runs' directories (the step's own argument)
    "keep_stale_checkpoints",
    # how long ranks wait and where the run reports (the step's --runtime, not in the record)
    "ddp_timeout",
    "report_to",
    "report_offline",
    "allow_cpu",
    # when checkpoints are written (the step's own argument): not what the run computes
    "save_minutes",
)
"""Keys of config `training` that are not a run's settings (`run_settings` drops them)."""
_OVERRIDE_DROPS = ("accelerate", "rredcot", "name", "method", "budget_of")
VLLM_ONLY: tuple[str, ...] = ("max_prompt_tokens", "vllm_max_model_length")
"""Settings a run without vLLM leaves to their defaults (its `--params` stay as they were)."""


def merged(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` on top, nested blocks merged key by key."""
    out = dict(base)
    for key, value in overrides.items():
        both = isinstance(value, Mapping) and isinstance(out.get(key), Mapping)
        out[key] = merged(out[key], value) if both else value
    return out


def run_settings(
    config: Mapping[str, Any],
    method: str,
    seed: int,
    *,
    task: str,
    variant: Mapping[str, Any] | None = None,
    reference_column: str = "reference",
) -> dict[str, Any]:
    """The settings of one RL run (a step's `--params`): config `training` without the keys
    that are not a run's (`NOT_RUN_SETTINGS`), the method's `per_method` overrides, then
    `variant`'s (a `training.variants` entry, or a development candidate), with the shared
    segmentation and estimator blocks, so the workflow and the development search build a run
    the same way. A `rredcot` block in an override changes estimator.rredcot for this run only.
    """
    tr = config["training"]
    settings = {k: v for k, v in tr.items() if k not in NOT_RUN_SETTINGS}
    if method in RESET_METHODS:
        # METHOD.md §6: on-policy per-sequence mean, no KL; TrainingSettings rejects the rest.
        settings.update(loss_type="grpo", kl_beta=0.0)
    own = tr.get("per_method", {}).get(method, {})
    variant = variant or {}
    estimator = merged(
        merged(config["estimator"]["rredcot"], own.get("rredcot", {})), variant.get("rredcot", {})
    )
    for layer in (own, variant):
        settings = merged(settings, {k: v for k, v in layer.items() if k not in _OVERRIDE_DROPS})
    if not settings.get("use_vllm"):  # they size the vLLM context only
        for key in VLLM_ONLY:
            settings.pop(key, None)
    if method_spec(method).reads_misconception or settings.get("rule_share") is not None:
        settings["misconception"] = config.get("sft", {}).get("misconception")
    settings.update(
        method=method,
        seed=seed,
        task=task,
        reference_column=reference_column,
        segmentation=config["segmentation"],
        rredcot=estimator,
        mc={**config["estimator"]["mc"], **tr.get("mc", {})},
    )
    return omit_unrecorded_defaults(settings)


def placebo_pairs(variants: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(method, placebo run) for every `training.variants` entry whose `credit.placebo` is set
    (METHOD.md §9), in the config's order: each placebo is compared with its own method."""
    return [
        (v["method"], v["name"])
        for v in variants
        if v.get("credit", {}).get("placebo", "none") != "none"
    ]


def budget_pairs(variants: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(run, baseline given its budget) for every `training.variants` entry with `budget_of`
    (e.g. GRPO with RREDCoT's measured seconds as more steps), in the config's order."""
    return [(v["budget_of"], v["name"]) for v in variants if "budget_of" in v]
