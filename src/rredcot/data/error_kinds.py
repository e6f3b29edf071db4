"""Which kind of error a response makes first: a misconception's (systematic) or another one.

The positive-control regime is described by how many of the base's errors are systematic: the
share of wrong responses whose first wrong line is a step where the misconception applies,
written with the misconception's value. The rest are random slips, wrong steps, format errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rredcot.data.checker import LINE_TRAILING, STEP_LINE, check_response
from rredcot.data.misconceptions import Misconception
from rredcot.data.programs import Program

ERROR_KINDS: tuple[str, ...] = ("correct", "systematic", "other")


def first_error_kind(
    program: str | Mapping[str, Any] | Program, response: str, misconception: Misconception
) -> str:
    """`correct` (the checker finds no error), `systematic` (the first wrong line computes a
    step where `misconception` applies, with the operands as written, and states its value) or
    `other`."""
    prog = Program.from_json(program)
    check = check_response(prog, response)
    if check.correct:
        return "correct"
    if check.error_kind != "wrong_value" or check.first_error_span is None:
        return "other"
    start, stop = check.first_error_span
    g = STEP_LINE.fullmatch(response[start:stop].rstrip(LINE_TRAILING))
    if g is None:  # the checker called it a wrong value, so the line parses
        raise ValueError(f"line {response[start:stop]!r}: not a step line")
    op, x, y, value = g.group(3), int(g.group(5)), int(g.group(7)), int(g.group(8))
    wrong = misconception.value(op, x, y, prog.modulus)
    return "systematic" if wrong is not None and wrong == value else "other"
