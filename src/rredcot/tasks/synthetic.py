"""The synthetic world as a task: prompt, answer trigger, exact-match grading, per-step checker.

The checker (defined with the world in `rredcot.data.synthetic`, re-exported here) gives each
response the index of its first wrong step, which is what the error localization study
(METHOD.md §5) compares every estimator's lowest-credit segment against.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rredcot.data.synthetic import (
    ANSWER_CLOSE,
    ANSWER_PREFIX,
    StepCheck,
    check_response,
    extract_answer,
)
from rredcot.tasks.base import Grade, require_text

__all__ = ["StepCheck", "SyntheticTask", "check_response", "extract_answer"]


@dataclass(frozen=True)
class SyntheticTask:
    """The `synthetic` task (METHOD.md §1): prompt = problem + "\\n", A = "\\nAnswer: ", close ".".

    The close "." appears in no step line, so it doubles as the stop string, and it delimits
    multi-digit answers when modulus > 10. The tiny model has no chat template.
    """

    name: str = "synthetic"
    answer_trigger: str = "\n" + ANSWER_PREFIX
    answer_close: str = ANSWER_CLOSE
    stop_strings: tuple[str, ...] = (ANSWER_CLOSE,)

    def build_prompt(self, problem: str, tokenizer: Any = None) -> str:
        return problem + "\n"

    def extract_answer(self, response: str) -> str | None:
        return extract_answer(response)

    def grade(self, response: str, gold: str) -> Grade:
        """Exact match of the last answer line's value with `gold`."""
        extracted = extract_answer(require_text(response, "response"))
        if extracted is None:
            return Grade(False, None, "no_answer")
        return Grade(extracted == gold.strip(), extracted)

    def check_response(self, program: str | Mapping[str, Any], response: str) -> StepCheck:
        return check_response(program, response)

    def reference_completion(self, row: Mapping[str, Any]) -> str:
        """The text SFT trains on after the prompt (the trainer appends EOS): the solution."""
        if "solution" not in row or not isinstance(row["solution"], str):
            raise ValueError(f"row {row.get('id')!r}: needs a string 'solution'")
        return row["solution"]

    def reference_reasoning(self, row: Mapping[str, Any]) -> str:
        """U*: the solution's step lines, so that U* ⊕ A ⊕ y* ⊕ close == the solution."""
        solution = self.reference_completion(row)
        reasoning = solution.rpartition(self.answer_trigger)[0]
        rebuilt = reasoning + self.answer_trigger + str(row["answer"]) + self.answer_close
        if rebuilt != solution:
            raise ValueError(
                f"row {row.get('id')!r}: solution does not end with "
                f"{self.answer_trigger!r} + answer {row['answer']!r} + {self.answer_close!r}"
            )
        return reasoning
