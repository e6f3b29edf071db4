"""From rewards and segment credit to per-token advantages (B, T) (METHOD.md §4, §6).

G groups of n responses per prompt; row i of the batch belongs to group g(i). Shapes: B rows,
T completion tokens (right-padded), K_i segments of row i with boundaries 0 = b_0 < … < b_K.

    A_i      = (R_i − mean_g R) / (std_g R + ε)            outcome advantage, TRL's GRPO   (B,)
    A_i      = (r_i − mean_g r) / std_g r, 0 if std < 1e-8  per-group, RRPO/SRPO (§6)       (B,)
    whiten(x)= (x − mean_g x) / (std_g x + ε)               center group: over the group's
               tokens, x_{i,k} counted n_{i,k} times (the tokens of segment k under the mask)
             = x / (std_g x + ε)                            center none: over the group's
               segments, each once; the sign of x kept
    immediate:    A_{i,k} = whiten(σ_{i,k})                                               (K_i,)
    reward_to_go: A_{i,k} = whiten(Σ_{k'≥k} σ_{i,k'})
    mixed:        A_{i,k} = A_i + β · whiten(σ_{i,k})

and every token of segment k gets A_{i,k}; tokens after b_K (the EOS that ends the response)
belong to the last segment; padding (completion mask 0) gets 0. The outcome advantage uses the
sample (Bessel-corrected) std and ε = 1e-4 exactly as TRL's `GRPOTrainer` does, so `credit: none`
is GRPO. Whitening uses the population std; a group whose values are all equal whitens to 0 (no
signal, std < 1e-8). All functions are pure: tensors in, tensors out.

`center: group` weights by tokens, not segments (METHOD.md §4): its mean and std are those of
the advantages' own (B, T) entries under the completion mask, so a long segment moves the
baseline as much as its tokens weigh in the loss. (Until issue 34 each segment counted once.)
This changes numbers only where `center: group` is used: config.yaml trains rredcot and mc with
`center: none` (segment-weighted std, unchanged), so of the default's runs only the side run
`rredcot_center_group` moves; CreditConfig's own default (and the schema's) is `group`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import pairwise

import torch

# The block and its names live in the torch-free `credit_config`; imported here, they are also
# this module's names, as before (the `X as X` ones only re-exported).
from rredcot.credit.credit_config import CENTERS as CENTERS
from rredcot.credit.credit_config import CREDIT_MODES as CREDIT_MODES
from rredcot.credit.credit_config import MIN_STD, REWARD_SCALES, TRL_EPS, CreditConfig
from rredcot.credit.credit_config import PLACEBOS as PLACEBOS


def _rewards(rewards: torch.Tensor | Sequence[float]) -> torch.Tensor:
    r = torch.as_tensor(rewards, dtype=torch.float32)
    if r.ndim != 1:
        raise ValueError(f"rewards: expected shape (B,), got {tuple(r.shape)}")
    if not torch.isfinite(r).all():
        bad = torch.nonzero(~torch.isfinite(r)).flatten().tolist()
        raise ValueError(f"rewards: rows {bad} are not finite")
    return r


def group_ids(batch_size: int, num_generations: int) -> torch.Tensor:
    """g(i) = i // n: TRL's layout, each prompt's n completions are consecutive rows. (B,)"""
    if num_generations < 1 or batch_size % num_generations:
        raise ValueError(
            f"batch_size {batch_size}: must be a multiple of num_generations {num_generations}"
        )
    return torch.arange(batch_size) // num_generations


def outcome_advantages(
    rewards: torch.Tensor | Sequence[float],
    num_generations: int,
    scale: str = "group",
    eps: float = TRL_EPS,
) -> torch.Tensor:
    """A_i = (R_i − mean_g R)/(std_g R + ε): TRL's GRPO advantage (B,), float32.

    rewards: (B,) in TRL's layout (`group_ids`). std is Bessel-corrected; scale "group" uses the
    group's std, "batch" the whole batch's, "none" divides by nothing (Dr. GRPO).
    """
    if scale not in REWARD_SCALES:
        raise ValueError(f"scale: {scale!r} is not allowed; choose one of {list(REWARD_SCALES)}")
    r = _rewards(rewards)
    group_ids(r.numel(), num_generations)  # checks the layout
    grouped = r.view(-1, num_generations)  # (G, n)
    mean = grouped.mean(dim=1).repeat_interleave(num_generations)  # (B,)
    advantages = r - mean
    if scale == "none":
        return advantages
    if scale == "group":
        std = (
            grouped.std(dim=1).repeat_interleave(num_generations)
            if num_generations > 1
            else torch.zeros_like(r)
        )
    else:
        std = r.std().expand_as(r) if r.numel() > 1 else torch.zeros_like(r)
    return advantages / (std + eps)


