"""The RREDCoT estimator (METHOD.md §3): answer-now reward R̂, reference-path value v̂, and σ.

Everything is a teacher-forced score under the policy π of text appended to a state
s_k = x ⊕ τ_{<b_k} (k = 0 … K); nothing is generated:

    log R̂_k = log π(y* ⊕ close | s_k ⊕ A)                 answer now            (K+1,)
              (`answer_now: joint`: log π(A ⊕ y* ⊕ close ⊕ EOS | s_k))
    v̂_k     = value variant over the reference suffixes     continuation value    (K+1,)
              C*_j = U*_{≥j} ⊕ A ⊕ y* ⊕ close, j = 0 … J−1 (C*_0 = C*, the whole reference)
    Φ_k = w_R·R̂_k + w_v·v̂_k,  h_k = Φ_k − Φ_{k−1},  σ = redistribute(Φ, R)   (redistribution.py)

The module has two layers:

- pure functions on log-prob tables (`ReferenceScores` -> `value_estimate`, `answer_reward`),
  selected by name from `VALUE_VARIANTS`;
- the model-facing `rredcot_credit` / `rredcot_credit_batch`, which build the continuations
  from a `ReferencePath` (`build_continuations`) and score all of them at all states with
  `rredcot.scoring.packed` (each trace encoded once, all states of all traces in a few batched
  passes; state 0 once per prompt).

Reconstructed choices (the paper's text was not available), each a config option:

- `answer_now` (default "conditional"): R̂_k is the probability of the reference answer if the
  policy answers now, π(y* ⊕ close | s_k ⊕ A) (the paper's wording: the immediate reward of the
  answer action), scored as log π(A ⊕ y* ⊕ close | s_k) − log π(A | s_k). "joint" scores
  π(A ⊕ y* ⊕ close [⊕ EOS] | s_k), which includes the probability of choosing to answer now
  (≈ 0 mid-trace); with it Φ_k = Σ_{j=0..J} π(C*_j | s_k) is an exact lower bound of V(s_k).
  The joint column is scored either way: it anchors the suffix pruning.

- `end_with_eos` (default True): the answer-now continuation and every C*_j end with the EOS
  token, so no continuation is a prefix of another; the events "the response is exactly C*_j"
  are then disjoint and each is a correct response, so Φ_k = Σ_{j=0..J} π(C*_j | s_k) (with
  C*_J = the bare answer = R̂_k) is a lower bound of the true value V(s_k).
- `join` (default "line"): how a continuation meets a state. The synthetic prompt ends with
  "\\n" and A = "\\nAnswer: ", so s_0 ⊕ A has a blank line the policy never saw; and a
  keyword segmentation ends the states k ≥ 1 *before* the newline, so a reference suffix that
  starts with a step line would be glued onto the previous line. "line" makes every continuation
  start on a new line: after a state whose text ends with "\\n" one leading "\\n" of the
  continuation is dropped; after any other state a continuation that does not start with "\\n"
  gets one, unless the state ends *inside* a line (the response does not continue with "\\n"
  there: a segmentation that cuts mid-line): a mid-line state gets the continuation without its
  leading "\\n", so no newline is forced into the middle of a step. "verbatim" appends the text
  as built. Under "line" the continuations depend on the kind of state (`STATE_KINDS`); each
  state is scored with its kind's set.
- `suffixes` (default "all"): score every C*_j, or importance-sample m of them per state
  (uniform q, v̂ scaled by J/m; unbiased for `ref_suffix_sum`, cheaper, noisier).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from numbers import Real
from typing import Any

import torch

from rredcot.credit.redistribution import (
    RETURN_EQUIVALENCE,
    potential,
    raw_credit,
    redistribute,
)
from rredcot.scoring.layout import LAYOUTS

# --------------------------------------------------------------------------- log-prob tables


@dataclass(frozen=True)
class ReferenceScores:
    """Scored log-probs (float64, natural log) of the reference continuations at states 0 … K.

    answer_now:  (K+1,)   log R̂_k: log π(y* ⊕ close | s_k ⊕ A) (conditional) or
                 log π(A ⊕ y* ⊕ close [⊕ EOS] | s_k) (joint), as the config's `answer_now` says
    suffixes:    (K+1, J) log π(C*_j | s_k), j = 0 … J−1; column 0 is the whole C*; or
                 (K+1, m) for m suffixes sampled out of J (see suffix_weight)
    path_prefix: (K+1,)   log π(U* ⊕ A | s_k); only `ref_answer_after_path` needs it
    path_num_tokens: |C*| in tokens (EOS included when appended), one int or one per state
        (K+1,) when the join rule makes C* state-dependent; only `ref_path_geomean` needs it
    suffix_weight: importance weight of each scored suffix in `ref_suffix_sum`, 1/(m·q(j)) =
        J/m for m suffixes drawn uniformly out of J; 1 when all J are scored
    """

    answer_now: torch.Tensor
    suffixes: torch.Tensor
    path_prefix: torch.Tensor | None = None
    path_num_tokens: int | torch.Tensor | None = None
    suffix_weight: float = 1.0

    def __post_init__(self) -> None:
        w = self.suffix_weight
        if isinstance(w, bool) or not isinstance(w, Real) or not math.isfinite(w) or w < 1:
            raise ValueError(f"suffix_weight: expected a finite number ≥ 1 (J/m), got {w!r}")
        object.__setattr__(self, "suffix_weight", float(w))
        answer_now = torch.as_tensor(self.answer_now, dtype=torch.float64)
        suffixes = torch.as_tensor(self.suffixes, dtype=torch.float64)
        if answer_now.ndim != 1 or answer_now.numel() < 1:
            raise ValueError(
                f"answer_now: expected shape (K+1,) with K+1 ≥ 1, got {tuple(answer_now.shape)}"
            )
        n = answer_now.numel()
        if suffixes.ndim != 2 or suffixes.shape[0] != n or suffixes.shape[1] < 1:
            raise ValueError(
                f"suffixes: expected shape (K+1, J) = ({n}, J ≥ 1), got {tuple(suffixes.shape)}"
            )
        _check_logprobs("answer_now", answer_now)
        _check_logprobs("suffixes", suffixes)
        object.__setattr__(self, "answer_now", answer_now)
        object.__setattr__(self, "suffixes", suffixes)
        if self.path_prefix is not None:
            prefix = torch.as_tensor(self.path_prefix, dtype=torch.float64)
            if prefix.shape != (n,):
                raise ValueError(f"path_prefix: expected shape ({n},), got {tuple(prefix.shape)}")
            _check_logprobs("path_prefix", prefix)
            object.__setattr__(self, "path_prefix", prefix)
        m = self.path_num_tokens
        if m is not None:
            if isinstance(m, bool):
                m = None  # refused below
            elif isinstance(m, int):
                m = torch.full((n,), m, dtype=torch.float64)
            else:
                m = torch.as_tensor(m, dtype=torch.float64)
            if m is None or m.shape != (n,) or (m < 1).any() or (m != m.round()).any():
                raise ValueError(
                    f"path_num_tokens: expected an integer ≥ 1 or ({n},) integers ≥ 1, got "
                    f"{self.path_num_tokens!r}"
                )
            object.__setattr__(self, "path_num_tokens", m)

    @property
    def num_states(self) -> int:
        """K + 1."""
        return self.answer_now.numel()

    @property
    def num_suffixes(self) -> int:
        """J."""
        return self.suffixes.shape[1]


def _check_logprobs(name: str, t: torch.Tensor) -> None:
    """Log-probabilities are ≤ 0 (a little float slack) and never NaN or +inf; −inf is allowed."""
    if torch.isnan(t).any() or (t > 1e-6).any():
        raise ValueError(f"{name}: log-probabilities must be ≤ 0 and not NaN, got {t.tolist()}")


def answer_reward(scores: ReferenceScores) -> torch.Tensor:
    """R̂_k = exp(answer_now): (K+1,) (conditional or joint, whichever was scored)."""
    return scores.answer_now.exp()


# --------------------------------------------------------------------------- value variants


def _ref_suffix_sum(scores: ReferenceScores) -> torch.Tensor:
    """v̂_k = Σ_j π(C*_j | s_k): the IS estimate with q uniform over the J suffixes (default).

    With m of the J suffixes sampled (suffix_weight = J/m): v̂_k = (J/m)·Σ_{j∈S} π(C*_j | s_k),
    unbiased for the sum over all J.
    """
    return (torch.logsumexp(scores.suffixes, dim=1) + math.log(scores.suffix_weight)).exp()


def _ref_suffix_max(scores: ReferenceScores) -> torch.Tensor:
    """v̂_k = max_j π(C*_j | s_k): the best-aligned suffix."""
    return scores.suffixes.max(dim=1).values.exp()


def _ref_path_geomean(scores: ReferenceScores) -> torch.Tensor:
    """v̂_k = exp(log π(C* | s_k) / |C*|): per-token (length-normalised) likelihood of C*."""
    if scores.path_num_tokens is None:
        raise ValueError("path_num_tokens: ref_path_geomean needs the token count |C*|")
    return (scores.suffixes[:, 0] / scores.path_num_tokens).exp()


def _ref_path_joint(scores: ReferenceScores) -> torch.Tensor:
    """v̂_k = π(C* | s_k): the IS estimate with q a point mass on C* (underflows when long)."""
    return scores.suffixes[:, 0].exp()


def _ref_answer_after_path(scores: ReferenceScores) -> torch.Tensor:
    """v̂_k = π(y* ⊕ close | s_k ⊕ U* ⊕ A) = π(C* | s_k) / π(U* ⊕ A | s_k).

    With EOS appended to C*, the answer scored here ends with EOS as well.
    """
    if scores.path_prefix is None:
        raise ValueError("path_prefix: ref_answer_after_path needs log π(U* ⊕ A | s_k)")
    return (scores.suffixes[:, 0] - scores.path_prefix).exp()


def _ref_path_ratio(scores: ReferenceScores) -> torch.Tensor:
    """v̂_k = log π(C* | s_k) − log π(C* | s_0): information gain about C* (nats), v̂_0 = 0.

    A log-ratio, not a probability: it enters Φ_k = w_R·R̂_k + w_v·v̂_k as is, so h_k gets
    w_v·(log π(C* | s_k) − log π(C* | s_{k−1})) and w_v sets the exchange rate between nats and
    reward. It is −inf where π(C* | s_k) underflows to 0, which `potential` refuses.
    """
    logp = scores.suffixes[:, 0]
    return logp - logp[0]


PRUNABLE: tuple[str, ...] = ("ref_suffix_sum", "ref_suffix_max")
"""Value variants that only add up or compare suffix probabilities, so a suffix far below R̂_k
may count as 0 (`RREDCoTConfig.prune_nats`)."""

VALUE_VARIANTS: dict[str, Callable[[ReferenceScores], torch.Tensor]] = {
    "ref_suffix_sum": _ref_suffix_sum,
    "ref_suffix_max": _ref_suffix_max,
    "ref_path_geomean": _ref_path_geomean,
    "ref_path_joint": _ref_path_joint,
    "ref_answer_after_path": _ref_answer_after_path,
    "ref_path_ratio": _ref_path_ratio,
}


def value_estimate(variant: str, scores: ReferenceScores) -> torch.Tensor:
    """v̂ (K+1,) for the value variant named `variant` (see `VALUE_VARIANTS` and METHOD.md §3)."""
    if variant not in VALUE_VARIANTS:
        raise ValueError(
            f"value: {variant!r} is not a value variant; choose one of {list(VALUE_VARIANTS)}"
        )
    return VALUE_VARIANTS[variant](scores)


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
    """Continuation-value variant, one of `VALUE_VARIANTS`."""
    w_R: float = 1.0  # noqa: N815 (the symbol of METHOD.md)
    """Weight of the answer-now reward R̂ in the potential Φ."""
    w_v: float = 1.0
    """Weight of the continuation value v̂ in the potential Φ."""
    return_equivalence: str = "terminal_correction"
    """How σ is made to sum to the return: terminal_correction (Σσ = R − Φ_0) | rescale (Σσ = R)."""
    answer_now: str = "conditional"
    """R̂_k: conditional π(y* ⊕ close | s_k ⊕ A) | joint π(A ⊕ y* ⊕ close [⊕ EOS] | s_k)."""
    eps: float = 1e-8
    """`rescale` falls back to the terminal correction when |Σ_k h_k| ≤ eps."""
    end_with_eos: bool = True
    """Append EOS to the answer-now continuation and every C*_j (disjoint events, lower bound)."""
    join: str = "line"
    """How a continuation meets a state: line (start it on a new line) | verbatim (module doc)."""
    max_tokens_per_pass: int | None = None
    """Cap on tokens per forward pass of the scorer, rows × width with padding (memory); None:
    passes are cut by padding only."""
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
    the cache slots; kept to compare). Same scores; shared costs less at long traces."""

    def __post_init__(self) -> None:
        if self.value not in VALUE_VARIANTS:
            raise ValueError(
                f"estimator.rredcot.value: {self.value!r} is not allowed; choose one of "
                f"{list(VALUE_VARIANTS)}"
            )
        if self.return_equivalence not in RETURN_EQUIVALENCE:
            raise ValueError(
                f"estimator.rredcot.return_equivalence: {self.return_equivalence!r} is not "
                f"allowed; choose one of {list(RETURN_EQUIVALENCE)}"
            )
        if self.answer_now not in ANSWER_NOW:
            raise ValueError(
                f"estimator.rredcot.answer_now: {self.answer_now!r} is not allowed; choose one "
                f"of {list(ANSWER_NOW)}"
            )
        if self.join not in JOIN_RULES:
            raise ValueError(
                f"estimator.rredcot.join: {self.join!r} is not allowed; choose one of "
                f"{list(JOIN_RULES)}"
            )
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
        if self.layout not in LAYOUTS:
            raise ValueError(
                f"estimator.rredcot.layout: {self.layout!r} is not allowed; choose one of "
                f"{list(LAYOUTS)}"
            )
        cap = self.max_tokens_per_pass
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ValueError(
                f"estimator.rredcot.max_tokens_per_pass: expected an integer ≥ 1 or None, "
                f"got {cap!r}"
            )

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any]) -> RREDCoTConfig:
        """Build from a config mapping (e.g. `config["estimator"]["rredcot"]`); unknown keys
        are errors."""
        allowed = [f.name for f in fields(cls)]
        unknown = sorted(set(mapping) - set(allowed))
        if unknown:
            raise ValueError(f"unknown estimator.rredcot key(s) {unknown}; allowed: {allowed}")
        return cls(**mapping)


