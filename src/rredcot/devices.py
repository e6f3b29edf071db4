"""Give every local GPU job devices of its own: a file-lock slot allocator.

Snakemake's `--resources gpu=8` only counts: with eight one-GPU jobs running it assigns no
devices, and every vLLM engine opens on device 0. Each rule with `resources: gpu` therefore runs
its command through

    python -m rredcot.devices --gpus N [--count C] -- <command ...>

which takes N device slots (an exclusive `flock` per device, in a directory shared by every
job of this user on the machine), sets CUDA_VISIBLE_DEVICES to them and `exec`s the command
with the locks still open: they are held exactly as long as the job's process lives, and
freed by the kernel however it ends. No nvidia-smi: the devices are `--count` (config key
`devices.count`), else $RREDCOT_GPUS (a count or a list such as `0,2,5`), else the list in
the caller's CUDA_VISIBLE_DEVICES, else SLURM's SLURM_STEP_GPUS / SLURM_JOB_GPUS, else torch's
device count; inside a SLURM allocation its own list comes first. A job that asks for none runs
unchanged.

Under SLURM the same holds inside the allocation: `salloc` (or `srun --pty`) with
`--resources gpu=N` runs several local jobs in one allocation, which SLURM does not place on its
GPUs, so they share out the allocation's devices. The locks are the allocation's own (a
subdirectory per SLURM job and step, `lock_dir`): device numbers are relative to an allocation
(SLURM's cgroup renumbers them from 0), so two allocations on one node must not lock each
other's "GPU 0". A job that SLURM itself placed (the slurm executor runs each job under `srun`
in a step of its own, with the step's GPUs bound) is alone in its step: it takes all of its
step's devices, and its CUDA_VISIBLE_DEVICES stays as SLURM set it.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

GPUS_ENV = "RREDCOT_GPUS"
LOCKS_ENV = "RREDCOT_GPU_LOCKS"
POLL_S = 2.0  # how often a job waiting for devices tries again


def slurm_scope(env: Mapping[str, str] = os.environ) -> str | None:
    """`job<id>` (with `.step<id>` inside a job step) under SLURM, None outside it: the jobs that
    share device numbers, hence locks (module docstring)."""
    job = env.get("SLURM_JOB_ID", "").strip()
    if not job:
        return None
    step = env.get("SLURM_STEP_ID", "").strip()
    return f"job{job}" + (f".step{step}" if step else "")


def lock_dir(env: Mapping[str, str] = os.environ) -> Path:
    """$RREDCOT_GPU_LOCKS, else one directory per user in the system's temp directory (the
    devices are the machine's, so every workflow of the user shares them); under SLURM a
    subdirectory of it per allocation (`slurm_scope`)."""
    own = env.get(LOCKS_ENV, "").strip()
    base = Path(own) if own else Path(tempfile.gettempdir()) / f"rredcot-gpu-locks-{os.getuid()}"
    scope = slurm_scope(env)
    return base / scope if scope else base


def _torch_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count())


# Where SLURM lists an allocation's devices, in the order read: CUDA_VISIBLE_DEVICES first, since
# SLURM's own lists hold the node's numbers, which its cgroup may renumber from 0 in it.
SLURM_DEVICES = ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")


def device_ids(count: int | None, env: Mapping[str, str] = os.environ) -> list[str]:
    """The devices jobs share out (module docstring): `count`, $RREDCOT_GPUS, the caller's
    CUDA_VISIBLE_DEVICES, SLURM's step or job GPUs, then torch's count. Inside a SLURM
    allocation that lists its devices, those come first: `devices.count` and $RREDCOT_GPUS
    describe a whole machine, not the allocation's share of it."""
    names = (GPUS_ENV, *SLURM_DEVICES)
    if slurm_scope(env) and any(env.get(name, "").strip() for name in SLURM_DEVICES):
        names, count = SLURM_DEVICES, None
    if count is not None:
        return [str(i) for i in range(count)]
    for name in names:
        value = env.get(name, "").strip()
        if not value:
            continue
        if name == GPUS_ENV and value.isdigit():
            return [str(i) for i in range(int(value))]
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(i) for i in range(_torch_count())]


def try_acquire(n: int, ids: Sequence[str], directory: Path) -> tuple[list[str], list[int]]:
    """N free devices of `ids` and their open lock descriptors, or ([], []) when fewer than N
    are free (all or nothing: two jobs never hold half of what each needs)."""
    directory.mkdir(parents=True, exist_ok=True)
    taken: list[str] = []
    fds: list[int] = []
    for device in ids:
        if len(taken) == n:
            break
        fd = os.open(directory / f"gpu-{device}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        taken.append(device)
        fds.append(fd)
    if len(taken) < n:
        for fd in fds:
            os.close(fd)  # closing the descriptor releases its lock
        return [], []
    return taken, fds


def acquire(n: int, ids: Sequence[str], directory: Path) -> tuple[list[str], list[int]]:
    """`try_acquire`, waiting until N devices are free; a request for more devices than exist
    is an error (it would wait forever), naming the settings that give the count."""
    if n > len(ids):
        raise ValueError(
            f"a job asks for {n} GPU(s) but this machine offers {len(ids)} ({list(ids)}); set "
            f"config key 'devices.count' or ${GPUS_ENV}, or lower the rule's resources gpu"
        )
    while True:
        taken, fds = try_acquire(n, ids, directory)
        if taken:
            return taken, fds
        time.sleep(POLL_S)


def job_environment(
    n: int, count: int | None, env: Mapping[str, str] = os.environ
) -> tuple[dict[str, str], list[int]]:
    """The environment a job with `n` GPUs runs in, and the lock descriptors to keep open: the
    caller's for a job without GPUs, else `n` devices of the machine or the SLURM allocation."""
    if n == 0:
        return dict(env), []
    taken, fds = acquire(n, device_ids(count, env), lock_dir(env))
    return {**env, "CUDA_VISIBLE_DEVICES": ",".join(taken)}, fds


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpus", type=int, required=True, help="devices this job needs")
    p.add_argument("--count", type=int, help="devices the machine offers (devices.count)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the job's command")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command after --")
    env, fds = job_environment(args.gpus, args.count)
    for fd in fds:
        os.set_inheritable(fd, True)  # the command holds the locks until it exits
    if fds:
        print(
            f"rredcot.devices: CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}", file=sys.stderr
        )
    os.execvpe(command[0], command, env)


if __name__ == "__main__":
    main()
