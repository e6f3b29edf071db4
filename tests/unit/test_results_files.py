"""Results-file readers name the file on any parse error (issue 32): a cut-short parquet, CSV or
JSON stops the job with its path, not with a polars error that names nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from rredcot.data.schema import UnreadableFileError, read_json, read_parquet, read_table

SRC = Path(__file__).resolve().parents[2] / "src" / "rredcot"


def cut(path: Path, keep: float = 0.5) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def test_a_cut_short_parquet_csv_or_json_is_named(tmp_path):
    table = pl.DataFrame({"method": ["grpo"] * 50, "reward": [0.5] * 50})
    table.write_parquet(tmp_path / "grades.parquet")
    (tmp_path / "metrics.csv").write_text('step,note\n1,"ok"\n2,"cut')
    (tmp_path / "train_summary.json").write_text(json.dumps({"steps": 60, "settings": {}}))
    assert read_table(tmp_path / "grades.parquet").equals(table)
    assert read_json(tmp_path / "train_summary.json")["steps"] == 60
    cut(tmp_path / "grades.parquet")
    cut(tmp_path / "train_summary.json")
    for path, read in [
        (tmp_path / "grades.parquet", read_table),
        (tmp_path / "grades.parquet", read_parquet),
        (tmp_path / "metrics.csv", read_table),
        (tmp_path / "train_summary.json", read_json),
    ]:
        with pytest.raises(UnreadableFileError, match=re.escape(f"{path}: cannot be read")):
            read(path)


def test_a_missing_file_stays_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_table(tmp_path / "absent.parquet")


def test_no_step_or_report_reads_a_results_file_unnamed():
    """Every step and report module reads tables through `read_table`/`read_parquet`."""
    found = [
        f"{p.relative_to(SRC)}:{n}"
        for folder in ("steps", "reporting")
        for p in sorted((SRC / folder).glob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\bpl\.(read|scan)_(parquet|csv|json|ndjson)\(", line)
    ]
    assert not found, found
