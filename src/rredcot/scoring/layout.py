"""Where continuation tokens sit in the scorer's passes: blocks, rows, and passes.

Each continuation without its last token (which predicts nothing) is a *block*; a block sits at
one state of one trace. Blocks of the same trace are packed back to back, earliest state first,
into *rows* of about `row_tokens` tokens (a block never splits; a longer block gets a row of its
own; `row_tokens` 0: one row per state). Three layouts then run the rows (`LAYOUTS`):

- `shared` (default): one row per pass, and the row reads its trace's cache where it lies: its
  tokens are written into the trace's cache buffer for the pass and the attention reads a view
  of it (`attention.SlotCache`), so the cache exists once, whatever the number of rows. The row
  is a tree: every block sees the trace up to its state and its own earlier tokens.
- `packed` (the earlier layout, kept to compare): rows of similar width and span share a pass
  (`_plan_passes`), and every row carries a copy of the cache slots of its trace that the pass
  attends over. Copies grow with the number of rows.
- `split` (CPU): rows of any traces share a pass (`split_passes`), which builds no mask: each
  token attends over its trace's cache slots (a view, as in `shared`) and over its own block
  apart, and the two are joined by their log-sum-exps (`scoring.split`). Without a mask a pass
  can be wide, so there are few passes, and the kernel computes no masked entries (the
  layout's encoding, `encode_traces(split=True)`, likewise).

Why rows of ~`row_tokens` tokens: attention inside a row costs width × (span + width) entries,
most of the width × width part masked, and the span is its latest state's; narrow rows keep
both tight (measured in bench/bench_credit_scaling.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rredcot.scoring.layout_names import LAYOUTS
from rredcot.scoring.queries import StateQuery

ROW_TOKENS = 32
"""Default row width of the `packed` layout (tokens): each row pays a cache copy there."""

SHARED_ROW_TOKENS = 256
"""Narrowest default row width of the `shared` layout (tokens): the fastest on the tiny model at
T = 4096 on one CPU thread (64: 1.7x, 128: 1.4x, 256: 1.3x, 512: 1.4x a training pass;
bench/bench_credit_scaling.py)."""

SHARED_ROW_MAX = 4096
"""Widest default row of the `shared` layout (tokens)."""

SPLIT_PASS_TOKENS = 2048
"""Default tokens per pass of the `split` layout: it builds no mask, so a pass holds its
activations only (~0.1 GiB at Qwen3-4B in bf16, mostly the MLP's), and wide passes amortise
the per-pass overhead that dominates at short traces (a step-like batch of 64 short traces
made 187 `shared` passes of ~10-15 ms each, rough: a loaded 2-core machine)."""

PAD_SLACK = 0.05
"""A pass takes one more row while its padding stays within this fraction of its real tokens."""

SPAN_SLACK = 0.25
"""… and while the cache slots its rows attend over stay within this fraction of those needed."""


def check_layout(layout: str) -> None:
    """Refuse an unknown layout name."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout: {layout!r} is not allowed; choose one of {list(LAYOUTS)}")


