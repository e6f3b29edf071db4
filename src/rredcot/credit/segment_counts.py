"""Fitting a segmentation to exactly K segments (METHOD.md §2): merge or split by a count rule.

A count rule gives, for a boundary array (int64, (S+1,)), the cost of removing each interior
boundary (merging the two segments around it) and where to add one more boundary. `hybrid`
picks its rule by name (`MERGE_SCORES`, from the entropies); `keyword` with K uses the
entropy-free `token_count`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

MergeCosts = Callable[[np.ndarray], np.ndarray]
SplitPoint = Callable[[np.ndarray], int]


def all_tokens(num_tokens: int) -> list[int]:
    """T < K: every token is its own segment."""
    return list(range(num_tokens + 1))


def fit_count(
    bounds: np.ndarray, num_segments: int, merge_costs: MergeCosts, split_point: SplitPoint
) -> list[int]:
    """Merge (lowest cost first, leftmost on ties) or split until exactly K segments remain.

    O(S²) in numpy for S starting segments (each merge recomputes S costs); S is the number of
    keyword segments, a few hundred to a few thousand for long reasoning traces.
    """
    num_tokens = int(bounds[-1])
    if num_tokens < num_segments:
        return all_tokens(num_tokens)
    while len(bounds) - 1 > num_segments:
        i = int(np.argmin(merge_costs(bounds)))  # first minimum = leftmost pair
        bounds = np.delete(bounds, i + 1)
    while len(bounds) - 1 < num_segments:
        cut = split_point(bounds)
        bounds = np.insert(bounds, np.searchsorted(bounds, cut), cut)
    return bounds.tolist()


def _pair_entropy_sum(entropies: np.ndarray) -> tuple[MergeCosts, SplitPoint]:
    """Merge: cost of joining segments i−1, i = Σ_{j ∈ both} H_j (prefix-sum differences).

    Split: the segment with the largest Σ H among those with ≥ 2 tokens, before its
    highest-entropy token other than its first.
    """
    cum_h = np.concatenate(([0.0], np.cumsum(entropies)))

    def merge_costs(b: np.ndarray) -> np.ndarray:
        return cum_h[b[2:]] - cum_h[b[:-2]]  # (S−1,) one per interior boundary b[1:-1]

    def split_point(b: np.ndarray) -> int:
        sums = np.where(np.diff(b) >= 2, cum_h[b[1:]] - cum_h[b[:-1]], -np.inf)
        k = int(np.argmax(sums))  # first maximum = leftmost segment
        inner = entropies[b[k] + 1 : b[k + 1]]
        return int(b[k] + 1 + np.argmax(inner))

    return merge_costs, split_point


def _boundary_entropy(entropies: np.ndarray) -> tuple[MergeCosts, SplitPoint]:
    """Merge: cost of removing boundary b_i = H at b_i (the right segment's first token).

    Split: a new boundary before the highest-entropy token that is not a boundary yet.
    """

    def merge_costs(b: np.ndarray) -> np.ndarray:
        return entropies[b[1:-1]]

    def split_point(b: np.ndarray) -> int:
        free = entropies.copy()
        free[b[:-1]] = -np.inf  # token 0 and existing boundaries
        return int(np.argmax(free))

    return merge_costs, split_point


def token_count(_: np.ndarray | None = None) -> tuple[MergeCosts, SplitPoint]:
    """Entropy-free rule for `keyword` with K: merge the shortest adjacent pair, split the
    longest segment at its middle token (start + ⌊length/2⌋)."""

    def merge_costs(b: np.ndarray) -> np.ndarray:
        return b[2:] - b[:-2]

    def split_point(b: np.ndarray) -> int:
        k = int(np.argmax(np.diff(b)))
        return int(b[k] + (b[k + 1] - b[k]) // 2)

    return merge_costs, split_point


MERGE_SCORES: dict[str, Callable[[np.ndarray], tuple[MergeCosts, SplitPoint]]] = {
    "pair_entropy_sum": _pair_entropy_sum,
    "boundary_entropy": _boundary_entropy,
}
