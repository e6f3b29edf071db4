"""The synthetic world's per-step checker: the first wrong line of any response, exactly
(METHOD.md §5, error localization), re-exported by the task `rredcot.tasks.synthetic`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rredcot.data.programs import ANSWER_CLOSE, ANSWER_PREFIX, COMMUTATIVE, Program

STEP_LINE = re.compile(r"([a-z])=([a-z])([-+*])([a-z])=(\d+)([-+*])(\d+)=(\d+)")
LINE_TRAILING = " \t\r"  # the only characters ignored at the end of a line


def _answer_value(line: str) -> str | None:
    """The value on an answer line, or None when the line is not one.

    `Answer: 5.` → "5". Tolerated: trailing spaces, spaces after the prefix, and a missing close
    (backends such as vLLM drop the stop string from the output). Nothing else.
    """
    if not line.startswith(ANSWER_PREFIX):
        return None
    value = line[len(ANSWER_PREFIX) :].rstrip(LINE_TRAILING).removesuffix(ANSWER_CLOSE).strip()
    return value or None


def extract_answer(response: str) -> str | None:
    """The value on the last line that starts with `Answer: `, or None."""
    for line in reversed(response.split("\n")):
        if line.startswith(ANSWER_PREFIX):
            return _answer_value(line)
    return None


@dataclass(frozen=True)
class StepCheck:
    """Verdict of the step checker on one response.

    first_error: 1-based index of the first wrong step; n_steps + 1 when every step is right but
    the answer line is missing, wrong or followed by more text; None when all is right.
    first_error_span: (start, end) character offsets in the response of the offending line
    (without its newline), or (len, len) when the response ends before it.
    error_kind: missing | malformed | wrong_step | wrong_substitution | wrong_value |
    wrong_answer | trailing_text (None when correct).
    answer_correct: exact match of `extract_answer(response)` with the reference answer, the same
    rule as `SyntheticTask.grade`; first_error None implies answer_correct.
    """

    first_error: int | None
    n_steps: int
    answer_correct: bool
    first_error_span: tuple[int, int] | None
    error_kind: str | None = None

    @property
    def correct(self) -> bool:
        return self.first_error is None


def _lines(text: str) -> list[tuple[int, int, str]]:
    """(start, end, line) for every "\\n"-separated line, offsets into `text`."""
    out, start = [], 0
    for line in text.split("\n"):
        out.append((start, start + len(line), line))
        start += len(line) + 1
    return out


def _step_verdict(
    got: str, program: Program, known: dict[str, int], values: dict[str, int]
) -> tuple[str | None, str | None]:
    """(name computed, error kind or None) of one step line, given the variables `known` so far.

    Valid: `name=L op R=x op y=z` where `name` is a step of the program not computed yet, L op R
    is its definition (or R op L for a commutative op), L and R are known, x and y are their
    values and z is the step's value.
    """
    g = STEP_LINE.fullmatch(got)
    if g is None:
        return None, "malformed"
    name, left, op, right = g.group(1, 2, 3, 4)
    step = next((s for s in program.steps if s.name == name), None)
    forms = set()
    if step is not None:
        forms.add((step.left, step.op, step.right))
        if step.op in COMMUTATIVE:
            forms.add((step.right, step.op, step.left))
    if step is None or name in known or (left, op, right) not in forms:
        return name, "wrong_step"  # another variable or expression than a step of the program
    if left not in known or right not in known:
        return name, "wrong_step"  # an operand not computed yet: not a valid order
    if g.group(5, 6, 7) != (str(known[left]), op, str(known[right])):
        return name, "wrong_substitution"
    if g.group(8) != str(values[name]):
        return name, "wrong_value"
    return name, None


def check_response(program: str | Mapping[str, Any] | Program, response: str) -> StepCheck:
    """Check a response (the text after the prompt) step by step against its program.

    Rule: lines 1 … n_steps (lines split on "\\n") compute the program's steps, one per line,
    each `c=a+b=3+8=1` character for character (trailing spaces, tabs and "\\r" ignored), in
    any order that uses only values already known (given or computed on an earlier line), with
    the operands of a commutative op (+, *) either way round: every valid solution path passes
    (`Program.solution_text(commuted=…)`; in a chain every step needs the previous one, so only
    the operand order varies). Line n_steps + 1 must be the answer line `Answer: <answer>.`
    (the same tolerance as `extract_answer`: spaces after the prefix, a missing "."), and only
    whitespace may follow it. The substituted operands must be the values (all earlier steps are
    right by then). A response that ends (or ends in blank space) before line i is missing step
    i. Nothing else is tolerated: no leading spaces, no blank lines between steps, no extra steps.
    """
    prog = Program.from_json(program)
    n = prog.depth
    values = prog.values()
    known = dict(prog.given)
    answer_correct = extract_answer(response) == prog.answer
    lines = _lines(response)
    end = (len(response), len(response))

    def error(i: int, kind: str, span: tuple[int, int]) -> StepCheck:
        return StepCheck(i, n, answer_correct, span, kind)

    def missing(i: int) -> bool:  # 0-based line i absent, or only blank space left
        return i >= len(lines) or (i == len(lines) - 1 and not lines[i][2].strip())

    for i in range(n):
        if missing(i):
            return error(i + 1, "missing", end)
        start, stop, line = lines[i]
        name, kind = _step_verdict(line.rstrip(LINE_TRAILING), prog, known, values)
        if kind is not None:
            return error(i + 1, kind, (start, stop))
        known[name] = values[name]
    if missing(n):
        return error(n + 1, "missing", end)
    start, stop, line = lines[n]
    value = _answer_value(line)
    if value is None:
        return error(n + 1, "malformed", (start, stop))
    if value != prog.answer:
        return error(n + 1, "wrong_answer", (start, stop))
    for start, stop, line in lines[n + 1 :]:
        if line.strip():
            return error(n + 1, "trailing_text", (start, stop))
    return StepCheck(None, n, answer_correct, None, None)
