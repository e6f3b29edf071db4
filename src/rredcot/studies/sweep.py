"""Segmentation sweep (METHOD.md §5): strategy × K, each against the same MC ground truth.

Every cell of the sweep re-segments the same traces, scores RREDCoT (the configured variant) on
its segments and reads σ_gt for its states from the shared ground-truth rollouts. A row reports
how well RREDCoT's σ orders the segments like σ_gt (mean per-trace Spearman, bootstrap CI,
undefined traces counted), how often the lowest-credit segment holds the first error (RREDCoT,
the ground truth itself, and a random segment), and what the cell's segments look like (K
obtained, tokens per segment).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from rredcot.studies.agreement import agreement_table
from rredcot.studies.ground_truth import GROUND_TRUTH
from rredcot.studies.localization import RANDOM, localization_table, true_segments


def sweep_table(
    traces: pl.DataFrame,
    segmentations: pl.DataFrame,
    estimates: pl.DataFrame,
    ground_truth: pl.DataFrame,
    *,
    estimator: str,
    resamples: int,
    seed: int,
) -> pl.DataFrame:
    """One row per sweep cell (`segmentation` label in all three tables).

    segmentations: `segmentation_table` rows of the sweep; estimates: the estimator's long table
    with a `segmentation` column; ground_truth: `ground_truth_sigmas` of the same rows.
    Columns: segmentation, strategy, requested_segments, mean_num_segments,
    mean_segment_tokens, n_traces, spearman_mean, ci95_low, ci95_high, n_defined,
    undefined_flat_ground_truth, n_incorrect, top1_<estimator>, top1_ground_truth, top1_random,
    within_one_<estimator>, forward_tokens_per_trace.
    """
    rows = []
    labels = segmentations["segmentation"].unique(maintain_order=True).to_list()
    for i, label in enumerate(labels):
        seg = segmentations.filter(pl.col("segmentation") == label)
        est = estimates.filter(
            (pl.col("segmentation") == label) & (pl.col("estimator") == estimator)
        )
        gt = ground_truth.filter(pl.col("segmentation") == label)
        agree = agreement_table(est, gt, resamples=resamples, seed=seed + i).row(0, named=True)
        both = pl.concat(
            [
                est.select("trace_index", "estimator", "family", "sigma"),
                gt.select(
                    pl.col("trace_index"),
                    pl.lit(GROUND_TRUTH).alias("estimator"),
                    pl.lit("ground_truth").alias("family"),
                    pl.col("sigma"),
                ),
            ]
        )
        truth = true_segments(traces, seg)
        local = localization_table(both, truth, resamples=resamples, seed=seed + i)
        by_name = {r["estimator"]: r for r in local.iter_rows(named=True)}
        tokens = [b[-1] / (len(b) - 1) for b in seg["boundaries"].to_list()]
        rows.append(
            {
                "segmentation": label,
                "strategy": seg["strategy"][0],
                "requested_segments": seg["requested_segments"][0],
                "mean_num_segments": float(seg["num_segments"].mean()),
                "mean_segment_tokens": float(np.mean(tokens)),
                "n_traces": seg.height,
                "spearman_mean": agree["spearman_mean"],
                "ci95_low": agree["ci95_low"],
                "ci95_high": agree["ci95_high"],
                "n_defined": agree["n_defined"],
                "undefined_flat_ground_truth": agree["undefined_flat_ground_truth"],
                "n_incorrect": truth.height,
                f"top1_{estimator}": by_name.get(estimator, {}).get("top1", np.nan),
                "top1_ground_truth": by_name.get(GROUND_TRUTH, {}).get("top1", np.nan),
                "top1_random": by_name[RANDOM]["top1"],
                f"within_one_{estimator}": by_name.get(estimator, {}).get("within_one", np.nan),
                "forward_tokens_per_trace": agree["forward_tokens_per_trace"],
            }
        )
    return pl.DataFrame(rows)


__all__ = ["sweep_table"]
