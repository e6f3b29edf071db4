"""From a potential Φ over states to segment rewards σ that sum to the return (METHOD.md §3).

RUDDER-style reward redistribution on a CoT trace with states s_0 … s_K (s_k = x ⊕ τ_{<b_k}):

    Φ_k = w_R·R̂_k + w_v·v̂_k                      potential of state k       (K+1,)
    h_k = Φ_k − Φ_{k−1},  k = 1 … K                raw credit of segment k    (K,)
    σ_k                                             redistributed reward       (K,)

Return equivalence (`RETURN_EQUIVALENCE`):

- `terminal_correction` (default): σ_k = h_k for k < K and σ_K = h_K + (R − Φ_K), so
  Σ_k σ_k = R − Φ_0. Φ_0 is the part of the return the prompt alone predicts; it plays the
  baseline's role and the group baseline absorbs it in training. Φ_K cancels: σ_K = R − Φ_{K−1}.
- `rescale`: σ_k = h_k · R / Σ_j h_j when |Σ_j h_j| > eps, so Σ_k σ_k = R; otherwise (the
  potential barely moved, the ratio would explode) the terminal correction above.

All functions are pure: float64 torch tensors in and out, segment index k = 1 … K stored at
position k − 1. Segment k of a list of traces can have different K, hence the list versions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Real

import torch

from rredcot.credit.rredcot_names import RETURN_EQUIVALENCE


def _vector(name: str, values: torch.Tensor | Sequence[float], min_len: int) -> torch.Tensor:
    """`values` as a float64 1-D tensor of at least `min_len` finite entries."""
    t = torch.as_tensor(values, dtype=torch.float64)
    if t.ndim != 1 or t.numel() < min_len:
        raise ValueError(
            f"{name}: expected a 1-D tensor of ≥ {min_len} entries, got {tuple(t.shape)}"
        )
    if not torch.isfinite(t).all():
        bad = torch.nonzero(~torch.isfinite(t)).flatten().tolist()
        raise ValueError(f"{name}: entries {bad} are not finite")
    return t


def potential(
    r_hat: torch.Tensor | Sequence[float],
    v_hat: torch.Tensor | Sequence[float],
    w_R: float = 1.0,  # noqa: N803 (the symbol of METHOD.md)
    w_v: float = 1.0,
) -> torch.Tensor:
    """Φ_k = w_R·R̂_k + w_v·v̂_k for k = 0 … K.

    r_hat, v_hat: (K+1,) answer-now reward and continuation value per state. Returns phi (K+1,).
    """
    r_hat = _vector("r_hat", r_hat, 1)
    v_hat = _vector("v_hat", v_hat, 1)
    if r_hat.shape != v_hat.shape:
        raise ValueError(
            f"r_hat/v_hat: need the same (K+1,) shape, got {tuple(r_hat.shape)} and "
            f"{tuple(v_hat.shape)}"
        )
    return w_R * r_hat + w_v * v_hat  # (K+1,)


def raw_credit(phi: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """h_k = Φ_k − Φ_{k−1} for k = 1 … K: phi (K+1,) -> h (K,). Σ_k h_k = Φ_K − Φ_0."""
    phi = _vector("phi", phi, 2)
    return phi[1:] - phi[:-1]  # (K,)


def _finite_return(R: object) -> float:  # noqa: N803
    if isinstance(R, bool) or not isinstance(R, Real) or not math.isfinite(R):
        raise ValueError(f"R: expected a finite return (the reward), got {R!r}")
    return float(R)


def terminal_credit(values: torch.Tensor | Sequence[float], R: float) -> torch.Tensor:  # noqa: N803
    """σ_k = V_k − V_{k−1}, k = 1 … K, with V_K := R: the terminal correction, one home for it.

    values: (K+1,) a value or potential per state s_0 … s_K; the last entry is replaced by the
    return R, so Σ_k σ_k = R − V_0 whatever V_K was (it need not even be computed: RREDCoT does
    not score s_K, MC does not roll out from it). NaN entries propagate into the two σ next to
    them (MC's states without an estimate); infinite ones are errors. Returns sigma (K,) float64.
    """
    v = torch.as_tensor(values, dtype=torch.float64).clone()
    if v.ndim != 1 or v.numel() < 1:
        raise ValueError(f"values: expected a 1-D tensor of K+1 >= 1 entries, got {tuple(v.shape)}")
    R = _finite_return(R)
    if torch.isinf(v).any():
        bad = torch.nonzero(torch.isinf(v)).flatten().tolist()
        raise ValueError(f"values: entries {bad} are infinite")
    v[-1] = R  # (K+1,)
    return v[1:] - v[:-1]  # (K,)


def redistribute(
    phi: torch.Tensor | Sequence[float],
    R: float,  # noqa: N803 (the symbol of METHOD.md)
    mode: str = "terminal_correction",
    eps: float = 1e-8,
) -> torch.Tensor:
    """σ (K,) from the potential phi (K+1,) and the episode return R (see the module docstring).

    terminal_correction: σ = h with σ_K += R − Φ_K, so Σσ = R − Φ_0.
    rescale: σ = h · R / Σh if |Σh| > eps (Σσ = R), else terminal_correction.
    """
    if mode not in RETURN_EQUIVALENCE:
        raise ValueError(f"mode: {mode!r} is not allowed; choose one of {list(RETURN_EQUIVALENCE)}")
    if not eps >= 0:
        raise ValueError(f"eps: expected a number ≥ 0, got {eps!r}")
    R = _finite_return(R)
    phi = _vector("phi", phi, 2)
    if mode == "rescale":
        h = raw_credit(phi)  # (K,)
        total = h.sum()
        if total.abs() > eps:
            return h * (R / total)
    return terminal_credit(phi, R)


def redistribute_batch(
    phis: Sequence[torch.Tensor | Sequence[float]],
    returns: Sequence[float],
    mode: str = "terminal_correction",
    eps: float = 1e-8,
) -> list[torch.Tensor]:
    """`redistribute` for each trace i (phis[i]: (K_i+1,), returns[i]: R_i) -> [σ_i (K_i,)]."""
    if len(phis) != len(returns):
        raise ValueError(
            f"phis/returns: need one return per trace, got {len(phis)} and {len(returns)}"
        )
    return [redistribute(p, r, mode=mode, eps=eps) for p, r in zip(phis, returns, strict=True)]
