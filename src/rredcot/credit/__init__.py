"""Credit estimators (METHOD.md §3-§5): segment signals σ from which advantages are built.

`rredcot` (the RREDCoT estimator) and `redistribution` (Φ -> h -> σ) are pure functions on
tensors plus one model-facing entry point; `mc`, `attribution` and `advantages` hold the
baselines and the credit-to-advantage step. What they read: `segmentation` (METHOD.md §2, with
`segment_counts`) cuts a response into the segments they credit, `references` gives the
reference solutions U* RREDCoT scores. Import the submodules for the full API.

The names below load on first use (`rredcot.lazy_exports`): the workflow's config check builds
the torch-free config blocks (`credit_config`, `rredcot_config`), and importing them must not
import torch through this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rredcot.lazy_exports import lazy_exports

if TYPE_CHECKING:
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

_HOME = {
    "RETURN_EQUIVALENCE": "redistribution",
    "potential": "redistribution",
    "raw_credit": "redistribution",
    "redistribute": "redistribution",
    "redistribute_batch": "redistribution",
    "VALUE_VARIANTS": "rredcot",
    "ReferencePath": "rredcot",
    "ReferenceScores": "rredcot",
    "RREDCoTConfig": "rredcot",
    "RREDCoTResult": "rredcot",
    "Trace": "rredcot",
    "rredcot_credit": "rredcot",
    "rredcot_credit_batch": "rredcot",
    "value_estimate": "rredcot",
}
"""Each exported name and the submodule it is read from."""

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

__getattr__, __dir__ = lazy_exports(globals(), _HOME)
