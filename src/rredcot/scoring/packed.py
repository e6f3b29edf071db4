"""Score many continuations at every state of a trace in a constant number of forward passes.

RREDCoT (METHOD.md §3) needs, for a trace x ⊕ τ with boundaries 0 = b_0 < … < b_K = T and
continuations c_1 … c_M (the answer-now continuation A ⊕ y* ⊕ close and the reference suffixes
C*_j), every

    S[k, m] = log π(c_m | s_k) = Σ_t log π(c_m,t | x ⊕ τ_<b_k ⊕ c_m,<t),   s_k = x ⊕ τ_<b_k.

Doing one full pass per (k, m) re-encodes the trace (K+1)·M times. Here the trace is encoded
once and the continuations of all states share that encoding:

1. **Trace pass.** One causal forward of x ⊕ τ with `use_cache=True`. The logits at position
   P + b_k − 1 (P = |x|) score the first token c_m,0 of every continuation at state k; no other
   trace logits are projected onto the vocabulary.
2. **Continuation pass.** All (K+1)·M continuations, minus their last token (it predicts
   nothing), are packed into one row per trace, state-major: [c_1 @ s_0][c_2 @ s_0] … [c_M @ s_K].
   A 4D additive mask lets a token of the block (k, m) see cached trace positions < P + b_k and,
   causally, the earlier tokens of its own block only; its position id is P + b_k + t, exactly
   where it would sit in the unpacked sequence s_k ⊕ c_m, so RoPE sees the same relative
   positions. The output at c_m,t scores c_m,t+1.

So a trace costs 2 forward passes whatever K and M (1 + the number of chunks when
`max_tokens_per_pass` caps the packed row; the trace KV cache is cropped back and reused).
A prepared 4D mask is handed to the attention function as-is by transformers' `masking_utils`,
and both the `eager` (adds it to the scores) and `sdpa` (passes it as `attn_mask`)
implementations accept a float additive mask; flash/flex attention cannot take it, so other
implementations are refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

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


@dataclass
class _Packed:
    """The continuation tokens of one trace, laid out state-major (tensors on the device)."""

    inputs: torch.Tensor  # (S,) c_m,t for t < |c_m| − 1
    targets: torch.Tensor  # (S,) c_m,t+1
    item: torch.Tensor  # (S,) k·M + m
    visible: torch.Tensor  # (S,) P + b_k: trace positions the token may attend to
    position: torch.Tensor  # (S,) P + b_k + t
    item_tokens: list[int]  # tokens per item, k·M + m order


def _pack(spec: TraceSpec, device: torch.device) -> _Packed:
    """Token-level index tensors for all (K+1)·M continuation blocks of one trace."""
    num_states, num_cont = spec.num_states, len(spec.continuations)
    p = len(spec.prompt_ids)
    lens = torch.tensor([len(c) - 1 for c in spec.continuations], dtype=torch.long)  # (M,)
    body = [tok for c in spec.continuations for tok in c[:-1]]
    tail = [tok for c in spec.continuations for tok in c[1:]]
    per_state = int(lens.sum())
    offsets = lens.cumsum(0) - lens  # (M,) start of each continuation in one state's block
    m_of = torch.repeat_interleave(torch.arange(num_cont), lens)  # (S_state,)
    t_of = torch.arange(per_state) - offsets[m_of]  # (S_state,)
    k_of = torch.repeat_interleave(torch.arange(num_states), per_state)  # (S,)
    visible = p + torch.tensor(list(spec.boundaries), dtype=torch.long)[k_of]
    return _Packed(
        inputs=torch.tensor(body, dtype=torch.long).repeat(num_states).to(device),
        targets=torch.tensor(tail, dtype=torch.long).repeat(num_states).to(device),
        item=(k_of * num_cont + m_of.repeat(num_states)).to(device),
        visible=visible.to(device),
        position=(visible + t_of.repeat(num_states)).to(device),
        item_tokens=lens.repeat(num_states).tolist(),
    )


def _chunk_items(item_tokens: list[int], cap: int | None) -> list[tuple[int, int]]:
    """Greedy token ranges [start, end) of whole items, each ≤ cap tokens (an item longer
    than cap gets a range of its own). No cap: one range."""
    total = sum(item_tokens)
    if cap is None or total <= cap:
        return [(0, total)] if total else []
    ranges, start, size = [], 0, 0
    for n in item_tokens:
        if size and size + n > cap:
            ranges.append((start, start + size))
            start, size = start + size, 0
        size += n
    if size:
        ranges.append((start, start + size))
    return ranges


def _block_mask(
    visible: torch.Tensor, block: torch.Tensor, cache_len: int, dtype: torch.dtype
) -> torch.Tensor:
    """Additive (B, 1, Q, cache_len + Q) mask: query q sees cache positions < visible[q] and,
    causally, the packed tokens of its own block."""
    q = block.shape[1]
    cache_ok = torch.arange(cache_len, device=visible.device) < visible[:, :, None]  # (B, Q, C)
    idx = torch.arange(q, device=block.device)
    same_block = (block[:, :, None] == block[:, None, :]) & (idx[:, None] >= idx[None, :])
    allowed = torch.cat([cache_ok, same_block], dim=-1)  # (B, Q, C + Q)
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

    Traces are right-padded into one batch (padding is never visible to real tokens), so the
    whole batch costs 1 trace pass + the continuation passes (1 without a cap).
    `max_tokens_per_pass` caps the packed continuation tokens per trace and pass.
    Returns one float64 CPU tensor (K_i+1, M_i) per trace.
    """
    if not traces:
        return []
    if max_tokens_per_pass is not None and max_tokens_per_pass < 1:
        raise ValueError(f"max_tokens_per_pass: expected None or ≥ 1, got {max_tokens_per_pass}")
    _check_model(model)
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    batch = len(traces)

    # 1. Trace pass: encode x ⊕ τ once; keep logits only where first tokens are scored.
    trace_rows = [
        torch.tensor([*s.prompt_ids, *s.response_ids], dtype=torch.long) for s in traces
    ]
    trace_ids = _pad_rows(trace_rows, 0, device)  # (B, L)
    cache_len = trace_ids.shape[1]
    keep = torch.zeros_like(trace_ids, dtype=torch.bool)  # (B, L)
    for i, s in enumerate(traces):
        first_pos = len(s.prompt_ids) - 1 + torch.tensor(list(s.boundaries), dtype=torch.long)
        keep[i, first_pos.to(device)] = True
    out = model(input_ids=trace_ids, use_cache=True, logits_to_keep=keep)
    first_log_pi = torch.log_softmax(out.logits.to(torch.float64), dim=-1)  # (Σ(K_i+1), V)
    cache = out.past_key_values

    scores: list[torch.Tensor] = []
    row = 0
    for s in traces:
        first_tok = torch.tensor([c[0] for c in s.continuations], device=device)
        scores.append(first_log_pi[row : row + s.num_states][:, first_tok].clone())  # (K+1, M)
        row += s.num_states

    # 2. Continuation passes: every (state, continuation) block packed into one row per trace.
    packs = [_pack(s, device) for s in traces]
    chunks = [_chunk_items(p.item_tokens, max_tokens_per_pass) for p in packs]
    sums = [torch.zeros(s.num_states * len(s.continuations), dtype=torch.float64) for s in traces]
    sums = [x.to(device) for x in sums]
    num_passes = max(len(c) for c in chunks)
    prev_q = 0  # packed width of the previous pass, cropped off the cache before the next
    for pass_idx in range(num_passes):
        ranges = [c[pass_idx] if pass_idx < len(c) else (0, 0) for c in chunks]
        sl = [slice(a, b) for a, b in ranges]
        inputs = _pad_rows([p.inputs[r] for p, r in zip(packs, sl, strict=True)], 0, device)
        targets = _pad_rows([p.targets[r] for p, r in zip(packs, sl, strict=True)], 0, device)
        # Padding: block −1 (attends only to earlier padding), no trace, position 0.
        block = _pad_rows([p.item[r] for p, r in zip(packs, sl, strict=True)], -1, device)
        visible = _pad_rows([p.visible[r] for p, r in zip(packs, sl, strict=True)], 0, device)
        position = _pad_rows([p.position[r] for p, r in zip(packs, sl, strict=True)], 0, device)
        real = block >= 0  # (B, Q)
        if prev_q:
            cache.crop(-prev_q)  # back to the trace alone
        out = model(
            input_ids=inputs,
            attention_mask=_block_mask(visible, block, cache_len, dtype),
            position_ids=position,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=real,
        )
        prev_q = inputs.shape[1]
        log_pi, _ = gather_logprobs(out.logits, targets[real])  # (N,) row-major over `real`
        counts = real.sum(1).tolist()
        for i, part in enumerate(torch.split(log_pi.double(), counts)):
            sums[i].index_add_(0, block[i, : counts[i]], part)
    return [
        (first + total.view(s.num_states, len(s.continuations))).cpu()
        for s, first, total in zip(traces, scores, sums, strict=True)
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
