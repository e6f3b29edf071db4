"""The GPU slot allocator on fake device counts: jobs get disjoint devices, all or nothing, and
SLURM jobs or jobs without GPUs run unchanged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rredcot.devices import acquire, device_ids, job_environment, try_acquire

REPO = Path(__file__).resolve().parents[2]


def test_device_ids_precedence() -> None:
    env = {"RREDCOT_GPUS": "3", "CUDA_VISIBLE_DEVICES": "4,5"}
    assert device_ids(2, env) == ["0", "1"]  # devices.count first
    assert device_ids(None, env) == ["0", "1", "2"]
    assert device_ids(None, {"RREDCOT_GPUS": "1, 6"}) == ["1", "6"]  # a list of ids
    assert device_ids(None, {"CUDA_VISIBLE_DEVICES": "4,5"}) == ["4", "5"]


def test_jobs_get_disjoint_devices_all_or_nothing(tmp_path: Path) -> None:
    ids = ["0", "1", "2", "3"]
    a, fds_a = try_acquire(1, ids, tmp_path)
    b, fds_b = try_acquire(2, ids, tmp_path)
    assert (a, b) == (["0"], ["1", "2"])
    assert try_acquire(2, ids, tmp_path) == ([], [])  # only device 3 is free: take none of it
    assert try_acquire(1, ids, tmp_path)[0] == ["3"]  # ... so it is still free
    for fd in fds_a:
        os.close(fd)  # job a ends
    c, _ = try_acquire(1, ids, tmp_path)
    assert c == ["0"]
    for fd in fds_b:
        os.close(fd)


def test_a_request_beyond_the_machine_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"asks for 3 GPU\(s\).*'devices.count'"):
        acquire(3, ["0", "1"], tmp_path)


def test_slurm_and_cpu_jobs_run_unchanged(tmp_path: Path) -> None:
    env = {"RREDCOT_GPU_LOCKS": str(tmp_path), "CUDA_VISIBLE_DEVICES": "7"}
    assert job_environment(0, 4, env) == (env, [])
    slurm = {**env, "SLURM_JOB_ID": "123"}
    assert job_environment(2, 4, slurm) == (slurm, [])
    got, fds = job_environment(2, 4, env)
    assert got["CUDA_VISIBLE_DEVICES"] == "0,1" and len(fds) == 2


def test_the_command_holds_its_devices_until_it_exits(tmp_path: Path) -> None:
    """Two jobs through the wrapper on three fake devices: the first holds two while it runs,
    the second gets the third; once the first exits its devices are free again."""
    env = {
        **os.environ,
        "RREDCOT_GPU_LOCKS": str(tmp_path / "locks"),
        "PYTHONPATH": str(REPO / "src"),
    }
    env.pop("SLURM_JOB_ID", None)
    hold = "import os, sys; print(os.environ['CUDA_VISIBLE_DEVICES'], flush=True); input()"
    wrapper = [sys.executable, "-m", "rredcot.devices", "--count", "3", "--gpus"]
    first = subprocess.Popen(
        [*wrapper, "2", "--", sys.executable, "-c", hold],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert first.stdout.readline().strip() == "0,1"  # it runs, holding 0 and 1
    show = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"
    second = subprocess.run(
        [*wrapper, "1", "--", sys.executable, "-c", show], env=env, capture_output=True, text=True
    )
    assert second.stdout.strip() == "2", second.stderr
    first.communicate("done\n")
    assert first.returncode == 0
    again = subprocess.run(
        [*wrapper, "3", "--", sys.executable, "-c", show], env=env, capture_output=True, text=True
    )
    assert again.stdout.strip() == "0,1,2", again.stderr
