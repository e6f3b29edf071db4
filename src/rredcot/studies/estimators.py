"""Run every credit estimator of the study on the traces and record σ and what it cost.

Estimators (METHOD.md §3, §5), each giving one σ (K,) per trace on the same segmentation:

- `mc_n{N}`: Monte Carlo state values from N rollouts per state (the first N of one nested
  set, own seed, never the ground truth's rollouts), σ_k = V̂(s_k) − V̂(s_{k−1}), V̂(s_K) = R;
- `rredcot_{variant}` / `rredcot_{variant}_joint`: RREDCoT with each value variant of
  `VALUE_VARIANTS` and the conditional / joint answer-now (the configured `estimator.rredcot`
  otherwise, terminal correction by default); `…_own_path` / `…_sampled`: with the key on the
  trace's own path (an oracle) or the sampled-first reference instead of the configured one;
- `loo`, `shapley`, `grad_x_input`, `attention`: the attribution baselines;
- `oppo_bayes`: OPPO's one-pass Bayes value (METHOD.md §8, reconstructed): V̂(s_k) = p_{b_k}, the
  running success probability from the policy's log ratio with and without the reference in
  the prompt, σ_k = V̂(s_k) − V̂(s_{k−1}), V̂(s_K) = R (`bayes_estimates`).

Costs per trace: forward_tokens (tokens run through the model: for MC, each rollout's state
prompt plus its new tokens, since every rollout encodes its own prefix; for RREDCoT, the packed
scorer's real tokens; for attributions, padded tokens as the library counts them),
backward_tokens (gradient × input only) and seconds. Batched calls (MC, RREDCoT) are timed as a
whole and the time is shared among traces in proportion to their forward tokens.

The table is long: one row per (trace, estimator) with `sigma` (K,) and `values` (K,: the state
values of k = 0 … K−1, Φ_k for RREDCoT, V̂(s_k) for MC and the Bayes value; null for
attributions) as lists.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl
from tqdm.auto import tqdm

from rredcot.models.chat import THINK_CLOSE_TRIGGER
from rredcot.studies import families
from rredcot.studies.rollouts import (
    forward_tokens_per_trace,
    sample_rollouts,
    sigma_from_values,
    state_values,
    value_lookup,
    values_at_states,
)

ESTIMATE_SCHEMA: dict[str, pl.DataType] = {
    "trace_index": pl.Int64(),
    "estimator": pl.String(),
    "family": pl.String(),
    "n_rollouts": pl.Int64(),
    "sigma": pl.List(pl.Float64()),
    "values": pl.List(pl.Float64()),
    "forward_tokens": pl.Int64(),
    "backward_tokens": pl.Int64(),
    "seconds": pl.Float64(),
    "cost_basis": pl.String(),
}
FAMILIES = families.FAMILIES
BAYES_NAME = "oppo_bayes"
"""The one-pass Bayes value's estimator name (family `bayes`)."""


def mc_name(n: int) -> str:
    return f"mc_n{n}"


REFERENCE_COLUMNS: dict[str, str] = {
    "configured": "reference",
    "own_path": "reference_own_path",
    "sampled": "reference_sampled",
}
"""Reference kind -> its column in the study traces (`studies.traces.with_reference_kinds`):
the configured kind (references.source, the default everything is paired against), the oracle
key on the trace's own path, and the sampled-first reference."""


def rredcot_name(
    variant: str, answer_now: str = "conditional", reference_source: str = "configured"
) -> str:
    """`rredcot_{variant}`, `_joint` for the joint answer-now, `_own_path` / `_sampled` for a
    reference of that kind (`reference_source`; none for the configured one)."""
    if reference_source not in REFERENCE_COLUMNS:
        raise ValueError(
            f"reference_source: expected one of {list(REFERENCE_COLUMNS)}, got {reference_source!r}"
        )
    name = f"rredcot_{variant}" + ("_joint" if answer_now == "joint" else "")
    return name + ("" if reference_source == "configured" else f"_{reference_source}")


