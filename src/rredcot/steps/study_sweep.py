"""Rule `segmentation_sweep`: RREDCoT (configured variant) and the MC ground truth on every
strategy × K of the sweep; agreement and error localization per cell; CSV and figure."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rredcot.credit.rredcot_config import RREDCoTConfig
from rredcot.credit.rredcot_queries import state_kinds
from rredcot.data.schema import read_table
from rredcot.reporting.figures import segmentation_sweep_figure
from rredcot.steps.cli import log
from rredcot.steps.study_common import (
    Timer,
    load_policy,
    policy_parser,
    start_policy_step,
    write_table,
)
from rredcot.studies.estimators import rredcot_estimates, rredcot_name
from rredcot.studies.ground_truth import ground_truth_sigmas, split_half, split_half_step_up
from rredcot.studies.segmentations import MAIN
from rredcot.studies.sweep import sweep_table


def main() -> None:
    p = policy_parser(__doc__)
    p.add_argument("--ground-truth", required=True, type=Path)
    p.add_argument("--figure", required=True, type=Path)
    step = start_policy_step(p, "rredcot", "bootstrap_resamples", "score_batch_traces")
    args, seed, task, traces = step.args, step.seed, step.task, step.traces
    rredcot, resamples, batch = step.settings
    with Timer("segmentation_sweep"):
        sweep = step.segmentations.filter(pl.col("segmentation") != MAIN)
        model, tokenizer = load_policy(args.policy, args.params.get("dtype", "float32"))
        config = RREDCoTConfig.from_dict(rredcot)
        name = rredcot_name(config.value, config.answer_now)
        estimates, mid_line = [], {}
        by_index = {r["trace_index"]: r for r in traces.iter_rows(named=True)}
        for label in sweep["segmentation"].unique(maintain_order=True).to_list():
            cell = sweep.filter(pl.col("segmentation") == label)
            est = rredcot_estimates(
                model, tokenizer, task, traces, cell, {name: config}, batch_traces=batch
            )
            estimates.append(est.with_columns(segmentation=pl.lit(label)))
            kinds = [
                state_kinds(
                    tokenizer,
                    by_index[t]["prompt_ids"],
                    by_index[t]["response_ids"],
                    bounds[1:-1],  # interior states: s_0 is the prompt, s_K the whole response
                )
                for t, bounds in cell.select("trace_index", "boundaries").iter_rows()
            ]
            flat = [k for ks in kinds for k in ks]
            mid_line[label] = (len(flat), flat.count("mid_line"))
        rollouts = read_table(args.ground_truth)
        gt = ground_truth_sigmas(traces, sweep, rollouts)
        halves = split_half(traces, sweep, rollouts)
        table = sweep_table(
            traces,
            sweep,
            pl.concat(estimates),
            gt,
            halves,
            estimator=name,
            resamples=resamples,
            seed=seed,
            step_up=split_half_step_up(rollouts),
            mid_line=mid_line,
        )
        write_table(table, args.out)
        segmentation_sweep_figure(table, args.figure, estimator=name)
    log.info(
        "wrote %s:\n%s",
        args.out,
        table.select(
            "segmentation", "credits_tau_b", "values_tau_b", "n_mid_line_states", f"top1_{name}"
        ),
    )


if __name__ == "__main__":
    main()
