"""RRPO (Samanta et al., 2026, arXiv:2605.25507): resets at a uniformly random step.

The one thing that differs from SRPO: the reset step N of a failed parent with K steps is drawn
uniformly from 1 … K (the official code's `random_localization` baseline,
`training/thought_ics_agent_loop.py` in github.com/Ankur-Samanta/SRPO), seeded per
(run seed, step, prompt) so a run is reproducible. Everything else (Group 1 fresh chains, Group 2
suffixes after steps 1 … N−1, per-group advantages, the on-policy loss) is `ResetMethod`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import ClassVar

from rredcot.generation.base import derive_seed
from rredcot.training.methods.resets import Parent, ResetChoice, ResetMethod, RolloutContext


def uniform_step(num_steps: int, seed: int) -> int:
    """N ~ Uniform{1, …, K} from its own stream `seed`."""
    if num_steps < 1:
        raise ValueError(f"num_steps: expected an integer >= 1, got {num_steps!r}")
    return random.Random(seed).randint(1, num_steps)


@dataclass
class RRPOMethod(ResetMethod):
    """Reset-based credit with a uniformly random reset step."""

    name: ClassVar[str] = "rrpo"

    def reset_steps(self, ctx: RolloutContext, parents: list[Parent]) -> list[ResetChoice]:
        return [
            ResetChoice(
                uniform_step(q.num_steps, derive_seed(ctx.seed, ctx.step, q.prompt_index)),
                "uniform",
            )
            for q in parents
        ]
