"""GRPO (Shao et al., 2024, DeepSeekMath): the outcome advantage, untouched.

A_i = (R_i − mean_g R)/(std_g R + ε) for every token of response i, exactly as TRL's
`GRPOTrainer` computes it; `credit: none`. The baseline every other method is compared with.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from rredcot.training.methods.base import Method, MethodOutput, RolloutBatch


class GRPOMethod(Method):
    """GRPO: TRL's own (B,) advantages are handed back as they are."""

    name: ClassVar[str] = "grpo"
    needs_whole_groups: ClassVar[bool] = False

    def advantages(self, batch: RolloutBatch, policy: torch.nn.Module) -> MethodOutput:
        return MethodOutput(batch.outcome_advantages)
