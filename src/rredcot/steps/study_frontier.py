"""Rule `study_frontier`: every estimator whose cost is its own against the MC ground truth on the
agreement traces (per-trace Spearman of credits; cosine of the token advantages it builds with
the ground truth's, under each configured transform) and against its cost (forward tokens and
seconds per trace), with the best, paired CIs against it and the Pareto front
(`rredcot.studies.frontier`); `results/estimator_frontier.csv` and its figure, and the
pre-registered pick of `rredcot_fast` read off the table (`results/estimator_pick.json`,
`rredcot.studies.preregistered.preregistered_fast_estimator`)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from rredcot.credit.advantages import CreditConfig
from rredcot.credit.rredcot import RREDCoTConfig
from rredcot.data.schema import read_table
from rredcot.reporting.figures import estimator_frontier_figure
from rredcot.steps.cli import log, require, setup
from rredcot.steps.study_common import (
    Timer,
    agreement_rows,
    analysis_parser,
    estimate_sources,
    main_segmentation,
    read_study_inputs,
    write_table,
)
from rredcot.studies.estimators import rredcot_name
from rredcot.studies.frontier import frontier_candidates, frontier_table
from rredcot.studies.ground_truth import ground_truth_sigmas
from rredcot.studies.null_estimator import null_estimates
from rredcot.studies.preregistered import preregistered_fast_estimator

LOGGED = (
    "measure",
    "estimator",
    "agreement",
    "diff_vs_best",
    "verdict_vs_best",
    "pareto_tokens",
    "forward_tokens_per_trace",
    "seconds_per_trace",
)


def main() -> None:
    p = analysis_parser(__doc__)
    p.add_argument("--variants", required=True, type=Path, help="study_scored's own forms")
    p.add_argument("--pick", required=True, type=Path, help="the pre-registered rredcot_fast")
    args = p.parse_args()
    setup()
    seed, resamples, rredcot, credit, transforms, group_size = require(
        args.params, "seed", "bootstrap_resamples", "rredcot", "credit", "transforms", "group_size"
    )
    config = RREDCoTConfig.from_dict(rredcot)
    with Timer("estimator_frontier"):
        traces, segmentations = read_study_inputs(args.traces, args.segmentations)
        seg = agreement_rows(traces, main_segmentation(segmentations))
        truth = ground_truth_sigmas(traces, seg, read_table(args.ground_truth)).join(
            seg.select("trace_index", "boundaries"), on="trace_index"
        )
        sources = [args.variants, *args.estimates]
        read = {
            path: read_table(path).with_columns(
                **{k: pl.lit(v) for k, v in estimate_sources(path).items()}
            )
            for path in sources
        }
        null = null_estimates(traces, seg).with_columns(timed_in=pl.lit("nothing run"))
        candidates = frontier_candidates(
            pl.concat([read[p] for p in args.estimates], how="diagonal_relaxed"),
            read[args.variants],
            null,
            seg,
        )
        blocks = {
            name: CreditConfig.from_dict({**credit, **keys}) for name, keys in transforms.items()
        }
        table = frontier_table(
            candidates,
            truth,
            traces,
            blocks,
            group_size=group_size,
            resamples=resamples,
            seed=seed,
        )
        if table.height == 0:
            log.warning(
                "no agreement trace has a ground truth to compare with: %s is empty", args.out
            )
        write_table(table, args.out)
        configured = rredcot_name(config.value, config.answer_now)
        estimator_frontier_figure(table, args.figure, configured=configured)
        pick = (
            preregistered_fast_estimator(table, configured)
            if table.height
            else {"choice": None, "reason": "no agreement trace with a ground truth"}
        )
        args.pick.parent.mkdir(parents=True, exist_ok=True)
        args.pick.write_text(json.dumps(pick, indent=2) + "\n")
    if table.height:
        log.info("wrote %s:\n%s", args.out, table.select(LOGGED))
    log.info("the pre-registered rredcot_fast: %s", pick)


if __name__ == "__main__":
    main()
