"""The GPU slot allocator on fake device counts: jobs get disjoint devices, all or nothing, also
inside a SLURM allocation; a job SLURM placed, or one without GPUs, runs unchanged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rredcot.devices import acquire, device_ids, job_environment, lock_dir, try_acquire

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


def test_cpu_jobs_run_unchanged(tmp_path: Path) -> None:
    env = {"RREDCOT_GPU_LOCKS": str(tmp_path), "CUDA_VISIBLE_DEVICES": "7"}
    assert job_environment(0, 4, env) == (env, [])
    assert job_environment(0, None, {**env, "SLURM_JOB_ID": "123"})[1] == []
    got, fds = job_environment(2, 4, env)
    assert got["CUDA_VISIBLE_DEVICES"] == "0,1" and len(fds) == 2
    for fd in fds:
        os.close(fd)


def test_local_jobs_in_an_allocation_share_out_its_gpus(tmp_path: Path) -> None:
    """`salloc --gpus=4` then `snakemake --resources gpu=4`: SLURM sets SLURM_JOB_ID and the
    allocation's devices, and places none of the local jobs; each gets GPUs of its own (issue 46,
    item 3: every job used to land on GPU 0)."""
    salloc = {"RREDCOT_GPU_LOCKS": str(tmp_path), "SLURM_JOB_ID": "123"}
    alloc = {**salloc, "CUDA_VISIBLE_DEVICES": "0,1,2,3", "SLURM_JOB_GPUS": "4,5,6,7"}
    jobs = [job_environment(1, None, alloc) for _ in range(3)]
    assert [env["CUDA_VISIBLE_DEVICES"] for env, _ in jobs] == ["0", "1", "2"]
    assert job_environment(1, None, alloc)[0]["CUDA_VISIBLE_DEVICES"] == "3"
    # without CUDA_VISIBLE_DEVICES, SLURM's lists of the allocation's GPUs (the step's first)
    assert device_ids(None, {**salloc, "SLURM_JOB_GPUS": "4,5"}) == ["4", "5"]
    step = {**salloc, "SLURM_STEP_ID": "0", "SLURM_STEP_GPUS": "6", "SLURM_JOB_GPUS": "4,5,6"}
    assert device_ids(None, step) == ["6"]
    assert device_ids(8, step) == ["6"]  # devices.count is the machine's, not the allocation's
    assert device_ids(8, salloc) == [str(i) for i in range(8)]  # no list: the count
    with pytest.raises(ValueError, match=r"asks for 2 GPU\(s\) but this machine offers 1"):
        job_environment(2, None, step)


def test_a_job_slurm_placed_keeps_its_devices(tmp_path: Path) -> None:
    """The slurm executor runs each job under `srun` in a step of its own, with its GPUs bound
    (renumbered from 0 in CUDA_VISIBLE_DEVICES): the job keeps them, and jobs of two allocations
    on one node never wait for each other's "GPU 0" (their locks are their allocation's)."""
    base = {"RREDCOT_GPU_LOCKS": str(tmp_path), "SLURM_STEP_ID": "0", "SLURM_STEP_GPUS": "3"}
    one = {**base, "SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "0"}
    other = {**base, "SLURM_JOB_ID": "8", "CUDA_VISIBLE_DEVICES": "0"}
    assert lock_dir(one) != lock_dir(other) and lock_dir(one).parent == tmp_path
    got, fds = job_environment(1, None, one)
    assert got == one and len(fds) == 1
    assert try_acquire(1, ["0"], lock_dir(other))[0] == ["0"]  # not held by job 7
    two = {**one, "CUDA_VISIBLE_DEVICES": "0,1", "SLURM_JOB_ID": "9"}
    assert job_environment(2, None, two)[0] == two


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
