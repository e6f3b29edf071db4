"""Continuation passes: run rows of blocks (`layout`) and add up their log-probs.

A block's tokens see the trace's cache slots up to its state (x ⊕ τ_<b), the keys of its own
earlier tokens from earlier pruning rounds (`_Extras`), and the earlier tokens of its own block,
nothing else; position ids are P + b + t, exactly where c_m,t sits in the unpacked
x ⊕ τ_<b ⊕ c_m, so RoPE sees the same relative positions. The output at c_m,t scores c_m,t+1.

`_run_tree_pass` runs one row of the `shared` layout on its trace's cache in place
(`attention.SlotCache`); `_run_pass` runs a batch of rows of the `packed` layout, each on a copy
of the cache slots the batch attends over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from rredcot.scoring.attention import (
    SlotCache,
    allowed_to_mask,
    chunk_rows,
    decoder,
    gqa_in_kernel,
    project,
)
from rredcot.scoring.encoding import EncodedTraces
from rredcot.scoring.layout import _plan_passes, _Row
from rredcot.scoring.logprobs import gather_logprobs
from rredcot.scoring.queries import Items


@dataclass
class _Extras:
    """Keys and values of runs of continuation tokens, one run per item, all of one length D:
    per layer (items, kv heads, D, head dim); `index[item]` is the item's row in them."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    index: dict[int, int]

    @staticmethod
    def concat(parts: Sequence[_Extras]) -> _Extras:
        """The items of several parts (disjoint), stacked."""
        parts = [p for p in parts if p.index]
        index, offset = {}, 0
        for part in parts:
            index.update({it: offset + r for it, r in part.index.items()})
            offset += len(part.index)
        layers = range(len(parts[0].keys)) if parts else range(0)
        return _Extras(
            [torch.cat([p.keys[i] for p in parts]) for i in layers],
            [torch.cat([p.values[i] for p in parts]) for i in layers],
            index,
        )

    def then(self, later: _Extras, items: Sequence[int]) -> _Extras:
        """Per item of `items`: its run here followed by its run in `later`."""
        mine = torch.tensor([self.index[it] for it in items], device=self.keys[0].device)
        theirs = torch.tensor([later.index[it] for it in items], device=self.keys[0].device)
        return _Extras(
            [
                torch.cat([a[mine], b[theirs]], 2)
                for a, b in zip(self.keys, later.keys, strict=True)
            ],
            [
                torch.cat([a[mine], b[theirs]], 2)
                for a, b in zip(self.values, later.values, strict=True)
            ],
            {it: r for r, it in enumerate(items)},
        )


def run_rows(
    model: torch.nn.Module,
    encoded: EncodedTraces,
    items: Items,
    rows: Sequence[_Row],
    scores: torch.Tensor,
    extras: _Extras | None,
    keep: set[int],
    layout: str,
    cap: int | None,
) -> _Extras:
    """Run `rows` in the passes of `layout`; adds each block's Σ log π into `scores[item]` and
    returns the keys and values of the blocks in `keep`. `packed` batches rows within `cap`
    tokens per pass; `shared` runs one row per pass (the caller keeps rows within the cap,
    `shared_row_width`)."""
    if layout == "packed":
        parts = [
            _run_pass(model, encoded, items, batch, scores, extras, keep)
            for batch in _plan_passes(rows, cap)
        ]
    else:
        parts = [_run_tree_pass(model, encoded, items, row, scores, extras, keep) for row in rows]
    return _Extras.concat(parts)


def _columns(
    encoded: EncodedTraces, items: Items, row: _Row
) -> tuple[dict[str, list[int]], list[tuple[int, int, int]]]:
    """Per token of a row: what it reads (inputs), predicts (targets), where it sits
    (position), its item, its block (index in the row), and `hi`: it sees cache slots < hi.
    And (offset, tokens, item) per block."""
    p_max = encoded.prompt_width
    p = len(encoded.prompt_ids[row.trace])
    cols: dict[str, list[int]] = {
        k: [] for k in ("inputs", "targets", "position", "item", "block", "hi")
    }
    offsets: list[tuple[int, int, int]] = []
    for j, bl in enumerate(row.blocks):
        c = items.queries[bl.query].continuations[bl.cont]
        first = bl.skip + bl.start
        n_tok = len(c) - 1 - first if bl.length < 0 else bl.length
        item = items.at(bl.query, bl.state, bl.cont)
        offsets.append((len(cols["inputs"]), n_tok, item))
        cols["inputs"] += c[first : first + n_tok]
        cols["targets"] += c[first + 1 : first + 1 + n_tok]
        cols["position"] += range(p + bl.b + first, p + bl.b + first + n_tok)  # c's place
        cols["item"] += [item] * n_tok
        cols["block"] += [j] * n_tok
        cols["hi"] += [p_max + bl.b + bl.skip] * n_tok
    return cols, offsets


