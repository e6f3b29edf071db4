"""Error localization (METHOD.md §5): does the lowest-credit segment hold the first wrong step?

Only the synthetic world can answer this: its step checker knows the first erroneous step of
every response (`check_response`). The traces used are the *incorrect* ones (reward 0; the
checker then always names a first error). The true segment is the one holding the first
character of the offending line (`error_char`: a response that stops before the step points at
its last character). Per estimator:

- top-1: the lowest-credit segment is the true one;
- within-one: it is at most one segment away;

both with ties counted fractionally (`rredcot.studies.metrics.localization_hits`), averaged over
traces with a bootstrap 95% CI. Two reference rows: `random` (a uniformly random segment, exact
expectation 1/K per trace) and the MC ground truth itself.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from rredcot.segmentation import segment_of_char
from rredcot.studies.metrics import bootstrap_mean_ci, localization_hits, random_localization
from rredcot.studies.traces import error_char

RANDOM = "random"


def true_segments(traces: pl.DataFrame, segmentation: pl.DataFrame) -> pl.DataFrame:
    """trace_index, num_segments, true_segment (0-based) of every incorrect, segmented trace."""
    seg = {
        t: (bounds, k)
        for t, bounds, k in segmentation.select(
            "trace_index", "boundaries", "num_segments"
        ).iter_rows()
    }
    rows = []
    for r in traces.filter(pl.col("reward") == 0).iter_rows(named=True):
        if r["trace_index"] not in seg:
            continue  # an empty response has no segment
        char = error_char(r["response"], r["error_start"])
        if char is None:
            continue
        bounds, k = seg[r["trace_index"]]
        rows.append(
            {
                "trace_index": r["trace_index"],
                "num_segments": k,
                "true_segment": segment_of_char(r["token_texts"], bounds, char),
            }
        )
    schema = {"trace_index": pl.Int64, "num_segments": pl.Int64, "true_segment": pl.Int64}
    return pl.DataFrame(rows, schema=schema)


def localization_table(
    estimates: pl.DataFrame, truth: pl.DataFrame, *, resamples: int, seed: int
) -> pl.DataFrame:
    """One row per estimator (plus `random`): top1, within_one, their CIs and trace counts.

    estimates: trace_index, estimator, family, sigma (the ground truth included as an estimator).
    truth: `true_segments`. Columns: estimator, family, top1, top1_ci95_low, top1_ci95_high,
    within_one, within_one_ci95_low, within_one_ci95_high, n_traces, n_unusable (σ with NaN),
    mean_num_segments.
    """
    target = dict(truth.select("trace_index", "true_segment").iter_rows())
    k_of = dict(truth.select("trace_index", "num_segments").iter_rows())
    out = []

    def summarize(name: str, family: str, hits: list[tuple[float, float]], unusable: int) -> None:
        top1 = [h[0] for h in hits]
        near = [h[1] for h in hits]
        i = len(out)
        t_mean, t_low, t_high = bootstrap_mean_ci(top1, resamples, seed + 2 * i)
        n_mean, n_low, n_high = bootstrap_mean_ci(near, resamples, seed + 2 * i + 1)
        out.append(
            {
                "estimator": name,
                "family": family,
                "top1": t_mean,
                "top1_ci95_low": t_low,
                "top1_ci95_high": t_high,
                "within_one": n_mean,
                "within_one_ci95_low": n_low,
                "within_one_ci95_high": n_high,
                "n_traces": len(hits),
                "n_unusable": unusable,
                "mean_num_segments": float(np.mean([k_of[t] for t in target])) if target else 0.0,
            }
        )

    summarize(
        RANDOM,
        "baseline",
        [random_localization(k_of[t], target[t]) for t in target],
        0,
    )
    chosen = estimates.filter(pl.col("trace_index").is_in(list(target)))
    for name in chosen["estimator"].unique(maintain_order=True).to_list():
        mine = chosen.filter(pl.col("estimator") == name)
        hits, unusable = [], 0
        for t, sigma in mine.select("trace_index", "sigma").iter_rows():
            top1, near = localization_hits(sigma, target[t])
            if np.isnan(top1):
                unusable += 1
                continue
            hits.append((top1, near))
        summarize(name, mine["family"][0], hits, unusable)
    return pl.DataFrame(out)


__all__ = ["RANDOM", "localization_table", "true_segments"]
