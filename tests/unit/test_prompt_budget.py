"""Prompts against the room their vLLM context leaves: a generating job refuses a prompt that
would overflow it before the engine loads, naming the problems and the key (issue 46, item 5)."""

from __future__ import annotations

import pytest

from rredcot.planning.prompt_budget import check_generation_prompts, prompt_tokens


class WordTokenizer:
    """One token per word: enough to count a prompt's length."""

    def __call__(self, texts: list[str], add_special_tokens: bool = True) -> dict:
        return {"input_ids": [t.split() for t in texts]}


SETTINGS = {"backend": "vllm", "vllm": {"max_model_len": 10}, "max_new_tokens": 6}


def test_a_prompt_without_room_for_its_new_tokens_is_refused_by_name() -> None:
    tok = WordTokenizer()
    assert prompt_tokens(["a b", "c"], tok) == [2, 1]
    check_generation_prompts(["p0"], ["one two three four"], tok, SETTINGS)  # 4 + 6 = 10 fits
    with pytest.raises(ValueError) as err:
        check_generation_prompts(["p0", "p1"], ["a", "a b c d e"], tok, SETTINGS)
    message = str(err.value)
    assert message.startswith("config key 'evaluation.max_prompt_tokens': 1 of 2 prompts")
    assert "p1 (5 tokens)" in message and "p0" not in message
    assert "evaluation.vllm.max_model_len 10" in message and "beside 6 new tokens" in message


def test_the_hf_backend_has_no_fixed_context_to_check() -> None:
    long = ["word " * 100]
    check_generation_prompts(["p0"], long, WordTokenizer(), {**SETTINGS, "backend": "hf"})
    check_generation_prompts(["p0"], long, WordTokenizer(), {**SETTINGS, "vllm": {}})
