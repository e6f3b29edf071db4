"""Which solution path a response takes, and how far it follows a reference's: the overlap
and the own-path oracle reference (analysis rows only)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rredcot.data.checker import LINE_TRAILING, STEP_LINE
from rredcot.data.programs import Program, SolutionPath


def step_forms(text: str) -> list[tuple[str, str, str, str]]:
    """(name, left, op, right) of every well-formed step line of `text`, in order (values
    ignored: a line's form is its place on a path, right or wrong)."""
    out = []
    for line in text.split("\n"):
        g = STEP_LINE.fullmatch(line.rstrip(LINE_TRAILING))
        if g is not None:
            out.append(g.group(1, 2, 3, 4))
    return out


def path_overlap(reference: str, response: str) -> float:
    """How far `response` follows the reference's solution path: the longest common
    subsequence of their step-line forms (name and operands in order, values ignored) over the
    reference's step count. 1.0: every reference line, written the same way round, in the same
    relative order; a trace on another order or operand order scores less. NaN when the
    reference has no step line."""
    ref, resp = step_forms(reference), step_forms(response)
    if not ref:
        return math.nan
    row = [0] * (len(resp) + 1)
    for x in ref:
        prev_diag = 0
        for j, y in enumerate(resp, start=1):
            prev_diag, row[j] = row[j], prev_diag + 1 if x == y else max(row[j], row[j - 1])
    return row[-1] / len(ref)


def own_path(program: str | Mapping[str, Any] | Program, response: str) -> SolutionPath:
    """The solution path a response takes: its well-formed lines that compute a step of the
    program after that step's operands (first occurrence; in the response's order and operand
    order), then every step it left out in the program's order. Always a valid path."""
    prog = Program.from_json(program)
    needs, commutable = prog.operands(), set(prog.commutable_steps())
    order: list[str] = []
    commuted: set[str] = set()
    for name, left, op, right in step_forms(response):
        if name not in needs or name in order or any(x not in order for x in needs[name]):
            continue
        st = prog.step(name)
        if (left, op, right) == (st.left, st.op, st.right):
            order.append(name)
        elif name in commutable and (left, op, right) == (st.right, st.op, st.left):
            order.append(name)
            commuted.add(name)
    order += [st.name for st in prog.steps if st.name not in order]
    return SolutionPath(tuple(order), frozenset(commuted))


def own_path_solution(program: str | Mapping[str, Any] | Program, response: str) -> str:
    """The answer key written on the response's own path (`own_path`): an oracle reference,
    which real data never has; for analysis rows only."""
    prog = Program.from_json(program)
    return prog.path_text(own_path(prog, response))
