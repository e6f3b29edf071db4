"""How a train_policy job starts its run: `python -m`, or `accelerate launch` with a rendezvous
port of the run's own."""

from __future__ import annotations

from rredcot.workflow import Config
from rredcot.workflow.runs import base_method, methods_and_seeds
from rredcot.workflow.shell import command

# The first run's rendezvous port; each (method, seed) adds its place in `methods_and_seeds`.
PORT_BASE = 29500


def training_launcher(
    config: Config, method: str, seed: int, slurm_extra: str | None = None
) -> str:
    """`python -m`, or `accelerate launch --config_file ... -m` with `training.accelerate` and
    `training.num_processes`; each run gets its own rendezvous port, so runs can share a node,
    and the ranks as long to save on a signal as the job's `--signal` lead in `slurm_extra`
    (the SLURM profile's; rredcot.training.launch.shutdown_timeout)."""
    from rredcot.training.launch import accelerate_command, shutdown_timeout

    tr = config["training"]
    # a method may launch otherwise (e.g. RRPO/SRPO, refused under ZeRO-3, on zero2)
    own = tr["per_method"].get(base_method(config, method), {})
    argv = accelerate_command(  # port and precision matter only under accelerate launch
        own.get("accelerate", tr["accelerate"]),
        tr["num_processes"],
        PORT_BASE + methods_and_seeds(config).index((method, seed)),
        mixed_precision="bf16" if tr["bf16"] else "no",
        shutdown_s=shutdown_timeout(slurm_extra),
    )
    return command(argv)
