"""Teacher-forced scoring: per-token log-probs and entropies, packed multi-state scores."""

from rredcot.scoring.logprobs import (
    gather_logprobs,
    position_ids_from_mask,
    response_entropies,
    sequence_logprob_naive,
    token_logprobs,
)
from rredcot.scoring.packed import TraceSpec, score_states, score_states_batch

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
