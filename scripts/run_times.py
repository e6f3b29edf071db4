"""The measured time of runs per rule and in total, as a markdown table for the docs: from
snapshots (docs/snapshots/<name>/, their job_times.csv and timing.json) or a run's
results/benchmarks/ directly; several sources (two machine classes, two configs) side by side.

    python scripts/run_times.py docs/snapshots/<name> [docs/snapshots/<other> ...]
    python scripts/run_times.py results/benchmarks

Wall seconds are each job's own, summed: jobs that ran at once overlap, so the total exceeds the
run's elapsed time; CPU seconds are what a run of the same config costs (a job Snakemake could not
measure counts its wall seconds).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rredcot.planning import timing
from rredcot.reporting.numbers import duration


def read_source(source: Path) -> tuple[str, list[timing.JobTime]]:
    """A line naming the run (config, machine, commit, calibration) and its job times."""
    read = timing.read_reference(source)
    if read is not None:
        spec, jobs = read
        return (
            f"{timing.config_label(spec['configfiles'])} on {spec['machine']} (commit "
            f"{spec['commit']}; calibration {spec['calibration_s']:.4f} s)",
            jobs,
        )
    if (source / timing.JOB_TIMES).is_file() or (source / timing.TIMING).is_file():
        raise SystemExit(f"{source}: a snapshot needs both {timing.JOB_TIMES} and {timing.TIMING}")
    jobs = timing.benchmark_jobs(source)
    if not jobs:
        raise SystemExit(f"{source}: no benchmark files (*.tsv) and no snapshot")
    return f"the benchmark files under {source}", jobs


def table(runs: dict[str, list[timing.JobTime]]) -> list[str]:
    """Markdown lines: one row per rule (ordered by the first run's CPU seconds), jobs, CPU and
    summed wall seconds per run, then the totals."""
    per_run = {name: {r.rule: r for r in timing.per_rule(jobs)} for name, jobs in runs.items()}
    rules = list(dict.fromkeys(rule for rows in per_run.values() for rule in rows))
    header = ["rule"] + [f"{n}: {c}" for n in runs for c in ("jobs", "CPU s", "wall s (summed)")]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for rule in rules:
        cells = [rule]
        for rows in per_run.values():
            r = rows.get(rule)
            cells += (
                ["—"] * 3 if r is None else [str(r.jobs), f"{r.cpu_s:,.0f}", f"{r.wall_s:,.0f}"]
            )
        lines.append("| " + " | ".join(cells) + " |")
    totals = ["**total**"]
    for name, rows in per_run.items():
        cpu, wall = (sum(getattr(r, f) for r in rows.values()) for f in ("cpu_s", "wall_s"))
        totals += [str(len(runs[name])), duration(cpu), duration(wall)]
    lines.append("| " + " | ".join(totals) + " |")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("sources", type=Path, nargs="+", help="snapshot directories or benchmark dirs")
    args = p.parse_args()
    names = [s.resolve().name for s in args.sources]
    if len(set(names)) != len(names):
        raise SystemExit(f"two sources share a directory name: {names}")
    runs = {}
    for name, source in zip(names, args.sources, strict=True):
        described, runs[name] = read_source(source)
        print(f"- {name}: {described}")
    print("\n" + "\n".join(table(runs)))


if __name__ == "__main__":
    main()
