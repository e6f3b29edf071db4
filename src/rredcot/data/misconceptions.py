"""Systematic errors in the demonstrations: a rule the demonstrator gets wrong more often than
right, in a context the step itself shows (METHOD.md §4, "Positive control").

Random slips (`sft.slip_rate`) leave the mode of every step right: the base's greedy output is
correct, RL only sharpens, and no credit method needs to know which step failed. A
misconception makes the base's mode wrong on an identifiable kind of step, so improving means
finding and fixing those steps: the regime in which credit assignment can matter.

Rules (`MISCONCEPTION_RULES`):
- `smaller_from_larger`: a subtraction x − y with x < y (a borrow mod m) is written as y − x, the
  classic subtraction bug of schoolchildren. It applies only where y − x ≢ x − y (mod m), i.e.
  where the bug changes the value (for m = 10: not when y − x = 5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

MISCONCEPTION_RULES: tuple[str, ...] = ("smaller_from_larger",)


def misconceived_value(rule: str, op: str, x: int, y: int, modulus: int) -> int | None:
    """The value the misconception writes for `x op y` (mod `modulus`), or None where the rule
    does not apply (another kind of step, or one where the bug gives the right value)."""
    if rule != "smaller_from_larger":
        raise ValueError(
            f"rule: {rule!r} is not allowed; choose one of {list(MISCONCEPTION_RULES)}"
        )
    if op != "-" or x >= y:
        return None
    wrong, right = (y - x) % modulus, (x - y) % modulus
    return wrong if wrong != right else None


@dataclass(frozen=True)
class Misconception:
    """The `sft.misconception` block: a demonstration step where `rule` applies is written
    with the rule's wrong value with probability `rate` (in place of a random slip there)."""

    rule: str = "smaller_from_larger"
    rate: float = 0.7
    """> 0.5 makes the wrong value the mode of those steps: the base's greedy output fails."""

    def __post_init__(self) -> None:
        if self.rule not in MISCONCEPTION_RULES:
            raise ValueError(
                f"sft.misconception.rule: {self.rule!r} is not allowed; choose one of "
                f"{list(MISCONCEPTION_RULES)}"
            )
        r = self.rate
        if (
            isinstance(r, bool)
            or not isinstance(r, Real)
            or not math.isfinite(r)
            or not 0 <= r <= 1
        ):
            raise ValueError(f"sft.misconception.rate: expected a number in [0, 1], got {r!r}")
        object.__setattr__(self, "rate", float(r))

    def value(self, op: str, x: int, y: int, modulus: int) -> int | None:
        """`misconceived_value` under this block's rule."""
        return misconceived_value(self.rule, op, x, y, modulus)
