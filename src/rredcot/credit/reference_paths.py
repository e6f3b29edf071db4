"""Reference paths and the continuations RREDCoT scores at a state (METHOD.md §3).

A reference solution U* is cut into lines (`ReferencePath`); its suffixes C*_j = U*_{≥j} ⊕ A ⊕
y* ⊕ close [⊕ EOS] and the answer-now continuation are built as token ids
(`build_continuations`), joined to a state by the config's `join` rule (`join_at_state`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rredcot.credit.rredcot_config import JOIN_RULES, STATE_KINDS
from rredcot.models.chat import THINK_CLOSE_TRIGGER

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
    thinking: bool = False,
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
    `thinking`: the state is inside an open `<think>` block, so A closes it first
    ("\n</think>" ⊕ A): the answer comes after the thinking block, as the policy writes it.
    """
    trigger, close = task.answer_trigger, task.answer_close
    if thinking:
        trigger = THINK_CLOSE_TRIGGER + trigger
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
