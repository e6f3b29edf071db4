"""The checker oracle: state values from the synthetic world's step checker (METHOD.md §4,
"Positive control").

A credit method can only be shown to matter on a testbed where a credit that *knows* which step
failed beats the outcome baseline. This oracle knows: the world checks every written line. Its
value of a state s_k that has written d_k of the m checked lines (the program's n steps and the
answer line, m = n + 1) is

    V(s_k) = 0                       if the first wrong line is among the d_k written
    V(s_k) = p^(m − d_k)             otherwise,

with p the per-line accuracy of the policy, so a correct prefix is worth the chance that the
lines still to write all come out right (independent lines: an approximation of the policy's
own value, exact when its errors are). V(s_K) := R (the terminal correction), so Σ_k σ_k =
R − V(s_0) as for every credit estimator. p is estimated from the traces being credited
(`line_accuracy`: the geometric maximum-likelihood estimate from each trace's first error), so
it follows the policy as it trains.

The rule-aware oracle (`oracle_rule`, issue 43) is the same value with one accuracy per line
kind instead of one for all lines: the misconception's steps (`rule`: a step where the world's
misconception changes the value, METHOD.md §9), the other steps (`step`) and the answer line
(`answer`). A state's value is the product over the lines still to write of their kinds'
accuracies,

    V(s_k) = 0                                   if the first wrong line is among the d_k written
    V(s_k) = Π_kind p_kind^(lines of that kind left)   otherwise,

so a state before a risky rule step is worth less than one after it, and the credit for getting
(or missing) that step lands on it. The lines left are the program's steps not yet written
(a correct prefix names them) and the answer line; each p_kind is estimated from the traces
being credited like p (`kind_accuracy`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from rredcot.data.checker import LINE_TRAILING, STEP_LINE
from rredcot.data.misconceptions import Misconception, rule_steps
from rredcot.data.programs import Program

LINE_KINDS: tuple[str, ...] = ("rule", "step", "answer")
"""Kinds of checked lines for the rule-aware oracle (module docstring)."""


def lines_written(text: str, offsets: Sequence[int]) -> list[int]:
    """d_k: how many "\\n"-separated lines of `text` end at or before each character offset c_k.

    A line ends where its newline starts (or at the end of the text); an empty last line (text
    ending in "\\n") ends only at the end of the text.
    """
    ends, start = [], 0
    for line in text.split("\n"):
        ends.append(start + len(line))
        start += len(line) + 1
    return [sum(1 for e in ends if e <= c) for c in offsets]


def line_accuracy(first_errors: Sequence[int | None], checked_lines: Sequence[int]) -> float:
    """p̂ = lines right / lines attempted up to and including each trace's first error.

    first_errors[i]: 1-based index of trace i's first wrong line (None: all right);
    checked_lines[i]: m_i, the lines the checker reads (steps + answer line). A trace with its
    first error at line e contributes e − 1 right of e attempted, a correct one m of m.
    """
    if len(first_errors) != len(checked_lines):
        raise ValueError(
            f"first_errors/checked_lines: need one entry per trace, got {len(first_errors)} and "
            f"{len(checked_lines)}"
        )
    right = attempted = 0
    for e, m in zip(first_errors, checked_lines, strict=True):
        if m < 1 or (e is not None and not 1 <= e <= m):
            raise ValueError(f"first error {e!r} is not a line of 1 … {m}")
        right += m if e is None else e - 1
        attempted += m if e is None else e
    if attempted == 0:
        raise ValueError("line_accuracy: no traces")
    return right / attempted


def checker_values(
    written: Sequence[int], first_error: int | None, checked_lines: int, accuracy: float
) -> list[float]:
    """V(s_k) for each state from the lines it has written (`lines_written`), the trace's first
    wrong line (1-based, None: all right), m = `checked_lines` and the per-line accuracy p."""
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"accuracy: expected a probability, got {accuracy!r}")
    return [
        0.0
        if first_error is not None and first_error <= d
        else accuracy ** max(checked_lines - d, 0)
        for d in written
    ]


def step_kinds(program: Program, misconception: Misconception) -> dict[str, str]:
    """`rule` for each step of `program` whose right operands make the misconception change
    its value, `step` for the others, by step name."""
    rule = rule_steps(program, misconception)
    return {s.name: "rule" if s.name in rule else "step" for s in program.steps}


def written_kinds(text: str, kinds: Mapping[str, str], checked_lines: int) -> list[str]:
    """The kind of each of the m = `checked_lines` lines of `text` (missing lines count as
    written empty): the last is the answer line; a step line is its step's kind (`kinds`, by the
    name it computes); a line that names no step of the program counts as `step`."""
    lines = text.split("\n")
    out = []
    for i in range(checked_lines - 1):
        line = lines[i].rstrip(LINE_TRAILING) if i < len(lines) else ""
        match = STEP_LINE.fullmatch(line)
        out.append(kinds.get(match.group(1), "step") if match else "step")
    return [*out, "answer"]


def kind_accuracy(
    first_errors: Sequence[int | None], line_kinds: Sequence[Sequence[str]]
) -> dict[str, float]:
    """p̂_kind = lines of that kind right / attempted, up to and including each trace's first
    error (`line_accuracy` per kind; line_kinds[i] from `written_kinds`). A kind no trace
    attempted gets the pooled p̂ of every line."""
    right: Counter[str] = Counter()
    attempted: Counter[str] = Counter()
    for e, kinds in zip(first_errors, line_kinds, strict=True):
        m = len(kinds)
        if m < 1 or (e is not None and not 1 <= e <= m):
            raise ValueError(f"first error {e!r} is not a line of 1 … {m}")
        last = m if e is None else e
        for j, kind in enumerate(kinds[:last], start=1):
            attempted[kind] += 1
            right[kind] += e is None or j < e
    total = sum(attempted.values())
    if total == 0:
        raise ValueError("kind_accuracy: no traces")
    pooled = sum(right.values()) / total
    return {k: right[k] / attempted[k] if attempted[k] else pooled for k in LINE_KINDS}


def kind_values(
    written: Sequence[int],
    first_error: int | None,
    line_kinds: Sequence[str],
    totals: Mapping[str, int],
    accuracy: Mapping[str, float],
) -> list[float]:
    """V(s_k) of the rule-aware oracle for each state from the lines it has written (d_k), the
    trace's first wrong line (None: all right), the kinds of its written lines (`written_kinds`),
    the program's lines per kind (`totals`: rule and step counts and one answer) and p̂_kind."""
    values = []
    for d in written:
        if first_error is not None and first_error <= d:
            values.append(0.0)
            continue
        left = Counter(totals)
        left.subtract(line_kinds[:d])
        value = 1.0
        for kind, n in left.items():
            value *= accuracy[kind] ** max(n, 0)
        values.append(value)
    return values