def per_group_advantages(
    rewards: torch.Tensor | Sequence[float],
    groups: torch.Tensor | Sequence[int],
    min_std: float = MIN_STD,
) -> torch.Tensor:
    """A_i = (r_i − mean_g r)/std_g r with the population std; A = 0 where std_g < min_std.

    RRPO/SRPO (§6): Group 1 (fresh chains) and Group 2 (reset suffixes) of a prompt are
    normalised on their own, so `groups` (B,) can be any labels, in any order.
    """
    r = _rewards(rewards).double()
    out = torch.zeros_like(r)
    for rows, std in _group_stds(r, _groups(groups, r.numel())):
        if std >= min_std:
            out[rows] = (r[rows] - r[rows].mean()) / std
    return out.float()


def zero_std_share(
    rewards: torch.Tensor | Sequence[float],
    groups: torch.Tensor | Sequence[int],
    min_std: float = MIN_STD,
) -> float:
    """Share of rows whose group's rewards have std < `min_std`: the rows `per_group_advantages`
    gives A = 0 (TRL's `frac_reward_zero_std`, but over these groups rather than TRL's n rows)."""
    r = _rewards(rewards).double()
    if not r.numel():
        raise ValueError("rewards: empty batch")
    groups = _groups(groups, r.numel())
    flat = sum(int(rows.sum()) for rows, std in _group_stds(r, groups) if std < min_std)
    return flat / r.numel()


