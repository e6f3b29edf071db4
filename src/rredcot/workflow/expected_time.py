"""The expected time a run logs before its first job (rredcot.planning.timing): the measured job
times of a snapshot of a run of the same config files (docs/snapshots/, or $RREDCOT_SNAPSHOTS: one's
own snapshots), scaled to this machine by a short calibration.

The jobs come from the DAG Snakemake built; this module reads of them only their rule's name,
their benchmark file and what each waits for, handed in as callables, so it is tested without
a DAG."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rredcot.planning import timing

CLUSTER_LINE = (
    "expected time: not estimated under a cluster executor (jobs run on other machines "
    "than this one); measured job times per snapshot: docs/snapshots/*/job_times.csv"
)


def snapshots_dir(basedir: Path, environ: Mapping[str, str]) -> Path:
    """Where the snapshots are: $RREDCOT_SNAPSHOTS, else the repository's docs/snapshots/."""
    return Path(environ.get("RREDCOT_SNAPSHOTS", "").strip() or basedir / "docs" / "snapshots")


def configfiles_given(basedir: Path, configfiles: Iterable[str | Path]) -> list[str]:
    """The config files over config.yaml, as the command line named them (relative to the
    workflow where they lie in it): the key a snapshot of the same configuration is found by."""
    base = basedir.resolve()
    out = []
    for f in configfiles:
        path = Path(f).resolve()
        out.append(str(path.relative_to(base)) if base in path.parents else str(path))
    return out


def priced_jobs(
    jobs: Iterable[Any], dependencies: Callable[[Any], Iterable[Hashable]]
) -> tuple[list[tuple[str, str]], dict[str, list[str]]]:
    """The jobs with a benchmark file as (rule, key) pairs
    (`rredcot.planning.timing.benchmark_key`), and by key the keys of the jobs each waits for. A job
    is anything with `.benchmark` (None for none) and `.rule.name`; `dependencies(job)` are the jobs
    it waits for."""
    keys = {job: timing.benchmark_key(job.benchmark) for job in jobs if job.benchmark is not None}
    after = {key: [keys[d] for d in dependencies(job) if d in keys] for job, key in keys.items()}
    return [(job.rule.name, key) for job, key in keys.items()], after


def expected_time_line(
    *,
    local: bool,
    jobs: Callable[[], Iterable[Any]],
    dependencies: Callable[[Any], Iterable[Hashable]],
    snapshots: Path,
    configfiles: Sequence[str],
    cores: int,
    src: str | Path,
) -> str:
    """The line a run logs before its first job: the expected CPU seconds and wall time of
    `jobs()` (those that will run, so a resumed run prices only what is left), or why there is
    none. Under a cluster executor (`local` false) jobs run on other machines than this one,
    which a calibration here would measure: no estimate. Any error reading the DAG or the
    snapshots gives the reason, never a failed run."""
    from snakemake.exceptions import WorkflowError

    if not local:
        return CLUSTER_LINE
    try:
        priced, after = priced_jobs(jobs(), dependencies)
        return timing.expected_time(
            priced,
            snapshots,
            configfiles,
            cores,
            lambda: timing.calibrate_in_subprocess(src),
            after,
        )
    except (
        AttributeError,  # a Snakemake DAG without needrun_jobs (pinned: 9.27.1)
        RuntimeError,
        ValueError,
        OSError,
        subprocess.TimeoutExpired,
        WorkflowError,
    ) as err:
        return f"expected time: not estimated ({err})"
