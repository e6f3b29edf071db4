"""Which continuations RREDCoT scores at which states: the query plan of a batch of traces.

Each state s_k = x ⊕ τ[:b_k] gets the continuations of its kind (how text joins it, whether it
is inside a thinking block: `state_kinds`, `thinking_states`) in one fixed column order
(`Columns`); a state two traces share (e.g. s_0 of one prompt) is asked once (`plan_queries`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from rredcot.credit.reference_paths import Continuations, ReferencePath, build_continuations
from rredcot.credit.rredcot_config import RREDCoTConfig
from rredcot.credit.segmented_trace import Trace
from rredcot.models.chat import THINK_CLOSE, THINK_OPEN
from rredcot.scoring.queries import StateQuery


def state_kinds(
    tokenizer: Any,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    cache: dict[tuple[int, str], bool] | None = None,
) -> list[str]:
    """`STATE_KINDS` of each state s_k = x ⊕ τ[:b_k]: its last token's text ends with "\\n"
    (newline); else the response ends there or its next token starts with "\\n" (line_end);
    else mid_line. `cache` memoizes token decodes across calls."""
    cache = {} if cache is None else cache
    ids = [*prompt_ids, *response_ids]

    def test(tok: int, how: str) -> bool:
        if (tok, how) not in cache:
            text = tokenizer.decode([tok], skip_special_tokens=False)
            cache[tok, how] = text.endswith("\n") if how == "end" else text.startswith("\n")
        return cache[tok, how]

    kinds = []
    for b in boundaries:
        at = len(prompt_ids) + b
        if test(ids[at - 1], "end"):
            kinds.append("newline")
        elif b == len(response_ids) or test(ids[at], "start"):
            kinds.append("line_end")
        else:
            kinds.append("mid_line")
    return kinds


def thinking_states(
    tokenizer: Any,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
) -> list[bool]:
    """Whether each state s_k = x ⊕ τ[:b_k] is inside an open `<think>` block (the last
    `<think>` token after the last `</think>`); all False for a tokenizer without the two as
    single tokens (the byte tokenizer, models that do not think)."""
    ids = [tokenizer.convert_tokens_to_ids(t) for t in (THINK_OPEN, THINK_CLOSE)]
    if any(not isinstance(i, int) or i == tokenizer.unk_token_id for i in ids):
        return [False] * len(boundaries)
    open_id, close_id = ids
    flags, is_open = [], False  # flags[i]: open after token i of x ⊕ τ
    for tok in [*prompt_ids, *response_ids]:
        is_open = True if tok == open_id else False if tok == close_id else is_open
        flags.append(is_open)
    return [
        bool(flags[len(prompt_ids) + b - 1]) if len(prompt_ids) + b else False for b in boundaries
    ]


def draw_suffixes(num_suffixes: int, m: int, rng: random.Random) -> tuple[int, ...]:
    """j ∈ S: m of the J suffix indices drawn uniformly without replacement (all when m ≥ J).

    Each j is in S with probability m/J, so (J/m)·Σ_{j∈S} π(C*_j | s) is unbiased for
    Σ_j π(C*_j | s) (the `suffixes` option of `RREDCoTConfig`).
    """
    if m >= num_suffixes:
        return tuple(range(num_suffixes))
    return tuple(sorted(rng.sample(range(num_suffixes), m)))


JOINT_COLUMN = 0
"""The joint answer-now's column: first in every query, the anchor of suffix pruning."""


class Columns(NamedTuple):
    """Where each continuation's log-probs sit in a state's row of scores (a query's columns)."""

    joint: int
    """A ⊕ y* ⊕ close [⊕ EOS]: the joint answer-now (`JOINT_COLUMN`)."""
    suffixes: slice
    """C*_j for the drawn j (m of them)."""
    path_prefix: int | None
    """U* ⊕ A (for `ref_answer_after_path`); None when not scored."""
    trigger: int | None
    """A (for the conditional answer-now); None when not scored."""
    answer_body: int | None
    """A ⊕ y* ⊕ close (for the conditional answer-now); None when not scored."""

    @classmethod
    def layout(cls, m: int, with_prefix: bool, conditional: bool) -> Columns:
        """[joint, m suffixes, (U* ⊕ A), (A, A ⊕ y* ⊕ close)]."""
        after = 1 + m + with_prefix
        return cls(
            joint=JOINT_COLUMN,
            suffixes=slice(1, 1 + m),
            path_prefix=1 + m if with_prefix else None,
            trigger=after if conditional else None,
            answer_body=after + 1 if conditional else None,
        )

    def ids(self, conts: Continuations, chosen: Sequence[int]) -> list[list[int]]:
        """The token ids of `conts` in this order (the drawn suffixes `chosen`)."""
        cols = [conts.answer_now, *(conts.suffixes[i] for i in chosen)]
        if self.path_prefix is not None:
            cols.append(conts.path_prefix)
        if self.trigger is not None:
            cols.extend([conts.trigger, conts.answer_body])
        return cols