def _group_stds(r: torch.Tensor, g: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(row mask, population std of its rewards) per group label of `g`."""
    for label in torch.unique(g):
        rows = g == label
        yield rows, r[rows].std(unbiased=False)


def _groups(groups: torch.Tensor | Sequence[int], batch_size: int) -> torch.Tensor:
    g = torch.as_tensor(groups, dtype=torch.long)
    if g.shape != (batch_size,):
        raise ValueError(f"groups: expected one group label per row ({batch_size},), got {g.shape}")
    return g


def _segment_values(values: Sequence[torch.Tensor | Sequence[float]]) -> list[torch.Tensor]:
    out = []
    for i, v in enumerate(values):
        t = torch.as_tensor(v, dtype=torch.float64)
        if t.ndim != 1:
            raise ValueError(f"sigma[{i}]: expected shape (K_i,), got {tuple(t.shape)}")
        if not torch.isfinite(t).all():
            bad = torch.nonzero(~torch.isfinite(t)).flatten().tolist()
            raise ValueError(f"sigma[{i}]: segments {bad} are not finite")
        out.append(t)
    return out


def whiten_groups(
    values: Sequence[torch.Tensor | Sequence[float]],
    groups: torch.Tensor | Sequence[int],
    eps: float = TRL_EPS,
    center: bool = True,
    weights: Sequence[torch.Tensor | Sequence[float]] | None = None,
) -> list[torch.Tensor]:
    """whiten(x_{i,k}) = (x_{i,k} − mean_g x)/(std_g x + ε), pooled over every segment k of every
    row i of group g (population std; 0 where std_g < 1e-8, all values equal). With
    `center=False` the mean is not subtracted: x_{i,k}/(std_g x + ε).

    `weights` (one per segment, e.g. `segment_token_counts`): mean and std are weighted, x_{i,k}
    counted w_{i,k} times (a group of total weight 0 whitens to 0); None: each segment once.
    values[i], weights[i]: (K_i,) -> list of (K_i,) float64."""
    vals = _segment_values(values)
    g = _groups(groups, len(vals))
    w = None if weights is None else _segment_values(weights)
    if w is not None and (
        [x.shape for x in w] != [v.shape for v in vals] or any((x < 0).any() for x in w)
    ):
        raise ValueError("weights: expected one weight >= 0 per segment, shaped as values")
    out = [v.clone() for v in vals]
    for label in torch.unique(g):
        rows = torch.nonzero(g == label).flatten().tolist()
        pooled = torch.cat([vals[i] for i in rows])
        if pooled.numel() == 0:
            continue
        if w is None:  # each segment once
            mean, std = pooled.mean(), pooled.std(unbiased=False)
        else:
            pooled_w = torch.cat([w[i] for i in rows])
            total = pooled_w.sum()
            if total <= 0:  # nothing to weigh: no signal
                mean, std = pooled.new_zeros(()), pooled.new_zeros(())
            else:
                mean = (pooled_w * pooled).sum() / total
                std = ((pooled_w * (pooled - mean) ** 2).sum() / total).sqrt()
        shift = mean if center else torch.zeros((), dtype=pooled.dtype)
        flat = std < MIN_STD
        for i in rows:
            out[i] = torch.zeros_like(vals[i]) if flat else (vals[i] - shift) / (std + eps)
    return out


def segment_token_counts(
    boundaries: Sequence[Sequence[int]], completion_mask: torch.Tensor
) -> list[torch.Tensor]:
    """n_{i,k}: the tokens of segment k of row i that the completion mask (B, T) keeps, i.e.
    the entries of the (B, T) advantages that get A_{i,k} (`expand_segments`: tokens after b_K,
    the EOS, belong to the last segment; padding counts for nothing). (K_i,) float64 each."""
    mask = torch.as_tensor(completion_mask)
    out = []
    for i, b in enumerate(boundaries):
        k = len(b) - 1
        owner = expand_segments(torch.arange(k, dtype=torch.float64), b, mask.shape[1])  # (T,)
        kept = mask[i].to(torch.float64)
        out.append(
            torch.zeros(k, dtype=torch.float64).index_add_(0, owner.long(), kept)
            if k
            else torch.zeros(0, dtype=torch.float64)
        )
    return out


def reward_to_go(sigma: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """G_k = Σ_{k'≥k} σ_{k'}: (K,) -> (K,)."""
    s = torch.as_tensor(sigma, dtype=torch.float64)
    return s.flip(0).cumsum(0).flip(0)


def expand_segments(
    values: torch.Tensor | Sequence[float], boundaries: Sequence[int], num_tokens: int
) -> torch.Tensor:
    """Per-segment values (K,) to per-token values (num_tokens,): token t ∈ [b_{k−1}, b_k) gets
    values[k−1]; tokens t ≥ b_K (the EOS ending the response, padding) get the last value.

    With K = 0 (boundaries [0], an empty response) every token gets 0.
    """
    v = torch.as_tensor(values, dtype=torch.float64)
    b = [int(x) for x in boundaries]
    if not b or b[0] != 0 or any(right <= left for left, right in pairwise(b)):
        raise ValueError(f"boundaries: need 0 = b_0 < … < b_K, got {b}")
    if v.shape != (len(b) - 1,):
        raise ValueError(
            f"values: expected one value per segment ({len(b) - 1},), got {tuple(v.shape)}"
        )
    if num_tokens < b[-1]:
        raise ValueError(f"num_tokens: {num_tokens} is less than b_K = {b[-1]}")
    if v.numel() == 0:
        return torch.zeros(num_tokens, dtype=torch.float64)
    sizes = torch.tensor([right - left for left, right in pairwise(b)])
    sizes[-1] += num_tokens - b[-1]
    return torch.repeat_interleave(v, sizes)


def token_advantages(
    sigmas: Sequence[torch.Tensor | Sequence[float]],
    boundaries: Sequence[Sequence[int]],
    groups: torch.Tensor | Sequence[int],
    completion_mask: torch.Tensor,
    config: CreditConfig | None = None,
    outcome: torch.Tensor | None = None,
) -> torch.Tensor:
    """Token advantages (B, T) float32 from segment signals σ_i (K_i,) and boundaries (K_i+1,).

    `config.mode` picks immediate | reward_to_go | mixed (module docstring); `mixed` needs the
    outcome advantages A_i (B,). Entries where `completion_mask` (B, T) is 0 are 0.
    """
    cfg = CreditConfig() if config is None else config
    mask = torch.as_tensor(completion_mask)
    if mask.ndim != 2 or len(sigmas) != mask.shape[0] or len(boundaries) != mask.shape[0]:
        raise ValueError(
            f"sigmas/boundaries/completion_mask: need B rows each, got {len(sigmas)}, "
            f"{len(boundaries)} and mask {tuple(mask.shape)}"
        )
    if cfg.mode == "mixed" and (outcome is None or tuple(outcome.shape) != (mask.shape[0],)):
        raise ValueError("outcome: mode 'mixed' needs the outcome advantages A_i of shape (B,)")
    sig = _segment_values(sigmas)
    signal = [reward_to_go(s) for s in sig] if cfg.mode == "reward_to_go" else sig
    centred = cfg.center == "group"
    weights = segment_token_counts(boundaries, mask) if centred else None  # §4: by tokens
    white = whiten_groups(signal, groups, cfg.eps, center=centred, weights=weights)
    rows = []
    for i, (w, b) in enumerate(zip(white, boundaries, strict=True)):
        a = cfg.beta * w + float(outcome[i]) if cfg.mode == "mixed" else w  # (K_i,)
        rows.append(expand_segments(a, b, mask.shape[1]))
    out = torch.stack(rows) if rows else torch.zeros(mask.shape, dtype=torch.float64)
    return (out * mask.to(out.dtype)).to(torch.float32)  # (B, T)


def masked_stats(advantages: torch.Tensor, completion_mask: torch.Tensor) -> dict[str, float]:
    """mean, std (population), min, max of (B,) or (B, T) advantages over unmasked tokens."""
    a = advantages if advantages.ndim == 2 else advantages[:, None].expand(completion_mask.shape)
    values = a[completion_mask.bool()].double()
    if values.numel() == 0:
        return {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0}
    return {
        "mean": float(values.mean()),
        "std": float(values.std(unbiased=False)),
        "min": float(values.min()),
        "max": float(values.max()),
    }
