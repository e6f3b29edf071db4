"""Score many continuations at many states of many traces in a few batched forward passes.

RREDCoT (METHOD.md §3) needs, for a trace x ⊕ τ and states s = x ⊕ τ_<b (b a prefix length of
the response τ) and continuations c_1 … c_M, every

    S[b, m] = log π(c_m | x ⊕ τ_<b) = Σ_t log π(c_m,t | x ⊕ τ_<b ⊕ c_m,<t).

Doing one full pass per (b, m) re-encodes the trace once per pair. Here every token of every
trace is encoded once, and the continuations of all states reuse its keys and values:

1. **Encoding** (`encode_traces`). Each distinct prompt x is run once (*prompt pass*, prompts
   left-padded), then every response τ on top of its prompt's cache (*response passes*, traces
   of similar length together so padding stays small). The n responses of a GRPO group share
   one prompt pass. The result (`EncodedTraces`) holds the KV cache of every trace in one slot
   layout, [left-padded prompt | right-padded response], and the last hidden state at every
   position: projected onto the vocabulary it gives the log-probs and entropies of the
   response tokens (the segmentation's input, `EncodedTraces.token_scores`) and the first
   token of every continuation at every state (hidden state at P + b − 1).
2. **Continuation passes** (`score_encoded`). Each continuation without its last token (which
   predicts nothing) is a *block*; a block sits at one state of one trace. Blocks of the same
   trace are packed back to back into batch rows of about `row_tokens` tokens (a block never
   splits; a longer block gets a row of its own). A row carries its trace's cache and a 4D
   mask: a block's tokens see the trace's cache slots up to its state (x ⊕ τ_<b) and the
   earlier tokens of their own block, nothing else; position ids are P + b + t, exactly where
   c_m,t sits in the unpacked x ⊕ τ_<b ⊕ c_m, so RoPE sees the same relative positions. The
   output at c_m,t scores c_m,t+1. Rows of similar width share a pass, so padding stays small;
   each pass keeps only the cache slots its rows can see.

Why rows of ~`row_tokens` tokens: attention inside a row costs width × (cache + width) entries,
most of them masked, while every row pays for a copy of its trace's cache; a few hundred tokens
balance the two on the CPU (measured in scripts/bench_scoring.py). One row per state (all
continuations of one state) is `row_tokens=0`.

The number of passes does not grow with the number of states or continuations: one prompt
pass, a few response passes (one per length bucket) and a few continuation passes (one per
width bucket, more only under `max_tokens_per_pass`, which caps rows × width of a pass,
padding included). transformers hands a prepared 4D mask to the attention function as-is
(`masking_utils._preprocess_mask_arguments`); `sdpa` takes a boolean mask and `eager` an
additive one, so both work. Flash and flex attention cannot take it and are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from rredcot.scoring.logprobs import _MAX_CHUNK_ELEMENTS, gather_logprobs

SUPPORTED_ATTENTION: tuple[str, ...] = ("eager", "sdpa")

ROW_TOKENS = 32
"""Default target width of a packed continuation row (tokens); see the module docstring."""

PAD_SLACK = 0.05
"""A pass takes one more row while its padding stays within this fraction of its real tokens."""

SPAN_SLACK = 0.25
"""… and while the cache slots its rows attend over stay within this fraction of those needed."""


@dataclass(frozen=True)
class TraceSpec:
    """One trace to score: prompt x, response τ, boundaries b_0 … b_K, continuations c_1 … c_M.

    State k is x ⊕ τ[:b_k]; boundaries must satisfy 0 = b_0 < … < b_K = T = len(response_ids).
    """

    prompt_ids: Sequence[int]
    response_ids: Sequence[int]
    boundaries: Sequence[int]
    continuations: Sequence[Sequence[int]]

    def __post_init__(self) -> None:
        if len(self.prompt_ids) == 0:
            raise ValueError(
                "prompt_ids: must hold at least one token (state 0 needs a context to score "
                "the first continuation token)"
            )
        b, t = list(self.boundaries), len(self.response_ids)
        if not b or b[0] != 0 or b[-1] != t:
            raise ValueError(
                f"boundaries: must start at 0 and end at len(response_ids) = {t}, got {b}"
            )
        if any(right <= left for left, right in zip(b, b[1:], strict=False)):
            raise ValueError(f"boundaries: must be strictly increasing, got {b}")
        _check_continuations(self.continuations)

    @property
    def num_states(self) -> int:
        """K + 1."""
        return len(self.boundaries)


@dataclass(frozen=True)
class StateQuery:
    """Continuations c_1 … c_M to score at the states x ⊕ τ[:b], b ∈ `states`, of encoded trace
    `trace` (an index into `EncodedTraces`); 0 ≤ b ≤ T, any order, repeats allowed."""

    trace: int
    states: Sequence[int]
    continuations: Sequence[Sequence[int]]

    def __post_init__(self) -> None:
        if len(self.states) == 0:
            raise ValueError(f"states: query of trace {self.trace} names no state")
        _check_continuations(self.continuations)


def _check_continuations(continuations: Sequence[Sequence[int]]) -> None:
    if len(continuations) == 0:
        raise ValueError("continuations: need at least one continuation to score")
    empty = [m for m, c in enumerate(continuations) if len(c) == 0]
    if empty:
        raise ValueError(f"continuations: entries {empty} are empty; each needs ≥ 1 token")


def _check_model(model: torch.nn.Module) -> None:
    config = model.config
    impl = getattr(config, "_attn_implementation", None)
    if impl not in SUPPORTED_ATTENTION:
        raise ValueError(
            f"model.config._attn_implementation: packed scoring needs a custom 4D attention "
            f"mask, which {impl!r} does not take; allowed: {list(SUPPORTED_ATTENTION)} (e.g. "
            f"model.set_attn_implementation('sdpa'))"
        )
    layer_types = getattr(config, "layer_types", None) or []
    other = sorted({t for t in layer_types if t != "full_attention"})
    if other:
        raise ValueError(
            f"model.config.layer_types: packed scoring supports full attention only, got {other}"
        )
    if getattr(config, "final_logit_softcapping", None) is not None:
        raise ValueError(
            "model.config.final_logit_softcapping: packed scoring projects hidden states with "
            "the output embeddings alone and cannot apply a logit soft-cap"
        )


def _allowed_to_mask(allowed: torch.Tensor, model: torch.nn.Module) -> torch.Tensor:
    """(R, Q, S) allowed → the (R, 1, Q, S) mask the attention takes: boolean for sdpa,
    additive (0 / dtype min) for eager."""
    if model.config._attn_implementation == "sdpa":
        return allowed[:, None]
    dtype = next(model.parameters()).dtype
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]


def _project(model: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """Logits (N, V) of last hidden states (N, H): the causal LM's head."""
    return model.get_output_embeddings()(hidden)


