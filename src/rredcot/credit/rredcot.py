"""The RREDCoT estimator (METHOD.md §3): answer-now reward R̂, reference-path value v̂, and σ.

Everything is a teacher-forced score under the policy π of text appended to a state
s_k = x ⊕ τ_{<b_k} (k = 0 … K); nothing is generated:

    log R̂_k = log π(y* ⊕ close | s_k ⊕ A)                 answer now            (K+1,)
              (`answer_now: joint`: log π(A ⊕ y* ⊕ close ⊕ EOS | s_k))
    v̂_k     = value variant over the reference suffixes     continuation value    (K+1,)
              C*_j = U*_{≥j} ⊕ A ⊕ y* ⊕ close, j = 0 … J−1 (C*_0 = C*, the whole reference)
    Φ_k = w_R·R̂_k + w_v·v̂_k,  h_k = Φ_k − Φ_{k−1},  σ = redistribute(Φ, R)   (redistribution.py)

The estimator is split so that each equation has one home:

- `rredcot_values`: pure functions on log-prob tables (`ReferenceScores` -> `value_estimate`,
  `answer_reward`), the value variants selected by name from `VALUE_VARIANTS`;
- `rredcot_config`: the config block (`RREDCoTConfig`);
- `reference_paths`: the reference path and the continuations scored at a state;
- `rredcot_queries`: which continuations are scored at which states (`plan_queries`, the
  column layout `Columns`, the kinds of state);
- `traces`: the scored trace (`Trace`, a `SegmentedTrace` with the reference and return);
- this module: the model-facing `rredcot_credit` / `rredcot_credit_batch`, which build the
  continuations from a `ReferencePath` (`build_continuations`) and score all of them at all
  states with `rredcot.scoring.packed` (each trace encoded once, its suffix rows reading its
  cache in place; state 0 once per prompt), then Φ, h and σ (`credit_from_scores`). Every
  public name of the others is re-exported here.

Reconstructed choices (the paper's text was not available), each a config option:

- `answer_now` (default "conditional"): R̂_k is the probability of the reference answer if the
  policy answers now, π(y* ⊕ close | s_k ⊕ A) (the paper's wording: the immediate reward of the
  answer action), scored as log π(A ⊕ y* ⊕ close | s_k) − log π(A | s_k). "joint" scores
  π(A ⊕ y* ⊕ close [⊕ EOS] | s_k), which includes the probability of choosing to answer now
  (≈ 0 mid-trace); with it Φ_k = Σ_{j=0..J} π(C*_j | s_k) is an exact lower bound of V(s_k).
  The joint column is scored either way: it anchors the suffix pruning.

- `end_with_eos` (default True): the answer-now continuation and every C*_j end with the EOS
  token, so no continuation is a prefix of another; the events "the response is exactly C*_j"
  are then disjoint and each is a correct response, so Φ_k = Σ_{j=0..J} π(C*_j | s_k) (with
  C*_J = the bare answer = R̂_k) is a lower bound of the true value V(s_k).
- `join` (default "line"): how a continuation meets a state. The synthetic prompt ends with
  "\\n" and A = "\\nAnswer: ", so s_0 ⊕ A has a blank line the policy never saw; and a
  keyword segmentation ends the states k ≥ 1 *before* the newline, so a reference suffix that
  starts with a step line would be glued onto the previous line. "line" makes every continuation
  start on a new line: after a state whose text ends with "\\n" one leading "\\n" of the
  continuation is dropped; after any other state a continuation that does not start with "\\n"
  gets one, unless the state ends *inside* a line (the response does not continue with "\\n"
  there: a segmentation that cuts mid-line): a mid-line state gets the continuation without its
  leading "\\n", so no newline is forced into the middle of a step. "verbatim" appends the text
  as built. Under "line" the continuations depend on the kind of state (`STATE_KINDS`); each
  state is scored with its kind's set.
- `suffixes` (default "all"): score every C*_j, or importance-sample m of them per state
  (uniform q, v̂ scaled by J/m; unbiased for `ref_suffix_sum`, cheaper, noisier). With
  `w_v: 0` (the answer-now-only potential Φ_k = w_R·R̂_k) no suffix is scored at all
  (`reads_suffixes`): the same Φ for the answer-now columns' cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import torch

from rredcot.credit.redistribution import (
    potential,
    raw_credit,
    redistribute,
)
from rredcot.credit.reference_paths import (
    Continuations,
    ReferencePath,
    build_continuations,
    join_at_state,
    split_lines,
)
from rredcot.credit.rredcot_config import ANSWER_NOW, JOIN_RULES, STATE_KINDS, RREDCoTConfig
from rredcot.credit.rredcot_queries import (
    JOINT_COLUMN,
    QueryPlan,
    draw_suffixes,
    plan_queries,
    state_kinds,
    thinking_states,
)
from rredcot.credit.rredcot_values import (
    PRUNABLE,
    VALUE_VARIANTS,
    ReferenceScores,
    answer_reward,
    value_estimate,
)
from rredcot.credit.segmented_trace import SegmentedTrace, Trace

__all__ = [
    "ANSWER_NOW",
    "JOIN_RULES",
    "PRUNABLE",
    "STATE_KINDS",
    "VALUE_VARIANTS",
    "Continuations",
    "CreditChain",
    "ReferencePath",
    "ReferenceScores",
    "RREDCoTConfig",
    "RREDCoTResult",
    "SegmentedTrace",
    "Trace",
    "answer_reward",
    "build_continuations",
    "credit_from_scores",
    "draw_suffixes",
    "join_at_state",
    "rredcot_credit",
    "rredcot_credit_batch",
    "rredcot_variants_batch",
    "reads_suffixes",
    "split_lines",
    "state_kinds",
    "thinking_states",
    "value_estimate",
]

# --------------------------------------------------------------------------- model-facing


@dataclass(frozen=True)
class RREDCoTResult:
    """Per-state and per-segment quantities of one trace (float64 tensors).

    States k = 0 … K: answer_logprob (log R̂), r_hat, v_hat, phi, suffix_logprobs (K+1, m):
    log π(C*_j | s_k) for the scored suffixes j ∈ suffix_columns (all J unless the config's
    `suffixes` is a number; −inf where pruning dropped the suffix, `RREDCoTConfig.prune_nats`).
    Segments k = 1 … K (stored at k−1): h (raw credit), sigma
    (redistributed reward). forward_tokens: real tokens the model ran for this trace (shared
    work counted once, see `rredcot_credit_batch`).
    """

    answer_logprob: torch.Tensor  # (K+1,)
    suffix_logprobs: torch.Tensor  # (K+1, J)
    path_prefix_logprobs: torch.Tensor | None  # (K+1,) for ref_answer_after_path
    r_hat: torch.Tensor  # (K+1,)
    v_hat: torch.Tensor  # (K+1,)
    phi: torch.Tensor  # (K+1,)
    h: torch.Tensor  # (K,)
    sigma: torch.Tensor  # (K,)
    forward_tokens: int
    suffix_columns: tuple[int, ...] = ()  # the j of each suffix_logprobs column


class CreditChain(NamedTuple):
    """The §3 chain of one trace, by symbol."""

    r_hat: torch.Tensor  # (K+1,) answer-now reward R̂_k
    v_hat: torch.Tensor  # (K+1,) reference-path value v̂_k
    phi: torch.Tensor  # (K+1,) potential Φ_k = w_R·R̂_k + w_v·v̂_k
    h: torch.Tensor  # (K,) raw credit Φ_k − Φ_{k−1}
    sigma: torch.Tensor  # (K,) redistributed credit σ_k


def credit_from_scores(
    scores: ReferenceScores, reward: float, config: RREDCoTConfig
) -> CreditChain:
    """(r_hat, v_hat, phi, h, sigma) from scored log-probs: the whole §3 chain, pure."""
    if scores.num_states < 2:
        raise ValueError(f"scores: need K ≥ 1 segments (K+1 ≥ 2 states), got {scores.num_states}")
    r_hat = answer_reward(scores)  # (K+1,)
    v_hat = value_estimate(config.value, scores)  # (K+1,)
    phi = potential(r_hat, v_hat, config.w_R, config.w_v)  # (K+1,)
    h = raw_credit(phi)  # (K,)
    sigma = redistribute(phi, reward, config.return_equivalence, config.eps)  # (K,)
    return CreditChain(r_hat, v_hat, phi, h, sigma)


def _check_encoded_rows(traces: Sequence[Trace], encoded: Any, rows: Sequence[int]) -> None:
    if len(rows) != len(traces):
        raise ValueError(
            f"encoded_rows: expected one row per trace ({len(traces)}), got {len(rows)}"
        )
    for t, (trace, row) in enumerate(zip(traces, rows, strict=True)):
        if not 0 <= row < len(encoded):
            raise ValueError(f"encoded_rows[{t}]: {row} is not an encoded trace")
        response = encoded.response_ids[row]
        n = len(trace.response_ids)
        if list(trace.prompt_ids) != encoded.prompt_ids[row] or (
            list(trace.response_ids) != response[:n]
        ):
            raise ValueError(
                f"encoded_rows[{t}]: encoded trace {row} is not x ⊕ τ of trace {t} (its prompt "
                f"must be equal and its response must start with the trace's response)"
            )


def _credit_batch(
    model: torch.nn.Module,
    tokenizer: Any,
    task: Any,
    traces: Sequence[Trace],
    config: RREDCoTConfig,
    variants: Mapping[str, RREDCoTConfig],
    *,
    encoded: Any = None,
    encoded_rows: Sequence[int] | None = None,
    seed: int | str = 0,
) -> dict[str, list[RREDCoTResult]]:
    """RREDCoT credit of several traces (METHOD.md §3), all scored in the same packed passes.

    Every column any of `variants` (name -> config) reads (U* ⊕ A, both answer-now forms) is
    scored in one pass under `config` (join, EOS, suffix draw, pruning); the result is name ->
    the credits of that variant (forward_tokens: the shared pass's). One variant equal to
    `config` is the plain single-config credit.

    Per trace: build the continuations (answer-now, C*_j, and U* ⊕ A for
    `ref_answer_after_path`; built once per reference and kind of state), score them at every
    state with `rredcot.scoring.packed` (`encode_traces`, then `score_encoded`: a few passes for
    the whole batch), then `credit_from_scores`. In steps: encode (`_encode`), plan the
    queries (`plan_queries`), score (`_score_in_chunks`), assemble each trace's scores by name
    (`_assemble`), then each variant's credit. State 0 (the bare prompt) is scored once per
    prompt and reference, not once per trace.

    encoded / encoded_rows: traces already encoded by the caller (`encode_traces`; row
    `encoded_rows[t]` must hold trace t's prompt and a response that starts with trace t's);
    their encoding is then the caller's cost, not counted in `forward_tokens`; or a
    `ChunkedEncoding` (`encode_within_budget`), which is encoded again here, chunk by chunk
    under `config.max_resident_tokens`, and counted. Without `encoded` the distinct traces are
    encoded here in such chunks (one chunk, all at once, when they fit). seed: the draw
    of the scored suffixes when `config.suffixes` is a number (one draw per prompt and
    reference, shared by its traces and all their states).
    A trace's `forward_tokens` counts the tokens run for it; what traces share (a prompt's
    encoding, state 0) is counted at the first trace that needs it, so the batch's sum is the
    batch's cost.
    """
    if not traces:
        return {name: [] for name in variants}
    encoded, rows = _encode(traces, config, encoded, encoded_rows)
    wanted = list(variants.values())
    with_prefix = any(c.value == "ref_answer_after_path" for c in wanted)
    conditional = any(c.answer_now == "conditional" for c in wanted)
    plan = plan_queries(
        traces,
        rows,
        tokenizer,
        task,
        config,
        with_prefix=with_prefix,
        conditional=conditional,
        seed=seed,
        with_suffixes=reads_suffixes(wanted),
    )
    prune = None
    if config.prune_nats is not None and config.value in PRUNABLE:
        from rredcot.scoring.packed import Pruning

        prune = Pruning(  # anchored on the joint answer-now
            config.prune_nats, config.prune_first_chunk, JOINT_COLUMN, config.prune_max_kept_tokens
        )
    tables, tokens = _score_in_chunks(
        model, encoded, rows, plan.queries, plan.asked_by, config, prune
    )
    scored = _assemble(traces, plan, tables, tokens)
    return {
        name: [
            _result(s.reference_scores(cfg.answer_now), trace, cfg, s.suffix_columns, s.tokens)
            for s, trace in zip(scored, traces, strict=True)
        ]
        for name, cfg in variants.items()
    }


def reads_suffixes(configs: Sequence[RREDCoTConfig]) -> bool:
    """Whether a pass for `configs` must score the reference suffixes: unless every config
    weighs v̂ by w_v = 0 with a value variant for which an unscored suffix (probability 0)
    gives v̂ = 0 (`PRUNABLE`: ref_suffix_sum, ref_suffix_max). Then Φ_k = w_R·R̂_k is the same
    either way and the answer-now columns alone are scored (the answer-now-only form)."""
    return any(c.w_v != 0 or c.value not in PRUNABLE for c in configs)


def _encode(
    traces: Sequence[Trace],
    config: RREDCoTConfig,
    encoded: Any,
    encoded_rows: Sequence[int] | None,
) -> tuple[Any, list[int]]:
    """(encoding, the row of each trace in it): the caller's encoding, checked, or the distinct
    traces as a `ChunkedEncoding`, encoded chunk by chunk in `_score_in_chunks` (one chunk when
    `config.max_resident_tokens` allows)."""
    if encoded is not None:
        if encoded_rows is None:
            raise ValueError("encoded_rows: needed with encoded (the encoded row of each trace)")
        rows = list(encoded_rows)
        _check_encoded_rows(traces, encoded, rows)
        return encoded, rows
    from rredcot.scoring.chunks import ChunkedEncoding

    distinct: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
    rows = [
        distinct.setdefault((tuple(t.prompt_ids), tuple(t.response_ids)), len(distinct))
        for t in traces
    ]
    chunked = ChunkedEncoding(
        [p for p, _ in distinct],
        [r for _, r in distinct],
        max_resident_tokens=config.max_resident_tokens,
        max_tokens_per_pass=config.max_tokens_per_pass,
        split=config.layout == "split",
    )
    return chunked, rows


@dataclass(frozen=True)
class TraceScores:
    """One trace's scored log-probs at states k = 0 … K, by name (`Columns`), both answer-now
    forms beside the values they feed; what every variant of a batch reads."""

    answer_joint: torch.Tensor  # (K+1,) log π(A ⊕ y* ⊕ close [⊕ EOS] | s_k)
    answer_conditional: torch.Tensor | None  # (K+1,) log π(y* ⊕ close | s_k ⊕ A), ≤ 0
    suffixes: torch.Tensor  # (K+1, m) log π(C*_j | s_k), j ∈ suffix_columns
    path_prefix: torch.Tensor | None  # (K+1,) log π(U* ⊕ A | s_k)
    path_num_tokens: torch.Tensor  # (K+1,) |C*| at each state
    suffix_weight: float  # J/m
    suffix_columns: tuple[int, ...]
    tokens: int  # forward tokens run for this trace

    def reference_scores(self, answer_now: str) -> ReferenceScores:
        """The scores a config with this `answer_now` form reads."""
        if answer_now == "conditional":
            if self.answer_conditional is None:
                raise ValueError("answer_now: the conditional form was not scored in this batch")
            log_r_hat = self.answer_conditional
        else:
            log_r_hat = self.answer_joint
        return ReferenceScores(
            answer_now=log_r_hat,
            suffixes=self.suffixes,
            path_prefix=self.path_prefix,
            path_num_tokens=self.path_num_tokens,
            suffix_weight=self.suffix_weight,
        )


def _assemble(
    traces: Sequence[Trace],
    plan: QueryPlan,
    tables: Sequence[torch.Tensor],
    tokens: Sequence[int],
) -> list[TraceScores]:
    """Each trace's rows of the scored tables, state by state, read by column name."""
    out = []
    for t, trace in enumerate(traces):
        per_state = torch.stack([tables[q][a] for q, a in plan.where[t]])  # (K+1, columns)
        col = plan.columns[t]
        chosen = plan.suffix_columns[t]
        suffixes = per_state[:, col.suffixes]
        if not chosen:  # none scored (w_v = 0): one suffix of probability 0, so v̂ = 0
            suffixes = torch.full((per_state.shape[0], 1), float("-inf"), dtype=per_state.dtype)
        conditional = None
        if col.trigger is not None:  # log π(A ⊕ y* ⊕ close | s) − log π(A | s)
            conditional = (per_state[:, col.answer_body] - per_state[:, col.trigger]).clamp(max=0.0)
        out.append(
            TraceScores(
                answer_joint=per_state[:, col.joint],
                answer_conditional=conditional,
                suffixes=suffixes,
                path_prefix=None if col.path_prefix is None else per_state[:, col.path_prefix],
                path_num_tokens=torch.tensor(plan.path_tokens[t]),
                suffix_weight=trace.reference.num_segments / len(chosen) if chosen else 1.0,
                suffix_columns=chosen,
                tokens=tokens[t],
            )
        )
    return out


