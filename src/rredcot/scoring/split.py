"""The `split` layout's attention: continuation tokens of many traces in one pass, no mask.

A continuation token at state b of trace i attends over two sets of keys: its trace's cache
slots [lo_i, P_max + b + skip) (the same for every token of its state) and its own block (the
keys of its earlier pruning rounds, then its own tokens up to itself). The `shared` and
`packed` layouts cover both with one (W, S) mask, which torch's CPU kernel converts to float in
every layer and computes in full, masked entries included (~1.5x the unmasked kernel on a
(256, 4400) row). Here each set is attended apart: the trace's slots, a view of the encoding's
buffer, by one unmasked kernel call per run of tokens that see the same slots; the own block
by one batched call per block length (causal, or a small (L, D + L) mask after D earlier
keys). The two are joined exactly by their log-sum-exps l_A, l_B:

    out = e^(l_A − l)·o_A + e^(l_B − l)·o_B,   l = log(e^l_A + e^l_B),

so the scores equal the dense layouts' up to float rounding. The layout's encoding runs its
response chunks the same way (`encoding._split_chunk`: a chunk's own tokens causally, the
prompt and earlier chunks unmasked). The log-sum-exps come from torch's CPU flash-attention
kernel (`aten::_scaled_dot_product_flash_attention_for_cpu`, a private op: `check_split`
refuses a model it cannot serve). The model's attention modules call `split_attention`
through transformers' attention registry while `dispatch` is active; the plan (`SplitPlan`)
rides in the slot of the attention mask.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AttentionInterface

from rredcot.scoring.attention import decoder

SPLIT_ATTENTION = "rredcot_split"
"""The name `split_attention` is registered under in transformers' attention registry."""

_FLASH_OP = "_scaled_dot_product_flash_attention_for_cpu"


def check_split(model: torch.nn.Module) -> None:
    """Refuse a model the `split` layout cannot score (a clear error, not wrong numbers): it
    needs the model on the CPU and torch's CPU flash-attention op, which returns the
    log-sum-exp the two halves are joined by."""
    device = next(model.parameters()).device
    if device.type != "cpu":
        raise ValueError(
            f"layout 'split': joins attention halves by the log-sum-exp of torch's CPU "
            f"flash-attention kernel and runs on the CPU only; the model is on {device} "
            f"(use layout 'shared')"
        )
    if getattr(torch.ops.aten, _FLASH_OP, None) is None:
        raise ValueError(
            f"layout 'split': this torch ({torch.__version__}) has no aten::{_FLASH_OP} "
            f"(use layout 'shared')"
        )


@dataclass
class SplitPlan:
    """What the attention of one `split` pass reads besides the pass's own keys.

    runs: (trace, lo, hi, start, end): the pass's tokens [start, end) see the encoding's cache
    slots [lo, hi) of row `trace`. own: per block length L, (the pass positions of its blocks'
    tokens (n, L), each block's row in `extras` (n,) or None). extras: per layer (keys,
    values) (items, kv heads, D, head dim) of the blocks' earlier tokens, or None. new: filled
    per layer with the pass's own keys and values (1, kv heads, W, head dim)."""

    keys: Sequence[torch.Tensor]
    values: Sequence[torch.Tensor]
    runs: Sequence[tuple[int, int, int, int, int]]
    own: Sequence[tuple[torch.Tensor, torch.Tensor | None]]
    extras: tuple[Sequence[torch.Tensor], Sequence[torch.Tensor]] | None = None
    new: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)


def _after_earlier(length: int, earlier: int, like: torch.Tensor) -> torch.Tensor:
    """(L, D + L) additive mask: token t sees the D earlier keys and its own tokens ≤ t."""
    row = torch.arange(length, device=like.device)[:, None]
    col = torch.arange(earlier + length, device=like.device)[None, :]
    allowed = (col < earlier) | (col - earlier <= row)
    mask = torch.zeros(allowed.shape, dtype=like.dtype, device=like.device)
    return mask.masked_fill_(~allowed, float("-inf"))


def split_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention of a `split` pass (transformers' attention-function signature): query
    (1, H, W, d), the pass's own key and value (1, kv, W, d), `attention_mask` its `SplitPlan`.
    Returns (1, W, H, d), as the registry's functions do."""
    plan = attention_mask
    if not isinstance(plan, SplitPlan):
        raise RuntimeError(
            "split attention: called without its SplitPlan (the model built its own mask "
            "instead of taking the one handed to it; use layout 'shared')"
        )
    for name in ("softcap", "sliding_window"):
        if kwargs.get(name) is not None:
            raise ValueError(f"layout 'split': attention with {name} is not supported")
    flash = getattr(torch.ops.aten, _FLASH_OP)
    layer = module.layer_idx
    plan.new.append((key, value))
    out_a, out_b = torch.empty_like(query), torch.empty_like(query)
    lse_dtype = torch.float64 if query.dtype == torch.float64 else torch.float32
    lse_a = torch.empty(query.shape[:3], dtype=lse_dtype, device=query.device)
    lse_b = torch.empty_like(lse_a)
    keys, values = plan.keys[layer], plan.values[layer]
    for trace, lo, hi, start, end in plan.runs:  # the trace's slots, unmasked
        out, lse = flash(
            query[:, :, start:end],
            keys[trace : trace + 1, :, lo:hi],
            values[trace : trace + 1, :, lo:hi],
            dropout,
            scale=scaling,
        )
        out_a[:, :, start:end] = out
        lse_a[:, :, start:end] = lse
    for index, rows in plan.own:  # each block's own keys, blocks of one length batched
        q = query[0][:, index].transpose(0, 1)  # (n, H, L, d)
        k, v = (t[0][:, index].transpose(0, 1) for t in (key, value))  # (n, kv, L, d)
        mask = None
        if rows is not None:  # after the block's earlier tokens, all of which it sees
            earlier_keys, earlier_values = plan.extras or ([], [])
            k = torch.cat([earlier_keys[layer][rows], k], 2)
            v = torch.cat([earlier_values[layer][rows], v], 2)
            mask = _after_earlier(index.shape[1], k.shape[2] - index.shape[1], q)
        out, lse = flash(q, k, v, dropout, mask is None, attn_mask=mask, scale=scaling)
        out_b[0][:, index] = out.transpose(0, 1)
        lse_b[0][:, index] = lse.transpose(0, 1)
    total = torch.logaddexp(lse_a, lse_b)
    joined = out_a * (lse_a - total).exp()[..., None] + out_b * (lse_b - total).exp()[..., None]
    return joined.to(query.dtype).transpose(1, 2).contiguous(), None


AttentionInterface.register(SPLIT_ATTENTION, split_attention)


@contextmanager
def dispatch(model: torch.nn.Module) -> Iterator[None]:
    """While active, the model's attention modules call `split_attention` (the registry entry
    their config names); the configured implementation is put back after."""
    config = decoder(model).config
    before = config._attn_implementation
    config._attn_implementation = SPLIT_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = before


def plan_mask(plan: SplitPlan) -> dict[str, SplitPlan]:
    """The per-layer-type mask mapping a decoder takes as prepared (every layer full
    attention, `attention.check_model`), so the plan reaches the attention as its mask."""
    return {"full_attention": plan}
