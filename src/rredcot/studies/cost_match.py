"""Cost at equal agreement (METHOD.md §5): the MC N whose agreement equals the baseline
estimator's, and what MC costs there, with CIs from the agreement's shared bootstrap resamples
(`rredcot.studies.agreement.agreement_with_resamples`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl

from rredcot.studies import families
from rredcot.studies.agreement import Resamples


def crossing(n: np.ndarray, rho: np.ndarray, target: float) -> tuple[float, str]:
    """The N where MC's agreement curve (ρ at the measured N, linear in log₂ N between them)
    first reaches `target`: (N, "") inside the measured range, (n[0], "matched at the
    smallest N") when the smallest N already reaches it (an upper bound), (inf, "beyond the
    largest N") when none does; NaN when target or the curve is not finite."""
    if not np.isfinite(target) or not np.isfinite(rho).all():
        return float("nan"), "not finite"
    if rho[0] >= target:
        return float(n[0]), "matched at the smallest N"
    x = np.log2(n)
    for i in range(len(n) - 1):
        if rho[i] < target <= rho[i + 1]:
            frac = (target - rho[i]) / (rho[i + 1] - rho[i])
            return float(2 ** (x[i] + frac * (x[i + 1] - x[i]))), ""
    return float("inf"), "beyond the largest N"


def cost_at(n_equal: float, n: np.ndarray, cost: np.ndarray) -> float:
    """MC's cost at N = n_equal, linear in N between the measured N (a rollout costs the same
    whichever N it belongs to, so tokens and seconds grow linearly in N); NaN outside them."""
    if not np.isfinite(n_equal) or n_equal < n[0] or n_equal > n[-1]:
        return float("nan")
    return float(np.interp(n_equal, n, cost))


def _order_ci(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval by order statistics (no interpolation, so ±inf entries, meaning
    'beyond the measured N', are allowed); NaN entries are left out."""
    x = np.sort(values[~np.isnan(values)])
    if x.size == 0:
        return float("nan"), float("nan")
    tail = (1 - level) / 2
    low = x[int(np.floor(tail * (x.size - 1)))]
    high = x[int(np.ceil((1 - tail) * (x.size - 1)))]
    return float(low), float(high)


def cost_match(
    table: pl.DataFrame, baseline_estimator: str, resamples: Resamples | None = None
) -> pl.DataFrame:
    """Per (target, aggregation): the MC N whose agreement equals the reference's (the
    `baseline_estimator`, column `reference`), what MC costs there relative to the reference,
    and a CI for both from the shared bootstrap resamples.

    n_equal: where the MC curve (ρ against log₂ N, `crossing`) reaches the reference's ρ
    (`inf` when no measured N does, `note` says so); n_equal_ci95_low/high: the same crossing
    on every bootstrap resample of `agreement_with_resamples` (reference and MC on the same
    traces), by order statistics (`inf`: beyond the largest N); share_beyond_max_n / share_at_min_n:
    the resamples where no measured N reaches the reference / the smallest already does (its N
    is then an upper bound). token_ratio / seconds_ratio (with CIs from the same resamples):
    MC's forward tokens / seconds per trace at n_equal, linear in N between the measured N
    (`cost_at`), over the reference's; NaN where n_equal lies outside the measured N.
    mc_better_from_n / mc_worse_up_to_n: the smallest N whose paired CI says MC is better than
    the reference, and the largest N whose CI says it is worse (NaN when none).
    """
    rows = []
    for (target, aggregation), part in table.group_by(
        ["target", "aggregation"], maintain_order=True
    ):
        ref = part.filter(pl.col("estimator") == baseline_estimator)
        mc = part.filter(pl.col("family") == families.MC).sort("n_rollouts")
        if ref.height == 0 or mc.height == 0:
            continue
        r = ref.row(0, named=True)
        n = mc["n_rollouts"].to_numpy().astype(float)
        tokens = mc["forward_tokens_per_trace"].cast(pl.Float64).to_numpy()
        seconds = mc["seconds_per_trace"].cast(pl.Float64).to_numpy()
        n_equal, note = crossing(n, mc["rho"].to_numpy(), r["rho"])
        row: dict[str, Any] = {
            "target": target,
            "aggregation": aggregation,
            "reference": baseline_estimator,
            "reference_rho": r["rho"],
            "n_equal": n_equal,
            "n_equal_ci95_low": float("nan"),
            "n_equal_ci95_high": float("nan"),
            "share_beyond_max_n": float("nan"),
            "share_at_min_n": float("nan"),
            "token_ratio": cost_at(n_equal, n, tokens) / r["forward_tokens_per_trace"],
            "token_ratio_ci95_low": float("nan"),
            "token_ratio_ci95_high": float("nan"),
            "seconds_ratio": cost_at(n_equal, n, seconds) / r["seconds_per_trace"],
            "seconds_ratio_ci95_low": float("nan"),
            "seconds_ratio_ci95_high": float("nan"),
            "mc_better_from_n": _n_where(mc, "better", min),
            "mc_worse_up_to_n": _n_where(mc, "worse", max),
            "note": note,
        }
        samples = (resamples or {}).get((target, aggregation))
        if samples is not None:
            names = mc["estimator"].to_list()
            curves = np.stack([samples[m] for m in names], axis=1)  # (R, N)
            found = [
                crossing(n, c, t) for c, t in zip(curves, samples[baseline_estimator], strict=True)
            ]
            n_b = np.array([f[0] for f in found])
            row["n_equal_ci95_low"], row["n_equal_ci95_high"] = _order_ci(n_b)
            row["share_beyond_max_n"] = float(np.mean(np.isinf(n_b)))
            row["share_at_min_n"] = float(np.mean(n_b == n[0]))
            for cost, ref_cost, key in (
                (tokens, r["forward_tokens_per_trace"], "token_ratio"),
                (seconds, r["seconds_per_trace"], "seconds_ratio"),
            ):
                ratio = np.array([cost_at(x, n, cost) for x in n_b]) / ref_cost
                ratio[np.isinf(n_b)] = np.inf  # beyond the largest N: more than it costs
                row[f"{key}_ci95_low"], row[f"{key}_ci95_high"] = _order_ci(ratio)
        rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)


def _n_where(mc: pl.DataFrame, verdict_: str, pick: Callable[..., Any]) -> float:
    picked = mc.filter(pl.col("verdict") == verdict_)["n_rollouts"].to_list()
    return float(pick(picked)) if picked else float("nan")
