"""The math task format: prompts with and without a chat template, trigger, extraction, grading."""

from __future__ import annotations

import pytest

from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.tasks.base import Grade, Task
from rredcot.tasks.math import INSTRUCTION, MathTask

PROBLEM = "Find $x$ such that $2x + 3 = 11$."

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def test_is_a_task() -> None:
    task: Task = MathTask()
    assert task.name == "math"
    assert task.answer_trigger == "\n\nFinal answer: \\boxed{"
    assert task.answer_close == "}"
    assert task.stop_strings == ()


def test_plain_prompt_without_chat_template() -> None:
    tok = build_byte_tokenizer()
    assert not getattr(tok, "chat_template", None)
    prompt = MathTask().build_prompt(PROBLEM, tok)
    assert prompt == f"Problem: {PROBLEM}\n{INSTRUCTION}\n\nSolution:\n"
    assert tok.decode(tok(prompt)["input_ids"]) == prompt  # bytes round-trip


def test_prompt_through_chat_template() -> None:
    tok = build_byte_tokenizer()
    tok.chat_template = TEMPLATE
    prompt = MathTask().build_prompt(PROBLEM, tok)
    assert prompt == f"<|user|>\n{PROBLEM}\n{INSTRUCTION}\n<|assistant|>\n"
    assert "put your final answer within \\boxed{}" in prompt


def test_empty_problem_is_rejected() -> None:
    with pytest.raises(ValueError, match="problem"):
        MathTask().build_prompt("  ", None)


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        MathTask(timeout_s=-1)


def test_answer_trigger_round_trip() -> None:
    """A prefix ⊕ A ⊕ y* ⊕ close (what RREDCoT scores) reads back as y* and grades correct."""
    task = MathTask()
    prefix = "2x = 8, so x = 4."
    forced = prefix + task.answer_trigger + "\\frac{8}{2}" + task.answer_close
    assert task.extract_answer(forced) == "\\frac{8}{2}"
    assert task.grade(forced, "4") == Grade(True, "\\frac{8}{2}", "ok")


def test_grade_and_grade_many() -> None:
    task = MathTask(timeout_s=5.0)
    pairs = [("so \\boxed{4}", "4"), ("so \\boxed{5}", "4"), ("x is four", "4")]
    expected = [Grade(True, "4", "ok"), Grade(False, "5", "ok"), Grade(False, None, "no_answer")]
    assert [task.grade(r, g) for r, g in pairs] == expected
    assert task.grade_many(pairs) == expected
