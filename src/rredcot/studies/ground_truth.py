"""The Monte Carlo ground truth σ_gt of every segmentation, from the shared rollout table.

σ_gt,k = V_gt(s_k) − V_gt(s_{k−1}) with V_gt(s_K) = R and V_gt the mean reward of the
ground-truth rollouts (N large, budget generous, METHOD.md §5) from s_k. Because the rollouts are
stored per distinct state, every segmentation reads its σ_gt from the same table.

`split_half` gives the ground truth's own noise: σ and V from rollouts [0, N/2) against those
from [N/2, N). Their agreement, stepped up with Spearman–Brown to N, is the reliability of the
N-rollout ground truth, and its square root the ceiling of any estimator's agreement with it
(`rredcot.studies.agreement`).
"""

from __future__ import annotations

import polars as pl

from rredcot.studies.rollouts import (
    sigma_from_values,
    state_values,
    value_lookup,
    values_at_states,
)
from rredcot.studies.statistics import split_half_factor

GROUND_TRUTH = "ground_truth"  # estimator name of σ_gt in the study tables


def ground_truth_sigmas(
    traces: pl.DataFrame,
    segmentations: pl.DataFrame,
    rollouts: pl.DataFrame,
    *,
    n: int | None = None,
    first_rollout: int = 0,
    truncation: str = "drop",
) -> pl.DataFrame:
    """trace_index, segmentation, sigma (K,) and values (K,: V_gt(s_0 … s_{K−1})) as
    List[f64] for every row of `segmentations`.

    Uses the rollouts [first_rollout, first_rollout + n) of each state (all when n is None).
    """
    reward = dict(traces.select("trace_index", "reward").iter_rows())
    values = value_lookup(
        state_values(rollouts, n=n, first_rollout=first_rollout, truncation=truncation)
    )
    rows = [
        {
            "trace_index": t,
            "segmentation": label,
            "sigma": sigma_from_values(cb, values.get(t, {}), reward[t]).tolist(),
            "values": values_at_states(cb, values.get(t, {})).tolist(),
        }
        for t, label, cb in segmentations.select(
            "trace_index", "segmentation", "char_boundaries"
        ).iter_rows()
    ]
    schema = {
        "trace_index": pl.Int64,
        "segmentation": pl.String,
        "sigma": pl.List(pl.Float64),
        "values": pl.List(pl.Float64),
    }
    return pl.DataFrame(rows, schema=schema)


def split_half(
    traces: pl.DataFrame, segmentations: pl.DataFrame, rollouts: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(σ from the first half of the rollouts, σ from the second half) per segmentation row."""
    _, half = _split_sizes(rollouts)
    first = ground_truth_sigmas(traces, segmentations, rollouts, n=half)
    second = ground_truth_sigmas(traces, segmentations, rollouts, n=half, first_rollout=half)
    return first, second


def _split_sizes(rollouts: pl.DataFrame) -> tuple[int, int]:
    """(rollouts per state in the ground truth, rollouts per split half: ⌊n/2⌋)."""
    n_total = int(rollouts["rollout"].max()) + 1 if rollouts.height else 0
    if n_total < 2:
        raise ValueError(
            f"rollouts: a split half needs at least 2 rollouts per state, got {n_total}"
        )
    return n_total, n_total // 2


def split_half_step_up(rollouts: pl.DataFrame) -> float:
    """The Spearman–Brown factor from one split half to the whole ground truth: n_total / n_half
    (2 for an even count; 33 rollouts give halves of 16 and a factor of 33/16)."""
    return split_half_factor(*_split_sizes(rollouts))


__all__ = ["GROUND_TRUTH", "ground_truth_sigmas", "split_half", "split_half_step_up"]
