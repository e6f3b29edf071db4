"""Names that RREDCoT's options take, defined once and without torch.

`RREDCoTConfig` (built by the workflow's config check) checks against these lists, and the
torch modules that implement the names import them from here: `redistribution` the return
equivalences, `rredcot_values` the value variants (its `VALUE_VARIANTS` has exactly these keys).
"""

from __future__ import annotations

RETURN_EQUIVALENCE: tuple[str, ...] = ("terminal_correction", "rescale")
"""How σ is made to sum to the return (`rredcot.credit.redistribution`)."""

VALUE_VARIANT_NAMES: tuple[str, ...] = (
    "ref_suffix_sum",
    "ref_suffix_max",
    "ref_path_geomean",
    "ref_path_joint",
    "ref_answer_after_path",
    "ref_path_ratio",
)
"""The continuation-value variants v̂_k, in `rredcot_values.VALUE_VARIANTS`' order."""
