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
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Real
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # programs does not import this module; the annotation only
    from rredcot.data.programs import Program

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


def misconception_can_reach_answer(program: Program, rule: str) -> bool:
    """Can `rule`, applied at any subset of the steps where it applies, write the right answer
    through a wrong value? A world that draws no such problem (`world.avoid_misconception`)
    keeps a misconceived chain from being rewarded as right: without it, at the mode of the
    misconception a later application undoes an earlier one (−(−v) = v) on a few percent of
    problems, and that luck rewards the very error the positive control is about.

    Exact: every subset is walked in a valid step order (subtraction never commutes, so the
    operands as written do not depend on the path); at most 2^depth branches.
    """
    from rredcot.data.programs import apply_op

    m, target, right = program.modulus, program.target, program.answer
    steps = program.steps

    def walk(i: int, written: dict[str, int], changed: bool) -> bool:
        if i == len(steps):
            return changed and str(written[target]) == right
        s = steps[i]
        x, y = written[s.left], written[s.right]
        if walk(i + 1, {**written, s.name: apply_op(s.op, x, y, m)}, changed):
            return True
        wrong = misconceived_value(rule, s.op, x, y, m)
        return wrong is not None and walk(i + 1, {**written, s.name: wrong}, True)

    return walk(0, dict(program.given), False)


@dataclass(frozen=True)
class Misconception:
    """The `sft.misconception` block: a demonstration step where `rule` applies is written
    with the rule's wrong value with probability `rate` (in place of a random slip there)."""

    rule: str = "smaller_from_larger"
    rate: float = 0.8
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


def rule_steps(program: Program, misconception: Misconception) -> set[str]:
    """The steps of `program`'s right solution whose value the rule changes, by name."""
    values = program.values()
    return {
        s.name
        for s in program.steps
        if misconception.value(s.op, values[s.left], values[s.right], program.modulus) is not None
    }


def rule_applies(program: Program, misconception: Misconception) -> bool:
    """Does the right solution of `program` have a step where the rule changes the value?"""
    return bool(rule_steps(program, misconception))


def rule_share_selection(applies: Sequence[bool], share: float) -> list[int]:
    """Indices (in order) of a subset of problems in which the share whose right solution the
    rule applies to (`applies`, one flag per problem, `rule_applies`) is `share`: the first k
    of the R rule problems and the first n − k of the O others, n = ⌊min(R / f, O / (1 − f))⌋
    (all R or all O at f = 1 or 0), k = round(n · f). The problems' own order is already random
    (the world draws them so), so the subset is the head of each pool. Raises when no problem
    is kept."""
    if isinstance(share, bool) or not isinstance(share, Real) or not 0.0 <= share <= 1.0:
        raise ValueError(f"training.rule_share: expected a number in [0, 1], got {share!r}")
    rule = [i for i, a in enumerate(applies) if a]
    other = [i for i, a in enumerate(applies) if not a]
    if share == 1.0:
        n, k = len(rule), len(rule)
    elif share == 0.0:
        n, k = len(other), 0
    else:
        n = int(min(len(rule) / share, len(other) / (1.0 - share)))
        k = round(n * share)
        n = min(n, k + len(other))
    if n == 0:
        raise ValueError(
            f"training.rule_share {share:g}: no problem to keep ({len(rule)} where the rule "
            f"applies, {len(other)} where it does not)"
        )
    return sorted(rule[:k] + other[: n - k])
