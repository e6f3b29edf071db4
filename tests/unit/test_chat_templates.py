"""The paper models' real chat templates (tests/data/chat_templates) on a local tokenizer: the
thinking mode the config pins, one BOS, and RREDCoT's answer trigger after the thinking block."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import processors

from rredcot.credit.reference_paths import ReferencePath, build_continuations
from rredcot.credit.rredcot_queries import thinking_states
from rredcot.models.chat import check_thinking, pin_thinking, prepare_tokenizer, single_bos
from rredcot.models.loading import load_tokenizer
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.tasks.math import INSTRUCTION, MathTask

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"
R1_BOS = "<｜begin▁of▁sentence｜>"


def qwen3_tokenizer():
    tok = build_byte_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<think>", "</think>"]})
    tok.chat_template = (TEMPLATES / "qwen3_4b.jinja").read_text()
    return tok


def r1_tokenizer():
    """The byte tokenizer as R1-Distill's: its BOS, a post-processor that prepends it on every
    encode (LlamaTokenizerFast with add_bos_token), <think> tokens and its template."""
    tok = build_byte_tokenizer()
    tok.add_special_tokens(
        {"bos_token": R1_BOS, "additional_special_tokens": ["<think>", "</think>"]}
    )
    bos = tok.convert_tokens_to_ids(R1_BOS)
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{R1_BOS} $A", pair=f"{R1_BOS} $A {R1_BOS} $B", special_tokens=[(R1_BOS, bos)]
    )
    tok.chat_template = (TEMPLATES / "r1_distill_qwen.jinja").read_text()
    return tok


def test_qwen3_thinking_mode_is_the_pinned_one() -> None:
    tok = qwen3_tokenizer()
    task = MathTask()
    head = f"<|im_start|>user\n1 + 1\n{INSTRUCTION}<|im_end|>\n<|im_start|>assistant\n"
    assert task.build_prompt("1 + 1", tok) == head  # the template's default: the model thinks
    tok.chat_template = pin_thinking(tok.chat_template, False)
    assert task.build_prompt("1 + 1", tok) == head + "<think>\n\n</think>\n\n"
    # the pin wins over a caller's keyword, and a second pin replaces the first
    tok.chat_template = pin_thinking(tok.chat_template, True)
    messages = [{"role": "user", "content": "x"}]
    text = tok.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert text.endswith("<|im_start|>assistant\n")
    assert tok.chat_template.count("set enable_thinking") == 1
    check_thinking(tok, False)  # Qwen3 can be told not to think: no error


def test_r1_distill_prompts_get_one_bos() -> None:
    tok = r1_tokenizer()
    prompt = MathTask().build_prompt("1 + 1", tok)
    assert prompt == f"{R1_BOS}<｜User｜>1 + 1\n{INSTRUCTION}<｜Assistant｜><think>\n"
    bos = tok.convert_tokens_to_ids(R1_BOS)
    assert tok(prompt)["input_ids"][:2] == [bos, bos]  # the doubled BOS this fixes
    assert single_bos(tok)
    ids = tok(prompt)["input_ids"]
    assert ids[0] == bos and ids.count(bos) == 1
    assert not single_bos(tok)  # nothing left to change
    assert not single_bos(qwen3_tokenizer())  # Qwen writes no BOS


def test_r1_distill_cannot_be_told_not_to_think() -> None:
    with pytest.raises(ValueError, match="model.enable_thinking: false.*set it to true"):
        check_thinking(r1_tokenizer(), False)
    check_thinking(r1_tokenizer(), True)


def test_the_base_model_directory_keeps_both_fixes(tmp_path: Path) -> None:
    """What fetch_base_model writes: every later load (jobs, vLLM, checkpoints) sees the pinned
    mode and a single BOS."""
    r1_tokenizer().save_pretrained(tmp_path)
    prepare_tokenizer(tmp_path, True)
    tok = load_tokenizer(tmp_path)
    prompt = MathTask().build_prompt("1 + 1", tok)
    assert tok(prompt)["input_ids"].count(tok.convert_tokens_to_ids(R1_BOS)) == 1
    assert tok.chat_template.startswith("{%- set enable_thinking = true -%}")


def test_answer_trigger_comes_after_the_thinking_block() -> None:
    """R1's prompt opens <think>: states before the response's </think> are inside it, and
    there the answer-now continuation closes the block before A."""
    tok = r1_tokenizer()
    single_bos(tok)
    prompt = list(tok(MathTask().build_prompt("1 + 1", tok))["input_ids"])
    response = list(tok("1 + 1 = 2.\n</think>\n\nSo 2.", add_special_tokens=False)["input_ids"])
    close = response.index(tok.convert_tokens_to_ids("</think>"))
    flags = thinking_states(tok, prompt, response, [0, close, close + 1, len(response)])
    assert flags == [True, True, False, False]
    assert thinking_states(qwen3_tokenizer(), [1, 2], [3], [0, 1]) == [False, False]
    ref = ReferencePath(segments=("1 + 1 = 2.",), answer="2")
    inside = build_continuations(MathTask(), ref, tok, end_with_eos=False, thinking=True)
    outside = build_continuations(MathTask(), ref, tok, end_with_eos=False)
    assert inside.texts[0] == "\n</think>\n\nFinal answer: \\boxed{2}"
    assert outside.texts[0] == "\n\nFinal answer: \\boxed{2}"
    assert inside.texts[1] == "\n1 + 1 = 2.\n</think>\n\nFinal answer: \\boxed{2}"


def test_attribution_answer_closes_an_open_thinking_block() -> None:
    from rredcot.studies.estimators import answer_ids

    tok = r1_tokenizer()
    ids, trigger_len = answer_ids(MathTask(), tok, "2", thinking=True)
    assert tok.decode(ids) == "\n</think>\n\nFinal answer: \\boxed{2}"
    assert tok.decode(ids[:trigger_len]) == "\n</think>\n\nFinal answer: \\boxed{"
    plain, plain_len = answer_ids(MathTask(), tok, "2")
    assert tok.decode(plain) == "\n\nFinal answer: \\boxed{2}" and plain_len < trigger_len
