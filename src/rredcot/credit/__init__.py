"""Credit estimators (METHOD.md §3-§5): segment signals σ from which advantages are built.

`rredcot` (the RREDCoT estimator) and `redistribution` (Φ -> h -> σ) are pure functions on
tensors plus one model-facing entry point; `mc`, `attribution` and `advantages` hold the
baselines and the credit-to-advantage step. Import the submodules for the full API.
"""

from __future__ import annotations

from rredcot.credit.redistribution import (
    RETURN_EQUIVALENCE,
    potential,
    raw_credit,
    redistribute,
    redistribute_batch,
)
from rredcot.credit.rredcot import (
    VALUE_VARIANTS,
    ReferencePath,
    ReferenceScores,
    RREDCoTConfig,
    RREDCoTResult,
    Trace,
    rredcot_credit,
    rredcot_credit_batch,
    value_estimate,
)

__all__ = [
    "RETURN_EQUIVALENCE",
    "RREDCoTConfig",
    "RREDCoTResult",
    "ReferencePath",
    "ReferenceScores",
    "Trace",
    "VALUE_VARIANTS",
    "potential",
    "raw_credit",
    "redistribute",
    "redistribute_batch",
    "rredcot_credit",
    "rredcot_credit_batch",
    "value_estimate",
]
