"""Raw benchmark rows -> the normalized table (`id, problem, answer, solution, source`).

A registry entry says which source column holds what, and how the reference answer y* is
obtained when a set has no clean answer column (last `\\boxed{}` of the solution, or GSM8K's
`#### <answer>` line). Rows that cannot be normalized are counted and listed with a reason,
never dropped silently; past `max_malformed_fraction` of the raw rows the whole load fails.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from rredcot.data.registry import (
    DatasetSpec,
    HubLoader,
    ResolvedSource,
    registry_entry,
    resolve_source,
)
from rredcot.data.schema import COLUMNS, SCHEMA, MalformedRowsError

BOXED_COMMANDS: tuple[str, ...] = ("\\boxed", "\\fbox")
GSM8K_MARKER = "####"
SHOWN_IDS = 20  # how many malformed row ids an error message lists before "and N more"


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`) in `text`, braces balanced.

    `\\boxed 5` (no braces) yields the token after the space. None when there is no box or
    the last one is not closed, so a truncated solution never yields a partial answer.
    """
    start = max(text.rfind(cmd) for cmd in BOXED_COMMANDS)
    if start < 0:
        return None
    cmd = next(c for c in BOXED_COMMANDS if text.startswith(c, start))
    rest = text[start + len(cmd) :]
    if rest.startswith(" "):
        token = rest.strip().split("$")[0].split()
        return token[0] if token else None
    if not rest.startswith("{"):
        return None
    depth = 0
    for i, ch in enumerate(rest):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                inner = rest[1:i].strip()
                return inner or None
    return None


def split_gsm8k_answer(text: str) -> tuple[str, str] | None:
    """GSM8K's answer field `"<reasoning>\\n#### 1,234"` -> (`"<reasoning>"`, `"1234"`).

    Thousands separators are removed from the final number (as in the Qwen2.5-Math harness
    the mirror copy comes from). None when the marker or the number after it is missing.
    """
    head, marker, tail = text.rpartition(GSM8K_MARKER)
    if not marker:
        return None
    answer = tail.strip().replace(",", "")
    if not answer:
        return None
    return head.rstrip(), answer