def default_row_tokens(layout: str, model: torch.nn.Module | None = None) -> int:
    """The row width (`split`: the pass width) a layout uses when the caller names none.
    `shared`: a row's mask (about 5 bytes per entry: boolean, and float inside the attention)
    costs 5·width bytes per cache slot, so the width is an eighth of the bytes one cache slot
    takes (keys and values of all layers), within [SHARED_ROW_TOKENS, SHARED_ROW_MAX]: the
    masks stay within ~5/8 of the trace's cache, and larger models get wider rows (fewer
    passes)."""
    if layout == "split":
        return SPLIT_PASS_TOKENS
    if layout != "shared":
        return ROW_TOKENS
    if model is None:
        return SHARED_ROW_TOKENS
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    size = next(model.parameters()).element_size()
    per_slot = 2 * config.num_hidden_layers * kv_heads * head_dim * size
    return min(SHARED_ROW_MAX, max(SHARED_ROW_TOKENS, per_slot // 8))


def shared_row_width(row_tokens: int, cap: int | None) -> int:
    """Row width of the `shared` layout: one row is one pass, so `cap` (max_tokens_per_pass)
    bounds it too (row_tokens 0, one row per state, becomes rows of at most `cap` tokens); the
    `split` layout's passes are at most this wide as well."""
    if cap is None:
        return row_tokens
    return cap if row_tokens <= 0 else min(row_tokens, cap)


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


@dataclass(frozen=True)
class Passes:
    """How continuation rows run: `layout`, row width (`shared`: already within the cap;
    `split`: the width of a pass, within the cap too) and `max_tokens_per_pass` (`cap`)."""

    layout: str
    row_tokens: int
    cap: int | None


@dataclass(frozen=True)
class _Block:
    """A run of one continuation's tokens at one state of one trace.

    The continuation's first `skip` tokens are the trace's own next tokens τ[b : b + skip]
    (their keys and values are in the trace's cache); the block runs inputs c[skip + start :
    skip + start + length] (length −1: to the end, without the last token) on top of
    c[skip : skip + start], whose keys and values the caller supplies (later rounds of
    `Pruning`; start 0: none)."""

    query: int
    state: int  # index into the query's states
    cont: int  # m
    b: int  # prefix length of the response: the state is x ⊕ τ[:b]
    start: int = 0
    length: int = -1
    skip: int = 0


@dataclass(frozen=True)
class _Row:
    """Blocks of one trace packed back to back into one batch row."""

    trace: int
    blocks: tuple[_Block, ...]
    width: int  # packed tokens
    span: int  # trace tokens its latest state sees: P + max b


Placed = tuple[int, _Block, int]
"""(b + skip: the trace slots the block sees, the block, its tokens)."""


def group_rows(
    per_trace: dict[int, list[Placed]], prompt_lengths: Sequence[int], row_tokens: int
) -> list[_Row]:
    """Each trace's blocks, earliest state first, greedily packed into rows of at most
    `row_tokens` tokens (a longer block alone)."""
    rows = []
    for trace, items in per_trace.items():
        items = sorted(items, key=lambda item: item[0])
        current: list[Placed] = []
        for item in items:
            if current and sum(n for *_, n in current) + item[2] > row_tokens:
                rows.append(_make_row(trace, current, prompt_lengths))
                current = []
            current.append(item)
        if current:
            rows.append(_make_row(trace, current, prompt_lengths))
    return rows


def _make_row(trace: int, items: list[Placed], prompt_lengths: Sequence[int]) -> _Row:
    return _Row(
        trace,
        tuple(bl for _, bl, _ in items),
        sum(n for *_, n in items),
        prompt_lengths[trace] + max(b for b, *_ in items),
    )


def _pack_rows(
    queries: Sequence[StateQuery],
    prompt_lengths: Sequence[int],
    row_tokens: int,
    plan: dict[tuple[int, int, int], tuple[int, int]] | None = None,
) -> list[_Row]:
    """Blocks of each trace, earliest state first, greedily packed into rows of at most
    `row_tokens` tokens (0: one row per (query, state)). `prompt_lengths`: P of each trace.
    `plan`: (skip, inputs to run) per (query, state, column) where not (0, all); a column with
    nothing to run gets no block."""
    plan = plan or {}
    blocks: dict[int, list[Placed]] = {}
    per_state: list[list[Placed]] = []
    for q, query in enumerate(queries):
        for a, b in enumerate(query.states):
            state_blocks = []
            for m, c in enumerate(query.continuations):
                # a one-token continuation is scored by its first token alone
                skip, n = plan.get((q, a, m), (0, len(c) - 1))
                if n <= 0:
                    continue
                whole = n == len(c) - 1 - skip
                block = _Block(q, a, m, b, 0, -1 if whole else n, skip)
                state_blocks.append((b + skip, block, n))
            if row_tokens <= 0:
                per_state.append(state_blocks)
            else:
                blocks.setdefault(query.trace, []).extend(state_blocks)
    if row_tokens > 0:
        return group_rows(blocks, prompt_lengths, row_tokens)
    return [_make_row(queries[bl[0][1].query].trace, bl, prompt_lengths) for bl in per_state if bl]


def split_passes(rows: Sequence[_Row], width: int) -> list[list[_Row]]:
    """`split` layout: consecutive rows (of any traces) share a pass while its tokens stay
    within `width` (≤ 0: a pass per row); a row wider than `width` is a pass alone."""
    passes: list[list[_Row]] = []
    tokens = 0
    for row in rows:
        if passes and width > 0 and tokens + row.width <= width:
            passes[-1].append(row)
            tokens += row.width
            continue
        passes.append([row])
        tokens = row.width
    return passes


def _plan_passes(rows: Sequence[_Row], cap: int | None) -> list[list[_Row]]:
    """`packed` layout: rows of similar width share a pass (`_length_buckets`: little padding,
    within `cap`); a width bucket is split further into rows that see similar spans of their
    traces, since every row attends over (and copies) the cache slots of the pass's longest
    span."""
    passes = []
    for bucket in _length_buckets([r.width for r in rows], cap):
        spans = [rows[i].span for i in bucket]
        for part in _length_buckets(spans, None, SPAN_SLACK):
            passes.append([rows[bucket[j]] for j in part])
    return passes
