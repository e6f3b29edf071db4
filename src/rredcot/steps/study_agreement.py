"""Rule `estimator_agreement`: per estimator, mean per-trace Spearman with the MC ground truth
(bootstrap 95% CI) against cost; `results/estimator_agreement.csv` and its figure."""

from __future__ import annotations

import polars as pl

from rredcot.reporting.figures import estimator_agreement_figure
from rredcot.steps.cli import log, require, setup
from rredcot.steps.study_common import Timer, analysis_parser, read_analysis_inputs, write_table
from rredcot.studies.agreement import agreement_table
from rredcot.studies.ground_truth import ground_truth_sigmas, split_half


def main() -> None:
    args = analysis_parser(__doc__).parse_args()
    setup()
    seed, resamples = require(args.params, "seed", "bootstrap_resamples")
    with Timer("estimator_agreement"):
        inputs = read_analysis_inputs(args)
        seg, rollouts = inputs.segmentation, inputs.rollouts
        gt = ground_truth_sigmas(inputs.traces, seg, rollouts)
        first, second = split_half(inputs.traces, seg, rollouts)
        n_gt = int(rollouts["rollout"].max()) + 1
        # The split half compares two independent halves of the ground truth with each other.
        table = agreement_table(inputs.estimates, gt, resamples=resamples, seed=seed)
        half = agreement_table(
            first.with_columns(
                estimator=pl.lit("ground_truth_split_half"),
                family=pl.lit("ground_truth"),
                n_rollouts=pl.lit(n_gt // 2, dtype=pl.Int64),
                forward_tokens=pl.lit(None, dtype=pl.Int64),
                backward_tokens=pl.lit(None, dtype=pl.Int64),
                seconds=pl.lit(None, dtype=pl.Float64),
            ),
            second,
            resamples=resamples,
            seed=seed,
        )
        table = pl.concat([table, half], how="vertical_relaxed").with_columns(
            compared_with=pl.when(pl.col("estimator") == "ground_truth_split_half")
            .then(pl.lit(f"the other half of the ground-truth rollouts (N={n_gt // 2} each)"))
            .otherwise(pl.lit(f"MC ground truth (N={n_gt})")),
            segmentation=pl.lit(seg["strategy"][0] + f" K={seg['requested_segments'][0]}"),
        )
        write_table(table, args.out)
        estimator_agreement_figure(table, args.figure, n_traces=seg.height)
    log.info(
        "wrote %s:\n%s",
        args.out,
        table.select(
            "estimator",
            "spearman_mean",
            "ci95_low",
            "ci95_high",
            "n_defined",
            "n_undefined",
            "forward_tokens_per_trace",
            "seconds_per_trace",
        ),
    )


if __name__ == "__main__":
    main()
