"""The one-pass Bayes value of OPPO's self-oracle (METHOD.md §8, a reconstruction).

Source: "OPPO: Bayesian Value Recursion for Token-Level Credit Assignment in LLM Reasoning",
Li et al., arXiv:2605.21851 (May 2026). No public code; only the abstract was read, so every
choice below is an option of `OPPOConfig` (config block `training.oppo`) with a stated default.

The policy scores each response token z_t twice: with and without the oracle text O (the
reference solution, `rredcot.credit.references.oracle_prompt`) in the prompt. If π(· | x ⊕ O) stands
for π(· | x, success), Bayes' rule turns the likelihood ratio into an update of the belief that
the response will succeed. Shapes: B rows, T response tokens (right-padded; `mask` (B, T) is 1
on each row's first T_i tokens), states t = 0 … T (state t has seen t tokens):

    r_t = log π(z_t | x ⊕ O, z_<t) − log π(z_t | x, z_<t)                   log ratio   (B, T)
    p_0 = P(success | x)        `prior`: the group's mean reward | 0.5      prior       (B,)
    p_t = p_0 · exp(Σ_{j≤t} r_j), clipped to [0, 1] (`clip`)                 belief      (B, T+1)
    a_t = p_t − p_{t−1}          `token_advantage: delta` (default)         advantage   (B, T)
        = p_{t−1} · r_t          `token_advantage: first_order`
    a_{T_i} = R_i − p_{T_i−1}    the verified outcome replaces p_T (last token of row i)

so under `delta` Σ_t a_t = R − p_0 (return equivalence, like RREDCoT's terminal correction);
under `first_order` only approximately. Segment form, boundaries 0 = b_0 < … < b_K = T_i:

    V̂(s_k) = p_{b_k}, k = 0 … K;  σ_k = V̂(s_k) − V̂(s_{k−1}), V̂(s_K) := R           (K,)

(`rredcot.credit.redistribution.terminal_credit`), through METHOD.md §4's transform like every
other segment credit. All functions here are pure: tensors in, float64 tensors out; the forward
passes that give r_t live with their callers (`rredcot.training.methods.oppo`,
`rredcot.studies.estimators.bayes_estimates`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rredcot.block_checks import check_choices, check_known_keys
from rredcot.credit.redistribution import terminal_credit

LEVELS: tuple[str, ...] = ("token", "segment")
PRIORS: tuple[str, ...] = ("group_mean", "half")
TOKEN_ADVANTAGES: tuple[str, ...] = ("delta", "first_order")


@dataclass(frozen=True)
class OPPOConfig:
    """The `training.oppo` config block (METHOD.md §8); every field has a default."""

    level: str = "token"
    """One of `LEVELS`: token (every token is its own segment, σ_t = a_t: the paper's token
    advantage) | segment (σ_k from V̂(s_k) = p_{b_k} on the configured segmentation, as
    RREDCoT's). Either way σ becomes advantages through the `credit` block (METHOD.md §4)."""
    prior: str = "group_mean"
    """One of `PRIORS`: p_0 = the group's mean reward | 0.5."""
    token_advantage: str = "delta"
    """One of `TOKEN_ADVANTAGES`: delta a_t = p_t − p_{t−1} | first_order a_t = p_{t−1}·r_t
    (level token only; the segment form reads p at the boundaries)."""
    clip: bool = True
    """Clip p_t to [0, 1] (without it p_t may exceed 1)."""

    def __post_init__(self) -> None:
        check_choices(
            "oppo",
            self,
            {"level": LEVELS, "prior": PRIORS, "token_advantage": TOKEN_ADVANTAGES},
        )
        if not isinstance(self.clip, bool):
            raise ValueError(f"oppo.clip: expected true or false, got {self.clip!r}")

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any]) -> OPPOConfig:
        """Build from a config mapping; unknown keys are errors."""
        check_known_keys("oppo", cls, mapping)
        return cls(**mapping)


def _lengths(mask: torch.Tensor) -> torch.Tensor:
    """T_i of a right-padded (B, T) mask; refuses a mask with holes."""
    m = torch.as_tensor(mask).bool()
    if m.ndim != 2:
        raise ValueError(f"mask: expected shape (B, T), got {tuple(m.shape)}")
    lengths = m.sum(dim=1)
    prefix = torch.arange(m.shape[1])[None, :] < lengths[:, None]
    if not torch.equal(m, prefix):
        raise ValueError("mask: expected right padding (each row's real tokens first)")
    return lengths


def prior_probabilities(
    rewards: torch.Tensor | Sequence[float], groups: torch.Tensor | Sequence[int], prior: str
) -> torch.Tensor:
    """p_0 of each row (B,): the mean reward of its group (`group_mean`) or 0.5 (`half`)."""
    if prior not in PRIORS:
        raise ValueError(f"prior: {prior!r} is not allowed; choose one of {list(PRIORS)}")
    r = torch.as_tensor(rewards, dtype=torch.float64)
    g = torch.as_tensor(groups, dtype=torch.long)
    if r.ndim != 1 or g.shape != r.shape:
        raise ValueError(f"rewards/groups: expected (B,) each, got {r.shape} and {g.shape}")
    if prior == "half":
        return torch.full_like(r, 0.5)
    out = torch.empty_like(r)
    for label in torch.unique(g):
        rows = g == label
        out[rows] = r[rows].mean()
    return out


