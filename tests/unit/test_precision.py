"""Float32 master weights (rredcot.training.precision): bf16 at lr 1e-6 moves the policy."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from transformers import set_seed

from rredcot.models.loading import load_model, load_tokenizer
from rredcot.training import CreditGRPOTrainer, TrainingSettings, build_trainer, grpo_config
from rredcot.training.methods.grpo import GRPOMethod
from rredcot.training.precision import FrozenWeightsError, UpdateCheck, policy_dtype

pytestmark = pytest.mark.usefixtures("one_thread")

ROWS = [
    {"prompt": "a=3, b=8. c=a+b. Find c.\n", "answer": "1", "reference": "x", "problem_id": "p0"},
    {"prompt": "a=1, b=2. c=b-a. Find c.\n", "answer": "1", "reference": "y", "problem_id": "p1"},
]
BF16_SMALL_LR = {
    "prompts_per_step": 2,
    "num_generations": 4,
    "max_completion_length": 12,
    "max_steps": 1,
    "save_steps": 100,
    "bf16": True,
    "learning_rate": 1e-6,
}


def digit_share(completions, **_):
    """A reward with spread even for a random model: the share of digits in the completion."""
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def one_step(model, tokenizer, tmp_path, callbacks=()):
    """One bf16-autocast optimizer step at lr 1e-6; the share of each matrix's elements that
    moved (the embedding is left out: rows of unsampled bytes get no gradient)."""
    settings = TrainingSettings.from_dict(BF16_SMALL_LR)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.dim() == 2}
    trainer = CreditGRPOTrainer(
        model=model.train(),
        reward_funcs=[digit_share],
        args=grpo_config(settings, tmp_path),
        train_dataset=Dataset.from_list(ROWS),
        processing_class=tokenizer,
        method=GRPOMethod(),
        callbacks=list(callbacks),
    )
    set_seed(0)
    trainer.train()
    after = dict(trainer.model.named_parameters())
    return {
        n: (after[n] != b).float().mean().item()
        for n, b in before.items()
        if "embed_tokens" not in n
    }


def test_the_step_trains_a_bf16_model_in_float32_and_a_small_update_moves_it(
    tiny_checkpoint, tmp_path
):
    path = tiny_checkpoint("bf16_policy")
    settings = TrainingSettings.from_dict(BF16_SMALL_LR)
    dtype = policy_dtype("bfloat16", settings, deepspeed=False)  # as train_policy loads it
    model = load_model(path, dtype=dtype)
    assert model.dtype == torch.float32
    moved = one_step(model, load_tokenizer(path), tmp_path)
    assert min(moved.values()) > 0.5, moved


def test_bf16_weights_without_a_master_copy_barely_move_and_the_run_stops(
    tiny_checkpoint, tmp_path
):
    """The control: the same step in bfloat16 weights rounds (almost) every update away, and
    `UpdateCheck` stops the run naming the step and the cause."""
    path = tiny_checkpoint("bf16_frozen")
    model = load_model(path, dtype="bfloat16")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with pytest.raises(FrozenWeightsError, match=r"optimizer step 1: .*bfloat16.*model\.dtype"):
        one_step(model, load_tokenizer(path), tmp_path, callbacks=[UpdateCheck()])
    moved = [(p != before[n]).float().mean().item() for n, p in model.named_parameters()]
    assert max(moved) < 0.1, moved


def test_build_trainer_refuses_bf16_trainable_weights_without_deepspeed(tiny_checkpoint, tmp_path):
    path = tiny_checkpoint("bf16_refused")
    settings = TrainingSettings.from_dict({**BF16_SMALL_LR, "task": "synthetic"})
    rows = Dataset.from_list(ROWS)
    with pytest.raises(ValueError, match=r"model\.dtype: .*bfloat16.*training\.lora"):
        build_trainer(load_model(path, "bfloat16"), load_tokenizer(path), rows, settings, tmp_path)


def test_lora_and_deepspeed_keep_the_model_dtype():
    settings = TrainingSettings.from_dict(BF16_SMALL_LR)
    lora = TrainingSettings.from_dict({**BF16_SMALL_LR, "lora": {"r": 4, "alpha": 8}})
    assert policy_dtype("bfloat16", settings, deepspeed=True) == "bfloat16"
    assert policy_dtype("bfloat16", lora, deepspeed=False) == "bfloat16"
    assert policy_dtype("float32", settings, deepspeed=False) == "float32"
