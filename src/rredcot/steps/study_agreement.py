"""Rule `estimator_agreement`: every estimator against the MC ground truth on one common set of
the agreement traces, for values and credits, per trace and pooled, with paired CIs against
RREDCoT's default, the ground truth's Spearman–Brown ceiling and the null row; the MC N of
equal agreement and its cost; `results/estimator_agreement.csv`, `results/estimator_cost_match.csv`
and the figure."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rredcot.credit.rredcot import RREDCoTConfig
from rredcot.reporting.figures import estimator_agreement_figure
from rredcot.steps.cli import log, require, setup
from rredcot.steps.study_common import (
    Timer,
    agreement_rows,
    analysis_parser,
    read_analysis_inputs,
    write_table,
)
from rredcot.studies.agreement import agreement_with_resamples, cost_match, null_estimates
from rredcot.studies.estimators import rredcot_name
from rredcot.studies.ground_truth import ground_truth_sigmas, split_half, split_half_step_up

# the agreement table's columns the log shows
LOGGED = (
    "target",
    "aggregation",
    "estimator",
    "rho",
    "ci95_low",
    "ci95_high",
    "diff_vs_reference",
    "verdict",
    "ceiling",
    "n_traces",
)


def main() -> None:
    p = analysis_parser(__doc__)
    p.add_argument("--cost-match", required=True, type=Path)
    args = p.parse_args()
    setup()
    seed, resamples, rredcot = require(args.params, "seed", "bootstrap_resamples", "rredcot")
    config = RREDCoTConfig.from_dict(rredcot)
    reference = rredcot_name(config.value, config.answer_now)
    with Timer("estimator_agreement"):
        inputs = read_analysis_inputs(args)
        traces = inputs.traces
        seg = agreement_rows(traces, inputs.segmentation)
        rollouts = inputs.rollouts
        gt = ground_truth_sigmas(traces, seg, rollouts)
        halves = split_half(traces, seg, rollouts)
        estimates = agreement_rows(traces, inputs.estimates).filter(
            ~pl.col("estimator").str.ends_with("_other_path")
        )
        estimates = pl.concat([estimates, null_estimates(traces, seg)], how="vertical_relaxed")
        n_gt = int(rollouts["rollout"].max()) + 1
        table, samples = agreement_with_resamples(
            estimates,
            gt,
            halves,
            reference=reference,
            resamples=resamples,
            seed=seed,
            step_up=split_half_step_up(rollouts),
        )
        if table.height == 0:
            # no trace has estimates and a ground truth that varies (e.g. a base that is never
            # right, as the CPU rehearsal's stand-in): empty tables and figure, said loudly
            log.warning(
                "no trace has both estimates and a non-flat ground truth: %s and %s are empty",
                args.out,
                args.cost_match,
            )
            table = pl.DataFrame(schema=dict.fromkeys(LOGGED, pl.String))
        table = table.with_columns(
            compared_with=pl.lit(f"MC ground truth (N={n_gt}, split halves of {n_gt // 2})"),
            segmentation=pl.lit(f"{seg['strategy'][0]} K={seg['requested_segments'][0] or 'own'}"),
        )
        matched = cost_match(table, reference, samples)
        write_table(table, args.out)
        write_table(matched, args.cost_match)
        estimator_agreement_figure(table, args.figure, reference=reference)
    log.info("wrote %s:\n%s", args.out, table.select(LOGGED))
    log.info("wrote %s:\n%s", args.cost_match, matched)


if __name__ == "__main__":
    main()
