"""Score many continuations at many states of many traces in a few batched forward passes.

RREDCoT (METHOD.md §3) needs, for a trace x ⊕ τ and states s = x ⊕ τ_<b (b a prefix length of
the response τ) and continuations c_1 … c_M, every

    S[b, m] = log π(c_m | x ⊕ τ_<b) = Σ_t log π(c_m,t | x ⊕ τ_<b ⊕ c_m,<t).

Doing one full pass per (b, m) re-encodes the trace once per pair. Here every token of every
trace is encoded once, and the continuations of all states reuse its keys and values. The
pieces, one module each:

1. **Encoding** (`scoring.encoding`): each trace run once; its KV cache and last hidden states
   kept. The first token of every continuation at every state is read off the encoding's
   hidden state at P + b − 1; a continuation whose first k tokens repeat the trace's own next
   tokens τ[b : b + k] (a reference line the policy wrote itself, the newline every
   continuation starts with) has its tokens 1 … k read off too (`_leading_scores`); only the
   rest is run.
2. **Layout** (`scoring.layout`): the rest of each continuation is a block at one state of one
   trace; blocks of a trace are packed into rows. The `shared` layout (default) runs a row on
   its trace's cache where it lies (one copy of the cache, whatever the number of rows); the
   `packed` layout (the earlier one) batches rows, each with a copy of the cache slots; the
   `split` layout (CPU) batches rows of any traces into wide passes without a mask, reading
   each trace's cache where it lies (`scoring.split`).
3. **Passes** (`scoring.passes`): masks and forward passes of the rows (`scoring.attention`:
   the supported attention implementations, the mask format, the in-place slot cache).
4. **Pruning** (`scoring.pruning`, optional): rounds that drop continuations which can no
   longer matter next to an anchor column, with a bound on what is lost.

The number of passes does not grow with the number of states or continuations in the `packed`
layout (one prompt pass, a few response passes and a few continuation passes, more only under
`max_tokens_per_pass`); in the `shared` layout it is the continuation tokens over the row width,
and each pass attends over its row's trace only; in the `split` layout it is the continuation
tokens over the pass width (`SPLIT_PASS_TOKENS`), each token attending over its own trace only.

This module keeps the public names of all of them (`from rredcot.scoring.packed import …`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rredcot.scoring.attention import (
    SUPPORTED_ATTENTION,
    check_model,
    chunk_rows,
)
from rredcot.scoring.encoding import (
    ENCODE_CHUNK,
    EncodedTraces,
    GenerationCache,
    encode_traces,
    encoding_from_generation,
)
from rredcot.scoring.layout import (
    LAYOUTS,
    PAD_SLACK,
    ROW_TOKENS,
    SHARED_ROW_TOKENS,
    SPAN_SLACK,
    Passes,
    _Block,
    _length_buckets,
    _pack_rows,
    _plan_passes,
    _Row,
    check_layout,
    default_row_tokens,
    shared_row_width,
)
from rredcot.scoring.passes import run_rows
from rredcot.scoring.pruning import Pruning, _pruning_rounds, _waves
from rredcot.scoring.queries import Items, StateQuery, TraceSpec
from rredcot.scoring.split import check_split

__all__ = [
    "ENCODE_CHUNK",
    "LAYOUTS",
    "PAD_SLACK",
    "ROW_TOKENS",
    "SHARED_ROW_TOKENS",
    "SPAN_SLACK",
    "SUPPORTED_ATTENTION",
    "EncodedTraces",
    "GenerationCache",
    "Pruning",
    "StateQuery",
    "TraceSpec",
    "_Block",
    "_Row",
    "_length_buckets",
    "_pack_rows",
    "_plan_passes",
    "encode_traces",
    "encoding_from_generation",
    "score_encoded",
    "score_states",
    "score_states_batch",
]

DEFAULT_LAYOUT = "shared"


@torch.inference_mode()
def score_encoded(
    model: torch.nn.Module,
    encoded: EncodedTraces,
    queries: Sequence[StateQuery],
    *,
    max_tokens_per_pass: int | None = None,
    row_tokens: int | None = None,
    prune: Pruning | None = None,
    tokens: list[int] | None = None,
    layout: str = DEFAULT_LAYOUT,
) -> list[torch.Tensor]:
    """S_q[a, m] = log π(c_m | x_i ⊕ τ_i[:b_a]) for each query q = (i, states b, continuations).

    Returns one float64 CPU tensor (len(states), M) per query. The first token of every
    continuation is scored from the encoded hidden state at the state; the rest in the
    continuation passes (module docstring). `max_tokens_per_pass` caps rows × width of a pass
    (None: passes are cut by padding only); `row_tokens` is the row width (`split`: the pass
    width; 0: one row per state; None: the layout's default); `layout`: `shared` (rows read
    their trace's cache in place), `packed` (rows batched, each with a copy of it) or `split`
    (rows of any traces in one pass, no mask; CPU only). `prune`: score in rounds and
    drop (−inf) what cannot matter next to the anchor column (`Pruning`). `tokens`: a list that
    receives, per query, the continuation tokens run for it.
    """
    check_layout(layout)
    if not queries:
        return []
    row_tokens = default_row_tokens(layout, model) if row_tokens is None else row_tokens
    if max_tokens_per_pass is not None and max_tokens_per_pass < 1:
        raise ValueError(f"max_tokens_per_pass: expected None or ≥ 1, got {max_tokens_per_pass}")
    check_model(model)
    if layout == "split":
        check_split(model)
    for q, query in enumerate(queries):
        if not 0 <= query.trace < len(encoded):
            raise ValueError(f"queries[{q}].trace: {query.trace} is not an encoded trace")
        t = len(encoded.response_ids[query.trace])
        bad = [b for b in query.states if not 0 <= b <= t]
        if bad:
            raise ValueError(f"queries[{q}].states: {bad} outside 0 … T = {t}")
        if prune is not None and prune.anchor >= len(query.continuations):
            raise ValueError(
                f"prune anchor: column {prune.anchor} does not exist in queries[{q}] "
                f"({len(query.continuations)} continuations)"
            )
    if layout in ("shared", "split"):
        row_tokens = shared_row_width(row_tokens, max_tokens_per_pass)
    passes = Passes(layout, row_tokens, max_tokens_per_pass)

    items = Items(queries)
    scores, skips = _leading_scores(model, encoded, items)  # (items,) float64, per item

    # Continuation passes: one round, or rounds of pruning.
    prompt_lengths = [len(p) for p in encoded.prompt_ids]
    run = [0] * len(queries)
    plan: dict[tuple[int, int, int], tuple[int, int]] = {}
    pending: list[int] = []  # items that still run tokens after the first round
    for it in range(len(items)):
        q, a, m = items.where(it)
        todo = items.inputs(it) - skips[it]
        size = todo
        if prune is not None and m != prune.anchor and todo > prune.first_chunk:
            size = prune.first_chunk
            pending.append(it)
        if skips[it] or size != todo:
            plan[q, a, m] = (skips[it], size)
        run[q] += size
    # Waves of pending items whose kept keys stay within prune.max_kept tokens (one wave when
    # unbounded); the first wave's first round runs together with every item not pending.
    waves = _waves(pending, [items.inputs(it) - skips[it] for it in pending], prune)
    later = {it for wave in waves[1:] for it in wave}
    for w, wave in enumerate(waves or [[]]):
        if w == 0:
            wave_plan = {**plan, **{items.where(it): (skips[it], 0) for it in later}}
        else:
            wave_plan = {items.where(it): (skips[it], 0) for it in range(len(items))}
            wave_plan.update({items.where(it): plan[items.where(it)] for it in wave})
        rows = _pack_rows(queries, prompt_lengths, row_tokens, wave_plan)
        kept = run_rows(model, encoded, items, rows, scores, None, set(wave), passes)
        if wave:
            _pruning_rounds(model, encoded, items, scores, skips, wave, kept, prune, passes, run)
        del kept
    if tokens is not None:
        tokens[:] = run
    scores = scores.cpu()
    return [
        scores[f : f + len(q.states) * len(q.continuations)].view(len(q.states), -1)
        for f, q in zip(items.flat, queries, strict=True)
    ]


def _leading_scores(
    model: torch.nn.Module, encoded: EncodedTraces, items: Items
) -> tuple[torch.Tensor, list[int]]:
    """Σ log π of each item's leading tokens, read off the encoding, and how many inputs that
    skips: c_0 always, and c_1 … c_k when c_0 … c_{k−1} are the trace's own next tokens
    τ[b : b + k] (their keys are in the trace's cache), each from the encoded hidden state at
    P + b + t − 1. The continuation passes run the rest of c from input k on."""
    device = next(model.parameters()).device
    skips = [0] * len(items)
    at: list[tuple[int, int]] = []  # (trace, position b + t)
    token: list[int] = []
    owner: list[int] = []
    for it in range(len(items)):
        q, a, m = items.where(it)
        query = items.queries[q]
        c, b = query.continuations[m], query.states[a]
        response = encoded.response_ids[query.trace]
        k = 0
        while k < len(c) - 1 and b + k < len(response) and c[k] == response[b + k]:
            k += 1
        skips[it] = k
        at += [(query.trace, b + t) for t in range(k + 1)]
        token += c[: k + 1]
        owner += [it] * (k + 1)
    distinct = {pair: r for r, pair in enumerate(dict.fromkeys(at))}
    hidden = encoded.hidden[[i for i, _ in distinct], [t for _, t in distinct]]  # (U, ·)
    rows = chunk_rows(model.get_output_embeddings().weight.shape[0])
    where = torch.tensor([distinct[pair] for pair in at], device=device)
    wanted = torch.tensor(token, device=device)
    lead = torch.empty(len(at), dtype=torch.float64, device=device)
    for s in range(0, len(hidden), rows):  # (rows, V) log-probs at a time, never (U, V)
        log_pi = torch.log_softmax(
            encoded.logits(model, hidden[s : s + rows]).to(torch.float64), -1
        )
        mine = (where >= s) & (where < s + rows)
        lead[mine] = log_pi[where[mine] - s, wanted[mine]]
    scores = torch.zeros(len(items), dtype=torch.float64, device=device)
    return scores.index_add_(0, torch.tensor(owner, device=device), lead), skips


def score_states_batch(
    model: torch.nn.Module,
    traces: Sequence[TraceSpec],
    *,
    max_tokens_per_pass: int | None = None,
    row_tokens: int | None = None,
    layout: str = DEFAULT_LAYOUT,
) -> list[torch.Tensor]:
    """S_i[k, m] = log π(c_m | x_i ⊕ τ_i[:b_k]) for several traces, batched in the same passes.

    Identical (prompt, response) pairs are encoded once (`encode_traces`), then all states of
    all traces are scored together (`score_encoded`, in `layout`). Returns one float64 CPU
    tensor (K_i+1, M_i) per trace.
    """
    check_layout(layout)
    if not traces:
        return []
    if max_tokens_per_pass is not None and max_tokens_per_pass < 1:
        raise ValueError(f"max_tokens_per_pass: expected None or ≥ 1, got {max_tokens_per_pass}")
    check_model(model)
    distinct: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
    rows = [
        distinct.setdefault((tuple(s.prompt_ids), tuple(s.response_ids)), len(distinct))
        for s in traces
    ]
    encoded = encode_traces(
        model,
        [p for p, _ in distinct],
        [r for _, r in distinct],
        max_tokens_per_pass=max_tokens_per_pass,
        split=layout == "split",
    )
    queries = [
        StateQuery(row, list(s.boundaries), s.continuations)
        for row, s in zip(rows, traces, strict=True)
    ]
    return score_encoded(
        model,
        encoded,
        queries,
        max_tokens_per_pass=max_tokens_per_pass,
        row_tokens=row_tokens,
        layout=layout,
    )


def score_states(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    continuations: Sequence[Sequence[int]],
    *,
    max_tokens_per_pass: int | None = None,
) -> torch.Tensor:
    """S[k, m] = log π(c_m | x ⊕ τ[:b_k]) for k = 0 … K, m = 1 … M: a (K+1, M) float64 tensor.

    boundaries = [b_0 = 0, …, b_K = T]; state 0 is the bare prompt, state K the full trace.
    A constant number of forward passes (see the module docstring); `max_tokens_per_pass`
    caps the tokens of each pass.
    """
    spec = TraceSpec(prompt_ids, response_ids, boundaries, continuations)
    return score_states_batch(model, [spec], max_tokens_per_pass=max_tokens_per_pass)[0]
