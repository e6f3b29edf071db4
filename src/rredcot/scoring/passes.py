"""Continuation passes: run rows of blocks (`layout`) and add up their log-probs.

A block's tokens see the trace's cache slots up to its state (x ⊕ τ_<b), the keys of its own
earlier tokens from earlier pruning rounds (`_Extras`), and the earlier tokens of its own block,
nothing else; position ids are P + b + t, exactly where c_m,t sits in the unpacked
x ⊕ τ_<b ⊕ c_m, so RoPE sees the same relative positions. The output at c_m,t scores c_m,t+1.

`_run_tree_pass` runs one row of the `shared` layout on its trace's cache in place
(`attention.SlotCache`); `_run_pass` runs a batch of rows of the `packed` layout, each on a copy
of the cache slots the batch attends over; `_run_split_pass` runs rows of any traces of the
`split` layout in one pass without a mask (`scoring.split`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

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
from rredcot.scoring.layout import Passes, _plan_passes, _Row, split_passes
from rredcot.scoring.logprobs import gather_logprobs
from rredcot.scoring.queries import Items
from rredcot.scoring.split import SplitPlan, dispatch, plan_mask


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


class _PassInputs(NamedTuple):
    """What every pass of one `run_rows` call reads and adds into: the model, the encoding,
    the items, their scores, the keys and values of their earlier tokens (`extras`) and the
    items whose keys and values to return (`keep`)."""

    model: torch.nn.Module
    encoded: EncodedTraces
    items: Items
    scores: torch.Tensor
    extras: _Extras | None
    keep: set[int]


def run_rows(
    model: torch.nn.Module,
    encoded: EncodedTraces,
    items: Items,
    rows: Sequence[_Row],
    scores: torch.Tensor,
    extras: _Extras | None,
    keep: set[int],
    passes: Passes,
) -> _Extras:
    """Run `rows` in the passes of `passes.layout`; adds each block's Σ log π into
    `scores[item]` and returns the keys and values of the blocks in `keep`. `packed` batches
    rows within `passes.cap` tokens per pass; `shared` runs one row per pass (the caller keeps
    rows within the cap, `shared_row_width`); `split` batches rows of any traces within
    `passes.row_tokens` tokens per pass."""
    common = _PassInputs(model, encoded, items, scores, extras, keep)
    if passes.layout == "packed":
        parts = [_run_pass(common, batch) for batch in _plan_passes(rows, passes.cap)]
    elif passes.layout == "split":
        parts = [_run_split_pass(common, batch) for batch in split_passes(rows, passes.row_tokens)]
    else:
        parts = [_run_tree_pass(common, row) for row in rows]
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


def _one_length(kept: Sequence[tuple[int, ...]]) -> int:
    """The one length (the entry before last: (…, tokens, item)) of the kept blocks."""
    lengths = {block[-2] for block in kept}
    if len(lengths) != 1:
        raise RuntimeError(f"pruning: kept blocks of different lengths {sorted(lengths)}")
    return lengths.pop()


def _kept_runs(
    new: Sequence[tuple[torch.Tensor, torch.Tensor]], kept: Sequence[tuple[int, int, int]]
) -> _Extras:
    """The `kept` blocks' ((offset, tokens, item) each, all of one length) keys and values,
    out of a one-row pass's new keys and values per layer (1, kv, W, d)."""
    if not kept:
        return _Extras([], [], {})
    slot = torch.tensor([o for o, _, _ in kept], device=new[0][0].device)[:, None]
    slot = slot + torch.arange(_one_length(kept), device=slot.device)  # (N, L)

    def take(t: torch.Tensor) -> torch.Tensor:  # (1, kv, W, d) -> (N, kv, L, d)
        return t[0][:, slot].transpose(0, 1)

    return _Extras(
        [take(k) for k, _ in new],
        [take(v) for _, v in new],
        {it: r for r, (*_, it) in enumerate(kept)},
    )


