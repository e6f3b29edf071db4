"""Choosing the credit → advantage transform by a study, not by RL (METHOD.md §4).

A candidate turns a credit estimator's σ into token advantages (`token_advantages` under a
`credit` block, or after a fix of the potential's level, `level_fixes`). Its agreement with the
true token advantages is the cosine over each group's tokens (`cosine`), averaged over groups.
The pre-registered rule (`choose_transform`): the candidate with the highest mean agreement
replaces the current default when the paired 95% CI of its difference from the default excludes
0; otherwise the default stays (ties keep it). `dev/probe_credit_transform.py` runs the study.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """a·b / (|a| |b|): blind to the advantages' scale (whitening sets it), not to their level
    (a group-wide shift changes it, unlike Pearson's r); 0 where either carries no signal."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(a @ b / (na * nb)) if na > 1e-12 and nb > 1e-12 else 0.0


def level_fixes(
    sigmas: Sequence[torch.Tensor], rewards: torch.Tensor, groups: torch.Tensor
) -> dict[str, list[torch.Tensor]]:
    """σ_i (K_i,) under two fixes of the potential's level, per row.

    With the terminal correction Σ_k σ_k = R − Φ_0, so Φ_0 = R − Σ σ and Φ_k = Φ_0 + Σ_{j≤k} σ_j
    (k < K). `baseline_shift`: σ_1 += Φ_0 − mean_g R (then Σ_k σ_k = R − mean_g R, GRPO's
    uncentred advantage). `potential_scaled`: Φ_k scaled by c = mean_g R / mean_g Φ_0 (c = 1 when
    mean_g Φ_0 ≤ 0) before differencing, σ_K = R − c·Φ_{K−1}.
    """
    r = torch.as_tensor(rewards, dtype=torch.float64)
    phi0 = torch.stack([r[i] - s.double().sum() for i, s in enumerate(sigmas)])
    shift, scaled = [], []
    for i, s in enumerate(sigmas):
        g = groups == groups[i]
        mean_r, mean_phi0 = float(r[g].mean()), float(phi0[g].mean())
        s = s.double()
        a = s.clone()
        a[0] += phi0[i] - mean_r
        shift.append(a)
        c = mean_r / mean_phi0 if mean_phi0 > 0 else 1.0
        phi = torch.cat([phi0[i : i + 1], phi0[i] + torch.cumsum(s, 0)[:-1]]) * c  # Φ_0..Φ_{K−1}
        scaled.append(torch.cat([phi[1:] - phi[:-1], (r[i] - phi[-1]).reshape(1)]))
    return {"baseline_shift": shift, "potential_scaled": scaled}


def paired_table(
    per_group: Mapping[str, Sequence[float]], default: str, resamples: int, seed: int
) -> list[dict[str, float | str | int]]:
    """Per candidate: mean agreement with its percentile bootstrap 95% CI over groups, and the
    paired difference from `default` (the same resampled groups) with its CI."""
    names = list(per_group)
    values = np.array([per_group[k] for k in names], dtype=float)  # (candidates, groups)
    if default not in per_group:
        raise ValueError(f"default {default!r} is not a candidate of {names}")
    idx = np.random.default_rng(seed).integers(0, values.shape[1], (resamples, values.shape[1]))
    boot = values[:, idx].mean(axis=2)  # (candidates, resamples)
    d0 = names.index(default)
    return [
        {
            "candidate": name,
            "groups": values.shape[1],
            "agreement": float(values[k].mean()),
            "ci_low": float(np.quantile(boot[k], 0.025)),
            "ci_high": float(np.quantile(boot[k], 0.975)),
            "minus_default": float(values[k].mean() - values[d0].mean()),
            "diff_ci_low": float(np.quantile(boot[k] - boot[d0], 0.025)),
            "diff_ci_high": float(np.quantile(boot[k] - boot[d0], 0.975)),
        }
        for k, name in enumerate(names)
    ]


def choose_transform(
    table: Sequence[Mapping[str, float | str]], default: str, exclude: Sequence[str] = ()
) -> str:
    """The pre-registered rule: the highest mean agreement among the candidates (rows not in
    `exclude`, e.g. GRPO's outcome advantage, which is no transform of σ) wins when its paired CI
    against `default` lies above 0; otherwise `default`."""
    rows = [r for r in table if r["candidate"] not in exclude]
    if not any(r["candidate"] == default for r in rows):
        raise ValueError(f"default {default!r} is not among the candidates")
    best = max(rows, key=lambda r: r["agreement"])
    return str(best["candidate"]) if float(best["diff_ci_low"]) > 0 else default
