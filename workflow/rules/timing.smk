# The expected time of a run (rredcot.workflow.expected_time, rredcot.planning.timing): the measured
# job times of a snapshot of a run of the same config files (docs/snapshots/, or $RREDCOT_SNAPSHOTS:
# one's own snapshots), scaled to this machine by a short calibration. Included after every rule,
# whose benchmark paths it reads.

SNAPSHOTS = expected_time.snapshots_dir(Path(workflow.basedir), os.environ)


def benchmark_patterns() -> dict[str, str]:
    """Every rule's benchmark path pattern, by rule name (rules without one left out). The rules
    with their benchmark directives have no public API: `workflow.rules`."""
    from snakemake.io import strip_wildcard_constraints

    return {
        r.name: strip_wildcard_constraints(str(r.benchmark))
        for r in workflow.rules
        if r.benchmark is not None
    }


def expected_time_line() -> str:
    """The line a run logs before its first job (rredcot.workflow.expected_time). The jobs that
    will run and what each waits for come from the DAG Snakemake built, which has no public API:
    `workflow.dag.needrun_jobs()` (the call its own job stats use) and `job_dependencies()`; nor
    has whether jobs run here (`workflow.local_exec`)."""
    return expected_time.expected_time_line(
        local=workflow.local_exec,
        jobs=lambda: workflow.dag.needrun_jobs(),
        dependencies=lambda job: workflow.dag.job_dependencies(job),
        snapshots=SNAPSHOTS,
        configfiles=configfiles_given(),
        cores=workflow.cores,
        src=SRC,
    )


def log_expected_time() -> None:
    """Log `expected_time_line()` through Snakemake's logger (console and its log file)."""
    from snakemake.logging import logger

    logger.info(expected_time_line())