def _run_tree_pass(common: _PassInputs, row: _Row) -> _Extras:
    """One `shared` pass: one row of one trace, its blocks a tree on the trace's cache.

    The attention reads the trace's cache slots [lo, hi_max) where they lie (a view of
    `encoded.keys`), followed by the blocks' earlier tokens (`extras`, one run of D per block,
    all of one length) and the row's tokens, which `SlotCache` writes over the slots after
    hi_max for the pass and puts back after it. Adds Σ log π of each block's targets into
    `scores[item]`; returns the keys and values of the blocks whose item is in `keep`."""
    model, encoded, items, scores, extras, keep = common
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
    return _kept_runs(cache.new, [block for block in offsets if block[2] in keep])


def _side_by_side(runs: torch.Tensor) -> torch.Tensor:
    """(n, kv, D, d) runs → (1, kv, n·D, d), run j at slots [j·D, (j+1)·D)."""
    n, kv, run, d = runs.shape
    return runs.transpose(0, 1).reshape(1, kv, n * run, d)


def _run_pass(common: _PassInputs, batch: Sequence[_Row]) -> _Extras:
    """One `packed` pass over `batch`: adds Σ log π of each block's targets into
    `scores[item]` and returns the keys and values of the blocks whose item is in `keep` (all
    of them of one length). With `extras` every row holds one block, which also sees its item's
    earlier tokens (extras.keys[.., index[item]]). Each row attends over a copy of the cache
    slots [min lo, max hi) of the batch."""
    model, encoded, items, scores, extras, keep = common
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


def _run_split_pass(common: _PassInputs, batch: Sequence[_Row]) -> _Extras:
    """One `split` pass over rows of any traces, without a mask (`scoring.split`): each run of
    blocks that see the same trace slots reads them from the encoding where they lie, each
    block its own tokens (after its item's earlier tokens in `extras`) apart. Adds Σ log π of
    each block's targets into `scores[item]`; returns the keys and values of the blocks whose
    item is in `keep`."""
    model, encoded, items, scores, extras, keep = common
    device = next(model.parameters()).device
    cols: dict[str, list[int]] = {k: [] for k in ("inputs", "targets", "position", "item")}
    runs: list[tuple[int, int, int, int, int]] = []  # (trace, lo, hi, start, end)
    offsets: list[tuple[int, int, int]] = []  # (offset, tokens, item) per block
    for row in batch:
        row_cols, row_offsets = _columns(encoded, items, row)
        base = len(cols["inputs"])
        for key in cols:
            cols[key] += row_cols[key]
        lo = encoded.prompt_width - len(encoded.prompt_ids[row.trace])
        for bl, (offset, n_tok, it) in zip(row.blocks, row_offsets, strict=True):
            hi, start = encoded.prompt_width + bl.b + bl.skip, base + offset
            offsets.append((start, n_tok, it))
            if runs and runs[-1][:3] == (row.trace, lo, hi) and runs[-1][4] == start:
                runs[-1] = (row.trace, lo, hi, runs[-1][3], start + n_tok)
            else:
                runs.append((row.trace, lo, hi, start, start + n_tok))
    by_length: dict[int, list[tuple[int, int]]] = {}
    for start, n_tok, it in offsets:
        by_length.setdefault(n_tok, []).append((start, it))
    own = []
    for n_tok, blocks in by_length.items():
        index = torch.tensor([start for start, _ in blocks], device=device)[:, None]
        rows_of = None
        if extras is not None:
            rows_of = torch.tensor([extras.index[it] for _, it in blocks], device=device)
        own.append((index + torch.arange(n_tok, device=device), rows_of))
    plan = SplitPlan(
        encoded.keys,
        encoded.values,
        runs,
        own,
        None if extras is None else (extras.keys, extras.values),
    )
    with dispatch(model):
        out = decoder(model)(
            input_ids=torch.tensor([cols["inputs"]], device=device),
            attention_mask=plan_mask(plan),
            position_ids=torch.tensor([cols["position"]], device=device),
            use_cache=False,
        )
    targets, item = (torch.tensor(cols[k], device=device) for k in ("targets", "item"))
    _score(model, out.last_hidden_state[0], targets, item, scores)
    return _kept_runs(plan.new, [block for block in offsets if block[2] in keep])
