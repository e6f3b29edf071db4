"""The one normalized table every dataset becomes, and its parquet I/O.

Every benchmark and training set, synthetic or from the Hub, is turned into rows with the
columns `id, problem, answer, solution, source` (extra columns are kept, never required), so
that every later rule reads one shape.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

COLUMNS: tuple[str, ...] = ("id", "problem", "answer", "solution", "source")
SCHEMA: dict[str, pl.DataType] = {c: pl.String() for c in COLUMNS}


class MalformedRowsError(ValueError):
    """Too many rows of a dataset could not be normalized; the message names them."""


def write_parquet(df: pl.DataFrame, path: str | Path) -> Path:
    """Write `df` after checking it has the normalized columns (in front, in order)."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"table lacks normalized column(s) {missing}; has {df.columns}")
    rest = [c for c in df.columns if c not in COLUMNS]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    df.select([*COLUMNS, *rest]).write_parquet(path)
    return path


def read_parquet(path: str | Path) -> pl.DataFrame:
    """Read a normalized table written by `write_parquet`."""
    df = pl.read_parquet(path)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: not a normalized table, missing {missing}")
    return df