# --------------------------------------------------------------------------- reference path

_AFTER_NEWLINE = re.compile(r"(?<=\n)")


def split_lines(text: str) -> list[str]:
    """One segment per line, each keeping its own trailing newline(s).

    Blank lines join the line before them (a leading run of blank lines joins the first line),
    so every segment holds some non-space text; "".join(segments) == text.
    """
    segments: list[str] = []
    pending = ""  # leading blank lines waiting for the first line with text
    for piece in _AFTER_NEWLINE.split(text):
        if not piece:
            continue
        if piece.strip():
            segments.append(pending + piece)
            pending = ""
        elif segments:
            segments[-1] += piece
        else:
            pending += piece
    if pending:  # the whole text is blank space
        segments.append(pending)
    return segments


@dataclass(frozen=True)
class ReferencePath:
    """The reference solution (U*, y*) that the value estimate follows.

    segments: U* split into J ≥ 1 segments U*_0 … U*_{J−1} (any segmentation; their
    concatenation is U*); answer: y*, the gold answer text.
    """

    segments: tuple[str, ...]
    answer: str

    def __post_init__(self) -> None:
        segments = self.segments
        if isinstance(segments, str) or not isinstance(segments, Sequence):
            raise ValueError(f"segments: expected a list of strings, got {segments!r}")
        segments = tuple(segments)
        if not segments:
            raise ValueError("segments: U* needs at least one segment (J ≥ 1)")
        bad = [j for j, s in enumerate(segments) if not isinstance(s, str) or not s]
        if bad:
            raise ValueError(f"segments: entries {bad} are empty or not strings")
        if not isinstance(self.answer, str) or not self.answer.strip():
            raise ValueError(f"answer: expected a non-empty string y*, got {self.answer!r}")
        object.__setattr__(self, "segments", segments)

    @classmethod
    def from_text(
        cls, reasoning: str, answer: str, segments: Sequence[str] | None = None
    ) -> ReferencePath:
        """U* = `reasoning`, split by `segments` (must concatenate to it) or one line each."""
        if not isinstance(reasoning, str) or not reasoning:
            raise ValueError(f"reasoning: expected a non-empty string U*, got {reasoning!r}")
        if segments is None:
            return cls(tuple(split_lines(reasoning)), answer)
        if "".join(segments) != reasoning:
            raise ValueError("segments: their concatenation must equal the reasoning text U*")
        return cls(tuple(segments), answer)

    @classmethod
    def from_row(
        cls, task: Any, row: Mapping[str, Any], segments: Sequence[str] | None = None
    ) -> ReferencePath:
        """From a normalized data row: U* from `task.reference_reasoning(row)`, y* = row answer."""
        if not hasattr(task, "reference_reasoning"):
            raise ValueError(
                f"task {getattr(task, 'name', task)!r}: has no reference_reasoning(row); build "
                f"the ReferencePath with from_text(reasoning, answer)"
            )
        return cls.from_text(task.reference_reasoning(row), str(row["answer"]), segments)

    @property
    def reasoning(self) -> str:
        """U*."""
        return "".join(self.segments)

    @property
    def num_segments(self) -> int:
        """J."""
        return len(self.segments)