def reference_kind(estimator: str) -> str | None:
    """The reference kind of an RREDCoT estimator name (None for other families)."""
    if not estimator.startswith("rredcot_"):
        return None
    for kind in REFERENCE_COLUMNS:
        if kind != "configured" and estimator.endswith(f"_{kind}"):
            return kind
    return "configured"


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
    seed: int,
    tokenizer: Any = None,
) -> pl.DataFrame:
    """σ and V̂ of MC with each N in `n_values`, nested: one rollout call with max(N) rollouts
    per state (seed `seed`, apart from the ground truth's), and MC-N reads the first N of them.

    Each MC-N is exactly an N-rollout MC estimate; nesting only makes the MC-N of different N
    share rollouts (they are never compared with each other, only with the ground truth and
    RREDCoT), at the cost of the largest N instead of their sum. Costs per trace: the forward
    tokens of the first N rollouts of its states; seconds = the call's time × that share of its
    tokens. segmentation: one row per trace (trace_index, char_boundaries, num_segments).
    """
    from rredcot.studies.segmentations import distinct_states

    states = distinct_states(segmentation)
    reward = dict(traces.select("trace_index", "reward").iter_rows())
    run = sample_rollouts(
        backend,
        task,
        traces,
        states,
        n_rollouts=max(n_values),
        budget=budget,
        seed=seed,
        temperature=temperature,
        top_p=top_p,
        tokenizer=tokenizer,
    )
    total = sum(forward_tokens_per_trace(run.rollouts).values())
    rows: list[dict[str, Any]] = []
    for n in sorted(n_values):
        values = value_lookup(state_values(run.rollouts, n=n, truncation=truncation))
        tokens = forward_tokens_per_trace(run.rollouts, n=n)
        for t, cb in segmentation.select("trace_index", "char_boundaries").iter_rows():
            sigma = sigma_from_values(cb, values.get(t, {}), reward[t])
            rows.append(
                {
                    "trace_index": t,
                    "estimator": mc_name(n),
                    "family": families.MC,
                    "n_rollouts": n,
                    "sigma": sigma.tolist(),
                    "values": values_at_states(cb, values.get(t, {})).tolist(),
                    "forward_tokens": tokens.get(t, 0),
                    "backward_tokens": 0,
                    "seconds": run.seconds * tokens.get(t, 0) / total if total else 0.0,
                    "cost_basis": f"first {n} of {max(n_values)} nested rollouts per state",
                }
            )
    return _frame(rows)


def reference_path(task: Any, reference: str | None, answer: str) -> Any:
    """The `ReferencePath` (U* split into lines, y*) of a reference text; None without one."""
    from rredcot.credit.references import reference_reasoning
    from rredcot.credit.rredcot import ReferencePath

    if reference is None:
        return None
    return ReferencePath.from_text(reference_reasoning(task, reference), answer)


def rredcot_configs(
    config: Any,
    variants: Sequence[str],
    answer_now: Sequence[str],
    reference_source: str = "configured",
) -> dict[str, Any]:
    """estimator name -> `config` with each value variant × answer-now (`rredcot_name`)."""
    return {
        rredcot_name(v, a, reference_source): replace(config, value=v, answer_now=a)
        for a in answer_now
        for v in variants
    }


