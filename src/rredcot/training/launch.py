"""How a step module is launched: plain `python -m`, or `accelerate launch` with a shipped config.

    accelerate_command(None, 1, None)
        ['python', '-m']
    accelerate_command("zero2", 8, 29501)
        ['env', 'TORCH_ELASTIC_SHUTDOWN_TIMEOUT=900', 'accelerate', 'launch', '--config_file',
         '<repo>/configs/accelerate/zero2.yaml', '--num_processes', '8',
         '--main_process_port', '29501', '-m']

The caller appends the module and its arguments (`rredcot.steps.train_policy --model ...`).
The configs (`configs/accelerate/{ddp,zero2,zero3}.yaml`) say `num_processes: 8`; the
command always overrides it, so one file serves any number of GPUs.

`accelerate launch` runs torch's elastic agent, which catches SIGTERM, passes it to the ranks
and SIGKILLs them after TORCH_ELASTIC_SHUTDOWN_TIMEOUT seconds (30 by default: far less than a
step and a ZeRO-3 save take). The command sets it to the time a SLURM job has between its
`--signal` and its time limit (`shutdown_timeout`), so the ranks finish the step and save.
"""

from __future__ import annotations

import re
from pathlib import Path

ACCELERATE_CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "accelerate"
"""The repository's accelerate configs (src/rredcot/training/ → repository root)."""

MIXED_PRECISIONS: tuple[str, ...] = ("no", "bf16")

SHUTDOWN_ENV = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
MIN_SHUTDOWN_S = 900
"""The least time the elastic agent gives the ranks between SIGTERM and SIGKILL: the SLURM
profile's signal lead (`--signal=TERM@900`), also for a signal that comes without one."""


def signal_lead(slurm_extra: str | None) -> int | None:
    """The seconds before the time limit at which `sbatch --signal=[{R|B}:]<sig>[@<seconds>]` in
    `slurm_extra` (a job's sbatch options) has SLURM signal the job (sbatch's default 60 without
    `@`), or None without the option."""
    found = re.search(r"--signal[= ]['\"]?(?:[RB]+:)?\w+(?:@(\d+))?", slurm_extra or "")
    if found is None:
        return None
    return int(found.group(1)) if found.group(1) else 60


def shutdown_timeout(slurm_extra: str | None) -> int:
    """The elastic agent's shutdown timeout for a job with these sbatch options: its signal lead,
    at least `MIN_SHUTDOWN_S`."""
    return max(signal_lead(slurm_extra) or 0, MIN_SHUTDOWN_S)


def available_configs(config_dir: str | Path = ACCELERATE_CONFIGS) -> list[str]:
    """Names of the accelerate configs in `config_dir` (file stems of *.yaml), sorted."""
    directory = Path(config_dir)
    return sorted(p.stem for p in directory.glob("*.yaml")) if directory.is_dir() else []


def accelerate_command(
    config_name: str | None,
    num_processes: int,
    main_process_port: int | None,
    *,
    mixed_precision: str | None = None,
    shutdown_s: int = MIN_SHUTDOWN_S,
    config_dir: str | Path = ACCELERATE_CONFIGS,
) -> list[str]:
    """The argv prefix that runs a step module (`-m` last; the module name comes next).

    None: `python -m` in this process (one process; `num_processes` must be 1). A name: `accelerate
    launch` with `<config_dir>/<name>.yaml` (absolute by default, so any working directory works)
    and `num_processes` processes; `main_process_port` keeps concurrent launches on one machine
    apart (None: accelerate's default 29500). `mixed_precision` ("no" | "bf16") overrides the
    config's bf16 so it matches `training.bf16` (the trainer refuses a mismatch). `shutdown_s`:
    how long the elastic agent lets the ranks finish on a signal (module docstring).
    """
    if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
        raise ValueError(f"num_processes: expected an integer >= 1, got {num_processes!r}")
    if main_process_port is not None and (
        isinstance(main_process_port, bool)
        or not isinstance(main_process_port, int)
        or not 1 <= main_process_port <= 65535
    ):
        raise ValueError(
            f"main_process_port: expected a port in [1, 65535], got {main_process_port!r}"
        )
    if mixed_precision is not None and mixed_precision not in MIXED_PRECISIONS:
        raise ValueError(
            f"mixed_precision: {mixed_precision!r} is not allowed; choose one of "
            f"{list(MIXED_PRECISIONS)}"
        )
    if isinstance(shutdown_s, bool) or not isinstance(shutdown_s, int) or shutdown_s < 1:
        raise ValueError(f"shutdown_s: expected seconds >= 1, got {shutdown_s!r}")
    if config_name is None:
        if num_processes != 1:
            raise ValueError(
                f"num_processes: {num_processes} processes need an accelerate config "
                f"(accelerate: one of {available_configs(config_dir)}); without one the step "
                "runs as a single `python -m` process"
            )
        return ["python", "-m"]
    path = Path(config_dir) / f"{config_name}.yaml"
    if not path.is_file():
        raise ValueError(
            f"accelerate: no config {config_name!r} ({path} does not exist); available in "
            f"{config_dir}: {available_configs(config_dir)}"
        )
    command = ["env", f"{SHUTDOWN_ENV}={shutdown_s}", "accelerate", "launch"]
    command += ["--config_file", str(path)]
    command += ["--num_processes", str(num_processes)]
    if main_process_port is not None:
        command += ["--main_process_port", str(main_process_port)]
    if mixed_precision is not None:
        command += ["--mixed_precision", mixed_precision]
    return [*command, "-m"]
