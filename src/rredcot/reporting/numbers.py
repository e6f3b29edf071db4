"""How the summary, the captions and the docs print numbers: signed differences with a true
minus, plain values, intervals, durations, markdown tables (one form, so a quoted number matches
the file it came from)."""

from __future__ import annotations

import math

from rredcot.reporting.summary_tables import MINUS


def signed(x: float | None, digits: int = 3) -> str:
    """A difference as the docs print it: explicit sign, a true minus."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:+.{digits}f}".replace("-", MINUS)


def plain(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{digits}f}".replace("-", MINUS)


def interval(low: float | None, high: float | None) -> str:
    return f"{signed(low)} … {signed(high)}"


def duration(seconds: float) -> str:
    """`12,140 s (3 h 22 min)`."""
    minutes = round(seconds / 60)
    return f"{seconds:,.0f} s ({minutes // 60} h {minutes % 60:02d} min)"


def markdown_table(header: list[str], rows: list[list[object]]) -> list[str]:
    """A markdown table."""
    cells = [[("" if c is None else str(c)) for c in row] for row in rows]
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in cells),
        "",
    ]
