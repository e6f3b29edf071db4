"""The estimator forms only the frontier compares (issue 47 item 2), each in its own pass.

`study_scored` writes them to `results/studies/estimates_variants.parquet` beside the estimates
every study reads; `rredcot.studies.frontier` reads both. All are scored on the agreement traces
(the ones with the MC ground truth), and each form is its own scoring call, so its forward
tokens and seconds are its own cost (never a pass shared with other forms):

- RREDCoT's configured form (`rredcot_name` of `estimator.rredcot`) and its cheaper forms
  (`studies.frontier.rredcot_variants`: label -> keys of `estimator.rredcot` replaced, named
  `<configured>_<label>`; e.g. `suffixes: 1` scores one reference suffix per state,
  `w_v: 0` the answer-now columns alone), on the studies' segmentation (label `main`);
- the same configured form with the oracle reference (the key on the trace's own path;
  `rredcot_name(..., "own_path")`), where the traces have one;
- the configured form at K segments (`studies.frontier.num_segments`, named
  `<configured>_k<K>`): the `segmentation` block (training's) with `num_segments` replaced,
  label `k<K>`; such a form has other states than the ground truth, so the frontier compares it
  by token advantages only;
- OPPO's token-level form (`oppo_bayes_token`): the Bayes value's `delta` advantage a_t at every
  token (a boundary before every token, label `token`), from the same two passes as
  `oppo_bayes`; scored on every study trace so that its prior p_0 (the scored traces' mean
  reward) is `oppo_bayes`'s, and kept on the agreement traces.

Rows: the estimate schema (`ESTIMATE_SCHEMA`) plus `segmentation` (label) and `boundaries`
(token boundaries of the row's segments, K+1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any

import polars as pl

from rredcot.studies.estimators import (
    ESTIMATE_SCHEMA,
    REFERENCE_COLUMNS,
    bayes_estimates,
    rredcot_estimates,
    rredcot_name,
)
from rredcot.studies.segmentations import MAIN, segmentation_table

VARIANTS_SCHEMA: dict[str, pl.DataType] = {
    **ESTIMATE_SCHEMA,
    "segmentation": pl.String(),
    "boundaries": pl.List(pl.Int64()),
}
TOKEN_LEVEL = "token"
"""Segmentation label of a form with a boundary before every token."""
BAYES_TOKEN_NAME = "oppo_bayes_token"
"""OPPO's token-level form (family `bayes`)."""


def segments_label(num_segments: int) -> str:
    """The segmentation label (and the estimator-name suffix) of a form at K segments."""
    return f"k{num_segments}"


def variant_configs(base: Any, overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """estimator name -> RREDCoT config: the configured form `base` under its own name, then
    each label's keys of `base` replaced (`<name of base>_<label>`); an unknown key is an error
    naming it."""
    from rredcot.credit.rredcot import RREDCoTConfig

    default = rredcot_name(base.value, base.answer_now)
    out = {default: base}
    for label, keys in overrides.items():
        out[f"{default}_{label}"] = RREDCoTConfig.from_dict({**asdict(base), **keys})
    return out


def token_segmentation(traces: pl.DataFrame) -> pl.DataFrame:
    """trace_index, boundaries 0, 1, …, T: every token its own segment (traces with T ≥ 1)."""
    rows = [
        (t, list(range(len(ids) + 1)))
        for t, ids in traces.select("trace_index", "response_ids").iter_rows()
        if len(ids)
    ]
    return pl.DataFrame(
        {"trace_index": [t for t, _ in rows], "boundaries": [b for _, b in rows]},
        schema={"trace_index": pl.Int64, "boundaries": pl.List(pl.Int64)},
    )


def _with_segmentation(estimates: pl.DataFrame, segmentation: pl.DataFrame, label: str):
    bounds = segmentation.select("trace_index", "boundaries")
    return estimates.join(bounds, on="trace_index", how="left").with_columns(
        segmentation=pl.lit(label)
    )


def variant_estimates(
    model: Any,
    tokenizer: Any,
    task: Any,
    traces: pl.DataFrame,
    main: pl.DataFrame,
    agreement: Sequence[int],
    *,
    rredcot: Any,
    segmentation: Any,
    overrides: Mapping[str, Mapping[str, Any]],
    num_segments: Sequence[int],
    oppo: Any = None,
    batch_traces: int = 64,
) -> pl.DataFrame:
    """The rows of every form of the module docstring, in `VARIANTS_SCHEMA`.

    traces: the study traces (with `reference`, and `reference_own_path` when the oracle row is
    wanted, `token_texts`, `entropies`, `logprobs` for the K segmentations); main: the studies'
    segmentation (label `main`); agreement: the trace indices the forms are scored on;
    rredcot: the configured `RREDCoTConfig`; segmentation: the `SegmentationConfig` whose
    `num_segments` the K forms replace; oppo: an `OPPOConfig` (None: its defaults).
    """
    chosen = pl.col("trace_index").is_in(list(agreement))
    mine, mine_main = traces.filter(chosen), main.filter(chosen)
    parts = []

    def score(cells: pl.DataFrame, configs: Mapping[str, Any], label: str, **kw: Any) -> None:
        for name, cfg in configs.items():  # each form its own calls: its own cost
            est = rredcot_estimates(
                model, tokenizer, task, mine, cells, {name: cfg}, batch_traces=batch_traces, **kw
            )
            parts.append(_with_segmentation(est, cells, label))

    score(mine_main, variant_configs(rredcot, overrides), MAIN)
    column = REFERENCE_COLUMNS["own_path"]
    if column in traces.columns:
        oracle = rredcot_name(rredcot.value, rredcot.answer_now, "own_path")
        score(mine_main, {oracle: rredcot}, MAIN, reference_column=column)
    default = rredcot_name(rredcot.value, rredcot.answer_now)
    grid = {segments_label(k): replace(segmentation, num_segments=k) for k in num_segments}
    if grid and mine.height:
        cells = segmentation_table(mine, tokenizer, grid)
        for label in grid:
            cell = cells.filter(pl.col("segmentation") == label)
            score(cell, {f"{default}_{label}": rredcot}, label)
    tokens = token_segmentation(traces)
    bayes = bayes_estimates(
        model,
        tokenizer,
        task,
        traces,
        tokens,
        oppo,
        batch_traces=batch_traces,
        name=BAYES_TOKEN_NAME,
    )
    parts.append(_with_segmentation(bayes.filter(chosen), tokens, TOKEN_LEVEL))
    if not parts:
        return pl.DataFrame(schema=VARIANTS_SCHEMA)
    return pl.concat(parts, how="vertical_relaxed").select(
        [pl.col(c).cast(d) for c, d in VARIANTS_SCHEMA.items()]
    )


__all__ = [
    "BAYES_TOKEN_NAME",
    "TOKEN_LEVEL",
    "VARIANTS_SCHEMA",
    "segments_label",
    "token_segmentation",
    "variant_configs",
    "variant_estimates",
]
