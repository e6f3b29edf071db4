"""What machine a run ran on: the CPU, the kernels torch dispatches to, threads and versions.

Training results on the CPU moved by 0.04 between two machines of one kind (issue 17), so every
run record, SFT metrics file and training table names the machine it came from. `machine_label`
is the one-line form the tables carry; runs from more than one machine show every label.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

# Environment variables that change which kernels or how many threads torch uses.
_KERNEL_ENV = ("ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "DNNL_MAX_CPU_ISA")


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name with its family / model / stepping numbers (a virtual machine often
    reports only "AMD EPYC": the numbers tell Zen 4 from Zen 5). `cpuinfo` defaults to
    /proc/cpuinfo; elsewhere, platform.processor()."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text() if path.is_file() else ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if ":" not in line:
            if fields:
                break  # the first processor's block is enough
            continue
        key, value = (s.strip() for s in line.split(":", 1))
        fields.setdefault(key, value)
    name = fields.get("model name") or platform.processor() or platform.machine() or "unknown"
    numbers = [
        f"{label} {fields[key]}"
        for key, label in (("cpu family", "family"), ("model", "model"), ("stepping", "stepping"))
        if key in fields
    ]
    return f"{name} ({', '.join(numbers)})" if numbers else name


def machine_info() -> dict[str, Any]:
    """The machine facts a result can depend on (module docstring)."""
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "gpu": gpu,
        "env": {k: os.environ[k] for k in _KERNEL_ENV if k in os.environ},
    }


def machine_label(info: dict[str, Any]) -> str:
    """One line for a table: CPU model, torch's CPU capability, threads, GPU if any, and any
    kernel-choosing environment variable that was set."""
    parts = [
        str(info.get("cpu_model", "unknown CPU")),
        f"torch {info.get('torch', '?')} {info.get('torch_cpu_capability', '?')}",
        f"{info.get('torch_threads', '?')} threads",
    ]
    if info.get("gpu"):
        parts.append(str(info["gpu"]))
    parts += [f"{k}={v}" for k, v in sorted((info.get("env") or {}).items())]
    return "; ".join(parts)


def machines_of(summaries: list[dict[str, Any]]) -> str:
    """The distinct machine labels of several run summaries, in first-seen order, " | "-joined;
    a summary without a machine (written before it was recorded) shows as `not recorded`."""
    labels: list[str] = []
    for summary in summaries:
        info = summary.get("machine")
        label = machine_label(info) if isinstance(info, dict) else "not recorded"
        if label not in labels:
            labels.append(label)
    return " | ".join(labels)


def machines_by_run_name(summaries: list[Path]) -> dict[str, str]:
    """Run name (a method or variant: the directory `train/<name>/seed<s>/` holding each
    train_summary.json) -> the `machines_of` label of its seeds' runs."""
    from rredcot.data.schema import read_json  # names the file on a parse error

    grouped: dict[str, list[dict[str, Any]]] = {}
    for path in summaries:
        grouped.setdefault(path.parent.parent.name, []).append(read_json(path))
    return {name: machines_of(runs) for name, runs in grouped.items()}


def with_machine_column(frame: pl.DataFrame, machines: dict[str, str]) -> pl.DataFrame:
    """`frame` with a `machine` column looked up by its `method` (`not recorded` if absent)."""
    import polars as pl

    return frame.with_columns(
        pl.col("method").replace_strict(machines, default="not recorded").alias("machine")
    )