def rredcot_estimates(
    model: Any,
    tokenizer: Any,
    task: Any,
    traces: pl.DataFrame,
    segmentation: pl.DataFrame,
    configs: Mapping[str, Any],
    *,
    batch_traces: int = 64,
    reference_column: str = "reference",
    shared_pass: bool = False,
) -> pl.DataFrame:
    """σ and Φ of RREDCoT under each named config, `batch_traces` traces per scoring call (the
    time of a call is shared among its traces in proportion to their forward tokens).

    One call per config (each config's own cost), or with `shared_pass` one unpruned call for
    all of them (`rredcot_variants_batch`; every config then gets the shared pass's cost, said
    in `cost_basis`). The reference is read from `reference_column`; traces without one get
    no row.
    """
    from rredcot.credit.rredcot import rredcot_credit_batch, rredcot_variants_batch
    from rredcot.credit.segmented_trace import Trace

    by_index = {r["trace_index"]: r for r in traces.iter_rows(named=True)}
    items = []
    for t, bounds in segmentation.select("trace_index", "boundaries").iter_rows():
        row = by_index[t]
        ref = reference_path(task, row[reference_column], row["answer"])
        if ref is None:
            continue
        items.append((t, Trace(row["prompt_ids"], row["response_ids"], bounds, ref, row["reward"])))
    groups = [dict(configs)] if shared_pass else [{n: c} for n, c in configs.items()]
    basis = f"one unpruned pass shared by {len(configs)} variants" if shared_pass else "own pass"
    rows: list[dict[str, Any]] = []
    chunks = [(g, s) for g in groups for s in range(0, len(items), batch_traces)]
    for group, start in tqdm(chunks, desc="rredcot scoring", unit="batch"):
        chunk = items[start : start + batch_traces]
        trs = [tr for _, tr in chunk]
        began = time.perf_counter()
        # a number of `suffixes` draws them per prompt, seeded by the chunk's first trace
        if shared_pass:
            by_name = rredcot_variants_batch(model, tokenizer, task, trs, group, seed=start)
        else:
            ((name, cfg),) = group.items()
            by_name = {name: rredcot_credit_batch(model, tokenizer, task, trs, cfg, seed=start)}
        elapsed = time.perf_counter() - began
        for name, results in by_name.items():
            tokens = {t: r.forward_tokens for (t, _), r in zip(chunk, results, strict=True)}
            seconds = _share(elapsed, tokens)
            for (t, _), r in zip(chunk, results, strict=True):
                rows.append(
                    {
                        "trace_index": t,
                        "estimator": name,
                        "family": families.RREDCOT,
                        "n_rollouts": None,
                        "sigma": r.sigma.tolist(),
                        "values": r.phi[:-1].tolist(),
                        "forward_tokens": r.forward_tokens,
                        "backward_tokens": 0,
                        "seconds": seconds[t],
                        "cost_basis": basis,
                    }
                )
    return _frame(rows)


def bayes_estimates(
    model: Any,
    tokenizer: Any,
    task: Any,
    traces: pl.DataFrame,
    segmentation: pl.DataFrame,
    config: Any = None,
    *,
    batch_traces: int = 64,
    reference_column: str = "reference",
    name: str = BAYES_NAME,
) -> pl.DataFrame:
    """σ and V̂(s_k) = p_{b_k} of the one-pass Bayes value (METHOD.md §8) at every segment
    boundary, `batch_traces` traces per pair of passes (x ⊕ τ and x ⊕ O ⊕ τ, O the reference in
    the prompt, `rredcot.credit.references.oracle_prompt`).

    config: an `OPPOConfig` (prior, clip; None: its defaults). One trace per problem has no
    group, so `prior: group_mean` takes p_0 = the mean reward of the scored traces (the study
    set); `half` takes 0.5. Costs per trace: the real tokens of both passes (the prompt, the
    oracle prompt and τ twice); seconds: the chunk's time shared by those tokens. Traces without
    a reference, or without a segment, get no row. `name`: the estimator's name (a segmentation
    with a boundary at every token gives OPPO's token-level form, σ_t = the `delta` advantage
    a_t; `rredcot.studies.variants`).
    """
    import torch

    from rredcot.credit.bayes import (
        OPPOConfig,
        bayes_segment_credit,
        bayes_segment_values,
        bayes_values,
        log_ratios,
    )
    from rredcot.credit.references import oracle_prompt
    from rredcot.scoring.logprobs import completion_scores, pad_rows

    cfg = OPPOConfig() if config is None else config
    by_index = {r["trace_index"]: r for r in traces.iter_rows(named=True)}
    items = [
        (t, bounds, by_index[t])
        for t, bounds in segmentation.select("trace_index", "boundaries").iter_rows()
        if len(bounds) > 1 and by_index[t][reference_column] is not None
    ]
    if cfg.prior == "half" or not items:
        p0 = 0.5
    else:
        p0 = float(np.mean([row["reward"] for _, _, row in items]))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rows: list[dict[str, Any]] = []
    chunks = range(0, len(items), batch_traces)
    for start in tqdm(chunks, desc="bayes scoring", unit="batch"):
        chunk = items[start : start + batch_traces]
        began = time.perf_counter()
        oracle_ids = [
            tokenizer(
                oracle_prompt(task, tokenizer, row["prompt"], row[reference_column]),
                add_special_tokens=False,
            )["input_ids"]
            for _, _, row in chunk
        ]
        completion, mask = pad_rows([row["response_ids"] for _, _, row in chunk], pad, left=False)
        scores, tokens = [], {}
        for prompts in ([row["prompt_ids"] for _, _, row in chunk], oracle_ids):
            ids, prompt_mask = pad_rows(prompts, pad, left=True)
            scores.append(completion_scores(model, ids, prompt_mask, completion, mask)[0])
        r = log_ratios(scores[1], scores[0], mask)  # (B, T)
        p = bayes_values(r, mask, torch.full((len(chunk),), p0), cfg.clip)  # (B, T+1)
        elapsed = time.perf_counter() - began
        for (t, _, row), extra in zip(chunk, oracle_ids, strict=True):
            tokens[t] = len(row["prompt_ids"]) + len(extra) + 2 * len(row["response_ids"])
        seconds = _share(elapsed, tokens)
        for i, (t, bounds, row) in enumerate(chunk):
            rows.append(
                {
                    "trace_index": t,
                    "estimator": name,
                    "family": families.BAYES,
                    "n_rollouts": None,
                    "sigma": bayes_segment_credit(p[i], bounds, row["reward"]).tolist(),
                    "values": bayes_segment_values(p[i], bounds)[:-1].tolist(),
                    "forward_tokens": tokens[t],
                    "backward_tokens": 0,
                    "seconds": seconds[t],
                    "cost_basis": "own passes with and without the reference",
                }
            )
    return _frame(rows)


