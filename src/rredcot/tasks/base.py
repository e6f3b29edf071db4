"""What a task format must provide: prompt, answer trigger, extraction and grading.

Two tasks exist: `synthetic` (the step-checkable arithmetic world, exact match) and `math`
(real benchmarks, math-verify). Every later stage (generation, RREDCoT's answer-now scoring,
evaluation) talks to a task only through this interface, chosen by name from `TASKS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Grade:
    """The verdict on one response: reward r(y) in {0, 1}, the extracted answer, and why."""

    correct: bool
    extracted: str | None
    status: str = "ok"  # "ok" | "no_answer" | "timeout" | "error"

    @property
    def reward(self) -> float:
        return 1.0 if self.correct else 0.0


def require_text(response: object, where: str) -> str:
    """`response` itself when it is a string; else a ValueError naming `where`.

    A missing response (None) is a broken generation table or caller, not a wrong answer:
    grading it 0 would hide the fault in the pass rates, so every grader refuses it the way it
    refuses an empty gold answer.
    """
    if not isinstance(response, str):
        raise ValueError(
            f"{where} must be a string (the generated text), got {type(response).__name__} "
            f"{response!r:.80}"
        )
    return response


class Task(Protocol):
    """A task format (METHOD.md §1): answer trigger A, closing text, extraction, verifier."""

    name: str
    answer_trigger: str  # text appended to a prefix to force the answer now (A)
    answer_close: str  # text that closes the answer (e.g. "}" for \boxed{...})
    stop_strings: tuple[str, ...]  # generation stops after any of these

    def build_prompt(self, problem: str, tokenizer: Any) -> str:
        """The text the policy is conditioned on (chat template where the tokenizer has one)."""
        ...

    def extract_answer(self, response: str) -> str | None:
        """The final answer in a response, or None when there is none."""
        ...

    def grade(self, response: str, gold: str) -> Grade:
        """r(y): 1 when the response's final answer matches `gold`."""
        ...
