"""The coalition value function of the attribution baselines (METHOD.md §5) and the trace it
reads: f(S) = log π(y* ⊕ close | x ⊕ (τ segments in S, in order) ⊕ A), every distinct coalition
scored once, in a few padded batched passes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from rredcot.scoring.logprobs import gather_logprobs, position_ids_from_mask

# Padded tokens (rows × width) per coalition-scoring forward pass; a row longer than this still
# gets a pass of its own.
DEFAULT_MAX_TOKENS_PER_PASS = 16384


@dataclass(frozen=True)
class AttributionTrace:
    """One trace as every attribution reads it: the prompt x, the response τ cut at boundaries
    0 = b_0 < … < b_K = len(τ) (segment k, 0-based k − 1, is a player), and the forced answer
    `answer_ids` = A ⊕ y* ⊕ close whose first `trigger_len` tokens (A) are context, not scored."""

    prompt_ids: Sequence[int]
    response_ids: Sequence[int]
    boundaries: Sequence[int]
    answer_ids: Sequence[int]
    trigger_len: int

    def __post_init__(self) -> None:
        if len(self.prompt_ids) == 0:
            raise ValueError("prompt_ids: must hold at least one token (the context of f(∅))")
        b, t = list(self.boundaries), len(self.response_ids)
        if len(b) < 2 or b[0] != 0 or b[-1] != t:
            raise ValueError(
                f"boundaries: expected [0, …, len(response_ids) = {t}] with at least one "
                f"segment, got {b}"
            )
        if any(right <= left for left, right in itertools.pairwise(b)):
            raise ValueError(f"boundaries: must be strictly increasing, got {b}")
        if not 0 <= self.trigger_len < len(self.answer_ids):
            raise ValueError(
                f"trigger_len: must be in [0, len(answer_ids) = {len(self.answer_ids)}) so that "
                f"at least one answer token is scored, got {self.trigger_len}"
            )

    @property
    def num_segments(self) -> int:
        """K."""
        return len(self.boundaries) - 1

    def segment_slices(self, offset: int) -> list[slice]:
        """Positions of each segment in a sequence where τ starts at `offset`."""
        return [slice(offset + lo, offset + hi) for lo, hi in itertools.pairwise(self.boundaries)]


@dataclass(frozen=True)
class AttributionResult:
    """Segment attributions and what they cost.

    values: (K,) float64, entry k − 1 for segment k. forward_tokens: token positions fed through
    the model in forward passes (padding included). backward_tokens: positions back-propagated
    through (gradient × input only). seconds: wall-clock time of the call.
    """

    values: np.ndarray
    forward_tokens: int
    backward_tokens: int = 0
    seconds: float = 0.0


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _score_answer(
    model: torch.nn.Module,
    sequences: Sequence[Sequence[int]],
    targets: Sequence[int],
    max_tokens_per_pass: int,
) -> tuple[np.ndarray, int]:
    """Σ_t log π(targets_t | …) for sequences that all end with `targets`; (values, tokens fed).

    Rows are sorted by length and left-padded, so every row's targets sit in the last columns
    and only those logits are projected onto the vocabulary. The last token of each row
    predicts nothing and is not fed.
    """
    device = model_device(model)
    n_target = len(targets)
    pad_id = getattr(model.config, "pad_token_id", None) or 0
    target_row = torch.tensor(targets, dtype=torch.long, device=device)
    order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
    values = np.empty(len(sequences), dtype=np.float64)
    forward_tokens = 0
    start = 0
    while start < len(order):
        width = len(sequences[order[start]]) - 1
        chunk = order[start : start + max(1, max_tokens_per_pass // width)]
        start += len(chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long, device=device)
        mask = torch.zeros((len(chunk), width), dtype=torch.long, device=device)
        for row, index in enumerate(chunk):
            fed = torch.tensor(sequences[index][:-1], dtype=torch.long, device=device)
            ids[row, width - len(fed) :] = fed
            mask[row, width - len(fed) :] = 1
        with torch.inference_mode():
            logits = model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=position_ids_from_mask(mask),
                logits_to_keep=n_target,
                use_cache=False,
            ).logits  # (B, n_target, V)
            logprobs, _ = gather_logprobs(
                logits.reshape(-1, logits.shape[-1]), target_row.repeat(len(chunk))
            )
            values[chunk] = logprobs.view(len(chunk), n_target).double().sum(-1).cpu().numpy()
        forward_tokens += len(chunk) * width
    return values, forward_tokens


class CoalitionValue:
    """f(S) = log π(y* ⊕ close | x ⊕ τ_S ⊕ A) for coalitions S ⊆ {0, …, K−1}, cached.

    Calling it with many coalitions scores the ones not seen before in a few batched passes;
    `forward_tokens` adds up what all calls fed through the model.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        trace: AttributionTrace,
        *,
        max_tokens_per_pass: int = DEFAULT_MAX_TOKENS_PER_PASS,
    ) -> None:
        if max_tokens_per_pass < 1:
            raise ValueError(
                f"max_tokens_per_pass: expected a positive integer, got {max_tokens_per_pass!r}"
            )
        self.model = model
        self.num_segments = trace.num_segments
        self.prompt_ids = list(trace.prompt_ids)
        self.segments = [list(trace.response_ids[s]) for s in trace.segment_slices(0)]
        self.answer_ids = list(trace.answer_ids)
        self.trigger_len = trace.trigger_len
        self.max_tokens_per_pass = max_tokens_per_pass
        self.forward_tokens = 0
        self._cache: dict[frozenset[int], float] = {}

    def sequence(self, coalition: frozenset[int]) -> list[int]:
        """x ⊕ (segments in S, in trace order) ⊕ A ⊕ y* ⊕ close."""
        kept = [tok for k in sorted(coalition) for tok in self.segments[k]]
        return [*self.prompt_ids, *kept, *self.answer_ids]

    def _check(self, coalition: frozenset[int]) -> frozenset[int]:
        coalition = frozenset(coalition)
        bad = sorted(k for k in coalition if not 0 <= k < self.num_segments)
        if bad:
            raise ValueError(
                f"coalitions: segment indices {bad} out of range; allowed 0 … "
                f"{self.num_segments - 1} (0-based, K = {self.num_segments})"
            )
        return coalition

    def __call__(self, coalitions: Sequence[frozenset[int]]) -> np.ndarray:
        """f for each coalition, in order: a (len(coalitions),) float64 array."""
        checked = [self._check(c) for c in coalitions]
        missing = list(dict.fromkeys(c for c in checked if c not in self._cache))
        if missing:
            values, tokens = _score_answer(
                self.model,
                [self.sequence(c) for c in missing],
                self.answer_ids[self.trigger_len :],
                self.max_tokens_per_pass,
            )
            self._cache.update(zip(missing, values.tolist(), strict=True))
            self.forward_tokens += tokens
        return np.array([self._cache[c] for c in checked], dtype=np.float64)


def coalition_logprob(
    model: torch.nn.Module,
    trace: AttributionTrace,
    coalitions: Sequence[frozenset[int]],
    *,
    max_tokens_per_pass: int = DEFAULT_MAX_TOKENS_PER_PASS,
) -> np.ndarray:
    """f(S) for each coalition (0-based segment indices): a (len(coalitions),) float64 array.

    Batched: distinct coalitions are padded into passes of at most `max_tokens_per_pass` tokens.
    Use `CoalitionValue` directly to keep the cache and the token count.
    """
    return CoalitionValue(model, trace, max_tokens_per_pass=max_tokens_per_pass)(coalitions)