def stringify_answer(value: Any) -> str | None:
    """A scalar answer as text (AIME answers may be ints, AMC answers floats like 27.0).

    Integral floats lose their `.0`; None, empty text, NaN, and non-scalars give None.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        text = value.strip()
        return text or None
    return None


def _text(value: Any) -> str | None:
    """A non-empty text field (problem or solution), or None."""
    if isinstance(value, str) and value.strip():
        return value
    return None


@dataclass(frozen=True)
class NormalizedDataset:
    """A benchmark in the normalized schema, plus what was left out and why.

    `df` holds the normalized columns first, then any extra source columns; `malformed`
    lists (row id, reason) for every raw row not in `df`; `origin` is where the rows came
    from (`mirror:<path>` or `hub:<id>@<revision>`), also in the `source` column.
    """

    df: pl.DataFrame
    malformed: list[tuple[str, str]]
    n_raw: int
    origin: str
    spec: DatasetSpec | None = field(default=None, compare=False)


def _extract(
    answer_from: str, record: Mapping[str, Any], columns: Mapping[str, str]
) -> tuple[dict[str, str], str | None]:
    """(problem, answer, solution) of one record under `columns`, or the reason it fails."""
    problem = _text(record.get(columns["problem"]))
    if problem is None:
        return {}, f"missing or empty problem (column {columns['problem']!r})"
    solution_raw = record.get(columns["solution"]) if "solution" in columns else None
    solution = solution_raw if isinstance(solution_raw, str) else ""
    if answer_from == "column":
        answer = stringify_answer(record.get(columns["answer"]))
        if answer is None:
            value = record.get(columns["answer"])
            return {}, f"missing or empty answer (column {columns['answer']!r}: {value!r})"
    elif answer_from == "last_boxed":
        answer = last_boxed(solution) if solution else None
        if answer is None:
            return {}, f"answer not extractable: no closed \\boxed{{}} in {columns['solution']!r}"
    elif answer_from == "gsm8k_marker":
        raw = record.get(columns["answer"])
        parts = split_gsm8k_answer(raw) if isinstance(raw, str) else None
        if parts is None:
            return {}, (
                f"answer not extractable: no '{GSM8K_MARKER} <answer>' in {columns['answer']!r}"
            )
        solution, answer = parts
    else:  # DatasetSpec validates this; kept so a new rule cannot pass unnoticed
        raise ValueError(f"unknown answer_from {answer_from!r}")
    return {"problem": problem, "answer": answer, "solution": solution}, None


def _row_id(spec: DatasetSpec, record: Mapping[str, Any] | None, index: int, mirror: bool) -> str:
    """The row's id: the source's own (hub ids get a `<name>-` prefix) or `<name>-<index>`."""
    id_col = "id" if mirror else spec.columns.get("id")
    raw = record.get(id_col) if (record is not None and id_col) else None
    if isinstance(raw, bool) or raw is None or (isinstance(raw, str) and not raw.strip()):
        return f"{spec.name}-{index}"
    text = str(raw).strip()
    if mirror or text.startswith(f"{spec.name}-"):
        return text
    return f"{spec.name}-{text}"


def _extra_name(column: str) -> str:
    """Extra source columns keep their name unless it clashes with a normalized one."""
    return f"raw_{column}" if column in COLUMNS else column


def _series(name: str, values: Sequence[Any]) -> pl.Series:
    """A column of extra values; mixed types (e.g. int and str ids) become text."""
    try:
        return pl.Series(name, values)
    except (TypeError, pl.exceptions.PolarsError):
        as_text = [
            None if v is None else v if isinstance(v, str) else json.dumps(v, default=str)
            for v in values
        ]
        return pl.Series(name, as_text, dtype=pl.String)


def normalize_rows(
    spec: DatasetSpec, source: ResolvedSource, max_malformed_fraction: float
) -> NormalizedDataset:
    """Map `source`'s rows onto the normalized schema under `spec`, listing malformed rows.

    Mirror rows are already in the normalized layout (`id, problem, answer, solution`) and
    must carry their answer; Hub rows go through `spec.columns` and `spec.answer_from`.
    Raises MalformedRowsError when malformed / n_raw > `max_malformed_fraction`.
    """
    if not 0.0 <= max_malformed_fraction <= 1.0:
        raise ValueError(f"max_malformed_fraction must be in [0, 1], got {max_malformed_fraction}")
    mirror = source.kind == "mirror"
    columns: Mapping[str, str] = (
        {c: c for c in ("id", "problem", "answer", "solution")} if mirror else spec.columns
    )
    answer_from = "column" if mirror else spec.answer_from
    n_raw = len(source.rows)
    if n_raw == 0:
        raise ValueError(f"{spec.name}: {source.origin} has no rows")
    if not mirror:
        _check_columns(spec, source)

    consumed = set(columns.values())
    kept: list[dict[str, Any]] = []
    extra_cols: list[str] = []
    malformed: list[tuple[str, str]] = []
    first_seen: dict[str, int] = {}
    for row in source.rows:
        row_id = _row_id(spec, row.record, row.index, mirror)
        if row.record is None:
            malformed.append((row_id, row.error or "unreadable row"))
            continue
        fields, reason = _extract(answer_from, row.record, columns)
        if reason is not None:
            malformed.append((row_id, reason))
            continue
        if row_id in first_seen:
            malformed.append((row_id, f"duplicate id (first at row {first_seen[row_id]})"))
            continue
        first_seen[row_id] = row.index
        out: dict[str, Any] = {"id": row_id, **fields, "source": source.origin}
        for key, value in row.record.items():
            if key in consumed:
                continue
            name = _extra_name(key)
            if name not in extra_cols:
                extra_cols.append(name)
            out[name] = value
        kept.append(out)

    if malformed and len(malformed) / n_raw > max_malformed_fraction:
        shown = ", ".join(row_id for row_id, _ in malformed[:SHOWN_IDS])
        more = len(malformed) - SHOWN_IDS
        first_reason = malformed[0][1]
        raise MalformedRowsError(
            f"{spec.name} ({source.origin}): {len(malformed)} of {n_raw} rows malformed "
            f"({len(malformed) / n_raw:.1%} > max_malformed_fraction "
            f"{max_malformed_fraction:.1%}): {shown}"
            + (f" and {more} more" if more > 0 else "")
            + f"; first reason: {first_reason}"
        )

    data = {c: pl.Series(c, [r[c] for r in kept], dtype=SCHEMA[c]) for c in COLUMNS}
    for name in extra_cols:
        data[name] = _series(name, [r.get(name) for r in kept])
    return NormalizedDataset(
        df=pl.DataFrame(data), malformed=malformed, n_raw=n_raw, origin=source.origin, spec=spec
    )


def _check_columns(spec: DatasetSpec, source: ResolvedSource) -> None:
    """A mapped Hub column missing from every row means the Hub schema changed: fail loudly."""
    seen: set[str] = set()
    for row in source.rows:
        if row.record is not None:
            seen.update(row.record)
    missing = sorted(col for col in spec.columns.values() if col not in seen)
    if missing:
        raise ValueError(
            f"{spec.name} ({source.origin}): mapped column(s) {missing} not in the source; "
            f"it has {sorted(seen)}. Update the registry's column mapping for {spec.name!r}."
        )


def load_normalized(
    name: str,
    mirror: Path | None,
    max_malformed_fraction: float,
    hub_loader: HubLoader | None = None,
) -> NormalizedDataset:
    """Registry dataset `name` as a normalized table, mirror first, then the Hub.

    Malformed rows are returned in `.malformed` for the caller to log; more than
    `max_malformed_fraction` of them raises MalformedRowsError naming the rows.
    """
    spec = registry_entry(name)
    return normalize_rows(spec, resolve_source(spec, mirror, hub_loader), max_malformed_fraction)
