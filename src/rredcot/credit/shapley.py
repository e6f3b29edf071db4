"""Shapley values of the segments (METHOD.md §5): of any batched game (`ValueFn`), and of the
coalition value function f of a trace, by permutation sampling or by all 2^K coalitions."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from rredcot.credit.coalitions import (
    DEFAULT_MAX_TOKENS_PER_PASS,
    AttributionResult,
    AttributionTrace,
    CoalitionValue,
)

# 2^K coalitions: 1024 sequences at K = 10 is still a few passes on the tiny model.
DEFAULT_MAX_EXACT_SEGMENTS = 10

# Batched value function: f for each coalition, in order.
ValueFn = Callable[[Sequence[frozenset[int]]], np.ndarray]


def sample_permutations(
    num_players: int, permutations: int, seed: int, *, antithetic: bool = False
) -> list[tuple[int, ...]]:
    """`permutations` random orders of 0 … num_players − 1.

    antithetic: every sampled order is followed by its reverse (the count stays `permutations`).
    """
    if permutations < 1:
        raise ValueError(f"permutations: expected a positive integer, got {permutations!r}")
    rng = np.random.default_rng(seed)
    orders: list[tuple[int, ...]] = []
    while len(orders) < permutations:
        order = tuple(int(k) for k in rng.permutation(num_players))
        orders.append(order)
        if antithetic and len(orders) < permutations:
            orders.append(order[::-1])
    return orders


def shapley_from_permutations(
    value_fn: ValueFn, num_players: int, orders: Sequence[Sequence[int]]
) -> np.ndarray:
    """φ_k = mean over orders π of f(pre_π(k) ∪ {k}) − f(pre_π(k)); (num_players,) float64.

    All prefix coalitions of all orders are deduplicated and handed to `value_fn` in one call.
    Over all num_players! orders this is the exact Shapley value; for any set of orders the
    marginals telescope, so Σ_k φ_k = f(all) − f(∅).
    """
    if len(orders) == 0:
        raise ValueError("orders: need at least one permutation")
    players = set(range(num_players))
    prefixes: list[list[frozenset[int]]] = []
    for order in orders:
        if len(order) != num_players or set(order) != players:
            raise ValueError(
                f"orders: each must be a permutation of 0 … {num_players - 1}, got {list(order)}"
            )
        prefixes.append([frozenset(order[:i]) for i in range(num_players + 1)])
    distinct = list(dict.fromkeys(c for row in prefixes for c in row))
    f = dict(zip(distinct, value_fn(distinct).tolist(), strict=True))
    phi = np.zeros(num_players, dtype=np.float64)
    for order, row in zip(orders, prefixes, strict=True):
        for i, k in enumerate(order):
            phi[k] += f[row[i + 1]] - f[row[i]]
    return phi / len(orders)


def shapley_exact_from_values(value_fn: ValueFn, num_players: int) -> np.ndarray:
    """Exact Shapley values from all 2^n coalitions (n = num_players):

    φ_k = Σ_{S ⊆ N∖{k}} |S|! (n − |S| − 1)! / n! · (f(S ∪ {k}) − f(S))
    """
    subsets = [
        frozenset(c)
        for size in range(num_players + 1)
        for c in itertools.combinations(range(num_players), size)
    ]
    f = dict(zip(subsets, value_fn(subsets).tolist(), strict=True))
    weight = [
        math.factorial(s) * math.factorial(num_players - s - 1) / math.factorial(num_players)
        for s in range(num_players)
    ]
    phi = np.zeros(num_players, dtype=np.float64)
    for subset in subsets:
        for k in range(num_players):
            if k not in subset:
                phi[k] += weight[len(subset)] * (f[subset | {k}] - f[subset])
    return phi


def shapley_permutation(
    model: torch.nn.Module,
    trace: AttributionTrace,
    *,
    permutations: int = 64,
    seed: int = 0,
    antithetic: bool = False,
    all_permutations: bool = False,
    max_tokens_per_pass: int = DEFAULT_MAX_TOKENS_PER_PASS,
) -> AttributionResult:
    """Permutation-sampling Shapley estimate of each segment under f (M = `permutations`).

    The prefix coalitions of all sampled orders are scored once each. `all_permutations`
    enumerates all K! orders instead of sampling (exact Shapley; small K only).
    """
    start = time.perf_counter()
    f = CoalitionValue(model, trace, max_tokens_per_pass=max_tokens_per_pass)
    k = f.num_segments
    if all_permutations:
        orders: Sequence[Sequence[int]] = list(itertools.permutations(range(k)))
    else:
        orders = sample_permutations(k, permutations, seed, antithetic=antithetic)
    phi = shapley_from_permutations(f, k, orders)
    return AttributionResult(
        values=phi, forward_tokens=f.forward_tokens, seconds=time.perf_counter() - start
    )


def shapley_exact(
    model: torch.nn.Module,
    trace: AttributionTrace,
    *,
    max_segments: int = DEFAULT_MAX_EXACT_SEGMENTS,
    max_tokens_per_pass: int = DEFAULT_MAX_TOKENS_PER_PASS,
) -> AttributionResult:
    """Exact Shapley values from all 2^K coalitions; refuses K > `max_segments`.

    Efficiency: Σ_k φ_k = f(all) − f(∅).
    """
    start = time.perf_counter()
    f = CoalitionValue(model, trace, max_tokens_per_pass=max_tokens_per_pass)
    if f.num_segments > max_segments:
        raise ValueError(
            f"boundaries: exact Shapley enumerates 2^K coalitions; K = {f.num_segments} exceeds "
            f"max_segments = {max_segments} (use shapley_permutation)"
        )
    phi = shapley_exact_from_values(f, f.num_segments)
    return AttributionResult(
        values=phi, forward_tokens=f.forward_tokens, seconds=time.perf_counter() - start
    )
