"""What the packed scorer is asked: traces with states and continuations, and their numbering.

A *query* names continuations c_1 … c_M to score at states x ⊕ τ[:b] of one encoded trace; an
*item* is one (query, state, continuation) entry of the answer, S[b, m] = log π(c_m | x ⊕ τ[:b]).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


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
        check_continuations(self.continuations)

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
        check_continuations(self.continuations)


def check_continuations(continuations: Sequence[Sequence[int]]) -> None:
    """Refuse an empty list or an empty continuation (it would score nothing)."""
    if len(continuations) == 0:
        raise ValueError("continuations: need at least one continuation to score")
    empty = [m for m, c in enumerate(continuations) if len(c) == 0]
    if empty:
        raise ValueError(f"continuations: entries {empty} are empty; each needs ≥ 1 token")


class Items:
    """Every (query q, state a, column m), numbered in query order: item = flat[q] + a·M_q + m."""

    def __init__(self, queries: Sequence[StateQuery]) -> None:
        self.queries = queries
        self.flat: list[int] = []
        self.owner: list[int] = []
        for q, query in enumerate(queries):
            self.flat.append(len(self.owner))
            self.owner += [q] * (len(query.states) * len(query.continuations))

    def __len__(self) -> int:
        return len(self.owner)

    def where(self, item: int) -> tuple[int, int, int]:
        """(q, a, m) of an item."""
        q = self.owner[item]
        a, m = divmod(item - self.flat[q], len(self.queries[q].continuations))
        return q, a, m

    def at(self, q: int, a: int, m: int) -> int:
        """The item of (q, a, m)."""
        return self.flat[q] + a * len(self.queries[q].continuations) + m

    def inputs(self, item: int) -> int:
        """Tokens fed for the item's continuation: all but its last."""
        q, _, m = self.where(item)
        return len(self.queries[q].continuations[m]) - 1
