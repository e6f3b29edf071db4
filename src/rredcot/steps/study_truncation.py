"""Rule `mc_truncation`: drop rate and value shift of truncated MC against the budget L, from
the ground-truth rollouts cut at each L; CSV and figure."""

from __future__ import annotations

from pathlib import Path

from rredcot.data.schema import read_table
from rredcot.reporting.figures import mc_truncation_figure
from rredcot.steps.cli import log, parser, require, setup
from rredcot.steps.study_common import Timer, main_segmentation, write_table
from rredcot.studies.segmentations import distinct_states
from rredcot.studies.truncation import truncation_table


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--segmentations", required=True, type=Path)
    p.add_argument("--ground-truth", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--figure", required=True, type=Path)
    args = p.parse_args()
    setup()
    seed, resamples, budgets = require(
        args.params, "seed", "bootstrap_resamples", "truncation_budgets"
    )
    with Timer("mc_truncation"):
        seg = main_segmentation(read_table(args.segmentations))
        rollouts = read_table(args.ground_truth)
        table = truncation_table(
            rollouts, distinct_states(seg), budgets, resamples=resamples, seed=seed
        )
        write_table(table, args.out)
        mc_truncation_figure(table, args.figure)
    log.info(
        "wrote %s:\n%s",
        args.out,
        table.select("budget", "truncation", "drop_rate", "no_estimate_share", "mean_value_shift"),
    )


if __name__ == "__main__":
    main()
