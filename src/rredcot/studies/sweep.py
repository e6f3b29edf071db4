"""Segmentation sweep (METHOD.md §5): strategy × K, each against the same MC ground truth.

Every cell of the sweep re-segments the same traces, scores RREDCoT (the configured variant) on
its segments and reads V_gt and σ_gt for its states from the shared ground-truth rollouts. A row
reports how well RREDCoT's values and credits order the states like the ground truth's (mean
per-trace Kendall τ-b, flat = 0, on the cell's common set, with the ground truth's Spearman–Brown
ceiling of the same statistic). Kendall, not Spearman: cells differ in K, and per-trace
Spearman's expectation at a given agreement falls with few states (at K = 2 it is τ), so
cells with few states read 15–20% low; τ-b's does not depend on K. A row also reports how
often the lowest-credit segment holds the first error (RREDCoT, the ground truth itself, and a
random segment), what the cell's segments look like (K obtained, tokens per
segment), and how many of its interior states end inside a line: there RREDCoT's continuations
join without a newline (`join: line`), so their Φ is the policy's probability of going on with
the reference right there, mid-step.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from rredcot.studies import families
from rredcot.studies.agreement import TARGETS, agreement_table
from rredcot.studies.ground_truth import GROUND_TRUTH
from rredcot.studies.localization import RANDOM, localization_table, true_segments


def sweep_table(
    traces: pl.DataFrame,
    segmentations: pl.DataFrame,
    estimates: pl.DataFrame,
    ground_truth: pl.DataFrame,
    halves: tuple[pl.DataFrame, pl.DataFrame],
    *,
    estimator: str,
    resamples: int,
    seed: int,
    step_up: float,
    mid_line: dict[str, tuple[int, int]] | None = None,
) -> pl.DataFrame:
    """One row per sweep cell (`segmentation` label in all the tables).

    segmentations: `segmentation_table` rows of the sweep; estimates: the estimator's long table
    with a `segmentation` column; ground_truth / halves: `ground_truth_sigmas` of the same rows
    (all rollouts, and each half); step_up: n_total / n_half of the ground truth
    (`split_half_step_up`). mid_line: label -> (interior states, mid-line ones).
    Columns: segmentation, strategy, requested_segments, mean_num_segments,
    mean_segment_tokens, n_traces, n_states, n_mid_line_states, then per target (values,
    credits): <target>_tau_b, <target>_ci95_low, <target>_ci95_high, <target>_ceiling,
    <target>_n_traces (the cell's common set, per trace); n_incorrect, top1_<estimator>,
    top1_ground_truth, top1_random, within_one_<estimator>, forward_tokens_per_trace.
    """
    rows = []
    labels = segmentations["segmentation"].unique(maintain_order=True).to_list()
    for i, label in enumerate(labels):
        seg = segmentations.filter(pl.col("segmentation") == label)
        cell = pl.col("segmentation") == label
        est = estimates.filter(cell & (pl.col("estimator") == estimator)).drop("segmentation")
        gt = ground_truth.filter(cell)
        cell_halves = (halves[0].filter(cell), halves[1].filter(cell))
        agree = agreement_table(
            est,
            gt,
            cell_halves,
            baseline_estimator=estimator,
            resamples=resamples,
            seed=seed + i,
            step_up=step_up,
            statistic="kendall",
        )
        # a cell where no trace has both estimates and a ground truth (e.g. every rollout ran
        # past the budget and was dropped) gives an empty table: its row reads NaN, n_traces 0
        per_trace = agree.filter(pl.col("aggregation") == "per_trace") if agree.height else agree
        by_target = {r["target"]: r for r in per_trace.iter_rows(named=True)}
        both = pl.concat(
            [
                est.select("trace_index", "estimator", "family", "sigma"),
                gt.select(
                    pl.col("trace_index"),
                    pl.lit(GROUND_TRUTH).alias("estimator"),
                    pl.lit(families.GROUND_TRUTH).alias("family"),
                    pl.col("sigma"),
                ),
            ]
        )
        truth = true_segments(traces, seg)
        local = (
            localization_table(
                both, truth, baseline_estimator=estimator, resamples=resamples, seed=seed + i
            )
            if truth.height
            else pl.DataFrame()
        )
        by_name = {r["estimator"]: r for r in local.iter_rows(named=True)} if local.height else {}
        tokens = [b[-1] / (len(b) - 1) for b in seg["boundaries"].to_list()]
        states, mid = (mid_line or {}).get(label, (0, 0))
        row = {
            "segmentation": label,
            "strategy": seg["strategy"][0],
            "requested_segments": seg["requested_segments"][0],
            "mean_num_segments": float(seg["num_segments"].mean()),
            "mean_segment_tokens": float(np.mean(tokens)),
            "n_traces": seg.height,
            "n_states": states,
            "n_mid_line_states": mid,
        }
        for target in TARGETS:
            r = by_target.get(target, {})
            row |= {
                f"{target}_tau_b": r.get("rho", np.nan),
                f"{target}_ci95_low": r.get("ci95_low", np.nan),
                f"{target}_ci95_high": r.get("ci95_high", np.nan),
                f"{target}_ceiling": r.get("ceiling", np.nan),
                f"{target}_n_traces": r.get("n_traces", 0),
            }
        row |= {
            "n_incorrect": truth.height,
            f"top1_{estimator}": by_name.get(estimator, {}).get("top1", np.nan),
            "top1_ground_truth": by_name.get(GROUND_TRUTH, {}).get("top1", np.nan),
            "top1_random": by_name.get(RANDOM, {}).get("top1", np.nan),
            f"within_one_{estimator}": by_name.get(estimator, {}).get("within_one", np.nan),
            "forward_tokens_per_trace": float(est["forward_tokens"].cast(pl.Float64).mean()),
        }
        rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)


__all__ = ["sweep_table"]
