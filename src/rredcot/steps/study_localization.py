"""Rule `error_localization`: share of incorrect traces whose lowest-credit segment holds the
first erroneous step (top-1, within one segment) per estimator, with random and MC ground truth
as reference rows; CSV and bar chart."""

from __future__ import annotations

from rredcot.reporting.figures import error_localization_figure
from rredcot.steps.cli import log, require, setup
from rredcot.steps.study_common import (
    Timer,
    analysis_parser,
    load_estimates_with_ground_truth,
    write_table,
)
from rredcot.studies.localization import localization_table, true_segments


def main() -> None:
    args = analysis_parser(__doc__).parse_args()
    setup()
    seed, resamples = require(args.params, "seed", "bootstrap_resamples")
    with Timer("error_localization"):
        traces, seg, estimates = load_estimates_with_ground_truth(args)
        truth = true_segments(traces, seg)
        if truth.height == 0:
            log.warning("no incorrect trace with a known first error: the table has no rows")
        table = localization_table(estimates, truth, resamples=resamples, seed=seed)
        write_table(table, args.out)
        error_localization_figure(table, args.figure)
    counts = dict(truth.group_by("true_segment").len().sort("true_segment").rows())
    log.info("incorrect traces per true segment (0-based): %s", counts)
    log.info("wrote %s:\n%s", args.out, table.select("estimator", "top1", "within_one", "n_traces"))


if __name__ == "__main__":
    main()