def _check_kind(kind: str) -> None:
    if kind not in STATE_KINDS:
        raise ValueError(f"state kind: {kind!r} is not one of {list(STATE_KINDS)}")


def join_at_state(continuation: str, kind: str, rule: str = "line") -> str:
    """The text appended to a state of `kind` (`STATE_KINDS`) under the join rule.

    line: after a state ending in "\\n", drop one leading "\\n" (no blank line); after a state
    that ends a line, start the continuation with "\\n" if it does not already; after a
    mid-line state, drop one leading "\\n" (no newline forced into a step). verbatim: unchanged.
    """
    if rule not in JOIN_RULES:
        raise ValueError(f"join: {rule!r} is not allowed; choose one of {list(JOIN_RULES)}")
    _check_kind(kind)
    if rule == "verbatim":
        return continuation
    if kind in ("newline", "mid_line"):
        return continuation.removeprefix("\n")
    return continuation if continuation.startswith("\n") else "\n" + continuation


@dataclass(frozen=True)
class Continuations:
    """Token ids of the continuations scored at one kind of state.

    answer_now: A ⊕ y* ⊕ close [⊕ EOS] (the joint answer-now); suffixes[j]: C*_j [⊕ EOS] for
    j = 0 … J−1 (suffixes[0] is the whole C*); path_prefix: U* ⊕ A (no EOS), or None when not
    built; trigger and answer_body: A and A ⊕ y* ⊕ close (no EOS), whose difference is the
    conditional log π(y* ⊕ close | s ⊕ A), or None when not built. texts: the same
    continuations as text (before EOS), in the order of `all_ids`.
    """

    answer_now: list[int]
    suffixes: list[list[int]]
    path_prefix: list[int] | None
    texts: list[str]
    trigger: list[int] | None = None
    answer_body: list[int] | None = None

    def all_ids(self) -> list[list[int]]:
        """[answer_now, C*_0 … C*_{J−1}, (U* ⊕ A), (A, A ⊕ y* ⊕ close)]: the scored columns."""
        ids = [self.answer_now, *self.suffixes]
        if self.path_prefix is not None:
            ids.append(self.path_prefix)
        if self.trigger is not None and self.answer_body is not None:
            ids.extend([self.trigger, self.answer_body])
        return ids


