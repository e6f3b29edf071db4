"""Monte Carlo rollouts kept one row each, so values under any N, budget L and truncation follow.

`rredcot.credit.mc.mc_state_values` returns aggregates for one trace; the studies need more:
the ground truth (large N, generous budget) is computed once per distinct state and then read
under several settings, and the truncated-MC study cuts the *same* rollouts at smaller budgets.
So here every rollout is one row: (trace_index, char_pos, rollout, num_tokens, eos_ended,
finish_reason, reward, prefill_tokens), and

    V̂(s) = mean of r over the rollouts of s that finished within L          (truncation "drop";
           NaN when none did)
    V̂(s) = Σ r·[finished within L] / N                                      (truncation "zero")

with N = the first n rollouts of s. The values agree with `mc_state_values` on the same backend
and seed (tested).

Cutting at a smaller budget after the fact is exact for a backend whose per-row random streams
do not depend on `max_new_tokens` (the HF backend's guarantee: a row's draws depend only on the
seed and its (prompt, sample) index): the first L tokens of a rollout are the tokens a run with
budget L would produce. A rollout finishes within L when it stopped (stop string or EOS) and its
kept tokens — plus the EOS token when EOS ended it, since EOS takes a generation step too — fit
in L. Rollouts that hit the generous budget itself are never counted as finished.

Rollout streams: one `backend.generate` call over all states, state i (in the given order) is
prompt index i, so stream (seed, i, j) feeds rollout j of state i. Different studies use
different seeds (derive_seed of a study-specific tag), so no estimator reuses the ground truth's
rollouts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from rredcot.generation.base import GenerationBackend, SamplingParams

# rredcot.credit.mc.TRUNCATION, repeated so that the analysis steps need not import torch.
TRUNCATION: tuple[str, ...] = ("drop", "zero")

ROLLOUT_SCHEMA: dict[str, pl.DataType] = {
    "trace_index": pl.Int64(),
    "char_pos": pl.Int64(),
    "rollout": pl.Int64(),
    "prefill_tokens": pl.Int64(),
    "num_tokens": pl.Int64(),
    "eos_ended": pl.Boolean(),
    "finish_reason": pl.String(),
    "reward": pl.Float64(),
}


@dataclass(frozen=True)
class RolloutRun:
    """The rollout table of one `sample_rollouts` call and its wall time (seconds)."""

    rollouts: pl.DataFrame
    seconds: float


def _grade_pairs(task: Any, pairs: list[tuple[str, str]]) -> list[float]:
    grade_many = getattr(task, "grade_many", None)
    grades = grade_many(pairs) if callable(grade_many) else [task.grade(r, g) for r, g in pairs]
    return [g.reward for g in grades]


def sample_rollouts(
    backend: GenerationBackend,
    task: Any,
    traces: pl.DataFrame,
    states: pl.DataFrame,
    *,
    n_rollouts: int,
    budget: int,
    seed: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    tokenizer: Any = None,
) -> RolloutRun:
    """`n_rollouts` rollouts of at most `budget` new tokens from every state, one row each.

    traces: `trace_index, prompt, response, answer`; states: `trace_index, char_pos` (state
    s = prompt ⊕ response[:char_pos]). A finished rollout is graded as the whole response
    response[:char_pos] ⊕ rollout against the trace's answer; a truncated one gets reward 0 and
    is told apart by `finish_reason == "length"`. prefill_tokens: tokens of the state prompt
    (counted with `tokenizer` when given), which each rollout encodes before generating.
    """
    by_index = {r["trace_index"]: r for r in traces.iter_rows(named=True)}
    unknown = sorted(set(states["trace_index"].to_list()) - set(by_index))
    if unknown:
        raise ValueError(f"states: trace_index {unknown[:10]} not in traces")
    state_rows = states.select("trace_index", "char_pos").rows()
    prefixes = [by_index[t]["response"][:c] for t, c in state_rows]
    prompts = [by_index[t]["prompt"] + p for (t, _), p in zip(state_rows, prefixes, strict=True)]
    prefill = (
        [len(ids) for ids in tokenizer(prompts)["input_ids"]]
        if tokenizer is not None and prompts
        else [0] * len(prompts)
    )
    params = SamplingParams(
        n=n_rollouts,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=budget,
        seed=seed,
        stop_strings=tuple(task.stop_strings),
    )
    start = time.perf_counter()
    completions = backend.generate(prompts, params) if prompts else []
    if len(completions) != len(prompts) * n_rollouts:
        raise ValueError(
            f"backend returned {len(completions)} completions for {len(prompts)} states x "
            f"{n_rollouts} rollouts"
        )
    finished = [c for c in completions if c.finish_reason == "stop"]
    rewards = _grade_pairs(
        task,
        [
            (prefixes[c.prompt_index] + c.text, by_index[state_rows[c.prompt_index][0]]["answer"])
            for c in finished
        ],
    )
    reward_of = {
        (c.prompt_index, c.sample_index): r for c, r in zip(finished, rewards, strict=True)
    }
    seconds = time.perf_counter() - start
    stops = tuple(task.stop_strings)
    rows = {name: [] for name in ROLLOUT_SCHEMA}
    for c in completions:
        t, pos = state_rows[c.prompt_index]
        rows["trace_index"].append(t)
        rows["char_pos"].append(pos)
        rows["rollout"].append(c.sample_index)
        rows["prefill_tokens"].append(prefill[c.prompt_index])
        rows["num_tokens"].append(c.num_tokens)
        # Stopped without a stop string at the end of its text: EOS ended it.
        rows["eos_ended"].append(
            c.finish_reason == "stop" and not any(c.text.endswith(s) for s in stops)
        )
        rows["finish_reason"].append(c.finish_reason)
        rows["reward"].append(reward_of.get((c.prompt_index, c.sample_index), 0.0))
    return RolloutRun(pl.DataFrame(rows, schema=ROLLOUT_SCHEMA), seconds)


def finished_within(rollouts: pl.DataFrame, budget: int | None = None) -> pl.Expr:
    """Expression: the rollout finished within `budget` new tokens (None: within its own)."""
    stopped = pl.col("finish_reason") == "stop"
    if budget is None:
        return stopped
    steps = pl.col("num_tokens") + pl.col("eos_ended").cast(pl.Int64)
    return stopped & (steps <= budget)


def state_values(
    rollouts: pl.DataFrame,
    *,
    n: int | None = None,
    budget: int | None = None,
    truncation: str = "drop",
    first_rollout: int = 0,
) -> pl.DataFrame:
    """V̂ per state from the rollouts [first_rollout, first_rollout + n) (module docstring).

    Returns trace_index, char_pos, value (NaN under "drop" when none finished), n_total,
    n_finished, n_truncated. `budget` None uses each rollout's own finish reason.
    """
    if truncation not in TRUNCATION:
        raise ValueError(f"truncation: {truncation!r} is not allowed; choose one of {TRUNCATION}")
    if n is not None and n < 1:
        raise ValueError(f"n: expected an integer >= 1 or None, got {n!r}")
    if budget is not None and budget < 1:
        raise ValueError(f"budget: expected an integer >= 1 or None, got {budget!r}")
    chosen = rollouts.filter(pl.col("rollout") >= first_rollout)
    if n is not None:
        chosen = chosen.filter(pl.col("rollout") < first_rollout + n)
    if n is not None:
        counts = chosen.group_by("trace_index", "char_pos").len()
        short = counts.filter(pl.col("len") < n)
        if short.height:
            raise ValueError(
                f"n: {n} rollouts asked for, but {short.height} state(s) have fewer from "
                f"rollout {first_rollout} on (e.g. {short.row(0)})"
            )
    done = finished_within(chosen, budget)
    out = chosen.group_by("trace_index", "char_pos").agg(
        n_total=pl.len(),
        n_finished=done.sum(),
        correct=(pl.col("reward") * done.cast(pl.Float64)).sum(),
    )
    denominator = pl.col("n_finished") if truncation == "drop" else pl.col("n_total")
    return (
        out.with_columns(
            value=pl.when(denominator > 0)
            .then(pl.col("correct") / denominator)
            .otherwise(float("nan")),
            n_truncated=pl.col("n_total") - pl.col("n_finished"),
        )
        .select("trace_index", "char_pos", "value", "n_total", "n_finished", "n_truncated")
        .sort("trace_index", "char_pos")
    )


def values_at_states(char_boundaries: Sequence[int], values: dict[int, float]) -> np.ndarray:
    """(V̂(s_0), …, V̂(s_{K−1})) from char_pos -> V̂ (NaN where a state has no value)."""
    return np.array([values.get(c, math.nan) for c in list(char_boundaries)[:-1]], np.float64)


def sigma_from_values(
    char_boundaries: Sequence[int], values: dict[int, float], reward: float
) -> np.ndarray:
    """σ_k = V̂(s_k) − V̂(s_{k−1}), k = 1 … K, with V̂(s_K) := R (`mc_segment_credit`).

    values: char_pos -> V̂ for the states c_0 … c_{K−1}; a missing or NaN value gives NaN σ
    next to it.
    """
    v = np.append(values_at_states(char_boundaries, values), float(reward))
    return v[1:] - v[:-1]


def value_lookup(values: pl.DataFrame) -> dict[int, dict[int, float]]:
    """trace_index -> (char_pos -> V̂) from a `state_values` table."""
    out: dict[int, dict[int, float]] = {}
    for t, c, v in values.select("trace_index", "char_pos", "value").iter_rows():
        out.setdefault(t, {})[c] = v
    return out


def forward_tokens_per_trace(rollouts: pl.DataFrame, n: int | None = None) -> dict[int, int]:
    """trace_index -> Σ over its rollouts (the first n per state) of prefill + new tokens."""
    chosen = rollouts if n is None else rollouts.filter(pl.col("rollout") < n)
    agg = chosen.group_by("trace_index").agg(
        (pl.col("prefill_tokens") + pl.col("num_tokens")).sum().alias("tokens")
    )
    return dict(agg.iter_rows())


__all__ = [
    "values_at_states",
    "ROLLOUT_SCHEMA",
    "RolloutRun",
    "finished_within",
    "forward_tokens_per_trace",
    "sample_rollouts",
    "sigma_from_values",
    "state_values",
    "value_lookup",
]
