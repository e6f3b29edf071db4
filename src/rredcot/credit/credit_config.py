"""The `training.credit` block (`CreditConfig`) and the names its options take.

Kept apart from `rredcot.credit.advantages` (which needs torch) so that the workflow's config
check builds the block without importing torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Real
from typing import Any

from rredcot.block_checks import check_known_keys

CREDIT_MODES: tuple[str, ...] = ("immediate", "reward_to_go", "mixed")
CENTERS: tuple[str, ...] = ("group", "none")
PLACEBOS: tuple[str, ...] = ("none", "perm", "flat")
"""`credit.placebo`: none (the method's own σ) | perm | flat (`rredcot.credit.placebo`)."""
REWARD_SCALES: tuple[str, ...] = ("group", "batch", "none")
TRL_EPS = 1e-4  # TRL's GRPO adds this to the std
MIN_STD = 1e-8  # a group whose values spread less than this carries no signal: advantage 0


@dataclass(frozen=True)
class CreditConfig:
    """The `training.credit` block: how segment signals σ become token advantages (§4)."""

    mode: str = "mixed"
    """One of `CREDIT_MODES`: immediate (RUDDER's) | reward_to_go | mixed (the outcome advantage
    plus β·whiten(σ), the workflow's pre-registered transform)."""
    beta: float = 1.0
    """β of `mixed`: A_i + β·whiten(σ_{i,k})."""
    eps: float = TRL_EPS
    """ε added to the std when whitening σ (the same value TRL adds to the reward std)."""
    center: str = "none"
    """One of `CENTERS`: `group` subtracts the group mean of σ before dividing by its std (both
    over the group's tokens, METHOD.md §4); `none` only divides (by the std over the group's
    segments), so a correct segment of an all-correct group keeps its positive sign."""
    placebo: str = "none"
    """One of `PLACEBOS` (METHOD.md §9): `perm` permutes σ within each trace, `flat` gives every
    token the trace's mean σ, before the transform; `none` keeps the method's own placement."""

    def __post_init__(self) -> None:
        if self.mode not in CREDIT_MODES:
            raise ValueError(
                f"credit.mode: {self.mode!r} is not allowed; choose one of {list(CREDIT_MODES)}"
            )
        if self.placebo not in PLACEBOS:
            raise ValueError(
                f"credit.placebo: {self.placebo!r} is not allowed; choose one of {list(PLACEBOS)}"
            )
        if self.center not in CENTERS:
            raise ValueError(
                f"credit.center: {self.center!r} is not allowed; choose one of {list(CENTERS)}"
            )
        for name in ("beta", "eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
                raise ValueError(f"credit.{name}: expected a finite number, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.eps < 0:
            raise ValueError(f"credit.eps: expected a number >= 0, got {self.eps!r}")

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any]) -> CreditConfig:
        """Build from a config mapping; unknown keys are errors."""
        check_known_keys("credit", cls, mapping)
        return cls(**mapping)
