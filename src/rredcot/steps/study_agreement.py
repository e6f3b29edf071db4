"""Rule `estimator_agreement`: every estimator against the MC ground truth on one common set of
the agreement traces, for values and credits, per trace and pooled, with paired CIs against
RREDCoT's default, the ground truth's Spearman–Brown ceiling and the null row; RREDCoT on every
reference kind (`reference_kind`); the same on the traces of each overlap bin with the
configured reference (`traces`); the MC N of equal agreement and its cost;
`results/estimator_agreement.csv`, `results/estimator_cost_match.csv` and the figure."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from rredcot.credit.rredcot_config import RREDCoTConfig
from rredcot.reporting.figures import estimator_agreement_figure
from rredcot.steps.cli import log, require, setup
from rredcot.steps.study_common import (
    Timer,
    agreement_rows,
    analysis_parser,
    figure_rows,
    overlap_subsets,
    read_analysis_inputs,
    with_reference_kind,
    write_table,
)
from rredcot.studies.agreement import agreement_with_resamples
from rredcot.studies.cost_match import cost_match
from rredcot.studies.estimators import rredcot_name
from rredcot.studies.ground_truth import ground_truth_sigmas, split_half, split_half_step_up
from rredcot.studies.null_estimator import null_estimates
from rredcot.studies.preregistered import preregistered_answer_now

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
    p.add_argument("--answer-now", required=True, type=Path, help="JSON: the pre-registered rule")
    args = p.parse_args()
    setup()
    seed, resamples, rredcot = require(args.params, "seed", "bootstrap_resamples", "rredcot")
    config = RREDCoTConfig.from_dict(rredcot)
    baseline_estimator = rredcot_name(config.value, config.answer_now)
    with Timer("estimator_agreement"):
        inputs = read_analysis_inputs(args)
        traces = inputs.traces
        seg = agreement_rows(traces, inputs.segmentation)
        rollouts = inputs.rollouts
        gt = ground_truth_sigmas(traces, seg, rollouts)
        halves = split_half(traces, seg, rollouts)
        estimates = agreement_rows(traces, inputs.estimates)
        estimates = pl.concat([estimates, null_estimates(traces, seg)], how="vertical_relaxed")
        n_gt = int(rollouts["rollout"].max()) + 1
        step_up = split_half_step_up(rollouts)
        table, samples = agreement_with_resamples(
            estimates,
            gt,
            halves,
            baseline_estimator=baseline_estimator,
            resamples=resamples,
            seed=seed,
            step_up=step_up,
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
        parts = [table.with_columns(traces=pl.lit("all"))]
        agreement = traces.filter(pl.col("agreement")) if "agreement" in traces.columns else traces
        for i, (label, chosen) in enumerate(overlap_subsets(agreement).items(), start=1):
            if len(chosen) < 2 or table.height == 0:
                log.warning("overlap bin %s: %d agreement traces, no rows", label, len(chosen))
                continue
            keep = pl.col("trace_index").is_in(chosen)
            sub, _ = agreement_with_resamples(
                estimates.filter(keep),
                gt.filter(keep),
                tuple(h.filter(keep) for h in halves),
                baseline_estimator=baseline_estimator,
                resamples=resamples,
                seed=seed + i,
                step_up=step_up,
            )
            parts.append(sub.with_columns(traces=pl.lit(label)))
        table = with_reference_kind(pl.concat(parts, how="diagonal_relaxed")).with_columns(
            compared_with=pl.lit(f"MC ground truth (N={n_gt}, split halves of {n_gt // 2})"),
            segmentation=pl.lit(f"{seg['strategy'][0]} K={seg['requested_segments'][0] or 'own'}"),
        )
        overall = table.filter(pl.col("traces") == "all")
        matched = cost_match(overall, baseline_estimator, samples)
        write_table(table, args.out)
        write_table(matched, args.cost_match)
        rule = (
            preregistered_answer_now(overall, config.value)
            if overall.height
            else {"choice": None, "rule": "no agreement rows: nothing to apply the rule to"}
        )
        args.answer_now.parent.mkdir(parents=True, exist_ok=True)
        args.answer_now.write_text(json.dumps(rule, indent=2) + "\n")
        estimator_agreement_figure(
            figure_rows(overall, baseline_estimator) if overall.height else overall,
            args.figure,
            baseline_estimator=baseline_estimator,
        )
    log.info("wrote %s:\n%s", args.out, table.filter(pl.col("traces") == "all").select(LOGGED))
    log.info("wrote %s:\n%s", args.cost_match, matched)
    log.info("pre-registered answer-now rule: %s", rule)


if __name__ == "__main__":
    main()
