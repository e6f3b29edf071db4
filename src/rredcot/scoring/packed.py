"""Score many continuations at every state of a trace in a constant number of forward passes.

RREDCoT (METHOD.md §3) needs, for a trace x ⊕ τ with boundaries 0 = b_0 < … < b_K = T and
continuations c_1 … c_M (the answer-now continuation A ⊕ y* ⊕ close and the reference suffixes
C*_j), every

    S[k, m] = log π(c_m | s_k) = Σ_t log π(c_m,t | x ⊕ τ_<b_k ⊕ c_m,<t),   s_k = x ⊕ τ_<b_k.

Doing one full pass per (k, m) re-encodes the trace (K+1)·M times. Here the trace is encoded
once and the continuations of all states reuse its keys and values:

1. **Trace pass.** One causal forward of x ⊕ τ with `use_cache=True`. The logits at position
   P + b_k − 1 (P = |x|) score the first token c_m,0 of every continuation at state k; no other
   trace logits are projected onto the vocabulary.
2. **Continuation pass.** One batch row per state k holds c_1 … c_M packed, each without its
   last token (it predicts nothing). The row's copy of the trace cache is masked by a 4D additive
   mask so that it sees trace positions < P + b_k only, and each packed block attends causally
   to itself only; position ids are P + b_k + t, exactly where c_m,t sits in the unpacked
   s_k ⊕ c_m, so RoPE sees the same relative positions. The output at c_m,t scores c_m,t+1.

One row per state rather than one row for everything: a single packed row of all (K+1)·M
blocks attends over Q × (P + T + Q) entries, mostly masked, which on the tiny model costs more
than the naive passes save; per-state rows cut that by about K+1 for K+1 small copies of the
trace cache (measured in scripts/bench_scoring.py).

A trace therefore costs 2 forward passes whatever K and M; several traces batched together
cost the same 2. `max_tokens_per_pass` caps the packed continuation tokens per pass (rows ×
width, padding included) and adds one pass per extra chunk; the trace cache is reused, never
recomputed. transformers hands a prepared 4D mask to the attention function as-is
(`masking_utils._preprocess_mask_arguments`); `eager` adds it to the scores and `sdpa` passes it
as `attn_mask`, so both work. Flash and flex attention cannot take it and are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from rredcot.scoring.logprobs import gather_logprobs

SUPPORTED_ATTENTION: tuple[str, ...] = ("eager", "sdpa")


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
        if len(self.continuations) == 0:
            raise ValueError("continuations: need at least one continuation to score")
        empty = [m for m, c in enumerate(self.continuations) if len(c) == 0]
        if empty:
            raise ValueError(f"continuations: entries {empty} are empty; each needs ≥ 1 token")

    @property
    def num_states(self) -> int:
        """K + 1."""
        return len(self.boundaries)


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


@dataclass(frozen=True)
class _Group:
    """Some continuations of one trace packed back to back, each without its last token."""

    inputs: torch.Tensor  # (W,) c_m,t for t < |c_m| − 1
    targets: torch.Tensor  # (W,) c_m,t+1, the token each input predicts
    cont: torch.Tensor  # (W,) m
    offset: torch.Tensor  # (W,) t


def _split_continuations(lengths: Sequence[int], cap: int | None) -> list[list[int]]:
    """Indices m with at least one packed token, in order, split greedily into groups of at
    most `cap` tokens (a continuation longer than `cap` forms a group of its own)."""
    groups: list[list[int]] = [[]]
    size = 0
    for m, n in enumerate(lengths):
        if n == 0:
            continue  # a one-token continuation is scored by the trace pass alone
        if cap is not None and groups[-1] and size + n > cap:
            groups.append([])
            size = 0
        groups[-1].append(m)
        size += n
    return [g for g in groups if g]


def _pack_group(
    continuations: Sequence[Sequence[int]], members: list[int], device: torch.device
) -> _Group:
    lens = torch.tensor([len(continuations[m]) - 1 for m in members], dtype=torch.long)
    starts = torch.repeat_interleave(lens.cumsum(0) - lens, lens)
    return _Group(
        inputs=torch.tensor([t for m in members for t in continuations[m][:-1]], device=device),
        targets=torch.tensor([t for m in members for t in continuations[m][1:]], device=device),
        cont=torch.repeat_interleave(torch.tensor(members), lens).to(device),
        offset=(torch.arange(int(lens.sum())) - starts).to(device),
    )


@dataclass(frozen=True)
class _Row:
    """One batch row of a continuation pass: a group of continuations at state k of a trace."""

    trace: int
    state: int
    group: _Group
    visible: int  # P + b_k: the row sees trace positions < visible


def _plan_passes(rows: list[_Row], cap: int | None) -> list[list[_Row]]:
    """Consecutive rows share a pass while rows × width (padding included) stays ≤ cap."""
    if cap is None:
        return [rows] if rows else []
    passes: list[list[_Row]] = []
    current: list[_Row] = []
    width = 0
    for row in rows:
        wider = max(width, len(row.group.inputs))
        if current and (len(current) + 1) * wider > cap:
            passes.append(current)
            current, wider = [], len(row.group.inputs)
        current.append(row)
        width = wider
    if current:
        passes.append(current)
    return passes


def _block_mask(
    visible: torch.Tensor, block: torch.Tensor, cache_len: int, dtype: torch.dtype
) -> torch.Tensor:
    """Additive (R, 1, W, cache_len + W) mask: row r sees cached trace positions < visible[r];
    a packed token sees the earlier tokens of its own block (block id −1 marks padding)."""
    rows, width = block.shape
    positions = torch.arange(cache_len, device=visible.device)
    cache_ok = (positions[None, None, :] < visible[:, None, None]).expand(rows, width, cache_len)
    idx = torch.arange(width, device=block.device)
    same_block = (block[:, :, None] == block[:, None, :]) & (idx[:, None] >= idx[None, :])
    allowed = torch.cat([cache_ok, same_block], dim=-1)  # (R, W, C + W)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]


def _pad_rows(rows: list[torch.Tensor], fill: int, device: torch.device) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), fill, dtype=torch.long, device=device)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


@torch.inference_mode()
def score_states_batch(
    model: torch.nn.Module,
    traces: Sequence[TraceSpec],
    *,
    max_tokens_per_pass: int | None = None,
) -> list[torch.Tensor]:
    """S_i[k, m] = log π(c_m | x_i ⊕ τ_i[:b_k]) for several traces, batched in the same passes.

    Traces are right-padded into one trace pass (padding is never visible to real tokens); the
    continuation rows of all traces share the continuation pass(es). `max_tokens_per_pass`
    caps rows × width of each continuation pass (None: one pass). Every row carries its own
    copy of its trace's KV cache, so for long traces on a GPU the cap also bounds the number of
    copies held at once.
    Returns one float64 CPU tensor (K_i+1, M_i) per trace.
    """
    if not traces:
        return []
    if max_tokens_per_pass is not None and max_tokens_per_pass < 1:
        raise ValueError(f"max_tokens_per_pass: expected None or ≥ 1, got {max_tokens_per_pass}")
    _check_model(model)
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype

    # 1. Trace pass: encode x ⊕ τ once; project onto the vocabulary only at P + b_k − 1.
    trace_rows = [torch.tensor([*s.prompt_ids, *s.response_ids], dtype=torch.long) for s in traces]
    trace_ids = _pad_rows(trace_rows, 0, device)  # (B, L)
    cache_len = trace_ids.shape[1]
    keep = torch.zeros_like(trace_ids, dtype=torch.bool)  # (B, L)
    for i, s in enumerate(traces):
        first_pos = len(s.prompt_ids) - 1 + torch.tensor(list(s.boundaries), dtype=torch.long)
        keep[i, first_pos.to(device)] = True
    out = model(input_ids=trace_ids, use_cache=True, logits_to_keep=keep)
    first_log_pi = torch.log_softmax(out.logits.to(torch.float64), dim=-1)  # (Σ(K_i+1), V)
    trace_cache = out.past_key_values
    del out

    first: list[torch.Tensor] = []  # (K_i+1, M_i): log π(c_m,0 | s_k)
    base: list[int] = []  # offset of trace i's (k, m) items in the flat `rest`
    row_start, item_start = 0, 0
    for s in traces:
        first_tok = torch.tensor([c[0] for c in s.continuations], device=device)
        first.append(first_log_pi[row_start : row_start + s.num_states][:, first_tok])
        base.append(item_start)
        row_start += s.num_states
        item_start += s.num_states * len(s.continuations)

    # 2. Continuation passes: one row per (trace, state, group of continuations).
    rows: list[_Row] = []
    for i, s in enumerate(traces):
        lengths = [len(c) - 1 for c in s.continuations]
        groups = [
            _pack_group(s.continuations, members, device)
            for members in _split_continuations(lengths, max_tokens_per_pass)
        ]
        for k, b in enumerate(s.boundaries):
            rows.extend(_Row(i, k, g, len(s.prompt_ids) + b) for g in groups)

    rest = torch.zeros(item_start, dtype=torch.float64, device=device)  # Σ_{t≥1} log π(c_m,t)
    for batch in _plan_passes(rows, max_tokens_per_pass):
        width = max(len(r.group.inputs) for r in batch)
        inputs = torch.zeros((len(batch), width), dtype=torch.long, device=device)
        targets = torch.zeros_like(inputs)
        position = torch.zeros_like(inputs)
        item = torch.full_like(inputs, -1)  # flat (trace, k, m) index; −1 = padding
        for j, r in enumerate(batch):
            n, m_count = len(r.group.inputs), len(traces[r.trace].continuations)
            inputs[j, :n] = r.group.inputs
            targets[j, :n] = r.group.targets
            position[j, :n] = r.visible + r.group.offset
            item[j, :n] = base[r.trace] + r.state * m_count + r.group.cont
        visible = torch.tensor([r.visible for r in batch], device=device)  # (R,)
        which = torch.tensor([r.trace for r in batch], device=device)  # (R,)
        row_cache = DynamicCache(
            ddp_cache_data=[
                (layer.keys[which], layer.values[which]) for layer in trace_cache.layers
            ]
        )
        real = item >= 0  # (R, W)
        out = model(
            input_ids=inputs,
            attention_mask=_block_mask(visible, item, cache_len, dtype),
            position_ids=position,
            past_key_values=row_cache,
            use_cache=True,
            logits_to_keep=real,
        )
        log_pi, _ = gather_logprobs(out.logits, targets[real])  # (N,), row-major over `real`
        rest.index_add_(0, item[real], log_pi.to(torch.float64))
        del out, row_cache

    return [
        (f + rest[b : b + f.numel()].view_as(f)).cpu() for f, b in zip(first, base, strict=True)
    ]


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
    Two forward passes (see the module docstring); `max_tokens_per_pass` splits the packed
    continuations into chunks of at most that many tokens (one extra pass per chunk).
    """
    spec = TraceSpec(prompt_ids, response_ids, boundaries, continuations)
    return score_states_batch(model, [spec], max_tokens_per_pass=max_tokens_per_pass)[0]
