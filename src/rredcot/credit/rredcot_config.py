"""The `estimator.rredcot` config block (`RREDCoTConfig`) and the names its options take."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Real
from typing import Any

from rredcot.block_checks import check_choices, check_known_keys
from rredcot.credit.rredcot_names import RETURN_EQUIVALENCE, VALUE_VARIANT_NAMES
from rredcot.scoring.layout_names import LAYOUTS

# --------------------------------------------------------------------------- config


JOIN_RULES: tuple[str, ...] = ("line", "verbatim")
ANSWER_NOW: tuple[str, ...] = ("conditional", "joint")
STATE_KINDS: tuple[str, ...] = ("newline", "line_end", "mid_line")
"""A state's text ends with "\\n" | ends a line (the response goes on with "\\n", or ends) |
ends inside a line."""


@dataclass(frozen=True)
class RREDCoTConfig:
    """The `estimator.rredcot` config block (METHOD.md §3); every field has a default."""

    value: str = "ref_suffix_sum"
    """Continuation-value variant, one of `VALUE_VARIANT_NAMES` (`rredcot_values`)."""
    w_R: float = 1.0  # noqa: N815 (the symbol of METHOD.md)
    """Weight of the answer-now reward R̂ in the potential Φ."""
    w_v: float = 1.0
    """Weight of the continuation value v̂ in the potential Φ."""
    return_equivalence: str = "terminal_correction"
    """How σ is made to sum to the return: terminal_correction (Σσ = R − Φ_0) | rescale (Σσ = R)."""
    answer_now: str = "joint"
    """R̂_k: conditional π(y* ⊕ close | s_k ⊕ A) | joint π(A ⊕ y* ⊕ close [⊕ EOS] | s_k) (the
    workflow's pre-registered form, config.yaml)."""
    eps: float = 1e-8
    """`rescale` falls back to the terminal correction when |Σ_k h_k| ≤ eps."""
    end_with_eos: bool = True
    """Append EOS to the answer-now continuation and every C*_j (disjoint events, lower bound)."""
    join: str = "line"
    """How a continuation meets a state: line (start it on a new line) | verbatim (module doc)."""
    max_tokens_per_pass: int | None = None
    """Cap on tokens per forward pass of the scorer, rows × width with padding (memory); None:
    passes are cut by padding only."""
    max_resident_tokens: int | None = None
    """Most trace-cache slots resident at once, rows × (P_max + T_max) of an encoding (memory:
    a slot costs keys and values of every layer, 144 KiB at Qwen3-4B in bf16): the traces of a
    step are encoded and scored in chunks that fit (`rredcot.scoring.chunks`), same scores; a
    longer trace is a chunk alone. None: every trace at once."""
    suffixes: str | int = "all"
    """Reference suffixes scored per state: "all" (the J of them: exact) or a number m ≥ 1:
    m of the J drawn uniformly without replacement (the same for all states of a trace and all
    traces of a prompt in one call), v̂_k = (J/m)·Σ_{j∈S} π(C*_j | s_k), unbiased for
    ref_suffix_sum's v̂ at about m/J of its scoring cost; m ≥ J scores all. ref_suffix_sum only."""
    prune_nats: float | None = 30.0
    """Stop scoring a reference suffix once its running log-prob at a state is this many nats
    below the answer-now log R̂_k (`rredcot.scoring.packed.Pruning`): it counts as 0, and Φ_k
    loses less than J·e^−nats·R̂_k (30: J·10⁻¹³ of R̂_k). None scores every suffix in full.
    Applies to ref_suffix_sum and ref_suffix_max; the other variants read log π(C* | s_k)
    itself and always score it in full."""
    prune_first_chunk: int = 16
    """Pruning: suffix tokens scored before the first check; each later round doubles it."""
    prune_max_kept_tokens: int | None = None
    """Pruning: most suffix tokens whose keys and values are kept between rounds at once (the
    suffixes are taken in waves whose full lengths add up to at most this; memory on a GPU).
    None: all at once."""
    layout: str = "shared"
    """How suffix tokens meet their trace's cache (`rredcot.scoring.layout`): shared (each row
    reads the one cache in place) | packed (the earlier layout: batched rows, each with a copy of
    the cache slots; kept to compare) | split (CPU only: rows of many traces per pass, each token
    reading its trace's cache in place and its own block apart, no mask, the encoding's chunks
    likewise; `rredcot.scoring.split`). Same scores up to float rounding; shared costs less
    than packed at long traces."""

    def __post_init__(self) -> None:
        choices = {
            "value": VALUE_VARIANT_NAMES,
            "return_equivalence": RETURN_EQUIVALENCE,
            "answer_now": ANSWER_NOW,
            "join": JOIN_RULES,
            "layout": LAYOUTS,
        }
        check_choices("estimator.rredcot", self, choices)
        for name in ("w_R", "w_v", "eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
                raise ValueError(
                    f"estimator.rredcot.{name}: expected a finite number, got {value!r}"
                )
            object.__setattr__(self, name, float(value))
        if self.eps < 0:
            raise ValueError(f"estimator.rredcot.eps: expected a number ≥ 0, got {self.eps!r}")
        if not isinstance(self.end_with_eos, bool):
            raise ValueError(
                f"estimator.rredcot.end_with_eos: expected true or false, got {self.end_with_eos!r}"
            )
        m = self.suffixes
        if m != "all" and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise ValueError(
                f'estimator.rredcot.suffixes: expected "all" or an integer ≥ 1, got {m!r}'
            )
        if m != "all" and self.value != "ref_suffix_sum":
            raise ValueError(
                f"estimator.rredcot.suffixes: sampling {m} suffixes is unbiased for "
                f'ref_suffix_sum only; value {self.value!r} needs suffixes: "all"'
            )
        nats = self.prune_nats
        if nats is not None and (
            isinstance(nats, bool)
            or not isinstance(nats, Real)
            or not math.isfinite(nats)
            or nats <= 0
        ):
            raise ValueError(
                f"estimator.rredcot.prune_nats: expected a number > 0 or None, got {nats!r}"
            )
        chunk = self.prune_first_chunk
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(
                f"estimator.rredcot.prune_first_chunk: expected an integer ≥ 1, got {chunk!r}"
            )
        kept = self.prune_max_kept_tokens
        if kept is not None and (isinstance(kept, bool) or not isinstance(kept, int) or kept < 1):
            raise ValueError(
                f"estimator.rredcot.prune_max_kept_tokens: expected an integer ≥ 1 or None, "
                f"got {kept!r}"
            )
        for name in ("max_tokens_per_pass", "max_resident_tokens"):
            cap = getattr(self, name)
            if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
                raise ValueError(
                    f"estimator.rredcot.{name}: expected an integer ≥ 1 or None, got {cap!r}"
                )

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any]) -> RREDCoTConfig:
        """Build from a config mapping (e.g. `config["estimator"]["rredcot"]`); unknown keys
        are errors."""
        check_known_keys("estimator.rredcot", cls, mapping)
        return cls(**mapping)
