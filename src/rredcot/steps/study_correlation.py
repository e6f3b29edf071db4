"""Rule `attribution_correlation`: mean per-trace Spearman (flat = 0) of the credits σ between
every pair of estimators (MC ground truth, MC-N, RREDCoT variants, attributions) on the common
set of the agreement traces; CSV matrix and heatmap."""

from __future__ import annotations

from rredcot.reporting.figures import correlation_heatmap
from rredcot.steps.cli import log, setup
from rredcot.steps.study_common import (
    Timer,
    agreement_rows,
    analysis_parser,
    configured_reference_rows,
    load_estimates_with_ground_truth,
    write_table,
)
from rredcot.studies.agreement import correlation_matrix


def main() -> None:
    args = analysis_parser(__doc__).parse_args()
    setup()
    with Timer("attribution_correlation"):
        traces, _, estimates = load_estimates_with_ground_truth(args)
        estimates = configured_reference_rows(agreement_rows(traces, estimates))
        matrix = correlation_matrix(estimates)
        write_table(matrix, args.out)
        correlation_heatmap(matrix, args.figure)
    log.info("wrote %s (%d estimators)", args.out, matrix.height)


if __name__ == "__main__":
    main()
