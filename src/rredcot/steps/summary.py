"""Rule `summary`: `results/SUMMARY.md`, the run's headline from its own tables and the time of
every job from its `benchmark:` file (read at run time: every job `rule all` asks for has
finished, since this rule's inputs are the other targets)."""

from __future__ import annotations

from pathlib import Path

from rredcot.planning.machine import machine_info, machine_label
from rredcot.reporting.captions import write_caption_fragments
from rredcot.reporting.summary import (
    TABLES,
    git_commit,
    job_times,
    read_tables,
    render_summary,
    summary_values,
)
from rredcot.steps.cli import log, parser, require, setup


def main() -> None:
    p = parser(__doc__)
    for name in TABLES:
        p.add_argument(f"--{name.replace('_', '-')}", type=Path, help=f"results/{TABLES[name][0]}")
    p.add_argument("--benchmarks", required=True, type=Path, help="results/benchmarks/")
    p.add_argument("--own-benchmark", type=Path, help="this rule's benchmark file, not summed")
    p.add_argument("--repo", required=True, type=Path, help="the workflow's checkout (its commit)")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--captions", type=Path, help="directory of the report captions' numbers")
    args = p.parse_args()
    setup()
    configfiles, reference = require(args.params, "configfiles", "reference")
    tables = read_tables({name: getattr(args, name) for name in TABLES})
    times = job_times(args.benchmarks, exclude=args.own_benchmark)
    log.info("read %d benchmark files under %s", times.jobs, args.benchmarks)
    machine, commit = machine_label(machine_info()), git_commit(args.repo)
    text = render_summary(tables, times, machine, commit, configfiles, reference)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    log.info("wrote %s", args.out)
    if args.captions is not None:
        values = summary_values(tables, times, machine, commit, reference)
        written = write_caption_fragments(values, args.captions)
        log.info("wrote %d caption fragments under %s", len(written), args.captions)


if __name__ == "__main__":
    main()
