"""The `training.resets` block of RRPO/SRPO (`ResetConfig`), apart from the reset methods
(`rredcot.training.methods.resets`) so that `TrainingSettings` holds it without importing the
methods, which read their settings' type (`MethodSettings`) from it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

from rredcot.block_checks import check_known_keys
from rredcot.training.localization import UNPARSED_STEPS


@dataclass(frozen=True)
class ResetConfig:
    """The `training.resets` block of RRPO/SRPO (METHOD.md §6); defaults are the official ones
    but the localization budget, config.yaml's for the tiny model (the paper's 4096: the paper
    configs and `rredcot.trl.PAPER_DEFAULTS`)."""

    max_fresh_attempts: int = 12
    """Fresh chains sampled at most while looking for n/2 kept chains and one failure."""
    localization_temperature: float = 0.3
    """SRPO: sampling temperature of the self-localization (0 = greedy)."""
    localization_max_new_tokens: int = 32
    """SRPO: new-token budget of the self-localization."""
    localization_unparsed: str = "middle"
    """SRPO: reset step when the output has no parseable N: middle (max(1, K // 2), as METHOD.md
    §6 states it; the project's default) or first (step 1, what the official code does)."""

    def __post_init__(self) -> None:
        for name in ("max_fresh_attempts", "localization_max_new_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
                raise ValueError(f"resets.{name}: expected an integer >= 1, got {value!r}")
            object.__setattr__(self, name, int(value))
        t = self.localization_temperature
        if isinstance(t, bool) or not isinstance(t, Real) or not math.isfinite(t) or t < 0:
            raise ValueError(
                f"resets.localization_temperature: expected a finite number >= 0, got {t!r}"
            )
        object.__setattr__(self, "localization_temperature", float(t))
        if self.localization_unparsed not in UNPARSED_STEPS:
            raise ValueError(
                f"resets.localization_unparsed: {self.localization_unparsed!r} is not allowed; "
                f"choose one of {list(UNPARSED_STEPS)}"
            )

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any]) -> ResetConfig:
        """Build from a config mapping; unknown keys are errors."""
        check_known_keys("resets", cls, mapping)
        return cls(**mapping)
