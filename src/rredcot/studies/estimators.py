"""Run every credit estimator of the study on the traces and record σ and what it cost.

Estimators (METHOD.md §3, §5), each giving one σ (K,) per trace on the same segmentation:

- `mc_n{N}`: Monte Carlo state values from N fresh rollouts per state (own seeds, never the
  ground truth's rollouts), σ_k = V̂(s_k) − V̂(s_{k−1}) with V̂(s_K) = R;
- `rredcot_{variant}`: RREDCoT with each value variant of `VALUE_VARIANTS` (the configured
  `estimator.rredcot` otherwise, terminal correction by default);
- `loo`, `shapley`, `grad_x_input`, `attention`: the attribution baselines.

Costs per trace: forward_tokens (tokens run through the model: for MC, each rollout's state
prompt plus its new tokens, since every rollout encodes its own prefix; for RREDCoT, the packed
scorer's real tokens; for attributions, padded tokens as the library counts them),
backward_tokens (gradient × input only) and seconds. Batched calls (MC, RREDCoT) are timed as a
whole and the time is shared among traces in proportion to their forward tokens.

The table is long: one row per (trace, estimator) with `sigma` as a list.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl

from rredcot.studies.rollouts import (
    forward_tokens_per_trace,
    sample_rollouts,
    sigma_from_values,
    state_values,
    value_lookup,
)

ESTIMATE_SCHEMA: dict[str, pl.DataType] = {
    "trace_index": pl.Int64(),
    "estimator": pl.String(),
    "family": pl.String(),
    "n_rollouts": pl.Int64(),
    "sigma": pl.List(pl.Float64()),
    "forward_tokens": pl.Int64(),
    "backward_tokens": pl.Int64(),
    "seconds": pl.Float64(),
}
FAMILIES: tuple[str, ...] = ("ground_truth", "mc", "rredcot", "attribution")


def mc_name(n: int) -> str:
    return f"mc_n{n}"


def rredcot_name(variant: str) -> str:
    return f"rredcot_{variant}"


def _share(total: float, weights: dict[int, int]) -> dict[int, float]:
    mass = sum(weights.values())
    return {t: total * w / mass if mass else 0.0 for t, w in weights.items()}


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=ESTIMATE_SCHEMA)


def mc_estimates(
    backend: Any,
    task: Any,
    traces: pl.DataFrame,
    segmentation: pl.DataFrame,
    n_values: Sequence[int],
    *,
    budget: int,
    truncation: str,
    temperature: float,
    top_p: float,
    seeds: Sequence[int],
    tokenizer: Any = None,
) -> pl.DataFrame:
    """σ of MC with each N in `n_values`: one independent rollout call per N (seed seeds[i]).

    segmentation: one row per trace (trace_index, char_boundaries, num_segments).
    """
    if len(seeds) != len(n_values):
        raise ValueError(f"seeds: need one per N ({len(n_values)}), got {len(seeds)}")
    from rredcot.studies.segmentations import distinct_states

    states = distinct_states(segmentation)
    reward = dict(traces.select("trace_index", "reward").iter_rows())
    rows: list[dict[str, Any]] = []
    for n, seed in zip(n_values, seeds, strict=True):
        run = sample_rollouts(
            backend,
            task,
            traces,
            states,
            n_rollouts=n,
            budget=budget,
            seed=seed,
            temperature=temperature,
            top_p=top_p,
            tokenizer=tokenizer,
        )
        values = value_lookup(state_values(run.rollouts, truncation=truncation))
        tokens = forward_tokens_per_trace(run.rollouts)
        seconds = _share(run.seconds, tokens)
        for t, cb in segmentation.select("trace_index", "char_boundaries").iter_rows():
            sigma = sigma_from_values(cb, values.get(t, {}), reward[t])
            rows.append(
                {
                    "trace_index": t,
                    "estimator": mc_name(n),
                    "family": "mc",
                    "n_rollouts": n,
                    "sigma": sigma.tolist(),
                    "forward_tokens": tokens.get(t, 0),
                    "backward_tokens": 0,
                    "seconds": seconds.get(t, 0.0),
                }
            )
    return _frame(rows)


def reference_path(task: Any, reference: str | None, answer: str) -> Any:
    """The `ReferencePath` (U* split into lines, y*) of a reference text; None without one."""
    from rredcot.credit.rredcot import ReferencePath
    from rredcot.references import reference_reasoning

    if reference is None:
        return None
    return ReferencePath.from_text(reference_reasoning(task, reference), answer)


def rredcot_estimates(
    model: Any,
    tokenizer: Any,
    task: Any,
    traces: pl.DataFrame,
    segmentation: pl.DataFrame,
    variants: Sequence[str],
    config: Any,
    *,
    estimator_names: Sequence[str] | None = None,
    batch_traces: int = 64,
) -> pl.DataFrame:
    """σ of RREDCoT with each value variant (config's other settings), `batch_traces` traces
    per `rredcot_credit_batch` call (the time of a call is shared among its traces in proportion
    to their forward tokens). Traces without a reference get no row."""
    from rredcot.credit.rredcot import Trace, rredcot_credit_batch

    names = (
        list(estimator_names)
        if estimator_names is not None
        else [rredcot_name(v) for v in variants]
    )
    by_index = {r["trace_index"]: r for r in traces.iter_rows(named=True)}
    items = []
    for t, bounds in segmentation.select("trace_index", "boundaries").iter_rows():
        row = by_index[t]
        ref = reference_path(task, row["reference"], row["answer"])
        if ref is None:
            continue
        items.append((t, Trace(row["prompt_ids"], row["response_ids"], bounds, ref, row["reward"])))
    rows: list[dict[str, Any]] = []
    for variant, name in zip(variants, names, strict=True):
        cfg = replace(config, value=variant)
        for start in range(0, len(items), batch_traces):
            chunk = items[start : start + batch_traces]
            began = time.perf_counter()
            results = rredcot_credit_batch(model, tokenizer, task, [tr for _, tr in chunk], cfg)
            elapsed = time.perf_counter() - began
            tokens = {t: r.forward_tokens for (t, _), r in zip(chunk, results, strict=True)}
            seconds = _share(elapsed, tokens)
            for (t, _), r in zip(chunk, results, strict=True):
                rows.append(
                    {
                        "trace_index": t,
                        "estimator": name,
                        "family": "rredcot",
                        "n_rollouts": None,
                        "sigma": r.sigma.tolist(),
                        "forward_tokens": r.forward_tokens,
                        "backward_tokens": 0,
                        "seconds": seconds[t],
                    }
                )
    return _frame(rows)


def answer_ids(task: Any, tokenizer: Any, answer: str) -> tuple[list[int], int]:
    """(A ⊕ y* ⊕ close token ids, len(A)) for the attribution value function f."""
    trigger = list(tokenizer(task.answer_trigger, add_special_tokens=False)["input_ids"])
    ids = list(
        tokenizer(task.answer_trigger + answer + task.answer_close, add_special_tokens=False)[
            "input_ids"
        ]
    )
    if ids[: len(trigger)] != trigger:
        raise ValueError("tokenizer: A ⊕ y* ⊕ close does not start with the tokens of A")
    return ids, len(trigger)


def attribution_estimates(
    model: Any,
    tokenizer: Any,
    task: Any,
    traces: pl.DataFrame,
    segmentation: pl.DataFrame,
    names: Sequence[str],
    config: Any,
) -> pl.DataFrame:
    """σ of each attribution in `names` (keys of `ATTRIBUTIONS`), one call per trace."""
    from rredcot.credit.attribution import attribute

    by_index = {r["trace_index"]: r for r in traces.iter_rows(named=True)}
    rows: list[dict[str, Any]] = []
    for t, bounds in segmentation.select("trace_index", "boundaries").iter_rows():
        row = by_index[t]
        ids, trigger_len = answer_ids(task, tokenizer, row["answer"])
        for name in names:
            res = attribute(
                name,
                model,
                row["prompt_ids"],
                row["response_ids"],
                bounds,
                ids,
                trigger_len,
                config,
            )
            rows.append(
                {
                    "trace_index": t,
                    "estimator": name,
                    "family": "attribution",
                    "n_rollouts": None,
                    "sigma": np.asarray(res.values, dtype=np.float64).tolist(),
                    "forward_tokens": res.forward_tokens,
                    "backward_tokens": res.backward_tokens,
                    "seconds": res.seconds,
                }
            )
    return _frame(rows)


__all__ = [
    "ESTIMATE_SCHEMA",
    "FAMILIES",
    "answer_ids",
    "attribution_estimates",
    "mc_estimates",
    "mc_name",
    "reference_path",
    "rredcot_estimates",
    "rredcot_name",
]
