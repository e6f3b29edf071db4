"""The null row of the agreement study (METHOD.md §5): an estimator that knows only R."""

from __future__ import annotations

import numpy as np
import polars as pl

from rredcot.studies import families
from rredcot.studies.estimators import ESTIMATE_SCHEMA

NULL = "null_R_only"
"""Estimator name of the null row."""


def null_estimates(traces: pl.DataFrame, segmentation: pl.DataFrame) -> pl.DataFrame:
    """The null row (METHOD.md §5): an estimator that knows only R. Its potential is R of the
    trace at every state (constant within a trace, different between traces), so what R alone
    explains is visible: its values order no state within a trace but rank traces by outcome
    (pooled), and its credits σ_k = Φ_k − Φ_{k−1} with the terminal correction σ_K += R − Φ_K
    are all 0 (a flat σ: it locates nothing, like a random guess)."""
    reward = dict(traces.select("trace_index", "reward").iter_rows())
    rows = []
    for t, k in segmentation.select("trace_index", "num_segments").iter_rows():
        r = float(reward[t])
        potentials = np.full(k + 1, r)  # Φ_0 … Φ_K
        sigma = np.diff(potentials)
        sigma[-1] += r - potentials[-1]
        rows.append(
            {
                "trace_index": t,
                "estimator": NULL,
                "family": families.NULL,
                "n_rollouts": None,
                "sigma": sigma.tolist(),
                "values": potentials[:k].tolist(),
                "forward_tokens": 0,
                "backward_tokens": 0,
                "seconds": 0.0,
                "cost_basis": "nothing run",
            }
        )
    return pl.DataFrame(rows, schema=ESTIMATE_SCHEMA)