def _chunk_rows(vocab: int) -> int:
    """Rows of (rows, V) logits projected at once: about 2^25 elements whatever V."""
    return max(1, _MAX_CHUNK_ELEMENTS // max(vocab, 1))


# --------------------------------------------------------------------------- encoding


@dataclass
class EncodedTraces:
    """Traces x_i ⊕ τ_i after one encoding: KV cache and last hidden states (`encode_traces`).

    Cache slots of row i: [0, P_max) the prompt left-padded (real from P_max − P_i), then
    [P_max, P_max + T_i) the response. hidden[i, b] is the last hidden state at position
    P_i + b − 1, the one that predicts τ_b (b < T_i) or a continuation's first token at state b.
    forward_tokens: real tokens run (each distinct prompt once, every response once).
    """

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    prompt_width: int  # P_max
    keys: list[torch.Tensor]  # per layer (B, kv heads, P_max + T_max, head dim)
    values: list[torch.Tensor]
    hidden: torch.Tensor  # (B, 1 + T_max, H)
    forward_tokens: int

    def __len__(self) -> int:
        return len(self.prompt_ids)

    def token_scores(self, model: torch.nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(log π(τ_t | x ⊕ τ_<t), H_t) for t < T_i, per trace: two float32 (float64 for a
        float64 model) CPU tensors (T_i,) each, from the cached hidden states (no new pass)."""
        lengths = [len(r) for r in self.response_ids]
        dtype = torch.float64 if self.hidden.dtype == torch.float64 else torch.float32
        if sum(lengths) == 0:
            return [(torch.zeros(0, dtype=dtype), torch.zeros(0, dtype=dtype)) for _ in lengths]
        rows = torch.cat([self.hidden[i, :n] for i, n in enumerate(lengths)])  # (ΣT, H)
        targets = torch.tensor([t for r in self.response_ids for t in r], device=rows.device)
        vocab = model.get_output_embeddings().weight.shape[0]
        chunk = _chunk_rows(vocab)
        logprobs, entropies = [], []
        with torch.inference_mode():
            for start in range(0, len(rows), chunk):
                part = slice(start, start + chunk)
                lp, h = gather_logprobs(
                    _project(model, rows[part]), targets[part], with_entropy=True
                )
                logprobs.append(lp.cpu())
                entropies.append(h.cpu())
        lp_all, h_all = torch.cat(logprobs), torch.cat(entropies)
        return list(zip(lp_all.split(lengths), h_all.split(lengths), strict=True))


def _length_buckets(
    lengths: Sequence[int], cap: int | None, slack: float | None = None
) -> list[list[int]]:
    """Indices with length > 0, longest first, cut into passes: a pass takes the next index
    while rows × longest stays within (1 + slack) × its summed lengths (slack None:
    `PAD_SLACK`) and within `cap`."""
    slack = PAD_SLACK if slack is None else slack
    order = sorted((i for i, n in enumerate(lengths) if n > 0), key=lambda i: -lengths[i])
    passes: list[list[int]] = []
    real = 0
    for i in order:
        if passes:
            width = lengths[passes[-1][0]]
            rows = len(passes[-1]) + 1
            fits_pad = rows * width <= (1 + slack) * (real + lengths[i])
            fits_cap = cap is None or rows * width <= cap
            if fits_pad and fits_cap:
                passes[-1].append(i)
                real += lengths[i]
                continue
        passes.append([i])
        real = lengths[i]
    return passes


def _decoder(model: torch.nn.Module) -> torch.nn.Module:
    return model.get_decoder()


@torch.inference_mode()
def encode_traces(
    model: torch.nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    *,
    max_tokens_per_pass: int | None = None,
) -> EncodedTraces:
    """Run every trace x_i ⊕ τ_i through `model` once, each distinct prompt once.

    `max_tokens_per_pass` caps rows × width of a response pass (a longer response gets a pass
    of its own). Traces may repeat; each copy is encoded (deduplicate first to save the work).
    """
    if len(prompt_ids) != len(response_ids):
        raise ValueError(
            f"prompt_ids/response_ids: expected one prompt per response, got {len(prompt_ids)} "
            f"and {len(response_ids)}"
        )
    _check_model(model)
    decoder = _decoder(model)
    device = next(model.parameters()).device
    prompts = [list(p) for p in prompt_ids]
    responses = [list(r) for r in response_ids]
    empty = [i for i, p in enumerate(prompts) if not p]
    if empty:
        raise ValueError(f"prompt_ids: traces {empty} have an empty prompt")
    if not prompts:
        return EncodedTraces([], [], 0, [], [], torch.zeros(0, 1, 0), 0)

    # 1. Prompt pass: each distinct prompt once, left-padded to P_max.
    distinct: dict[tuple[int, ...], int] = {}
    group = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]  # trace -> prompt
    unique = [list(p) for p in distinct]
    p_max = max(map(len, unique))
    lo = torch.tensor([p_max - len(p) for p in unique], device=device)  # first real slot
    ids = torch.zeros((len(unique), p_max), dtype=torch.long, device=device)
    for g, p in enumerate(unique):
        ids[g, p_max - len(p) :] = torch.tensor(p)
    slot = torch.arange(p_max, device=device)
    causal = slot[None, :, None] >= slot[None, None, :]  # (1, Q, S)
    allowed = (causal & (slot[None, None, :] >= lo[:, None, None])) | torch.eye(
        p_max, dtype=torch.bool, device=device
    )  # a padding query sees itself, so no row is fully masked
    out = decoder(
        input_ids=ids,
        attention_mask=_allowed_to_mask(allowed, model),
        position_ids=(slot[None] - lo[:, None]).clamp_min(0),
        use_cache=True,
    )
    prompt_keys = [layer.keys for layer in out.past_key_values.layers]
    prompt_values = [layer.values for layer in out.past_key_values.layers]
    prompt_last = out.last_hidden_state[:, -1]  # (G, H): predicts τ_0
    del out

    # 2. Response passes: every response on a copy of its prompt's cache.
    lengths = [len(r) for r in responses]
    t_max = max(lengths)
    which = torch.tensor(group, device=device)
    keys = [k[which] for k in prompt_keys]  # (B, kv, P_max, d), grown to P_max + T_max below
    values = [v[which] for v in prompt_values]
    if t_max:
        keys = [torch.cat([k, k.new_zeros(*k.shape[:2], t_max, k.shape[3])], 2) for k in keys]
        values = [torch.cat([v, v.new_zeros(*v.shape[:2], t_max, v.shape[3])], 2) for v in values]
    hidden = prompt_last.new_zeros(len(prompts), 1 + t_max, prompt_last.shape[-1])
    hidden[:, 0] = prompt_last[which]
    for rows in _length_buckets(lengths, max_tokens_per_pass):
        width = lengths[rows[0]]
        r = torch.tensor(rows, device=device)
        ids = torch.zeros((len(rows), width), dtype=torch.long, device=device)
        for j, i in enumerate(rows):
            ids[j, : lengths[i]] = torch.tensor(responses[i])
        t = torch.arange(width, device=device)
        row_lo = lo[which[r]]  # (n,)
        prompt_ok = (slot[None, None, :] >= row_lo[:, None, None]).expand(-1, width, -1)
        own = (t[:, None] >= t[None, :]).expand(len(rows), -1, -1)  # causal over the response
        cache = DynamicCache(
            ddp_cache_data=[
                (k[r, :, :p_max], v[r, :, :p_max]) for k, v in zip(keys, values, strict=True)
            ]
        )
        prompt_len = torch.tensor([len(prompts[i]) for i in rows], device=device)
        out = decoder(
            input_ids=ids,
            attention_mask=_allowed_to_mask(torch.cat([prompt_ok, own], -1), model),
            position_ids=prompt_len[:, None] + t[None],
            past_key_values=cache,
            use_cache=True,
        )
        for k, v, layer in zip(keys, values, out.past_key_values.layers, strict=True):
            k[r, :, p_max : p_max + width] = layer.keys[:, :, p_max:]
            v[r, :, p_max : p_max + width] = layer.values[:, :, p_max:]
        hidden[r, 1 : 1 + width] = out.last_hidden_state
        del out, cache
    tokens = sum(map(len, unique)) + sum(lengths)
    return EncodedTraces(prompts, responses, p_max, keys, values, hidden, tokens)


# --------------------------------------------------------------------------- continuations


@dataclass(frozen=True)
class _Block:
    """One continuation (without its last token) at one state of one trace."""

    query: int
    state: int  # index into the query's states
    cont: int  # m
    b: int  # prefix length of the response: the state is x ⊕ τ[:b]


@dataclass(frozen=True)
class _Row:
    """Blocks of one trace packed back to back into one batch row."""

    trace: int
    blocks: tuple[_Block, ...]
    width: int  # packed tokens
    span: int  # trace tokens its latest state sees: P + max b


def _pack_rows(
    queries: Sequence[StateQuery], prompt_lengths: Sequence[int], row_tokens: int
) -> list[_Row]:
    """Blocks of each trace, earliest state first, greedily packed into rows of at most
    `row_tokens` tokens (0: one row per (query, state)). `prompt_lengths`: P of each trace."""
    blocks: dict[int, list[tuple[int, _Block, int]]] = {}  # trace -> (b, block, tokens)
    per_state: list[list[tuple[int, _Block, int]]] = []
    for q, query in enumerate(queries):
        for a, b in enumerate(query.states):
            state_blocks = [
                (b, _Block(q, a, m, b), len(c) - 1)
                for m, c in enumerate(query.continuations)
                if len(c) > 1  # a one-token continuation is scored by its first token alone
            ]
            if row_tokens <= 0:
                per_state.append(state_blocks)
            else:
                blocks.setdefault(query.trace, []).extend(state_blocks)
    if row_tokens <= 0:
        groups = [(queries[bl[0][1].query].trace, bl) for bl in per_state if bl]
    else:
        groups = []
        for trace, items in blocks.items():
            items.sort(key=lambda item: item[0])
            current: list[tuple[int, _Block, int]] = []
            for item in items:
                if current and sum(n for *_, n in current) + item[2] > row_tokens:
                    groups.append((trace, current))
                    current = []
                current.append(item)
            if current:
                groups.append((trace, current))
    return [
        _Row(
            trace,
            tuple(bl for _, bl, _ in items),
            sum(n for *_, n in items),
            prompt_lengths[trace] + max(b for b, *_ in items),
        )
        for trace, items in groups
    ]


def _plan_passes(rows: Sequence[_Row], cap: int | None) -> list[list[_Row]]:
    """Rows of similar width share a pass (`_length_buckets`: little padding, within `cap`);
    a width bucket is split further into rows that see similar spans of their traces, since
    every row attends over (and copies) the cache slots of the pass's longest span."""
    passes = []
    for bucket in _length_buckets([r.width for r in rows], cap):
        spans = [rows[i].span for i in bucket]
        for part in _length_buckets(spans, None, SPAN_SLACK):
            passes.append([rows[bucket[j]] for j in part])
    return passes


@torch.inference_mode()
def score_encoded(
    model: torch.nn.Module,
    encoded: EncodedTraces,
    queries: Sequence[StateQuery],
    *,
    max_tokens_per_pass: int | None = None,
    row_tokens: int | None = None,
) -> list[torch.Tensor]:
    """S_q[a, m] = log π(c_m | x_i ⊕ τ_i[:b_a]) for each query q = (i, states b, continuations).

    Returns one float64 CPU tensor (len(states), M) per query. The first token of every
    continuation is scored from the encoded hidden state at the state; the rest in the
    continuation passes (module docstring). `max_tokens_per_pass` caps rows × width of a pass
    (None: passes are cut by padding only); `row_tokens` is the packed row width (0: one row
    per state; None: `ROW_TOKENS`).
    """
    if not queries:
        return []
    row_tokens = ROW_TOKENS if row_tokens is None else row_tokens
    if max_tokens_per_pass is not None and max_tokens_per_pass < 1:
        raise ValueError(f"max_tokens_per_pass: expected None or ≥ 1, got {max_tokens_per_pass}")
    _check_model(model)
    device = next(model.parameters()).device
    for q, query in enumerate(queries):
        if not 0 <= query.trace < len(encoded):
            raise ValueError(f"queries[{q}].trace: {query.trace} is not an encoded trace")
        t = len(encoded.response_ids[query.trace])
        bad = [b for b in query.states if not 0 <= b <= t]
        if bad:
            raise ValueError(f"queries[{q}].states: {bad} outside 0 … T = {t}")

    # First tokens: log π(c_m,0 | x ⊕ τ_<b) from the hidden state at P + b − 1.
    pairs = [(q.trace, b) for q in queries for b in q.states]
    hidden = encoded.hidden[[i for i, _ in pairs], [b for _, b in pairs]]  # (ΣA, H)
    chunk = _chunk_rows(model.get_output_embeddings().weight.shape[0])
    first_log_pi = torch.cat(
        [
            torch.log_softmax(_project(model, hidden[s : s + chunk]).to(torch.float64), -1)
            for s in range(0, len(hidden), chunk)
        ]
    )  # (ΣA, V)
    tables: list[torch.Tensor] = []
    start = 0
    for query in queries:
        first_tok = torch.tensor([c[0] for c in query.continuations], device=device)
        n = len(query.states)
        tables.append(first_log_pi[start : start + n][:, first_tok])  # (A, M)
        start += n
    del first_log_pi

    # Continuation passes.
    decoder = _decoder(model)
    p_max = encoded.prompt_width
    base, flat = [], 0  # offset of query q's (a, m) items in the flat `rest`
    for query in queries:
        base.append(flat)
        flat += len(query.states) * len(query.continuations)
    rest = torch.zeros(flat, dtype=torch.float64, device=device)  # Σ_{t≥1} log π(c_m,t)
    for batch in _plan_passes(
        _pack_rows(queries, [len(p) for p in encoded.prompt_ids], row_tokens), max_tokens_per_pass
    ):
        width = max(row.width for row in batch)
        n = len(batch)
        # Per token of the pass, row-major and padded: what it reads, predicts, where it sits.
        cols: dict[str, list[int]] = {k: [] for k in ("inputs", "targets", "position", "item")}
        cols["block"], cols["hi"] = [], []  # block id in the pass; sees cache slots < hi
        lo = [p_max - len(encoded.prompt_ids[row.trace]) for row in batch]  # and ≥ lo
        blocks_seen = 0
        for j, row in enumerate(batch):
            p = len(encoded.prompt_ids[row.trace])
            for bl in row.blocks:
                query = queries[bl.query]
                c = query.continuations[bl.cont]
                n_tok = len(c) - 1
                cols["inputs"] += c[:-1]
                cols["targets"] += c[1:]
                cols["position"] += range(p + bl.b, p + bl.b + n_tok)
                cols["item"] += [
                    base[bl.query] + bl.state * len(query.continuations) + bl.cont
                ] * n_tok
                cols["block"] += [blocks_seen] * n_tok
                blocks_seen += 1
                cols["hi"] += [p_max + bl.b] * n_tok
            pad = width - row.width
            for key, fill in (("inputs", 0), ("targets", 0), ("position", 0), ("hi", 0)):
                cols[key] += [fill] * pad
            cols["item"] += [-1] * pad
            cols["block"] += [-1 - j] * pad  # padding: its own block per row, never read
        inputs, targets, position, item, block, hi = (
            torch.tensor(cols[k], dtype=torch.long).view(n, width)
            for k in ("inputs", "targets", "position", "item", "block", "hi")
        )
        lo = torch.tensor(lo)
        s0, s1 = int(lo.min()), int(hi.max())  # the cache slots this pass can see
        slots = torch.arange(s0, s1)
        cache_ok = (slots[None, None, :] >= lo[:, None, None]) & (
            slots[None, None, :] < hi[:, :, None]
        )  # (n, W, S)
        idx = torch.arange(width)
        own = (block[:, :, None] == block[:, None, :]) & (idx[:, None] >= idx[None, :])
        which = torch.tensor([row.trace for row in batch], device=device)
        cache = DynamicCache(
            ddp_cache_data=[
                (k[which, :, s0:s1], v[which, :, s0:s1])
                for k, v in zip(encoded.keys, encoded.values, strict=True)
            ]
        )
        real = item >= 0  # (n, W)
        out = decoder(
            input_ids=inputs.to(device),
            attention_mask=_allowed_to_mask(torch.cat([cache_ok, own], -1).to(device), model),
            position_ids=position.to(device),
            past_key_values=cache,
            use_cache=True,
        )
        logits = _project(model, out.last_hidden_state[real.to(device)])  # (N, V)
        del out, cache
        log_pi, _ = gather_logprobs(logits, targets[real].to(device))  # (N,)
        rest.index_add_(0, item[real].to(device), log_pi.to(torch.float64))

    rest = rest.cpu()
    return [
        (f.cpu() + rest[b : b + f.numel()].view_as(f)) for f, b in zip(tables, base, strict=True)
    ]


def score_states_batch(
    model: torch.nn.Module,
    traces: Sequence[TraceSpec],
    *,
    max_tokens_per_pass: int | None = None,
    row_tokens: int | None = None,
) -> list[torch.Tensor]:
    """S_i[k, m] = log π(c_m | x_i ⊕ τ_i[:b_k]) for several traces, batched in the same passes.

    Identical (prompt, response) pairs are encoded once (`encode_traces`), then all states of
    all traces are scored together (`score_encoded`). Returns one float64 CPU tensor
    (K_i+1, M_i) per trace.
    """
    if not traces:
        return []
    if max_tokens_per_pass is not None and max_tokens_per_pass < 1:
        raise ValueError(f"max_tokens_per_pass: expected None or ≥ 1, got {max_tokens_per_pass}")
    _check_model(model)
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
    )
    queries = [
        StateQuery(row, list(s.boundaries), s.continuations)
        for row, s in zip(rows, traces, strict=True)
    ]
    return score_encoded(
        model, encoded, queries, max_tokens_per_pass=max_tokens_per_pass, row_tokens=row_tokens
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
