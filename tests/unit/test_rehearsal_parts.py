"""The CPU rehearsal's pieces: the stand-in training set, the stand-in chat tokenizer, the
studies' reference filter and the LoRA target check."""

from __future__ import annotations

import polars as pl
import pytest

from rredcot.data.normalize import last_boxed
from rredcot.data.stand_in import numina_style, stand_in_rows
from rredcot.models.tokenizer import build_chat_tokenizer
from rredcot.steps.study_traces import with_reference
from rredcot.training.lora import check_lora_targets, missing_targets

GSM8K = [
    {"id": "gsm8k-0", "problem": "Eggs?", "answer": "18",
     "solution": "She sells 16 - 3 - 4 = <<16-3-4=9>>9 eggs.\nShe makes 9 * 2 = $<<9*2=18>>18."},
    {"id": "gsm8k-1", "problem": "No solution", "answer": "3", "solution": ""},
    {"id": "gsm8k-2", "problem": "Robe?", "answer": "3", "solution": "2 + 1 = <<2+1=3>>3"},
]  # fmt: skip


def test_stand_in_rows_are_numina_style_with_the_box_as_answer() -> None:
    rows = stand_in_rows(GSM8K, 2)
    assert [r["id"] for r in rows] == [
        "stand_in-gsm8k-0",
        "stand_in-gsm8k-2",
    ]  # no solution: skipped
    first = rows[0]
    assert "<<" not in first["solution"] and first["solution"].endswith("$\\boxed{18}$.")
    assert first["answer"] == last_boxed(first["solution"]) == "18"
    assert numina_style("a <<1+1=2>>2", "2") == "a 2\nThe answer is $\\boxed{2}$."
    with pytest.raises(ValueError, match="2 usable rows, need 3"):
        stand_in_rows(GSM8K, 3)


def test_the_stand_in_tokenizer_renders_chat_turns() -> None:
    tok = build_chat_tokenizer()
    text = tok.apply_chat_template(
        [{"role": "user", "content": "2+3?"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<|im_start|>user\n2+3?<|im_end|>\n<|im_start|>assistant\n"


def test_studies_keep_problems_with_a_reference() -> None:
    table = pl.DataFrame({"id": ["a", "b"], "reference": ["U*", None]})
    assert with_reference(table, "math500")["id"].to_list() == ["a"]
    with pytest.raises(ValueError, match="studies.split: none of the 1 problems of 'math500'"):
        with_reference(table.filter(pl.col("id") == "b"), "math500")


def test_lora_targets_the_model_lacks_are_named(tiny_checkpoint) -> None:
    names = ["model.layers.0.self_attn.q_proj", "model.layers.0.mlp.up_proj"]
    assert missing_targets("all-linear", names) == []
    assert missing_targets(["q_proj", "mlp.up_proj", "qkv"], names) == ["qkv"]
    path = tiny_checkpoint("lora_check")
    key = "training.per_method.srpo.lora.target_modules"
    runs = {key: ["q_proj", "qkv_proj"], "training.lora.target_modules": ["v_proj"]}
    (error,) = check_lora_targets(path, runs)
    assert error.startswith(f"config key '{key}': ['qkv_proj'] match no module")
    assert "'q_proj'" in error
