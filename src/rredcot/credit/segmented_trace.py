"""The trace every token-level credit estimator reads: x, τ and the segment boundaries.

`SegmentedTrace` is the one type for (prompt, response, boundaries); an estimator that needs
more extends it with what it adds (`Trace`: RREDCoT's reference and return R).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rredcot.credit.reference_paths import ReferencePath


@dataclass(frozen=True)
class SegmentedTrace:
    """A prompt x (token ids), a response τ and boundaries 0 = b_0 < … < b_K = T = len(τ):
    segment k is τ[b_{k−1}:b_k] and state s_k is x ⊕ τ[:b_k]. K ≥ 1, except for an empty
    response ([0], K = 0: a completion the loss masks out entirely, which no estimator scores)."""

    prompt_ids: Sequence[int]
    response_ids: Sequence[int]
    boundaries: Sequence[int]

    def __post_init__(self) -> None:
        if len(self.prompt_ids) == 0:
            raise ValueError("prompt_ids: must hold at least one token")
        b, t = list(self.boundaries), len(self.response_ids)
        increasing = all(right > left for left, right in zip(b, b[1:], strict=False))
        if not b or b[0] != 0 or b[-1] != t or not increasing or (len(b) < 2 and t > 0):
            raise ValueError(_bad_boundaries(b, t))

    @property
    def num_segments(self) -> int:
        """K."""
        return len(self.boundaries) - 1


def _bad_boundaries(b: list[int], t: int) -> str:
    return f"boundaries: need 0 = b_0 < … < b_K = T = {t} with K ≥ 1, got {b}"


@dataclass(frozen=True)
class Trace(SegmentedTrace):
    """A segmented trace that RREDCoT scores (K ≥ 1): with the reference (U*, y*) and return
    R = r(y)."""

    reference: ReferencePath
    reward: float

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_segments < 1:
            raise ValueError(_bad_boundaries(list(self.boundaries), len(self.response_ids)))
        if not isinstance(self.reference, ReferencePath):
            raise ValueError(f"reference: expected a ReferencePath, got {type(self.reference)}")
        if not math.isfinite(float(self.reward)):
            raise ValueError(f"reward: expected a finite return R, got {self.reward!r}")
