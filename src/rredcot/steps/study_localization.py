"""Rule `error_localization`: share of incorrect traces whose lowest-credit segment holds the
first erroneous step (top-1, within one segment) per estimator, with random and MC ground truth
as reference rows; CSV and bar chart."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rredcot.reporting.figures import error_localization_figure
from rredcot.steps.cli import log, parser, require, setup
from rredcot.steps.study_common import (
    Timer,
    ground_truth_estimates,
    main_segmentation,
    read_estimates,
    read_study_inputs,
)
from rredcot.studies.localization import localization_table, true_segments


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--traces", required=True, type=Path)
    p.add_argument("--segmentations", required=True, type=Path)
    p.add_argument("--ground-truth", required=True, type=Path)
    p.add_argument("--estimates", required=True, nargs="+", type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--figure", required=True, type=Path)
    args = p.parse_args()
    setup()
    seed, resamples = require(args.params, "seed", "bootstrap_resamples")
    with Timer("error_localization"):
        traces, segmentations = read_study_inputs(args.traces, args.segmentations)
        seg = main_segmentation(segmentations)
        rollouts = pl.read_parquet(args.ground_truth)
        estimates = pl.concat(
            [ground_truth_estimates(traces, seg, rollouts), read_estimates(args.estimates)],
            how="vertical_relaxed",
        )
        truth = true_segments(traces, seg)
        if truth.height == 0:
            log.warning("no incorrect trace with a known first error: the table has no rows")
        table = localization_table(estimates, truth, resamples=resamples, seed=seed)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        table.write_csv(args.out)
        error_localization_figure(table, args.figure)
    counts = dict(truth.group_by("true_segment").len().sort("true_segment").rows())
    log.info("incorrect traces per true segment (0-based): %s", counts)
    log.info("wrote %s:\n%s", args.out, table.select("estimator", "top1", "within_one", "n_traces"))


if __name__ == "__main__":
    main()