def log_ratios(
    oracle_logprobs: torch.Tensor, logprobs: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """r_t = log π(z_t | x ⊕ O, z_<t) − log π(z_t | x, z_<t): (B, T) each -> (B, T) float64,
    0 where `mask` is 0."""
    lo, lp = torch.as_tensor(oracle_logprobs), torch.as_tensor(logprobs)
    if lo.shape != lp.shape or lo.shape != torch.as_tensor(mask).shape:
        raise ValueError(
            f"oracle_logprobs/logprobs/mask: need equal (B, T) shapes, got {tuple(lo.shape)}, "
            f"{tuple(lp.shape)} and {tuple(torch.as_tensor(mask).shape)}"
        )
    m = torch.as_tensor(mask).bool()
    r = lo.double() - lp.double()
    return torch.where(m, r, torch.zeros_like(r))


def bayes_values(
    log_ratio: torch.Tensor, mask: torch.Tensor, prior: torch.Tensor, clip: bool = True
) -> torch.Tensor:
    """p_t = p_0 · exp(Σ_{j≤t} r_j), clipped to [0, 1] when `clip`, for t = 0 … T.

    log_ratio: (B, T) r_t; mask: (B, T) right-padded; prior: (B,) p_0 in [0, 1]. Returns p
    (B, T+1) float64 with p[:, 0] = p_0; past a row's end (t > T_i) p stays at p_{T_i}. The sum
    is taken in log space, so p_0 = 0 stays 0.
    """
    r = torch.as_tensor(log_ratio, dtype=torch.float64)
    lengths = _lengths(mask)
    if r.shape != torch.as_tensor(mask).shape:
        raise ValueError(f"log_ratio/mask: need equal (B, T) shapes, got {tuple(r.shape)}")
    p0 = torch.as_tensor(prior, dtype=torch.float64)
    if p0.shape != (r.shape[0],) or not ((p0 >= 0) & (p0 <= 1)).all():
        raise ValueError(f"prior: expected (B,) = ({r.shape[0]},) values in [0, 1], got {p0}")
    real = torch.arange(r.shape[1])[None, :] < lengths[:, None]
    if not torch.isfinite(r[real]).all():
        raise ValueError("log_ratio: entries under the mask are not finite")
    cum = torch.cat([r.new_zeros(r.shape[0], 1), torch.where(real, r, 0.0).cumsum(1)], dim=1)
    log_p = torch.log(p0)[:, None] + cum  # (B, T+1)
    if clip:
        log_p = log_p.clamp(max=0.0)
    return torch.exp(log_p)


def bayes_token_advantages(
    values: torch.Tensor,
    log_ratio: torch.Tensor,
    mask: torch.Tensor,
    rewards: torch.Tensor | Sequence[float],
    form: str = "delta",
) -> torch.Tensor:
    """a_t of every token (B, T) float64, 0 where `mask` is 0 (module docstring).

    values: (B, T+1) p from `bayes_values`; log_ratio, mask: (B, T); rewards: (B,) R_i.
    delta: a_t = p_t − p_{t−1}; first_order: a_t = p_{t−1}·r_t; then the last real token of
    row i gets a = R_i − p_{T_i−1} (the outcome replaces p_T). A row with T_i = 0 gets nothing.
    """
    if form not in TOKEN_ADVANTAGES:
        raise ValueError(f"form: {form!r} is not allowed; choose one of {list(TOKEN_ADVANTAGES)}")
    p = torch.as_tensor(values, dtype=torch.float64)
    r = torch.as_tensor(log_ratio, dtype=torch.float64)
    lengths = _lengths(mask)
    big_r = torch.as_tensor(rewards, dtype=torch.float64)
    b, t = r.shape
    if p.shape != (b, t + 1) or big_r.shape != (b,):
        raise ValueError(
            f"values/rewards: expected (B, T+1) = {(b, t + 1)} and (B,), got {tuple(p.shape)} "
            f"and {tuple(big_r.shape)}"
        )
    a = p[:, 1:] - p[:, :-1] if form == "delta" else p[:, :-1] * r
    rows = torch.nonzero(lengths > 0).flatten()
    last = lengths[rows] - 1
    a[rows, last] = big_r[rows] - p[rows, last]
    real = torch.arange(t)[None, :] < lengths[:, None]
    return torch.where(real, a, torch.zeros_like(a))


def bayes_segment_values(values: torch.Tensor, boundaries: Sequence[int]) -> torch.Tensor:
    """V̂(s_k) = p_{b_k} for k = 0 … K: one row's p (T+1,) -> (K+1,) float64."""
    p = torch.as_tensor(values, dtype=torch.float64)
    b = [int(x) for x in boundaries]
    if p.ndim != 1 or not b or b[0] != 0 or b != sorted(set(b)) or b[-1] >= p.numel():
        raise ValueError(
            f"boundaries: need 0 = b_0 < … < b_K ≤ T = {p.numel() - 1}, got {b} (values "
            f"{tuple(p.shape)})"
        )
    return p[b]


def bayes_segment_credit(values: torch.Tensor, boundaries: Sequence[int], R: float) -> torch.Tensor:  # noqa: N803
    """σ_k = V̂(s_k) − V̂(s_{k−1}) with V̂(s_K) := R: one row's p (T+1,) -> σ (K,) float64."""
    return terminal_credit(bayes_segment_values(values, boundaries), R)


__all__ = [
    "LEVELS",
    "PRIORS",
    "TOKEN_ADVANTAGES",
    "OPPOConfig",
    "bayes_segment_credit",
    "bayes_segment_values",
    "bayes_token_advantages",
    "bayes_values",
    "log_ratios",
    "prior_probabilities",
]
