"""Teacher-forced scoring: per-token log-probs and entropies, packed multi-state scores.

The names below load on first use (`rredcot.lazy_exports`): the workflow imports torch-free
submodules (`layout_names`, `chunk_plan`) while it builds the DAG, and importing them must not
import torch and transformers through this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rredcot.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from rredcot.scoring.logprobs import (
        gather_logprobs,
        position_ids_from_mask,
        response_entropies,
        sequence_logprob_naive,
        token_logprobs,
    )
    from rredcot.scoring.packed import TraceSpec, score_states, score_states_batch

_HOME = {
    "gather_logprobs": "logprobs",
    "position_ids_from_mask": "logprobs",
    "response_entropies": "logprobs",
    "sequence_logprob_naive": "logprobs",
    "token_logprobs": "logprobs",
    "TraceSpec": "packed",
    "score_states": "packed",
    "score_states_batch": "packed",
}
"""Each exported name and the submodule it is read from."""

__all__ = [
    "TraceSpec",
    "gather_logprobs",
    "position_ids_from_mask",
    "response_entropies",
    "score_states",
    "score_states_batch",
    "sequence_logprob_naive",
    "token_logprobs",
]

__getattr__, __dir__ = lazy_exports(globals(), _HOME)
