"""The measured time of a run per rule and in total, as a markdown table for the docs: from a
snapshot (docs/snapshots/<name>/, its job_times.csv and timing.json) or a run's
results/benchmarks/ directly.

    python scripts/run_times.py docs/snapshots/<name>
    python scripts/run_times.py results/benchmarks

Wall seconds are each job's own, summed: jobs that ran at once overlap, so the total exceeds the
run's elapsed time; CPU seconds are what a run of the same config costs (a job Snakemake could not
measure counts its wall seconds).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rredcot import timing
from rredcot.reporting.summary import duration


def table(jobs: list[timing.JobTime]) -> list[str]:
    """Markdown lines: one row per rule, then the total."""
    rows = timing.per_rule(jobs)
    lines = ["| rule | jobs | CPU s | wall s (summed) |", "|---|---|---|---|"]
    lines += [f"| {r.rule} | {r.jobs} | {r.cpu_s:,.0f} | {r.wall_s:,.0f} |" for r in rows]
    cpu, wall = sum(r.cpu_s for r in rows), sum(r.wall_s for r in rows)
    lines.append(f"| **total** | {len(jobs)} | {duration(cpu)} | {duration(wall)} |")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("source", type=Path, help="a snapshot directory or results/benchmarks/")
    args = p.parse_args()
    read = timing.read_reference(args.source)
    if read is not None:
        spec, jobs = read
        print(
            f"Run of {timing.config_label(spec['configfiles'])} on {spec['machine']} (commit "
            f"{spec['commit']}; calibration {spec['calibration_s']:.4f} s):\n"
        )
    elif (args.source / timing.JOB_TIMES).is_file() or (args.source / timing.TIMING).is_file():
        raise SystemExit(f"{args.source}: a snapshot needs both {timing.JOB_TIMES} and "
                         f"{timing.TIMING}")  # fmt: skip
    else:
        jobs = timing.benchmark_jobs(args.source)
        if not jobs:
            raise SystemExit(f"{args.source}: no benchmark files (*.tsv) and no snapshot")
    print("\n".join(table(jobs)))


if __name__ == "__main__":
    main()