@dataclass(frozen=True)
class QueryPlan:
    """What to score for a batch of traces, and where each trace's states find their rows.

    queries[q] is asked for trace asked_by[q] (its cost is counted there); state k of trace t
    reads row where[t][k] = (q, a) of query q's table. Per trace: the drawn suffix indices
    (suffix_columns), the column layout (columns) and |C*| in tokens at each state
    (path_tokens: C* depends on the state's kind).
    """

    queries: list[StateQuery]
    asked_by: list[int]
    where: list[list[tuple[int, int]]]
    suffix_columns: list[tuple[int, ...]]
    columns: list[Columns]
    path_tokens: list[list[int]]


def plan_queries(
    traces: Sequence[Trace],
    rows: Sequence[int],
    tokenizer: Any,
    task: Any,
    config: RREDCoTConfig,
    *,
    with_prefix: bool,
    conditional: bool,
    seed: int | str,
    with_suffixes: bool = True,
) -> QueryPlan:
    """The queries that score every state of `traces` (encoded at `rows`) under `config`.

    Continuations are built once per reference and kind of state; the scored suffixes are drawn
    once per prompt and reference (`config.suffixes`, seeded by `seed`), shared by its traces
    and all their states; a state already asked for (the same prompt, reference, prefix, kind
    and draw) is read off its first query rather than scored again. `with_prefix` and
    `conditional` add the U* ⊕ A and the (A, A ⊕ y* ⊕ close) columns; without
    `with_suffixes` no reference suffix is scored (a potential that does not read v̂, w_v = 0).
    """
    built: dict[tuple[ReferencePath, tuple[str, bool]], Continuations] = {}
    draws: dict[tuple[tuple[int, ...], ReferencePath], tuple[int, ...]] = {}
    rng = random.Random(f"rredcot-suffixes/{seed}")
    decoded: dict[tuple[int, str], bool] = {}  # (token id, end|start) -> has "\n" there

    def continuations(ref: ReferencePath, kind: tuple[str, bool]) -> Continuations:
        if (ref, kind) not in built:  # kind: (how it joins, inside a thinking block)
            built[ref, kind] = build_continuations(
                task,
                ref,
                tokenizer,
                end_with_eos=config.end_with_eos,
                state_kind=kind[0],
                join=config.join,
                with_path_prefix=with_prefix,
                with_conditional=conditional,
                thinking=kind[1],
            )
        return built[ref, kind]

    plan = QueryPlan([], [], [], [], [], [])
    shared: dict[tuple, tuple[int, int]] = {}  # a state's (query, row) by what it is
    for t, (trace, row) in enumerate(zip(traces, rows, strict=True)):
        ref, b = trace.reference, list(trace.boundaries)
        j = ref.num_segments
        group = (tuple(trace.prompt_ids), ref)
        if group not in draws:
            m = j if config.suffixes == "all" else int(config.suffixes)
            draws[group] = draw_suffixes(j, m, rng) if with_suffixes else ()
        chosen = draws[group]
        columns = Columns.layout(len(chosen), with_prefix, conditional)
        if config.join == "line":
            joins = state_kinds(tokenizer, trace.prompt_ids, trace.response_ids, b, decoded)
        else:
            joins = ["line_end"] * len(b)
        thinks = thinking_states(tokenizer, trace.prompt_ids, trace.response_ids, b)
        kinds = list(zip(joins, thinks, strict=True))
        own, lengths = [None] * len(b), [0] * len(b)
        for kind in sorted(set(kinds)):
            conts = continuations(ref, kind)
            cols = columns.ids(conts, chosen)
            states = [k for k, kd in enumerate(kinds) if kd == kind]
            for k in states:
                lengths[k] = len(conts.suffixes[0])
            new: list[int] = []  # prefix lengths b of states not scored yet
            for k in states:
                key = (group, tuple(trace.response_ids[: b[k]]), kind, chosen)
                if key not in shared:  # a state seen before (e.g. s_0) is read off, not rescored
                    shared[key] = (len(plan.queries), len(new))
                    new.append(b[k])
                own[k] = shared[key]
            if new:
                plan.queries.append(StateQuery(row, new, cols))
                plan.asked_by.append(t)
        plan.where.append(own)
        plan.suffix_columns.append(chosen)
        plan.columns.append(columns)
        plan.path_tokens.append(lengths)
    return plan
