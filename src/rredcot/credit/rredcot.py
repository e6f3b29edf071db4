"""The RREDCoT estimator (METHOD.md §3): answer-now reward R̂, reference-path value v̂, and σ.

Everything is a teacher-forced score under the policy π of text appended to a state
s_k = x ⊕ τ_{<b_k} (k = 0 … K); nothing is generated:

    log R̂_k = log π(A ⊕ y* ⊕ close | s_k)                 answer now            (K+1,)
    v̂_k     = value variant over the reference suffixes     continuation value    (K+1,)
              C*_j = U*_{≥j} ⊕ A ⊕ y* ⊕ close, j = 0 … J−1 (C*_0 = C*, the whole reference)
    Φ_k = w_R·R̂_k + w_v·v̂_k,  h_k = Φ_k − Φ_{k−1},  σ = redistribute(Φ, R)   (redistribution.py)

The module has two layers:

- pure functions on log-prob tables (`ReferenceScores` -> `value_estimate`, `answer_reward`),
  selected by name from `VALUE_VARIANTS`;
- the model-facing `rredcot_credit` / `rredcot_credit_batch`, which build the continuations
  from a `ReferencePath` (`build_continuations`) and score all of them at all states with
  `rredcot.scoring.packed.score_states_batch` (each trace encoded once, two forward passes).

Reconstructed choices (the paper's text was not available), each a config option:

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
  gets one. "verbatim" appends the text as built. Under "line" the continuations depend on
  the kind of state (ends with "\\n" or not); each kind gets its own packed spec, cut at its
  last state, so the usual extra kind (s_0 alone) costs one prompt-only row.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from numbers import Real
from typing import Any

import torch

from rredcot.credit.redistribution import (
    RETURN_EQUIVALENCE,
    potential,
    raw_credit,
    redistribute,
)

# --------------------------------------------------------------------------- log-prob tables


@dataclass(frozen=True)
class ReferenceScores:
    """Scored log-probs (float64, natural log) of the reference continuations at states 0 … K.

    answer_now:  (K+1,)   log π(A ⊕ y* ⊕ close [⊕ EOS] | s_k) = log R̂_k
    suffixes:    (K+1, J) log π(C*_j | s_k), j = 0 … J−1; column 0 is the whole C*
    path_prefix: (K+1,)   log π(U* ⊕ A | s_k); only `ref_answer_after_path` needs it
    path_num_tokens: |C*| in tokens (EOS included when appended), one int or one per state
        (K+1,) when the join rule makes C* state-dependent; only `ref_path_geomean` needs it
    """

    answer_now: torch.Tensor
    suffixes: torch.Tensor
    path_prefix: torch.Tensor | None = None
    path_num_tokens: int | torch.Tensor | None = None

    def __post_init__(self) -> None:
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
    """R̂_k = π(A ⊕ y* ⊕ close | s_k) = exp(answer_now): (K+1,)."""
    return scores.answer_now.exp()


# --------------------------------------------------------------------------- value variants


def _ref_suffix_sum(scores: ReferenceScores) -> torch.Tensor:
    """v̂_k = Σ_j π(C*_j | s_k): the IS estimate with q uniform over the J suffixes (default)."""
    return torch.logsumexp(scores.suffixes, dim=1).exp()  # (K+1,)


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
    eps: float = 1e-8
    """`rescale` falls back to the terminal correction when |Σ_k h_k| ≤ eps."""
    end_with_eos: bool = True
    """Append EOS to the answer-now continuation and every C*_j (disjoint events, lower bound)."""
    join: str = "line"
    """How a continuation meets a state: line (start it on a new line) | verbatim (module doc)."""
    max_tokens_per_pass: int | None = None
    """Cap on packed continuation tokens per forward pass (memory); None: no cap."""

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


def join_at_state(continuation: str, state_ends_with_newline: bool, rule: str = "line") -> str:
    """The text appended to a state under the join rule (see the module docstring).

    line: after a state ending in "\\n", drop one leading "\\n" (no blank line); after any other
    state, start the continuation with "\\n" if it does not already. verbatim: unchanged.
    """
    if rule not in JOIN_RULES:
        raise ValueError(f"join: {rule!r} is not allowed; choose one of {list(JOIN_RULES)}")
    if rule == "verbatim":
        return continuation
    if state_ends_with_newline:
        return continuation.removeprefix("\n")
    return continuation if continuation.startswith("\n") else "\n" + continuation


@dataclass(frozen=True)
class Continuations:
    """Token ids of the continuations scored at one kind of state.

    answer_now: A ⊕ y* ⊕ close [⊕ EOS]; suffixes[j]: C*_j [⊕ EOS] for j = 0 … J−1
    (suffixes[0] is the whole C*); path_prefix: U* ⊕ A (no EOS), or None when not built.
    texts: the same continuations as text (before EOS), in the order answer_now, suffixes,
    path_prefix.
    """

    answer_now: list[int]
    suffixes: list[list[int]]
    path_prefix: list[int] | None
    texts: list[str]

    def all_ids(self) -> list[list[int]]:
        """[answer_now, C*_0 … C*_{J−1}, (U* ⊕ A)]: the columns `score_states` gets."""
        ids = [self.answer_now, *self.suffixes]
        return ids if self.path_prefix is None else [*ids, self.path_prefix]


def build_continuations(
    task: Any,
    reference: ReferencePath,
    tokenizer: Any,
    *,
    end_with_eos: bool = True,
    state_ends_with_newline: bool = False,
    join: str = "line",
    with_path_prefix: bool = False,
) -> Continuations:
    """Token ids of answer-now, the J suffixes C*_j = U*_{≥j} ⊕ A ⊕ y* ⊕ close and U* ⊕ A.

    A and close are `task.answer_trigger` and `task.answer_close`. Each continuation is joined
    to the state by `join` (`join_at_state`) and tokenized as one whole string without special
    tokens (a BPE tokenizer may merge across the state/continuation junction: that is the
    caller's concern; the byte tokenizer is exact); EOS is appended when `end_with_eos`.
    `with_path_prefix` also builds U* ⊕ A, checked to be a token prefix of C*_0 so that
    log π(C*_0) − log π(U* ⊕ A) scores exactly y* ⊕ close [⊕ EOS] after U* ⊕ A.
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
    texts = [join_at_state(t, state_ends_with_newline, join) for t in texts]

    def encode(text: str, eos: bool) -> list[int]:
        ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        return ids + [tokenizer.eos_token_id] if eos else ids

    ids = [encode(t, end_with_eos) for t in texts[: 1 + len(segs)]]
    path_prefix = None
    if with_path_prefix:
        path_prefix = encode(texts[-1], False)
        whole = ids[1]
        if len(path_prefix) >= len(whole) or whole[: len(path_prefix)] != path_prefix:
            raise ValueError(
                "tokenizer: U* ⊕ A does not tokenize to a prefix of C*; ref_answer_after_path "
                "cannot split log π(C*) into path and answer with this tokenizer"
            )
    return Continuations(ids[0], ids[1:], path_prefix, texts)


# --------------------------------------------------------------------------- model-facing


@dataclass(frozen=True)
class RREDCoTResult:
    """Per-state and per-segment quantities of one trace (float64 tensors).

    States k = 0 … K: answer_logprob (log R̂), r_hat, v_hat, phi, suffix_logprobs (K+1, J).
    Segments k = 1 … K (stored at k−1): h (raw credit), sigma (redistributed reward).
    forward_tokens: real tokens the model ran for this trace (`packed_forward_tokens`).
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


def state_ends_with_newline(
    tokenizer: Any,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
) -> list[bool]:
    """For each state s_k = x ⊕ τ[:b_k]: does its text end with "\\n"? (last token decoded)."""
    ids = [*prompt_ids, *response_ids]
    return [
        tokenizer.decode([ids[len(prompt_ids) + b - 1]], skip_special_tokens=False).endswith("\n")
        for b in boundaries
    ]


def packed_forward_tokens(
    prompt_len: int, response_len: int, num_states: int, continuation_lens: Sequence[int]
) -> int:
    """Real tokens the packed scorer runs for one trace spec: x ⊕ τ once, then at each of the
    K+1 states every continuation without its last token: P + T + (K+1)·Σ_m (|c_m| − 1)."""
    return prompt_len + response_len + num_states * sum(n - 1 for n in continuation_lens)


@dataclass(frozen=True)
class _Plan:
    """How one trace's states are read off the packed scores: one spec per kind of state."""

    specs: list[Any]  # rredcot.scoring.packed.TraceSpec
    where: list[tuple[int, int]]  # per state k: (spec index, row in that spec's table)
    path_num_tokens: list[int]  # per state k: |C*| as scored there


def _plan(tokenizer: Any, task: Any, trace: Trace, config: RREDCoTConfig) -> _Plan:
    """Continuations per kind of state (see `join`), and a packed spec per kind.

    A kind's spec covers the trace only up to its last state of that kind, with the boundaries
    {0} ∪ {b_k of that kind}; so when only s_0 ends with "\\n" (the usual case) the extra spec
    is the bare prompt with one row of continuations, not a second copy of every row.
    """
    from rredcot.scoring.packed import TraceSpec

    b = list(trace.boundaries)
    kinds = (
        state_ends_with_newline(tokenizer, trace.prompt_ids, trace.response_ids, b)
        if config.join == "line"
        else [False] * len(b)
    )
    specs, where, path_tokens = [], [None] * len(b), [0] * len(b)
    for kind in sorted(set(kinds)):
        conts = build_continuations(
            task,
            trace.reference,
            tokenizer,
            end_with_eos=config.end_with_eos,
            state_ends_with_newline=kind,
            join=config.join,
            with_path_prefix=config.value == "ref_answer_after_path",
        )
        states = [k for k, kd in enumerate(kinds) if kd == kind]
        spec_b = sorted({0, *(b[k] for k in states)})
        for k in states:
            where[k] = (len(specs), spec_b.index(b[k]))
            path_tokens[k] = len(conts.suffixes[0])
        specs.append(
            TraceSpec(
                list(trace.prompt_ids),
                list(trace.response_ids[: spec_b[-1]]),
                spec_b,
                conts.all_ids(),
            )
        )
    return _Plan(specs, where, path_tokens)


def rredcot_credit_batch(
    model: torch.nn.Module,
    tokenizer: Any,
    task: Any,
    traces: Sequence[Trace],
    config: RREDCoTConfig | None = None,
) -> list[RREDCoTResult]:
    """RREDCoT credit of several traces (METHOD.md §3), all scored in the same packed passes.

    Per trace: build the continuations (answer-now, C*_0 … C*_{J−1}, and U* ⊕ A for
    `ref_answer_after_path`), score them at every state with
    `rredcot.scoring.packed.score_states_batch` (two forward passes for the whole batch, more
    only under `max_tokens_per_pass`), then `credit_from_scores`.
    """
    from rredcot.scoring.packed import score_states_batch

    config = RREDCoTConfig() if config is None else config
    plans = [_plan(tokenizer, task, t, config) for t in traces]
    tables = score_states_batch(
        model,
        [spec for plan in plans for spec in plan.specs],
        max_tokens_per_pass=config.max_tokens_per_pass,
    )
    results, start = [], 0
    for trace, plan in zip(traces, plans, strict=True):
        own = tables[start : start + len(plan.specs)]
        start += len(plan.specs)
        per_state = torch.stack([own[s][row] for s, row in plan.where])  # (K+1, 1 + J [+ 1])
        j = trace.reference.num_segments
        scores = ReferenceScores(
            answer_now=per_state[:, 0],
            suffixes=per_state[:, 1 : 1 + j],
            path_prefix=per_state[:, 1 + j] if per_state.shape[1] > 1 + j else None,
            path_num_tokens=torch.tensor(plan.path_num_tokens),
        )
        r_hat, v_hat, phi, h, sigma = credit_from_scores(scores, trace.reward, config)
        cost = sum(
            packed_forward_tokens(
                len(s.prompt_ids),
                len(s.response_ids),
                s.num_states,
                [len(c) for c in s.continuations],
            )
            for s in plan.specs
        )
        results.append(
            RREDCoTResult(
                answer_logprob=scores.answer_now,
                suffix_logprobs=scores.suffixes,
                path_prefix_logprobs=scores.path_prefix,
                r_hat=r_hat,
                v_hat=v_hat,
                phi=phi,
                h=h,
                sigma=sigma,
                forward_tokens=cost,
            )
        )
    return results


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
) -> RREDCoTResult:
    """RREDCoT credit of one trace x ⊕ τ with boundaries 0 = b_0 < … < b_K = T and return
    R = `reward` (see `rredcot_credit_batch`)."""
    trace = Trace(prompt_ids, response_ids, boundaries, reference, reward)
    return rredcot_credit_batch(model, tokenizer, task, [trace], config)[0]