def _score(
    model: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    item: torch.Tensor,
    scores: torch.Tensor,
) -> None:
    """scores[item] += log π(target) of each hidden state (N, H), projecting a chunk of rows
    at a time (a pass of 65k tokens would otherwise hold 65k × V logits)."""
    rows = chunk_rows(model.get_output_embeddings().weight.shape[0])
    for s in range(0, len(hidden), rows):
        part = slice(s, s + rows)
        log_pi, _ = gather_logprobs(project(model, hidden[part]), targets[part])  # (rows,)
        scores.index_add_(0, item[part], log_pi.to(torch.float64))


def _one_length(kept: Sequence[tuple[int, int, int, int]]) -> int:
    lengths = {n_tok for _, _, n_tok, _ in kept}
    if len(lengths) != 1:
        raise RuntimeError(f"pruning: kept blocks of different lengths {sorted(lengths)}")
    return lengths.pop()


def _run_tree_pass(
    model: torch.nn.Module,
    encoded: EncodedTraces,
    items: Items,
    row: _Row,
    scores: torch.Tensor,
    extras: _Extras | None,
    keep: set[int],
) -> _Extras:
    """One `shared` pass: one row of one trace, its blocks a tree on the trace's cache.

    The attention reads the trace's cache slots [lo, hi_max) where they lie (a view of
    `encoded.keys`), followed by the blocks' earlier tokens (`extras`, one run of D per block,
    all of one length) and the row's tokens, which `SlotCache` writes over the slots after
    hi_max for the pass and puts back after it. Adds Σ log π of each block's targets into
    `scores[item]`; returns the keys and values of the blocks whose item is in `keep`."""
    device = next(model.parameters()).device
    cols, offsets = _columns(encoded, items, row)
    lo = encoded.prompt_width - len(encoded.prompt_ids[row.trace])
    hi = torch.tensor(cols["hi"], device=device)
    block = torch.tensor(cols["block"], device=device)
    s1 = int(hi.max())
    parts = [torch.arange(lo, s1, device=device)[None, :] < hi[:, None]]  # (W, S): the trace
    extra_kv = None
    if extras is not None:  # block j sees its item's earlier tokens, slots [j·D, (j+1)·D)
        rows_of = torch.tensor([extras.index[it] for *_, it in offsets], device=device)
        run = extras.keys[0].shape[2]
        extra_kv = (
            [_side_by_side(k[rows_of]) for k in extras.keys],
            [_side_by_side(v[rows_of]) for v in extras.values],
        )
        owner = torch.arange(len(offsets), device=device).repeat_interleave(run)
        parts.append(block[:, None] == owner[None, :])
    idx = torch.arange(len(block), device=device)
    parts.append((block[:, None] == block[None, :]) & (idx[:, None] >= idx[None, :]))
    cache = SlotCache(
        encoded.keys,
        encoded.values,
        slice(row.trace, row.trace + 1),
        lo,
        s1,
        extras=extra_kv,
        restore=True,
    )
    try:
        with gqa_in_kernel(model):
            out = decoder(model)(
                input_ids=torch.tensor([cols["inputs"]], device=device),
                attention_mask=allowed_to_mask(torch.cat(parts, -1)[None], model),
                position_ids=torch.tensor([cols["position"]], device=device),
                past_key_values=cache,
                use_cache=True,
            )
    finally:
        cache.restore()
    targets, item = (torch.tensor(cols[k], device=device) for k in ("targets", "item"))
    _score(model, out.last_hidden_state[0], targets, item, scores)
    kept = [(0, offset, n_tok, it) for offset, n_tok, it in offsets if it in keep]
    if not kept:
        return _Extras([], [], {})
    slot = torch.tensor([o for _, o, _, _ in kept], device=device)[:, None] + torch.arange(
        _one_length(kept), device=device
    )  # (N, L)

    def take(t: torch.Tensor) -> torch.Tensor:  # (1, kv, W, d) -> (N, kv, L, d)
        return t[0][:, slot].transpose(0, 1)

    return _Extras(
        [take(k) for k, _ in cache.new],
        [take(v) for _, v in cache.new],
        {it: r for r, (*_, it) in enumerate(kept)},
    )