def _score_in_chunks(
    model: torch.nn.Module,
    encoded: Any,
    rows: Sequence[int],
    queries: Sequence[Any],
    asked_by: Sequence[int],
    config: RREDCoTConfig,
    prune: Any,
) -> tuple[list[torch.Tensor], list[int]]:
    """The table of every query (`score_encoded`), and the tokens run per trace.

    A resident `EncodedTraces` is scored in one call (its encoding is the caller's cost). A
    `ChunkedEncoding` is encoded chunk by chunk under `config.max_resident_tokens` (only the
    rows the traces use), each chunk's queries scored on it before it is dropped; its
    encoding is counted here: a response at the first trace that reads it, a prompt at the
    first trace that reads it in each chunk. A query names one row, so it runs in one chunk and
    what it computes does not depend on the chunking (up to float rounding of batched passes).
    """
    from rredcot.scoring.chunks import ChunkedEncoding
    from rredcot.scoring.packed import score_encoded

    tokens = [0] * len(rows)
    tables: list[torch.Tensor | None] = [None] * len(queries)
    chunked = isinstance(encoded, ChunkedEncoding)
    if chunked:
        chunks = encoded.chunks(model, sorted(set(rows)))
    else:
        chunks = iter([(list(range(len(encoded))), encoded)])
    for chunk, part in chunks:
        local = {r: i for i, r in enumerate(chunk)}
        if chunked:  # encoded here: the traces that first read it pay for it
            seen_rows: set[int] = set()
            seen_prompts: set[tuple[int, ...]] = set()
            for t, row in enumerate(rows):
                prompt = tuple(encoded.prompt_ids[row])
                if row in local and row not in seen_rows:
                    seen_rows.add(row)
                    tokens[t] += len(encoded.response_ids[row])
                if row in local and prompt not in seen_prompts:
                    seen_prompts.add(prompt)
                    tokens[t] += len(prompt)
        mine = [q for q, query in enumerate(queries) if query.trace in local]
        run: list[int] = []
        out = score_encoded(
            model,
            part,
            [replace(queries[q], trace=local[queries[q].trace]) for q in mine],
            max_tokens_per_pass=config.max_tokens_per_pass,
            prune=prune,
            tokens=run,
            layout=config.layout,
        )
        for q, table, n in zip(mine, out, run, strict=True):
            tables[q] = table
            tokens[asked_by[q]] += n
        del part, out
    return [t for t in tables if t is not None], tokens


