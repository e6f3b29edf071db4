"""The one normalized table every dataset becomes, its parquet I/O, and the results-file readers
that name the file on a parse error.

Every benchmark and training set, synthetic or from the Hub, is turned into rows with the
columns `id, problem, answer, solution, source` (extra columns are kept, never required), so
that every later rule reads one shape.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


class UnreadableFileError(ValueError):
    """A results file that does not parse (cut short, corrupted); the message names it."""


def _unreadable(path: str | Path, err: Exception) -> UnreadableFileError:
    return UnreadableFileError(
        f"{path}: cannot be read ({type(err).__name__}: {err}); it is corrupt or cut short: "
        "delete it and rerun, so that Snakemake rebuilds it"
    )


def read_table(path: str | Path, **options: Any) -> pl.DataFrame:
    """A results table, parquet or CSV/TSV by its suffix (`options` go to polars' reader, e.g. a
    TSV's `separator`); any parse error names the file (`UnreadableFileError`), which polars' own
    errors do not."""
    reader = pl.read_csv if Path(path).suffix in (".csv", ".tsv") else pl.read_parquet
    try:
        return reader(path, **options)
    except FileNotFoundError:
        raise
    except (OSError, ValueError, pl.exceptions.PolarsError, pl.exceptions.PanicException) as err:
        raise _unreadable(path, err) from err


def read_json(path: str | Path) -> Any:
    """A JSON results file (summary, record); a parse error names the file."""
    try:
        return json.loads(Path(path).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise _unreadable(path, err) from err


def read_parquet(path: str | Path) -> pl.DataFrame:
    """Read a normalized table written by `write_parquet` (`read_table`)."""
    df = read_table(path)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: not a normalized table, missing {missing}")
    return df