def answer_ids(
    task: Any, tokenizer: Any, answer: str, thinking: bool = False
) -> tuple[list[int], int]:
    """(A ⊕ y* ⊕ close token ids, len(A)) for the attribution value function f; `thinking`:
    the trace ends inside an open `<think>` block, so A closes it first (as RREDCoT's
    continuations do, `rredcot.credit.reference_paths.build_continuations`)."""
    text = (THINK_CLOSE_TRIGGER if thinking else "") + task.answer_trigger
    trigger = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    ids = list(tokenizer(text + answer + task.answer_close, add_special_tokens=False)["input_ids"])
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
    from rredcot.credit.attribution import AttributionTrace, attribute
    from rredcot.credit.rredcot_queries import thinking_states

    by_index = {r["trace_index"]: r for r in traces.iter_rows(named=True)}
    rows: list[dict[str, Any]] = []
    pairs = list(segmentation.select("trace_index", "boundaries").iter_rows())
    for t, bounds in tqdm(pairs, desc="attributions", unit="trace"):
        row = by_index[t]
        response = row["response_ids"]
        # one trigger per trace: whether its whole response leaves a <think> block open
        thinking = thinking_states(tokenizer, row["prompt_ids"], response, [len(response)])[0]
        ids, trigger_len = answer_ids(task, tokenizer, row["answer"], thinking)
        trace = AttributionTrace(row["prompt_ids"], response, bounds, ids, trigger_len)
        for name in names:
            res = attribute(name, model, trace, config)
            rows.append(
                {
                    "trace_index": t,
                    "estimator": name,
                    "family": families.ATTRIBUTION,
                    "n_rollouts": None,
                    "sigma": np.asarray(res.values, dtype=np.float64).tolist(),
                    "values": None,
                    "forward_tokens": res.forward_tokens,
                    "backward_tokens": res.backward_tokens,
                    "seconds": res.seconds,
                    "cost_basis": "own pass",
                }
            )
    return _frame(rows)


__all__ = [
    "ESTIMATE_SCHEMA",
    "FAMILIES",
    "answer_ids",
    "BAYES_NAME",
    "attribution_estimates",
    "bayes_estimates",
    "mc_estimates",
    "mc_name",
    "reference_path",
    "rredcot_configs",
    "rredcot_estimates",
    "rredcot_name",
    "REFERENCE_COLUMNS",
    "reference_kind",
]
