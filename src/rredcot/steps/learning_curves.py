"""Rule `learning_curves`: held-out pass@1 along every run, and the paired method comparison."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rredcot.data.schema import read_json, read_table
from rredcot.planning.machine import machines_by_run_name, with_machine_column
from rredcot.reporting.learning_curves import (
    comparison_mapping,
    learning_curves,
    method_comparison,
    plot_learning_curves,
    read_run,
)
from rredcot.steps.cli import log, parser, setup


def main() -> None:
    p = parser(__doc__)
    p.add_argument(
        "--summaries", required=True, nargs="+", type=Path, help="train_summary.json per run"
    )
    p.add_argument(
        "--grades", required=True, nargs="+", type=Path, help="final grades per run, same order"
    )
    p.add_argument("--base", required=True, type=Path, help="the base policy's grades on the split")
    p.add_argument("--curves", required=True, type=Path)
    p.add_argument("--runs", required=True, type=Path)
    p.add_argument("--figure", required=True, type=Path)
    p.add_argument("--comparison", required=True, type=Path)
    args = p.parse_args()
    setup()
    if len(args.summaries) != len(args.grades):
        raise ValueError(f"{len(args.summaries)} summaries but {len(args.grades)} grade files")
    runs = []
    for summary, grades in zip(args.summaries, args.grades, strict=True):
        settings = read_json(summary)["settings"]
        # the run's name (a method or a variant of one) is its directory: train/{name}/seed{s}
        name = summary.parent.parent.name
        runs.append(read_run(name, int(settings["seed"]), summary.parent, grades))
    base = read_table(args.base)
    per_run, summary = learning_curves(runs, base)
    machines = machines_by_run_name(args.summaries)
    summary = with_machine_column(summary, machines)
    for path in (args.curves, args.runs, args.comparison):
        path.parent.mkdir(parents=True, exist_ok=True)
    summary.write_csv(args.curves)
    per_run.write_csv(args.runs)
    plot_learning_curves(summary, args.figure)
    comparison = method_comparison(
        runs, base, args.params["reference"],
        n_resamples=args.params.get("bootstrap_resamples", 10_000),
        seed=args.params.get("seed", 0),
    )  # fmt: skip
    comparison = comparison.with_columns(
        pl.struct("method", "against")
        .map_elements(
            lambda r: " | ".join(
                dict.fromkeys(
                    machines.get(r[k], "not recorded")
                    for k in ("method", "against")
                    if r[k] != "base"
                )
            ),
            return_dtype=pl.String,
        )
        .alias("machine")
    )
    comparison.write_csv(args.comparison)
    log.info("learning curves:\n%s", summary)
    for key, value in comparison_mapping(comparison).items():
        log.info("%s: %s", key, value)


if __name__ == "__main__":
    main()
