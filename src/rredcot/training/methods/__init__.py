"""Training methods by name: one short file each, all over the shared credit code.

    grpo     outcome advantage A_i on every token (TRL's GRPO)            methods/grpo.py
    rredcot  RREDCoT σ_{i,k} per segment → token advantages               methods/rredcot.py
    mc       VinePPO-style Monte Carlo σ_k = V̂(s_k) − V̂(s_{k−1})         methods/mc.py
    rrpo     resets at a uniform random step of a failed chain              methods/rrpo.py
    srpo     resets where the policy localizes its own first error          methods/srpo.py
             (rrpo and srpo sample their own groups: methods/resets.py)

A new method is a subclass of `Method` in its own file plus one entry in `METHODS` and one
branch in `build_method`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rredcot.credit.advantages import CreditConfig
from rredcot.credit.mc import MCConfig
from rredcot.credit.rredcot import RREDCoTConfig
from rredcot.segmentation import SegmentationConfig
from rredcot.training.methods.base import (
    Method,
    MethodOutput,
    RolloutBatch,
    SegmentedCompletion,
    segment_completions,
)
from rredcot.training.methods.grpo import GRPOMethod
from rredcot.training.methods.mc import MCMethod
from rredcot.training.methods.resets import ResetConfig
from rredcot.training.methods.rredcot import RREDCoTMethod
from rredcot.training.methods.rrpo import RRPOMethod
from rredcot.training.methods.srpo import SRPOMethod

METHODS: dict[str, type[Method]] = {
    "grpo": GRPOMethod,
    "rredcot": RREDCoTMethod,
    "mc": MCMethod,
    "rrpo": RRPOMethod,
    "srpo": SRPOMethod,
}


def build_method(
    name: str,
    task: Any,
    tokenizer: Any,
    eos_ids: Sequence[int],
    *,
    segmentation: SegmentationConfig | None = None,
    credit: CreditConfig | None = None,
    rredcot: RREDCoTConfig | None = None,
    reference: str = "configured",
    mc: MCConfig | None = None,
    mc_batch_size: int = 64,
    resets: ResetConfig | None = None,
) -> Method:
    """The method called `name` with its settings (the blocks it does not use are ignored)."""
    if name not in METHODS:
        raise ValueError(
            f"method: {name!r} is not a training method; choose one of {list(METHODS)}"
        )
    segmentation = segmentation or SegmentationConfig()
    credit = credit or CreditConfig()
    if name == "grpo":
        return GRPOMethod()
    if name == "rredcot":
        return RREDCoTMethod(
            task,
            tokenizer,
            list(eos_ids),
            segmentation,
            rredcot or RREDCoTConfig(),
            credit,
            reference=reference,
        )
    if name in ("rrpo", "srpo"):
        reset_method = RRPOMethod if name == "rrpo" else SRPOMethod
        return reset_method(task, tokenizer, list(eos_ids), segmentation, resets or ResetConfig())
    return MCMethod(
        task, tokenizer, list(eos_ids), segmentation, mc or MCConfig(), credit, mc_batch_size
    )


__all__ = [
    "METHODS",
    "GRPOMethod",
    "MCMethod",
    "Method",
    "MethodOutput",
    "RREDCoTMethod",
    "RRPOMethod",
    "ResetConfig",
    "RolloutBatch",
    "SRPOMethod",
    "SegmentedCompletion",
    "build_method",
    "segment_completions",
]
