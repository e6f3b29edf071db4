"""Training methods by name: one short file each, all over the shared credit code.

The list of methods, with what the workflow needs to know of each, is
`rredcot.training.method_registry.METHOD_SPECS` (torch-free); `METHODS` maps each name to its class:

    grpo         outcome advantage A_i on every token (TRL's GRPO)          methods/grpo.py
    rredcot      RREDCoT σ_{i,k} per segment → token advantages             methods/rredcot.py
    mc           VinePPO-style Monte Carlo σ_k = V̂(s_k) − V̂(s_{k−1})       methods/mc.py
    oppo         OPPO's self-oracle: Bayes success probability p_t           methods/oppo.py
    rrpo         resets at a uniform random step of a failed chain            methods/rrpo.py
    srpo         resets where the policy localizes its own first error        methods/srpo.py
                 (rrpo and srpo sample their own groups: methods/resets.py)
    oracle_step  positive control: per-line values from the world's checker  methods/oracle_step.py

A new method is a subclass of `Method` (a credit method: of `SegmentCreditMethod`, which turns
its σ into token advantages) with a `from_settings` factory, in its own file, plus one
`MethodSpec` in `rredcot.training.method_registry`.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from rredcot.training.method_registry import METHOD_SPECS, method_spec
from rredcot.training.method_settings import MethodSettings
from rredcot.training.methods.base import (
    Method,
    MethodOutput,
    RolloutBatch,
    SegmentCredit,
    SegmentCreditMethod,
    segment_completions,
)
from rredcot.training.reset_config import ResetConfig


def _load(implementation: str) -> type[Method]:
    module, _, name = implementation.partition(":")
    cls = getattr(importlib.import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, Method)):
        raise TypeError(f"{implementation} is not a Method subclass")
    return cls


METHODS: dict[str, type[Method]] = {
    name: _load(spec.implementation) for name, spec in METHOD_SPECS.items()
}
"""Every training method's class, by name (from `METHOD_SPECS`)."""


def build_method(
    name: str,
    task: Any,
    tokenizer: Any,
    eos_ids: Sequence[int],
    settings: Any = None,
    **blocks: Any,
) -> Method:
    """The method called `name` with its settings: a run's `TrainingSettings` (or a
    `MethodSettings`), else `MethodSettings(**blocks)` (defaults for the blocks not given;
    None means the default). The blocks a method does not use are ignored."""
    method_spec(name)  # the error that lists the methods
    if settings is None:
        settings = MethodSettings(**{k: v for k, v in blocks.items() if v is not None})
    elif blocks:
        raise ValueError("build_method: give either settings or blocks, not both")
    return METHODS[name].from_settings(settings, task, tokenizer, list(eos_ids))


__all__ = [
    "METHODS",
    "Method",
    "MethodOutput",
    "ResetConfig",
    "RolloutBatch",
    "SegmentCredit",
    "SegmentCreditMethod",
    "build_method",
    "segment_completions",
]