def build_continuations(
    task: Any,
    reference: ReferencePath,
    tokenizer: Any,
    *,
    end_with_eos: bool = True,
    state_kind: str = "line_end",
    join: str = "line",
    with_path_prefix: bool = False,
    with_conditional: bool = False,
) -> Continuations:
    """Token ids of answer-now, the J suffixes C*_j = U*_{≥j} ⊕ A ⊕ y* ⊕ close and U* ⊕ A.

    A and close are `task.answer_trigger` and `task.answer_close`. Each continuation is joined
    to the state by `join` (`join_at_state`) and tokenized as one whole string without special
    tokens (a BPE tokenizer may merge across the state/continuation junction: that is the
    caller's concern; the byte tokenizer is exact); EOS is appended when `end_with_eos`.
    `with_path_prefix` also builds U* ⊕ A, checked to be a token prefix of C*_0 so that
    log π(C*_0) − log π(U* ⊕ A) scores exactly y* ⊕ close [⊕ EOS] after U* ⊕ A.
    `with_conditional` also builds A and A ⊕ y* ⊕ close (no EOS), A checked to be a token
    prefix, for the conditional answer-now log π(y* ⊕ close | s ⊕ A).
    """
    trigger, close = task.answer_trigger, task.answer_close
    if end_with_eos and tokenizer.eos_token_id is None:
        raise ValueError("tokenizer: has no eos token, but end_with_eos is set")
    answer = trigger + reference.answer + close
    segs = reference.segments
    suffix_texts = ["".join(segs[j:]) + answer for j in range(len(segs))]
    texts = [answer, *suffix_texts]
    if with_path_prefix:
        texts.append(reference.reasoning + trigger)
    if with_conditional:
        texts.extend([trigger, answer])
    texts = [join_at_state(t, state_kind, join) for t in texts]

    def encode(text: str, eos: bool) -> list[int]:
        ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        return ids + [tokenizer.eos_token_id] if eos else ids

    ids = [encode(t, end_with_eos) for t in texts[: 1 + len(segs)]]  # answer_now, C*_j
    n = 1 + len(segs)
    path_prefix = trigger_ids = body_ids = None
    if with_path_prefix:
        path_prefix = encode(texts[n], False)
        whole = ids[1]
        if len(path_prefix) >= len(whole) or whole[: len(path_prefix)] != path_prefix:
            raise ValueError(
                "tokenizer: U* ⊕ A does not tokenize to a prefix of C*; ref_answer_after_path "
                "cannot split log π(C*) into path and answer with this tokenizer"
            )
    if with_conditional:
        trigger_ids, body_ids = encode(texts[-2], False), encode(texts[-1], False)
        if len(trigger_ids) >= len(body_ids) or body_ids[: len(trigger_ids)] != trigger_ids:
            raise ValueError(
                "tokenizer: A does not tokenize to a prefix of A ⊕ y* ⊕ close; the conditional "
                "answer-now cannot be split off with this tokenizer (use answer_now: joint)"
            )
    return Continuations(ids[0], ids[1:n], path_prefix, texts, trigger_ids, body_ids)


