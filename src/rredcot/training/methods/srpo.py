"""SRPO (Samanta et al., 2026, arXiv:2605.25507): resets where the policy says it went wrong.

The one thing that differs from RRPO: the reset step N of a failed parent is the policy's own
answer to "which step first derailed this solution?" (`rredcot.training.localization`: the
official level-2 prompt, temperature 0.3, `\\boxed{N}`, fallbacks step 1 on an exception and
max(1, K // 2) on an empty output), clamped to [1, K]. All parents of a step are localized in one
batched generation. Everything else is `ResetMethod`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

from rredcot.generation.base import derive_seed
from rredcot.training.localization import LOCALIZATION_STATUSES, localize_many
from rredcot.training.methods.resets import Parent, ResetChoice, ResetMethod, RolloutContext


@dataclass
class SRPOMethod(ResetMethod):
    """Reset-based credit with the reset step found by self-localization."""

    name: ClassVar[str] = "srpo"
    metric_names: ClassVar[tuple[str, ...]] = (
        *ResetMethod.metric_names,
        *(f"credit/localization_{status}" for status in LOCALIZATION_STATUSES),
    )

    def reset_steps(self, ctx: RolloutContext, parents: list[Parent]) -> list[ResetChoice]:
        found = localize_many(
            ctx.policy,
            self.tokenizer,
            [q.problem for q in parents],
            [q.steps for q in parents],
            temperature=self.resets.localization_temperature,
            top_p=ctx.top_p,
            max_new_tokens=self.resets.localization_max_new_tokens,
            seed=derive_seed(ctx.seed, ctx.step),
            unparsed_step=self.resets.localization_unparsed,
            batch_size=max(len(parents), 1),
        )
        return [ResetChoice(f.step, f.status, f.forward_tokens) for f in found]

    def choice_metrics(self, choices: list[ResetChoice]) -> dict[str, float]:
        """How many parents each localization status produced this step."""
        counts = Counter(c.status for c in choices)
        return {f"credit/localization_{s}": float(counts[s]) for s in LOCALIZATION_STATUSES}
