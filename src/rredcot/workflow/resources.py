"""What each rule's jobs ask of the machine or the cluster: memory, wall time, CPUs, GPUs, and
the slot allocator GPU commands run through."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rredcot.workflow import Config

# What a rule gets when neither $RREDCOT_RESOURCES nor config `resources` names the key.
DEFAULTS = {"mem_mb": 4000, "runtime": 60, "cpus_per_task": 1, "gpu": 0}


def resource(config: Config, overrides: Mapping[str, Any], rule: str, key: str) -> Any:
    """A resource of `rule`: `overrides` ($RREDCOT_RESOURCES: a partition's shorter time limit
    or smaller nodes), then config `resources`; in each the rule's entry, then `default`."""
    for table in (overrides, config.get("resources", {})):
        for entry in (rule, "default"):
            if key in table.get(entry, {}):
                return table[entry][key]
    return DEFAULTS[key]


def gpu_request(count: int, environ: Mapping[str, str]) -> dict[str, Any]:
    """The GPU resources of a rule's jobs that use `count` GPUs: `gpu` N (local: --resources
    gating and rredcot.devices; SLURM: --gpus=N); with $RREDCOT_SLURM_GRES (e.g. `gpu`,
    `gpu:a100`) a GRES request `gres=<it>:N` instead (gpu 0, so --gpus is not added too); with
    $RREDCOT_SLURM_GPU_MODEL the model (--gpus=<model>:N). Jobs without GPUs get neither."""
    gres = environ.get("RREDCOT_SLURM_GRES", "").strip()
    model = environ.get("RREDCOT_SLURM_GPU_MODEL", "").strip()
    if count and gres:
        return {"gpu": 0, "gres": f"{gres}:{count}"}
    return {"gpu": count, "gpu_model": model} if count and model else {"gpu": count}


def gpu_job(config: Config) -> str:
    """The slot allocator every GPU rule's command runs through (rredcot.devices): a local job
    with resources gpu > 0 gets devices of its own in CUDA_VISIBLE_DEVICES, the machine's or,
    inside a SLURM allocation, the allocation's; a job SLURM placed keeps its own; gpu 0 runs
    unchanged."""
    count = config["devices"]["count"]
    return "python -m rredcot.devices" + (f" --count {count}" if count is not None else "")