# --------------------------------------------------------------------------- model-facing


@dataclass(frozen=True)
class RREDCoTResult:
    """Per-state and per-segment quantities of one trace (float64 tensors).

    States k = 0 … K: answer_logprob (log R̂), r_hat, v_hat, phi, suffix_logprobs (K+1, m):
    log π(C*_j | s_k) for the scored suffixes j ∈ suffix_columns (all J unless the config's
    `suffixes` is a number; −inf where pruning dropped the suffix, `RREDCoTConfig.prune_nats`).
    Segments k = 1 … K (stored at k−1): h (raw credit), sigma
    (redistributed reward). forward_tokens: real tokens the model ran for this trace (shared
    work counted once, see `rredcot_credit_batch`).
    """

    answer_logprob: torch.Tensor  # (K+1,)
    suffix_logprobs: torch.Tensor  # (K+1, J)
    path_prefix_logprobs: torch.Tensor | None  # (K+1,) for ref_answer_after_path
    r_hat: torch.Tensor  # (K+1,)
    v_hat: torch.Tensor  # (K+1,)
    phi: torch.Tensor  # (K+1,)
    h: torch.Tensor  # (K,)
    sigma: torch.Tensor  # (K,)
    forward_tokens: int
    suffix_columns: tuple[int, ...] = ()  # the j of each suffix_logprobs column


