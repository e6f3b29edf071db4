"""Rule `attribution_correlation`: mean per-trace Spearman between every pair of estimators
(MC ground truth, MC-N, RREDCoT variants, attributions); CSV matrix and heatmap."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rredcot.reporting.figures import correlation_heatmap
from rredcot.steps.cli import log, parser, setup
from rredcot.steps.study_common import (
    Timer,
    ground_truth_estimates,
    main_segmentation,
    read_estimates,
    read_study_inputs,
)
from rredcot.studies.agreement import correlation_matrix


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
    with Timer("attribution_correlation"):
        traces, segmentations = read_study_inputs(args.traces, args.segmentations)
        seg = main_segmentation(segmentations)
        rollouts = pl.read_parquet(args.ground_truth)
        estimates = pl.concat(
            [ground_truth_estimates(traces, seg, rollouts), read_estimates(args.estimates)],
            how="vertical_relaxed",
        )
        matrix = correlation_matrix(estimates)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        matrix.write_csv(args.out)
        correlation_heatmap(matrix, args.figure)
    log.info("wrote %s (%d estimators)", args.out, matrix.height)


if __name__ == "__main__":
    main()
