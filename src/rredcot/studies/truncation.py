"""Truncated Monte Carlo (METHOD.md §5): how much a budget L drops and how far it moves V̂.

The ground-truth rollouts are cut at each budget L after the fact (exact for the HF backend, see
`rredcot.studies.rollouts`), so the shift V̂_L − V_gt is the bias of truncation alone, with no
sampling noise between the two. Per (L, truncation mode):

- truncated_share: rollouts that do not finish within L (all N per state);
- drop_rate: the share left out of the means (= truncated_share under "drop", 0 under "zero");
- no_estimate_share: states where every rollout was dropped (V̂_L undefined, "drop" only);
- mean_value_shift, its bootstrap 95% CI over states, and mean_abs_value_shift: over the states
  with an estimate. "drop" keeps only the short, finished continuations (biased to whatever
  finishes early); "zero" scores the rest as failures (biased down).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from rredcot.studies.rollouts import TRUNCATION, state_values
from rredcot.studies.statistics import bootstrap_mean_ci


def truncation_table(
    rollouts: pl.DataFrame,
    states: pl.DataFrame,
    budgets: Sequence[int],
    *,
    resamples: int,
    seed: int,
    modes: Sequence[str] = TRUNCATION,
) -> pl.DataFrame:
    """One row per (budget, truncation mode), on the given states (trace_index, char_pos).

    The reference V_gt is the value of all rollouts under their own (generous) budget, "drop".
    """
    chosen = rollouts.join(states.select("trace_index", "char_pos"), on=["trace_index", "char_pos"])
    if chosen.height == 0:
        raise ValueError("states: none of them has rollouts")
    keys = ["trace_index", "char_pos"]
    reference = state_values(chosen, truncation="drop").select(*keys, v_gt="value")
    ref_truncated = float((chosen["finish_reason"] == "length").mean())
    rows = []
    for i, budget in enumerate(sorted(budgets)):
        for j, mode in enumerate(modes):
            values = state_values(chosen, budget=budget, truncation=mode).join(reference, on=keys)
            shift = (values["value"] - values["v_gt"]).to_numpy()
            usable = shift[np.isfinite(shift)]
            mean, low, high = bootstrap_mean_ci(usable, resamples, seed + 2 * i + j)
            truncated = float(values["n_truncated"].sum() / values["n_total"].sum())
            rows.append(
                {
                    "budget": budget,
                    "truncation": mode,
                    "n_states": values.height,
                    "n_rollouts": int(values["n_total"].sum()),
                    "truncated_share": truncated,
                    "drop_rate": truncated if mode == "drop" else 0.0,
                    "no_estimate_share": float(values["value"].is_nan().mean()),
                    "mean_value_shift": mean,
                    "ci95_low": low,
                    "ci95_high": high,
                    "mean_abs_value_shift": float(np.abs(usable).mean()) if usable.size else np.nan,
                    "mean_v_gt": float(np.nanmean(values["v_gt"].to_numpy())),
                    "reference_truncated_share": ref_truncated,
                }
            )
    return pl.DataFrame(rows)


__all__ = ["truncation_table"]