@dataclass(frozen=True)
class Trace:
    """One scored trace: prompt x, response τ, boundaries 0 = b_0 < … < b_K = T, reference
    (U*, y*) and return R = r(y)."""

    prompt_ids: Sequence[int]
    response_ids: Sequence[int]
    boundaries: Sequence[int]
    reference: ReferencePath
    reward: float

    def __post_init__(self) -> None:
        if len(self.prompt_ids) == 0:
            raise ValueError("prompt_ids: must hold at least one token")
        b, t = list(self.boundaries), len(self.response_ids)
        increasing = all(right > left for left, right in zip(b, b[1:], strict=False))
        if len(b) < 2 or b[0] != 0 or b[-1] != t or not increasing:
            raise ValueError(f"boundaries: need 0 = b_0 < … < b_K = T = {t} with K ≥ 1, got {b}")
        if not isinstance(self.reference, ReferencePath):
            raise ValueError(f"reference: expected a ReferencePath, got {type(self.reference)}")
        if not math.isfinite(float(self.reward)):
            raise ValueError(f"reward: expected a finite return R, got {self.reward!r}")


def credit_from_scores(
    scores: ReferenceScores, reward: float, config: RREDCoTConfig
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(r_hat, v_hat, phi, h, sigma) from scored log-probs: the whole §3 chain, pure."""
    if scores.num_states < 2:
        raise ValueError(f"scores: need K ≥ 1 segments (K+1 ≥ 2 states), got {scores.num_states}")
    r_hat = answer_reward(scores)  # (K+1,)
    v_hat = value_estimate(config.value, scores)  # (K+1,)
    phi = potential(r_hat, v_hat, config.w_R, config.w_v)  # (K+1,)
    h = raw_credit(phi)  # (K,)
    sigma = redistribute(phi, reward, config.return_equivalence, config.eps)  # (K,)
    return r_hat, v_hat, phi, h, sigma


def state_kinds(
    tokenizer: Any,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    cache: dict[tuple[int, str], bool] | None = None,
) -> list[str]:
    """`STATE_KINDS` of each state s_k = x ⊕ τ[:b_k]: its last token's text ends with "\\n"
    (newline); else the response ends there or its next token starts with "\\n" (line_end);
    else mid_line. `cache` memoizes token decodes across calls."""
    cache = {} if cache is None else cache
    ids = [*prompt_ids, *response_ids]

    def test(tok: int, how: str) -> bool:
        if (tok, how) not in cache:
            text = tokenizer.decode([tok], skip_special_tokens=False)
            cache[tok, how] = text.endswith("\n") if how == "end" else text.startswith("\n")
        return cache[tok, how]

    kinds = []
    for b in boundaries:
        at = len(prompt_ids) + b
        if test(ids[at - 1], "end"):
            kinds.append("newline")
        elif b == len(response_ids) or test(ids[at], "start"):
            kinds.append("line_end")
        else:
            kinds.append("mid_line")
    return kinds


def _check_encoded_rows(traces: Sequence[Trace], encoded: Any, rows: Sequence[int]) -> None:
    if len(rows) != len(traces):
        raise ValueError(
            f"encoded_rows: expected one row per trace ({len(traces)}), got {len(rows)}"
        )
    for t, (trace, row) in enumerate(zip(traces, rows, strict=True)):
        if not 0 <= row < len(encoded):
            raise ValueError(f"encoded_rows[{t}]: {row} is not an encoded trace")
        response = encoded.response_ids[row]
        n = len(trace.response_ids)
        if list(trace.prompt_ids) != encoded.prompt_ids[row] or (
            list(trace.response_ids) != response[:n]
        ):
            raise ValueError(
                f"encoded_rows[{t}]: encoded trace {row} is not x ⊕ τ of trace {t} (its prompt "
                f"must be equal and its response must start with the trace's response)"
            )


def draw_suffixes(num_suffixes: int, m: int, rng: random.Random) -> tuple[int, ...]:
    """j ∈ S: m of the J suffix indices drawn uniformly without replacement (all when m ≥ J).

    Each j is in S with probability m/J, so (J/m)·Σ_{j∈S} π(C*_j | s) is unbiased for
    Σ_j π(C*_j | s) (the `suffixes` option of `RREDCoTConfig`).
    """
    if m >= num_suffixes:
        return tuple(range(num_suffixes))
    return tuple(sorted(rng.sample(range(num_suffixes), m)))


def _credit_batch(
    model: torch.nn.Module,
    tokenizer: Any,
    task: Any,
    traces: Sequence[Trace],
    config: RREDCoTConfig,
    variants: Mapping[str, RREDCoTConfig],
    *,
    encoded: Any = None,
    encoded_rows: Sequence[int] | None = None,
    seed: int | str = 0,
) -> dict[str, list[RREDCoTResult]]:
    """RREDCoT credit of several traces (METHOD.md §3), all scored in the same packed passes.

    Every column any of `variants` (name -> config) reads (U* ⊕ A, both answer-now forms) is
    scored in one pass under `config` (join, EOS, suffix draw, pruning); the result is name ->
    the credits of that variant (forward_tokens: the shared pass's). One variant equal to
    `config` is the plain single-config credit.

    Per trace: build the continuations (answer-now, C*_j, and U* ⊕ A for
    `ref_answer_after_path`; built once per reference and kind of state), score them at every
    state with `rredcot.scoring.packed` (`encode_traces`, then `score_encoded`: a few passes for
    the whole batch), then `credit_from_scores`. State 0 (the bare prompt) is scored once per
    prompt and reference, not once per trace.

    encoded / encoded_rows: traces already encoded by the caller (`encode_traces`; row
    `encoded_rows[t]` must hold trace t's prompt and a response that starts with trace t's);
    their encoding is then the caller's cost, not counted in `forward_tokens`. seed: the draw
    of the scored suffixes when `config.suffixes` is a number (one draw per prompt and
    reference, shared by its traces and all their states).
    A trace's `forward_tokens` counts the tokens run for it; what traces share (a prompt's
    encoding, state 0) is counted at the first trace that needs it, so the batch's sum is the
    batch's cost.
    """
    from rredcot.scoring.packed import Pruning, StateQuery, encode_traces, score_encoded

    if not traces:
        return {name: [] for name in variants}
    tokens = [0] * len(traces)
    if encoded is None:
        distinct: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
        rows = []
        seen_prompts: set[tuple[int, ...]] = set()
        for t, trace in enumerate(traces):
            key = (tuple(trace.prompt_ids), tuple(trace.response_ids))
            if key not in distinct:
                distinct[key] = len(distinct)
                tokens[t] += len(trace.response_ids)
                if key[0] not in seen_prompts:
                    seen_prompts.add(key[0])
                    tokens[t] += len(trace.prompt_ids)
            rows.append(distinct[key])
        encoded = encode_traces(
            model,
            [p for p, _ in distinct],
            [r for _, r in distinct],
            max_tokens_per_pass=config.max_tokens_per_pass,
        )
    else:
        if encoded_rows is None:
            raise ValueError("encoded_rows: needed with encoded (the encoded row of each trace)")
        rows = list(encoded_rows)
        _check_encoded_rows(traces, encoded, rows)

    wanted = list(variants.values())
    with_prefix = any(c.value == "ref_answer_after_path" for c in wanted)
    conditional = any(c.answer_now == "conditional" for c in wanted)
    built: dict[tuple[ReferencePath, str], Continuations] = {}
    draws: dict[tuple[tuple[int, ...], ReferencePath], tuple[int, ...]] = {}
    rng = random.Random(f"rredcot-suffixes/{seed}")
    decoded: dict[tuple[int, str], bool] = {}  # (token id, end|start) -> has "\n" there

    def continuations(ref: ReferencePath, kind: str) -> Continuations:
        if (ref, kind) not in built:
            built[ref, kind] = build_continuations(
                task,
                ref,
                tokenizer,
                end_with_eos=config.end_with_eos,
                state_kind=kind,
                join=config.join,
                with_path_prefix=with_prefix,
                with_conditional=conditional,
            )
        return built[ref, kind]

    queries: list[Any] = []
    asked_by: list[int] = []  # the trace each query was made for (its cost is counted there)
    shared: dict[tuple, tuple[int, int]] = {}  # a state's (query, row) by what it is
    where: list[list[tuple[int, int]]] = []  # per trace, per state k: (query, row in it)
    path_tokens: list[list[int]] = []
    columns: list[tuple[int, ...]] = []
    for t, (trace, row) in enumerate(zip(traces, rows, strict=True)):
        ref, b = trace.reference, list(trace.boundaries)
        j = ref.num_segments
        group = (tuple(trace.prompt_ids), ref)
        if group not in draws:
            m = j if config.suffixes == "all" else int(config.suffixes)
            draws[group] = draw_suffixes(j, m, rng)
        chosen = draws[group]
        columns.append(chosen)
        if config.join == "line":
            kinds = state_kinds(tokenizer, trace.prompt_ids, trace.response_ids, b, decoded)
        else:
            kinds = ["line_end"] * len(b)
        own, lengths = [None] * len(b), [0] * len(b)
        for kind in sorted(set(kinds)):
            conts = continuations(ref, kind)
            cols = [conts.answer_now, *(conts.suffixes[i] for i in chosen)]
            if conts.path_prefix is not None:
                cols.append(conts.path_prefix)
            if conditional:
                cols.extend([conts.trigger, conts.answer_body])
            states = [k for k, kd in enumerate(kinds) if kd == kind]
            for k in states:
                lengths[k] = len(conts.suffixes[0])
            new: list[int] = []  # prefix lengths b of states not scored yet
            for k in states:
                key = (group, tuple(trace.response_ids[: b[k]]), kind, chosen)
                if key not in shared:  # a state seen before (e.g. s_0) is read off, not rescored
                    shared[key] = (len(queries), len(new))
                    new.append(b[k])
                own[k] = shared[key]
            if new:
                queries.append(StateQuery(row, new, cols))
                asked_by.append(t)
        where.append(own)
        path_tokens.append(lengths)

    prune = None
    if config.prune_nats is not None and config.value in PRUNABLE:
        prune = Pruning(  # anchor 0: the answer-now column
            config.prune_nats, config.prune_first_chunk, 0, config.prune_max_kept_tokens
        )
    run: list[int] = []
    tables = score_encoded(
        model,
        encoded,
        queries,
        max_tokens_per_pass=config.max_tokens_per_pass,
        prune=prune,
        tokens=run,
        layout=config.layout,
    )
    for t, n in zip(asked_by, run, strict=True):
        tokens[t] += n
    per_trace = [torch.stack([tables[q][a] for q, a in where[t]]) for t in range(len(traces))]

    def credits(cfg: RREDCoTConfig) -> list[RREDCoTResult]:
        results = []
        for t, trace in enumerate(traces):
            per_state = per_trace[t]  # (K+1, 1 + m [+1] [+2]): joint, suffixes, prefix, A, body
            m = len(columns[t])
            answer_now = per_state[:, 0]  # joint
            if cfg.answer_now == "conditional":  # log π(A ⊕ y* ⊕ close | s) − log π(A | s)
                answer_now = (per_state[:, -1] - per_state[:, -2]).clamp(max=0.0)
            scores = ReferenceScores(
                answer_now=answer_now,
                suffixes=per_state[:, 1 : 1 + m],
                path_prefix=per_state[:, 1 + m] if with_prefix else None,
                path_num_tokens=torch.tensor(path_tokens[t]),
                suffix_weight=trace.reference.num_segments / m,
            )
            results.append(_result(scores, trace, cfg, columns[t], tokens[t]))
        return results

    return {name: credits(cfg) for name, cfg in variants.items()}


def _result(
    scores: ReferenceScores,
    trace: Trace,
    config: RREDCoTConfig,
    suffix_columns: tuple[int, ...],
    forward_tokens: int,
) -> RREDCoTResult:
    r_hat, v_hat, phi, h, sigma = credit_from_scores(scores, trace.reward, config)
    return RREDCoTResult(
        answer_logprob=scores.answer_now,
        suffix_logprobs=scores.suffixes,
        path_prefix_logprobs=scores.path_prefix,
        r_hat=r_hat,
        v_hat=v_hat,
        phi=phi,
        h=h,
        sigma=sigma,
        forward_tokens=forward_tokens,
        suffix_columns=suffix_columns,
    )


def rredcot_credit_batch(
    model: torch.nn.Module,
    tokenizer: Any,
    task: Any,
    traces: Sequence[Trace],
    config: RREDCoTConfig | None = None,
    *,
    encoded: Any = None,
    encoded_rows: Sequence[int] | None = None,
    seed: int | str = 0,
) -> list[RREDCoTResult]:
    """RREDCoT credit of several traces under one config (see `_credit_batch`)."""
    config = RREDCoTConfig() if config is None else config
    out = _credit_batch(
        model,
        tokenizer,
        task,
        traces,
        config,
        {"": config},
        encoded=encoded,
        encoded_rows=encoded_rows,
        seed=seed,
    )
    return out[""]


def rredcot_variants_batch(
    model: torch.nn.Module,
    tokenizer: Any,
    task: Any,
    traces: Sequence[Trace],
    variants: Mapping[str, RREDCoTConfig],
    *,
    seed: int | str = 0,
) -> dict[str, list[RREDCoTResult]]:
    """RREDCoT credit of several traces under several configs from one unpruned scoring pass
    of every column any of them reads (see `_credit_batch`); each result's forward_tokens is
    the shared pass's. The configs must agree on everything that sets the scored columns
    (join, end_with_eos, suffixes)."""
    if not variants:
        return {}
    first = next(iter(variants.values()))
    for name, cfg in variants.items():
        for key in ("join", "end_with_eos", "suffixes"):
            if getattr(cfg, key) != getattr(first, key):
                raise ValueError(
                    f"variants: {name!r} has {key}={getattr(cfg, key)!r}, another "
                    f"{getattr(first, key)!r}; one scoring pass cannot serve both"
                )
    base = replace(first, value="ref_suffix_sum", prune_nats=None)
    return _credit_batch(model, tokenizer, task, traces, base, variants, seed=seed)


def rredcot_credit(
    model: torch.nn.Module,
    tokenizer: Any,
    task: Any,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    reference: ReferencePath,
    reward: float,
    config: RREDCoTConfig | None = None,
    *,
    seed: int | str = 0,
) -> RREDCoTResult:
    """RREDCoT credit of one trace x ⊕ τ with boundaries 0 = b_0 < … < b_K = T and return
    R = `reward` (see `rredcot_credit_batch`)."""
    trace = Trace(prompt_ids, response_ids, boundaries, reference, reward)
    return rredcot_credit_batch(model, tokenizer, task, [trace], config, seed=seed)[0]
