"""Shared fixtures: repository paths and the benchmark mirror."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def mirror() -> Path:
    """The offline benchmark mirror (RREDCOT_MIRROR, else ../shared/data/benchmarks)."""
    path = Path(os.environ.get("RREDCOT_MIRROR") or REPO.parent / "shared" / "data" / "benchmarks")
    if not path.is_dir():
        pytest.skip(f"benchmark mirror not found at {path} (set RREDCOT_MIRROR)")
    return path
