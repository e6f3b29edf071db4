"""Error localization (METHOD.md §5): does the lowest-credit segment hold the first wrong step?

Only the synthetic world can answer this: its step checker knows the first erroneous step of
every response (`check_response`). The traces used are the *incorrect* ones (reward 0; the
checker then always names a first error). The true segment is the one holding the first
character of the offending line (`error_char`: a response that stops before the step points at
its last character). Per estimator:

- top-1: the lowest-credit segment is the true one;
- within-one: it is at most one segment away;

both with ties counted fractionally (`rredcot.studies.statistics.localization_hits`), averaged over
one common set of traces with a bootstrap 95% CI, and each estimator's top-1 compared with the
reference estimator's (RREDCoT's default) by a paired bootstrap over the same traces. A
`random` row (a uniformly random segment, exact expectation 1/K per trace) is in every table.

It only means something when the reference U* is not the checker's own answer key (METHOD.md
§5): the study scores RREDCoT both with the reference on the trace's own path and with one on a
different valid path of the same problem (the reference kinds and overlap bins).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from rredcot.credit.segmentation import segment_of_char
from rredcot.studies import families
from rredcot.studies.statistics import (
    bootstrap_indices,
    localization_hits,
    percentile_ci,
    random_localization,
    verdict,
)
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
    estimates: pl.DataFrame,
    truth: pl.DataFrame,
    *,
    baseline_estimator: str,
    resamples: int,
    seed: int,
    trace_set: str = "all",
) -> pl.DataFrame:
    """One row per estimator (plus `random`) on one common set of incorrect traces.

    estimates: trace_index, estimator, family, sigma; truth: `true_segments` of the traces to
    use. The common set: the traces of `truth` where every estimator has a finite σ of the
    trace's K (an unusable σ leaves the trace out for all, counted in `excluded_unusable`).
    One bootstrap draw of traces serves every row, so `top1_diff_vs_reference` (the paired
    difference of top-1 from `baseline_estimator`) has a paired CI and a verdict. Columns:
    trace_set, estimator, family, top1, top1_ci95_low, top1_ci95_high, within_one,
    within_one_ci95_low, within_one_ci95_high, top1_diff_vs_reference, diff_ci95_low,
    diff_ci95_high, verdict, ci_dropped_share (resamples without a finite value, the largest
    of the three CIs'), n_traces, excluded_unusable, mean_num_segments.
    """
    names = estimates["estimator"].unique(maintain_order=True).to_list()
    if baseline_estimator not in names:
        raise ValueError(
            f"baseline_estimator: {baseline_estimator!r} is not an estimator; have {names}"
        )
    target = dict(truth.select("trace_index", "true_segment").iter_rows())
    k_of = dict(truth.select("trace_index", "num_segments").iter_rows())
    sig = {
        name: {
            t: np.asarray(s, dtype=np.float64)
            for t, s in estimates.filter(pl.col("estimator") == name)
            .select("trace_index", "sigma")
            .iter_rows()
            if s is not None
        }
        for name in names
    }
    family = dict(estimates.select("estimator", "family").unique("estimator").iter_rows())
    traces = [
        t
        for t in sorted(target)
        if all(
            t in sig[n] and sig[n][t].size == k_of[t] and np.isfinite(sig[n][t]).all()
            for n in names
        )
    ]
    excluded = len(target) - len(traces)
    if not traces:
        return pl.DataFrame()
    idx = bootstrap_indices(len(traces), resamples, seed)
    hits = {
        RANDOM: np.array([random_localization(k_of[t], target[t]) for t in traces]),
        **{n: np.array([localization_hits(sig[n][t], target[t]) for t in traces]) for n in names},
    }
    ref_top1 = hits[baseline_estimator][:, 0]
    out = []
    for name, h in hits.items():
        top1, near = h[:, 0], h[:, 1]
        cis = [percentile_ci(x[idx].mean(axis=1)) for x in (top1, near, top1 - ref_top1)]
        (t_low, t_high, _), (n_low, n_high, _), (d_low, d_high, _) = cis
        out.append(
            {
                "trace_set": trace_set,
                "estimator": name,
                "family": families.BASELINE if name == RANDOM else family[name],
                "top1": float(top1.mean()),
                "top1_ci95_low": t_low,
                "top1_ci95_high": t_high,
                "within_one": float(near.mean()),
                "within_one_ci95_low": n_low,
                "within_one_ci95_high": n_high,
                "top1_diff_vs_reference": float((top1 - ref_top1).mean()),
                "diff_ci95_low": d_low,
                "diff_ci95_high": d_high,
                "verdict": "reference" if name == baseline_estimator else verdict(d_low, d_high),
                "ci_dropped_share": max(ci.dropped_share for ci in cis),
                "n_traces": len(traces),
                "excluded_unusable": excluded,
                "mean_num_segments": float(np.mean([k_of[t] for t in traces])),
            }
        )
    return pl.DataFrame(out)


def localization_sets(
    truth: pl.DataFrame,
    agreement_truth: pl.DataFrame,
    estimates: pl.DataFrame,
    *,
    baseline_estimator: str,
    overlap_subsets: Mapping[str, Sequence[int]] | None = None,
    error_kinds: Mapping[int, str] | None = None,
) -> dict[str, tuple[pl.DataFrame, pl.DataFrame]]:
    """The trace sets of the localization table: label -> (true segments, estimates).

    `all_incorrect`: every incorrect trace (`truth`), RREDCoT on every reference kind, the
    one-pass Bayes value, the attributions, the controls (oracles, placebo) and the null row;
    `agreement_incorrect`: the agreement set's incorrect traces (`agreement_truth`), the
    reference estimator, MC, the ground truth, the controls and the null row; then, per first
    error kind (`error_kinds`: trace_index -> systematic | other), `incorrect <kind>` and
    `agreement_incorrect <kind>` with the same estimators but RREDCoT's other forms and the
    attributions; then, per overlap bin of the configured reference (`overlap_subsets`: label
    -> trace indices), `incorrect <label>`: those incorrect traces, RREDCoT on every reference
    kind, the Bayes value and the null row."""
    family, name = pl.col("family"), pl.col("estimator")
    controls = family.is_in([families.ORACLE, families.PLACEBO, families.NULL])
    chosen = {
        "all_incorrect": family.is_in([families.RREDCOT, families.BAYES, families.ATTRIBUTION])
        | controls,
        "agreement_incorrect": family.is_in([families.MC, families.GROUND_TRUTH])
        | (name == baseline_estimator)
        | controls,
    }
    sets = {
        "all_incorrect": (truth, estimates.filter(chosen["all_incorrect"])),
        "agreement_incorrect": (agreement_truth, estimates.filter(chosen["agreement_incorrect"])),
    }
    for kind in sorted(set((error_kinds or {}).values()), key=lambda k: k != "systematic"):
        of_kind = [t for t, k in (error_kinds or {}).items() if k == kind]
        narrow = chosen["all_incorrect"] & ~family.is_in([families.RREDCOT, families.ATTRIBUTION])
        for label, rows, which in (
            ("incorrect", truth, narrow | (name == baseline_estimator)),
            ("agreement_incorrect", agreement_truth, chosen["agreement_incorrect"]),
        ):
            subset = rows.filter(pl.col("trace_index").is_in(of_kind))
            if subset.height:
                sets[f"{label} {kind}"] = (subset, estimates.filter(which))
    for label, traces in (overlap_subsets or {}).items():
        rows = truth.filter(pl.col("trace_index").is_in(list(traces)))
        if rows.height:
            sets[f"incorrect {label}"] = (
                rows,
                estimates.filter(family.is_in([families.RREDCOT, families.BAYES, families.NULL])),
            )
    return sets


__all__ = ["RANDOM", "localization_sets", "localization_table", "true_segments"]
