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
"""

from __future__ import annotations

from collections.abc import Sequence


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
