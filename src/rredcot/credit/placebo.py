"""Placebo credit: a segment-credit method's σ with its placement destroyed (METHOD.md §9).

A credit method differs from GRPO in *where* its signal goes and in *how much* signal each trace
and group gets. A gain counts as credit *assignment* only against a placebo that keeps the
second and removes the first, trained through the same path on the same seeds:

    perm: σ'_{i,·} = σ_{i,π_i(·)}, π_i uniform over the K_i! orders of trace i (seeded by the
          run's seed, the step and the row): each trace keeps its multiset and sum of σ, so the
          group's pooled values, spread and level (and the signal of all-equal groups) are
          unchanged; only which segment gets which value is random.
    flat: σ'_{i,k} = Σ_k' n_{i,k'} σ_{i,k'} / Σ_k' n_{i,k'} for every k, n the segment's tokens
          under the completion mask: every token of trace i gets the trace's token-weighted mean,
          the same token-weighted total and no shape at all.

Both act on σ before the transform (`credit.advantages.token_advantages`), so `mixed`'s outcome
term, whitening and centring see them as they would the method's own σ. Pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rredcot.credit.advantages import segment_token_counts
from rredcot.credit.credit_config import PLACEBOS
from rredcot.generation.base import derive_seed


def permute_within_traces(
    sigmas: Sequence[torch.Tensor], seed: int, step: int
) -> list[torch.Tensor]:
    """σ_i permuted uniformly at random within each trace i; row i's order is drawn from its own
    stream (`derive_seed(seed, step, i)`), so a row's placebo does not depend on the others."""
    out = []
    for i, sigma in enumerate(sigmas):
        s = torch.as_tensor(sigma)
        generator = torch.Generator().manual_seed(derive_seed(seed, step, i))
        out.append(s[torch.randperm(s.numel(), generator=generator)])
    return out


def flatten_traces(
    sigmas: Sequence[torch.Tensor],
    boundaries: Sequence[Sequence[int]],
    completion_mask: torch.Tensor,
) -> list[torch.Tensor]:
    """Every segment of trace i gets the trace's token-weighted mean σ̄_i (K_i,): the tokens each
    segment carries under the mask weigh it, so Σ_k n_{i,k} σ'_{i,k} = Σ_k n_{i,k} σ_{i,k}. A
    trace with no kept token (all masked) takes the plain mean of its σ."""
    counts = segment_token_counts(boundaries, completion_mask)  # (K_i,) each
    out = []
    for sigma, n in zip(sigmas, counts, strict=True):
        s = torch.as_tensor(sigma, dtype=torch.float64)
        if s.numel() == 0:
            out.append(s)
            continue
        total = n.sum()
        mean = (n * s).sum() / total if total > 0 else s.mean()
        out.append(torch.full_like(s, float(mean)))
    return out


def placebo_sigmas(
    kind: str,
    sigmas: Sequence[torch.Tensor],
    boundaries: Sequence[Sequence[int]],
    completion_mask: torch.Tensor,
    seed: int,
    step: int,
) -> list[torch.Tensor]:
    """σ under placebo `kind` (one of `PLACEBOS`; `none` returns σ as given)."""
    if kind == "none":
        return list(sigmas)
    if kind == "perm":
        return permute_within_traces(sigmas, seed, step)
    if kind == "flat":
        return flatten_traces(sigmas, boundaries, completion_mask)
    raise ValueError(f"credit.placebo: {kind!r} is not allowed; choose one of {list(PLACEBOS)}")