def _side_by_side(runs: torch.Tensor) -> torch.Tensor:
    """(n, kv, D, d) runs → (1, kv, n·D, d), run j at slots [j·D, (j+1)·D)."""
    n, kv, run, d = runs.shape
    return runs.transpose(0, 1).reshape(1, kv, n * run, d)


def _run_pass(
    model: torch.nn.Module,
    encoded: EncodedTraces,
    items: Items,
    batch: Sequence[_Row],
    scores: torch.Tensor,
    extras: _Extras | None,
    keep: set[int],
) -> _Extras:
    """One `packed` pass over `batch`: adds Σ log π of each block's targets into
    `scores[item]` and returns the keys and values of the blocks whose item is in `keep` (all
    of them of one length). With `extras` every row holds one block, which also sees its item's
    earlier tokens (extras.keys[.., index[item]]). Each row attends over a copy of the cache
    slots [min lo, max hi) of the batch."""
    device = next(model.parameters()).device
    p_max = encoded.prompt_width
    width = max(row.width for row in batch)
    n = len(batch)
    cols: dict[str, list[int]] = {
        k: [] for k in ("inputs", "targets", "position", "item", "block", "hi")
    }
    lo = [p_max - len(encoded.prompt_ids[row.trace]) for row in batch]  # sees slots ≥ lo
    offsets: list[tuple[int, int, int, int]] = []  # (row, offset, tokens, item) per block
    for j, row in enumerate(batch):
        row_cols, row_offsets = _columns(encoded, items, row)
        for key, values in row_cols.items():
            cols[key] += values
        offsets += [(j, *o) for o in row_offsets]
        pad = width - row.width
        for key, fill in (("inputs", 0), ("targets", 0), ("position", 0), ("hi", 0)):
            cols[key] += [fill] * pad
        cols["item"] += [-1] * pad
        cols["block"] += [-1] * pad  # padding: its own block, never read
    inputs, targets, position, item, block, hi = (
        torch.tensor(cols[k], dtype=torch.long).view(n, width)
        for k in ("inputs", "targets", "position", "item", "block", "hi")
    )
    lo_t = torch.tensor(lo)
    s0, s1 = int(lo_t.min()), int(hi.max())  # the cache slots this pass can see
    slots = torch.arange(s0, s1)
    cache_ok = (slots[None, None, :] >= lo_t[:, None, None]) & (
        slots[None, None, :] < hi[:, :, None]
    )  # (n, W, S)
    idx = torch.arange(width)
    own = (block[:, :, None] == block[:, None, :]) & (idx[:, None] >= idx[None, :])
    which = torch.tensor([row.trace for row in batch], device=device)
    past = [
        (k[which, :, s0:s1], v[which, :, s0:s1])
        for k, v in zip(encoded.keys, encoded.values, strict=True)
    ]
    parts = [cache_ok]
    e = 0
    if extras is not None:  # one block per row: it sees all of its item's earlier tokens
        rows_of = torch.tensor([extras.index[it] for *_, it in offsets], device=device)
        past = [
            (torch.cat([k, ek[rows_of]], 2), torch.cat([v, ev[rows_of]], 2))
            for (k, v), ek, ev in zip(past, extras.keys, extras.values, strict=True)
        ]
        e = extras.keys[0].shape[2]
        parts.append(torch.ones(n, width, e, dtype=torch.bool))
    parts.append(own)
    real = item >= 0  # (n, W)
    out = decoder(model)(
        input_ids=inputs.to(device),
        attention_mask=allowed_to_mask(torch.cat(parts, -1).to(device), model),
        position_ids=position.to(device),
        past_key_values=DynamicCache(ddp_cache_data=past),
        use_cache=True,
    )
    hidden = out.last_hidden_state[real.to(device)]
    _score(model, hidden, targets[real].to(device), item[real].to(device), scores)
    kept = [(j, offset, n_tok, it) for j, offset, n_tok, it in offsets if it in keep]
    if not kept:
        return _Extras([], [], {})
    start = (s1 - s0) + e  # the pass's own tokens in the returned cache
    rows = torch.tensor([j for j, *_ in kept], device=device)
    slot = torch.tensor([start + o for _, o, _, _ in kept], device=device)[:, None] + torch.arange(
        _one_length(kept), device=device
    )  # (N, L)

    def take(t: torch.Tensor) -> torch.Tensor:  # (n, kv, S, d) -> (N, kv, L, d)
        return t.transpose(1, 2)[rows[:, None], slot].transpose(1, 2)

    layers = out.past_key_values.layers
    return _Extras(
        [take(layer.keys) for layer in layers],
        [take(layer.values) for layer in layers],
        {it: r for r, (*_, it) in enumerate(kept)},
    )
