"""The `math` task format: DeepSeek-R1 / open-r1 prompt, `\\boxed{}` answers, math-verify.

The answer trigger A = "\\n\\nFinal answer: \\boxed{" and close "}" (METHOD.md §1) make the
answer-now continuation y* ⊕ close end in the same box the instruction asks for, so the answer
RREDCoT scores is exactly what `extract_answer` would read back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rredcot.tasks.base import Grade
from rredcot.tasks.grading import DEFAULT_TIMEOUT_S, extract_last_boxed, grade_many, verify_math

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


class MathTask:
    """Competition math (AIME, AMC, MATH-500, Minerva, GSM8K, Numina) graded by math-verify."""

    name: str = "math"
    answer_trigger: str = "\n\nFinal answer: \\boxed{"
    answer_close: str = "}"
    stop_strings: tuple[str, ...] = ()  # the response ends at EOS, after the boxed answer

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self.timeout_s = timeout_s

    def build_prompt(self, problem: str, tokenizer: Any) -> str:
        """The problem followed by the R1 instruction, as the user turn of the tokenizer's chat
        template (with the assistant's generation prompt); plain text when it has none."""
        if not problem.strip():
            raise ValueError("problem must be non-empty text")
        if getattr(tokenizer, "chat_template", None):
            messages = [{"role": "user", "content": f"{problem.strip()}\n{INSTRUCTION}"}]
            prompt = tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
            if not isinstance(prompt, str):
                raise ValueError(
                    f"tokenizer.apply_chat_template(tokenize=False) returned "
                    f"{type(prompt).__name__}, expected str"
                )
            return prompt
        return f"Problem: {problem.strip()}\n{INSTRUCTION}\n\nSolution:\n"

    def extract_answer(self, response: str) -> str | None:
        return extract_last_boxed(response)

    def grade(self, response: str, gold: str) -> Grade:
        return verify_math(response, gold, self.timeout_s)

    def grade_many(self, pairs: Iterable[tuple[str, str]]) -> list[Grade]:
        """`grade` over (response, gold) pairs in one pass through the grading worker."""
        return grade_many(pairs, self.timeout_s)
