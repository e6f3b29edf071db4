"""RREDCoT's pure layer (METHOD.md §3): log-prob tables → answer-now reward R̂ and value v̂.

`ReferenceScores` holds what the scorer measured at every state; `answer_reward` and the value
variants (`VALUE_VARIANTS`, one function per definition of v̂_k) turn it into the terms of the
potential Φ_k = w_R·R̂_k + w_v·v̂_k. No model is involved here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Real

import torch

from rredcot.credit.rredcot_names import VALUE_VARIANT_NAMES

# --------------------------------------------------------------------------- log-prob tables


@dataclass(frozen=True)
class ReferenceScores:
    """Scored log-probs (float64, natural log) of the reference continuations at states 0 … K.

    answer_now:  (K+1,)   log R̂_k: log π(y* ⊕ close | s_k ⊕ A) (conditional) or
                 log π(A ⊕ y* ⊕ close [⊕ EOS] | s_k) (joint), as the config's `answer_now` says
    suffixes:    (K+1, J) log π(C*_j | s_k), j = 0 … J−1; column 0 is the whole C*; or
                 (K+1, m) for m suffixes sampled out of J (see suffix_weight)
    path_prefix: (K+1,)   log π(U* ⊕ A | s_k); only `ref_answer_after_path` needs it
    path_num_tokens: |C*| in tokens (EOS included when appended), one int or one per state
        (K+1,) when the join rule makes C* state-dependent; only `ref_path_geomean` needs it
    suffix_weight: importance weight of each scored suffix in `ref_suffix_sum`, 1/(m·q(j)) =
        J/m for m suffixes drawn uniformly out of J; 1 when all J are scored
    """

    answer_now: torch.Tensor
    suffixes: torch.Tensor
    path_prefix: torch.Tensor | None = None
    path_num_tokens: int | torch.Tensor | None = None
    suffix_weight: float = 1.0

    def __post_init__(self) -> None:
        w = self.suffix_weight
        if isinstance(w, bool) or not isinstance(w, Real) or not math.isfinite(w) or w < 1:
            raise ValueError(f"suffix_weight: expected a finite number ≥ 1 (J/m), got {w!r}")
        object.__setattr__(self, "suffix_weight", float(w))
        answer_now = torch.as_tensor(self.answer_now, dtype=torch.float64)
        suffixes = torch.as_tensor(self.suffixes, dtype=torch.float64)
        if answer_now.ndim != 1 or answer_now.numel() < 1:
            raise ValueError(
                f"answer_now: expected shape (K+1,) with K+1 ≥ 1, got {tuple(answer_now.shape)}"
            )
        n = answer_now.numel()
        if suffixes.ndim != 2 or suffixes.shape[0] != n or suffixes.shape[1] < 1:
            raise ValueError(
                f"suffixes: expected shape (K+1, J) = ({n}, J ≥ 1), got {tuple(suffixes.shape)}"
            )
        _check_logprobs("answer_now", answer_now)
        _check_logprobs("suffixes", suffixes)
        object.__setattr__(self, "answer_now", answer_now)
        object.__setattr__(self, "suffixes", suffixes)
        if self.path_prefix is not None:
            prefix = torch.as_tensor(self.path_prefix, dtype=torch.float64)
            if prefix.shape != (n,):
                raise ValueError(f"path_prefix: expected shape ({n},), got {tuple(prefix.shape)}")
            _check_logprobs("path_prefix", prefix)
            object.__setattr__(self, "path_prefix", prefix)
        m = self.path_num_tokens
        if m is not None:
            if isinstance(m, bool):
                m = None  # refused below
            elif isinstance(m, int):
                m = torch.full((n,), m, dtype=torch.float64)
            else:
                m = torch.as_tensor(m, dtype=torch.float64)
            if m is None or m.shape != (n,) or (m < 1).any() or (m != m.round()).any():
                raise ValueError(
                    f"path_num_tokens: expected an integer ≥ 1 or ({n},) integers ≥ 1, got "
                    f"{self.path_num_tokens!r}"
                )
            object.__setattr__(self, "path_num_tokens", m)

    @property
    def num_states(self) -> int:
        """K + 1."""
        return self.answer_now.numel()

    @property
    def num_suffixes(self) -> int:
        """J."""
        return self.suffixes.shape[1]


def _check_logprobs(name: str, t: torch.Tensor) -> None:
    """Log-probabilities are ≤ 0 (a little float slack) and never NaN or +inf; −inf is allowed."""
    if torch.isnan(t).any() or (t > 1e-6).any():
        raise ValueError(f"{name}: log-probabilities must be ≤ 0 and not NaN, got {t.tolist()}")


def answer_reward(scores: ReferenceScores) -> torch.Tensor:
    """R̂_k = exp(answer_now): (K+1,) (conditional or joint, whichever was scored)."""
    return scores.answer_now.exp()


# --------------------------------------------------------------------------- value variants


def _ref_suffix_sum(scores: ReferenceScores) -> torch.Tensor:
    """v̂_k = Σ_j π(C*_j | s_k): the IS estimate with q uniform over the J suffixes (default).

    With m of the J suffixes sampled (suffix_weight = J/m): v̂_k = (J/m)·Σ_{j∈S} π(C*_j | s_k),
    unbiased for the sum over all J.
    """
    return (torch.logsumexp(scores.suffixes, dim=1) + math.log(scores.suffix_weight)).exp()


def _ref_suffix_max(scores: ReferenceScores) -> torch.Tensor:
    """v̂_k = max_j π(C*_j | s_k): the best-aligned suffix."""
    return scores.suffixes.max(dim=1).values.exp()


def _ref_path_geomean(scores: ReferenceScores) -> torch.Tensor:
    """v̂_k = exp(log π(C* | s_k) / |C*|): per-token (length-normalised) likelihood of C*."""
    if scores.path_num_tokens is None:
        raise ValueError("path_num_tokens: ref_path_geomean needs the token count |C*|")
    return (scores.suffixes[:, 0] / scores.path_num_tokens).exp()


def _ref_path_joint(scores: ReferenceScores) -> torch.Tensor:
    """v̂_k = π(C* | s_k): the IS estimate with q a point mass on C* (underflows when long)."""
    return scores.suffixes[:, 0].exp()


def _ref_answer_after_path(scores: ReferenceScores) -> torch.Tensor:
    """v̂_k = π(y* ⊕ close | s_k ⊕ U* ⊕ A) = π(C* | s_k) / π(U* ⊕ A | s_k).

    With EOS appended to C*, the answer scored here ends with EOS as well.
    """
    if scores.path_prefix is None:
        raise ValueError("path_prefix: ref_answer_after_path needs log π(U* ⊕ A | s_k)")
    return (scores.suffixes[:, 0] - scores.path_prefix).exp()


def _ref_path_ratio(scores: ReferenceScores) -> torch.Tensor:
    """v̂_k = log π(C* | s_k) − log π(C* | s_0): information gain about C* (nats), v̂_0 = 0.

    A log-ratio, not a probability: it enters Φ_k = w_R·R̂_k + w_v·v̂_k as is, so h_k gets
    w_v·(log π(C* | s_k) − log π(C* | s_{k−1})) and w_v sets the exchange rate between nats and
    reward. It is −inf where π(C* | s_k) underflows to 0, which `potential` refuses.
    """
    logp = scores.suffixes[:, 0]
    return logp - logp[0]


PRUNABLE: tuple[str, ...] = ("ref_suffix_sum", "ref_suffix_max")
"""Value variants that only add up or compare suffix probabilities, so a suffix far below R̂_k
may count as 0 (`RREDCoTConfig.prune_nats`)."""

VALUE_VARIANTS: dict[str, Callable[[ReferenceScores], torch.Tensor]] = {
    "ref_suffix_sum": _ref_suffix_sum,
    "ref_suffix_max": _ref_suffix_max,
    "ref_path_geomean": _ref_path_geomean,
    "ref_path_joint": _ref_path_joint,
    "ref_answer_after_path": _ref_answer_after_path,
    "ref_path_ratio": _ref_path_ratio,
}
if tuple(VALUE_VARIANTS) != VALUE_VARIANT_NAMES:  # the config checks against the names
    raise ImportError(
        f"VALUE_VARIANTS {list(VALUE_VARIANTS)} must have the keys of "
        f"rredcot_names.VALUE_VARIANT_NAMES {list(VALUE_VARIANT_NAMES)}, in order"
    )


def value_estimate(variant: str, scores: ReferenceScores) -> torch.Tensor:
    """v̂ (K+1,) for the value variant named `variant` (see `VALUE_VARIANTS` and METHOD.md §3)."""
    if variant not in VALUE_VARIANTS:
        raise ValueError(
            f"value: {variant!r} is not a value variant; choose one of {list(VALUE_VARIANTS)}"
        )
    return VALUE_VARIANTS[variant](scores)
