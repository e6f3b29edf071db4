"""Rule `error_localization`: share of incorrect traces whose lowest-credit segment holds the
first erroneous step (top-1, within one segment), per estimator, on three common sets, each
with a paired comparison against RREDCoT's default and a random-segment row:

- `all_incorrect`: every incorrect study trace; RREDCoT (every value variant × answer-now), the
  attributions and the null row;
- `agreement_incorrect`: the incorrect traces of the agreement set, the only ones the MC
  ground truth and MC-N cover; RREDCoT's default, MC, the ground truth and the null row;
- `incorrect <kind>` / `agreement_incorrect <kind>`: those traces by the kind of their first
  error (`systematic`: the world's misconception; `other`), when the world has a misconception;
- `incorrect <overlap bin>`: the incorrect traces by how far they follow the configured
  reference's path (`studies.traces.OVERLAP_BINS`); RREDCoT on every reference kind (the
  configured one, the oracle key on the trace's own path, the sampled-first one).
RREDCoT rows carry their `reference_kind`. Every set but the overlap bins also holds the
controls (`rredcot.studies.controls`): the checker oracles `oracle_step` and `oracle_rule`
(near 1) and the placebos `<default>_perm`, `oracle_rule_perm` (σ permuted within each trace:
at chance, the `random` row, or the study is broken).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rredcot.credit.rredcot_config import RREDCoTConfig
from rredcot.data.misconceptions import Misconception
from rredcot.data.schema import read_table
from rredcot.reporting.figures import error_localization_figure
from rredcot.steps.cli import log, require, setup
from rredcot.steps.study_common import (
    Timer,
    agreement_rows,
    analysis_parser,
    figure_rows,
    load_estimates_with_ground_truth,
    overlap_subsets,
    with_reference_kind,
    write_table,
)
from rredcot.studies.controls import (
    first_error_kinds,
    oracle_estimates,
    placebo_estimates,
)
from rredcot.studies.estimators import rredcot_name
from rredcot.studies.localization import localization_sets, localization_table, true_segments
from rredcot.studies.null_estimator import null_estimates


def main() -> None:
    p = analysis_parser(__doc__)
    p.add_argument(
        "--problems", required=True, type=Path, help="the study's problems (`id`, `program`)"
    )
    args = p.parse_args()
    setup()
    seed, resamples, rredcot, block = require(
        args.params, "seed", "bootstrap_resamples", "rredcot", "misconception"
    )
    config = RREDCoTConfig.from_dict(rredcot)
    baseline_estimator = rredcot_name(config.value, config.answer_now)
    misconception = None if block is None else Misconception(**block)
    with Timer("error_localization"):
        traces, seg, estimates = load_estimates_with_ground_truth(args)
        problems = read_table(args.problems, columns=["id", "program"])
        programs = dict(problems.iter_rows())
        oracles = oracle_estimates(traces, seg, programs, misconception)
        estimates = pl.concat(
            [estimates, null_estimates(traces, seg), oracles], how="vertical_relaxed"
        )
        placebos = [baseline_estimator, *(["oracle_rule"] if misconception else [])]
        estimates = pl.concat(
            [estimates, placebo_estimates(estimates, placebos, seed)], how="vertical_relaxed"
        )
        truth = true_segments(traces, seg)
        if truth.height == 0:
            log.warning("no incorrect trace with a known first error: the table has no rows")
        sets = localization_sets(
            truth,
            agreement_rows(traces, truth),
            estimates,
            baseline_estimator=baseline_estimator,
            overlap_subsets=overlap_subsets(traces),
            error_kinds=(
                first_error_kinds(traces, programs, misconception) if misconception else None
            ),
        )
        tables = []
        for i, (label, (rows, chosen_estimates)) in enumerate(sets.items()):
            if rows.height == 0 or chosen_estimates.height == 0:
                log.warning("trace set %s: nothing to score", label)
                continue
            tables.append(
                localization_table(
                    chosen_estimates,
                    rows,
                    baseline_estimator=baseline_estimator,
                    resamples=resamples,
                    seed=seed + i,
                    trace_set=label,
                )
            )
        table = pl.concat(tables, how="vertical_relaxed") if tables else pl.DataFrame()
        if table.height:
            table = with_reference_kind(table)
        write_table(table, args.out)
        error_localization_figure(
            figure_rows(table, baseline_estimator) if table.height else table, args.figure
        )
    counts = dict(truth.group_by("true_segment").len().sort("true_segment").rows())
    log.info("incorrect traces per true segment (0-based): %s", counts)
    if table.height:
        log.info(
            "wrote %s:\n%s",
            args.out,
            table.select(
                "trace_set",
                "estimator",
                "top1",
                "top1_ci95_low",
                "top1_ci95_high",
                "verdict",
                "n_traces",
            ),
        )


if __name__ == "__main__":
    main()
