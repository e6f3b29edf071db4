"""One run of the whole smoke DAG, shared by every integration test (it takes minutes), and the
mirrors the integration tests use."""

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


def without_mirror() -> dict[str, str]:
    """The environment less RREDCOT_MIRROR, offline: smoke.yaml's data.mirror is relative and
    does not resolve from a scratch directory, so a run in one reads no mirror at all."""
    env = {k: v for k, v in os.environ.items() if k != "RREDCOT_MIRROR"}
    return {**env, "HF_HUB_OFFLINE": "1"}


@pytest.fixture()
def no_mirror_env() -> dict[str, str]:
    """`without_mirror()`, for tests that run Snakemake on the synthetic world themselves."""
    return without_mirror()


@pytest.fixture(scope="session")
def smoke_run(repo, tmp_path_factory):
    """The default target (tables, studies, training) on the smoke config, without the benchmark
    mirror: the synthetic world needs none, so the integration test runs on any clone."""
    workdir = tmp_path_factory.mktemp("smoke")
    proc = snakemake(
        repo,
        workdir,
        "--configfile",
        str(repo / "configs" / "smoke.yaml"),
        "--cores",
        "2",
        "all",
        env=without_mirror(),
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return workdir, proc


@pytest.fixture(scope="session")
def smoke_aime24(repo, mirror, smoke_run):
    """The real aime24 table on the smoke run's base model, read from the benchmark mirror
    (the one part of the smoke DAG that needs it)."""
    workdir, _ = smoke_run
    env = {**os.environ, "RREDCOT_MIRROR": str(mirror), "HF_HUB_OFFLINE": "1"}
    proc = snakemake(
        repo,
        workdir,
        "--configfile",
        str(repo / "configs" / "smoke.yaml"),
        "--cores",
        "2",
        "results/aime24_table.csv",
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return workdir, proc


@pytest.fixture()
def stub_mirror(tmp_path):
    """A mirror of empty `<dataset>.jsonl` files, one per registry dataset, for dry runs: the
    DAG needs the files to exist (they are rule inputs), no job reads them."""
    from rredcot.data.registry import REGISTRY

    path = tmp_path / "stub_mirror"
    path.mkdir()
    for name in REGISTRY:
        (path / f"{name}.jsonl").write_text("")
    return path
