"""One run of the whole smoke DAG, shared by every integration test (it takes minutes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def snakemake(repo: Path, workdir: Path, *args: str, env: dict | None = None):
    """Run Snakemake on the repo's Snakefile from `workdir`, as a user would."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), *args]
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env=env, timeout=1800)


@pytest.fixture(scope="session")
def run_snakemake():
    """`snakemake(repo, workdir, *args, env=None)` for tests that run their own command."""
    return snakemake


@pytest.fixture(scope="session")
def smoke_run(repo, mirror, tmp_path_factory):
    """The default target (tables, studies, training) and the aime24 table, on the smoke config."""
    workdir = tmp_path_factory.mktemp("smoke")
    env = {**os.environ, "RREDCOT_MIRROR": str(mirror), "HF_HUB_OFFLINE": "1"}
    proc = snakemake(
        repo,
        workdir,
        "--configfile",
        str(repo / "configs" / "smoke.yaml"),
        "--cores",
        "2",
        "all",
        "results/aime24_table.csv",
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return workdir, proc
