"""Rule `training_report`: training curves (CSV + figure) and compute cost per method."""

from __future__ import annotations

from pathlib import Path

from rredcot.data.schema import read_json
from rredcot.planning.machine import machines_by_run_name, with_machine_column
from rredcot.reporting.training import compute_cost, plot_training_curves, training_curves
from rredcot.steps.cli import log, parser, setup


def main() -> None:
    p = parser(__doc__)
    p.add_argument(
        "--summaries",
        required=True,
        nargs="+",
        type=Path,
        help="train_summary.json of every run (metrics.csv lies beside it)",
    )
    p.add_argument("--baseline", required=True, help="the run the cost ratios are to")
    p.add_argument("--curves", required=True, type=Path)
    p.add_argument("--figure", required=True, type=Path)
    p.add_argument("--cost", required=True, type=Path)
    args = p.parse_args()
    setup()
    runs = []
    for path in args.summaries:
        settings = read_json(path)["settings"]
        # the run's name (a method or a variant of one) is its directory: train/{name}/seed{s}
        name = path.parent.parent.name
        runs.append((name, int(settings["seed"]), path.parent / "metrics.csv"))
    curves = training_curves(runs)
    args.curves.parent.mkdir(parents=True, exist_ok=True)
    curves.write_csv(args.curves)
    plot_training_curves(curves, args.figure)
    machines = machines_by_run_name(args.summaries)
    cost = with_machine_column(compute_cost(curves, args.baseline), machines)
    cost.write_csv(args.cost)
    log.info("compute cost per step:\n%s", cost)


if __name__ == "__main__":
    main()