def _result(
    scores: ReferenceScores,
    trace: Trace,
    config: RREDCoTConfig,
    suffix_columns: tuple[int, ...],
    forward_tokens: int,
) -> RREDCoTResult:
    chain = credit_from_scores(scores, trace.reward, config)
    return RREDCoTResult(
        answer_logprob=scores.answer_now,
        suffix_logprobs=scores.suffixes,
        path_prefix_logprobs=scores.path_prefix,
        **chain._asdict(),
        forward_tokens=forward_tokens,
        suffix_columns=suffix_columns,
    )


def rredcot_credit_batch(
    model: torch.nn.Module,
    tokenizer: Any,
    task: Any,
    traces: Sequence[Trace],
    config: RREDCoTConfig | None = None,
    *,
    encoded: Any = None,
    encoded_rows: Sequence[int] | None = None,
    seed: int | str = 0,
) -> list[RREDCoTResult]:
    """RREDCoT credit of several traces under one config (see `_credit_batch`)."""
    config = RREDCoTConfig() if config is None else config
    out = _credit_batch(
        model,
        tokenizer,
        task,
        traces,
        config,
        {"": config},
        encoded=encoded,
        encoded_rows=encoded_rows,
        seed=seed,
    )
    return out[""]


def rredcot_variants_batch(
    model: torch.nn.Module,
    tokenizer: Any,
    task: Any,
    traces: Sequence[Trace],
    variants: Mapping[str, RREDCoTConfig],
    *,
    seed: int | str = 0,
) -> dict[str, list[RREDCoTResult]]:
    """RREDCoT credit of several traces under several configs from one unpruned scoring pass
    of every column any of them reads (see `_credit_batch`); each result's forward_tokens is
    the shared pass's. The configs must agree on everything that sets the scored columns
    (join, end_with_eos, suffixes)."""
    if not variants:
        return {}
    first = next(iter(variants.values()))
    for name, cfg in variants.items():
        for key in ("join", "end_with_eos", "suffixes"):
            if getattr(cfg, key) != getattr(first, key):
                raise ValueError(
                    f"variants: {name!r} has {key}={getattr(cfg, key)!r}, another "
                    f"{getattr(first, key)!r}; one scoring pass cannot serve both"
                )
    base = replace(first, value="ref_suffix_sum", prune_nats=None)
    return _credit_batch(model, tokenizer, task, traces, base, variants, seed=seed)


def rredcot_credit(
    model: torch.nn.Module,
    tokenizer: Any,
    task: Any,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    reference: ReferencePath,
    reward: float,
    config: RREDCoTConfig | None = None,
    *,
    seed: int | str = 0,
) -> RREDCoTResult:
    """RREDCoT credit of one trace x ⊕ τ with boundaries 0 = b_0 < … < b_K = T and return
    R = `reward` (see `rredcot_credit_batch`)."""
    trace = Trace(prompt_ids, response_ids, boundaries, reference, reward)
    return rredcot_credit_batch(model, tokenizer, task, [trace], config, seed=seed)[0]
