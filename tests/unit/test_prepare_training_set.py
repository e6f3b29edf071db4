"""The prepare step on a registry training set: a seeded random subset, kept in dataset order."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl


def _prepare(mirror: Path, out: Path, **params: object) -> pl.DataFrame:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "rredcot.steps.prepare_benchmark",
            "--dataset",
            "numina_cot",
            "--out",
            str(out),
            "--params",
            json.dumps({"mirror": str(mirror), **params}),
        ],
        check=True,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
    )
    return pl.read_parquet(out)


def test_training_set_subset_is_seeded_and_ordered(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    rows = [
        {"id": f"n{i}", "problem": f"What is {i}+1?", "answer": str(i + 1), "solution": ""}
        for i in range(20)
    ]
    (mirror / "numina_cot.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    full = _prepare(mirror, tmp_path / "full.parquet")
    assert full["id"].to_list() == [r["id"] for r in rows]
    a = _prepare(mirror, tmp_path / "a.parquet", max_problems=6, seed=3)
    b = _prepare(mirror, tmp_path / "b.parquet", max_problems=6, seed=3)
    c = _prepare(mirror, tmp_path / "c.parquet", max_problems=6, seed=4)
    assert a.height == 6 and a.equals(b)
    assert not a.equals(c)
    order = [int(i[1:]) for i in a["id"].to_list()]
    assert order == sorted(order)  # dataset order kept
    assert set(a["id"]) <= set(full["id"])
