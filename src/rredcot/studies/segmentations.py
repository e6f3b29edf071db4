"""Every segmentation the studies need, and the distinct states they ask the ground truth for.

The main study uses the configured segmentation (`segmentation` block, hybrid with K = 4 by
default); the sweep re-segments the first traces with every strategy × K of `studies.sweep`
(the other settings — keywords, merge score, … — stay as configured). A segmentation of a trace
is stored both as token boundaries 0 = b_0 < … < b_K = T (what the scorers take) and as
character boundaries c_k into the response text (what the rollouts continue from: state
s_k = prompt ⊕ response[:c_k]).

The Monte Carlo ground truth is computed once per *distinct* state (trace, c_k) with k < K
(s_K is the whole response, whose value is its reward R): segmentations that share a cut share
its rollouts, and the sweep's ground truth is the main study's wherever they meet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import polars as pl

from rredcot.credit.segmentation import SegmentationConfig, segment

MAIN = "main"  # the `segmentation` column value of the configured segmentation


def sweep_label(strategy: str, num_segments: int) -> str:
    """The `segmentation` column value of one sweep cell, e.g. "fixed_k4"."""
    return f"{strategy}_k{num_segments}"


def sweep_configs(
    base: SegmentationConfig, strategies: Sequence[str], num_segments: Sequence[int]
) -> dict[str, SegmentationConfig]:
    """label -> config for every strategy × K of the sweep (base settings otherwise)."""
    return {
        sweep_label(s, k): replace(base, strategy=s, num_segments=k)
        for s in strategies
        for k in num_segments
    }


def segmentation_table(
    traces: pl.DataFrame,
    tokenizer: Any,
    configs: Mapping[str, SegmentationConfig],
    trace_subsets: Mapping[str, Sequence[int]] | None = None,
) -> pl.DataFrame:
    """One row per (trace, segmentation): boundaries, char_boundaries, num_segments.

    traces: `trace_index, response, response_ids, token_texts, entropies, logprobs`.
    configs: label -> segmentation; trace_subsets: label -> the trace indices it covers (default:
    all traces). Traces with an empty response get no row (no segment; the caller counts them).
    Columns: trace_index, segmentation, strategy, requested_segments (K asked for, null for
    a strategy's own count), num_segments (K obtained: fewer when T < K), boundaries,
    char_boundaries.
    """
    from rredcot.credit.mc import token_to_char_boundaries

    subsets = dict(trace_subsets or {})
    rows: list[dict[str, Any]] = []
    for trace in traces.iter_rows(named=True):
        if trace["num_tokens"] == 0:
            continue
        for label, cfg in configs.items():
            if label in subsets and trace["trace_index"] not in set(subsets[label]):
                continue
            bounds = segment(trace["token_texts"], trace["entropies"], trace["logprobs"], cfg)
            chars = token_to_char_boundaries(
                tokenizer, trace["response_ids"], bounds, trace["response"]
            )
            rows.append(
                {
                    "trace_index": trace["trace_index"],
                    "segmentation": label,
                    "strategy": cfg.strategy,
                    "requested_segments": cfg.num_segments,
                    "num_segments": len(bounds) - 1,
                    "boundaries": bounds,
                    "char_boundaries": chars,
                }
            )
    schema = {
        "trace_index": pl.Int64,
        "segmentation": pl.String,
        "strategy": pl.String,
        "requested_segments": pl.Int64,
        "num_segments": pl.Int64,
        "boundaries": pl.List(pl.Int64),
        "char_boundaries": pl.List(pl.Int64),
    }
    return pl.DataFrame(rows, schema=schema)


def distinct_states(segmentations: pl.DataFrame) -> pl.DataFrame:
    """The states (trace_index, char_pos) the ground truth needs: every c_k with k < K, once.

    Sorted by trace, then position, so the rollout order is a function of this set alone.
    """
    return (
        segmentations.select(
            "trace_index", pl.col("char_boundaries").list.slice(0, pl.col("num_segments"))
        )
        .explode("char_boundaries")
        .rename({"char_boundaries": "char_pos"})
        .drop_nulls()
        .unique()
        .sort("trace_index", "char_pos")
    )


__all__ = ["MAIN", "distinct_states", "segmentation_table", "sweep_configs", "sweep_label"]
