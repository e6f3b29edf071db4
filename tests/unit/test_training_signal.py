"""Every training method turns reward variance into a gradient, on groups built by hand.

The smoke DAG cannot choose which of its groups have reward variance (that depends on what the
policy samples), so it only checks the implications; here the rewards are fixed by each row's
position, so every group of every method has both outcomes and one step must move the weights,
or by nothing, so no group has any and the outcome-only methods must not move.
"""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from transformers import TrainerCallback

from rredcot.models.tiny import build_tiny_model
from rredcot.tasks import get_task
from rredcot.training import CreditGRPOTrainer, TrainingSettings, grpo_config
from rredcot.training.methods import build_method

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

ARCH = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
}
ROWS = [  # (problem, answer, reference); the reference is RREDCoT's
    ("a=3, b=8, c=2. d=a+b. e=d*a. Find e.", "3", "d=a+b=3+8=1\ne=d*a=1*3=3\nAnswer: 3."),
    ("a=1, b=2, c=4. d=c-a. e=d+b. Find e.", "5", "d=c-a=4-1=3\ne=d+b=3+2=5\nAnswer: 5."),
]


def alternating(completions, **_):
    """r = 1, 0, 1, 0, … by row. TRL's groups are n consecutive rows and RRPO/SRPO's halves n/2
    consecutive rows (n = 4 here), so every group holds both rewards."""
    return [float(i % 2 == 0) for i in range(len(completions))]


class FirstStep(TrainerCallback):
    """The policy's weights before training and after its first optimizer step."""

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.before = {n: p.detach().clone() for n, p in model.named_parameters()}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step == 1:
            self.after = {n: p.detach().clone() for n, p in model.named_parameters()}


def constant(completions, **_):
    """r = 1 on every row: no group has reward variance."""
    return [1.0] * len(completions)


def one_step(tokenizer, tmp_path, name, reward):
    """One optimizer step of method `name` on two synthetic prompts × 4 rollouts under `reward`:
    the step's log and the weights before and after."""
    settings = TrainingSettings.from_dict(
        {
            "method": name,
            "prompts_per_step": 2,
            "num_generations": 4,
            "max_completion_length": 12,
            "max_steps": 1,
            "save_steps": 100,
            "learning_rate": 1e-2,
            "loss_type": "grpo",  # RRPO/SRPO's on-policy loss; the same for every method here
            "segmentation": {"num_segments": 2},
            "mc": {"n_rollouts": 2, "budget": 6},
            "resets": {"localization_max_new_tokens": 4},
        }
    )
    task = get_task("synthetic")
    rows = [
        {"prompt": task.build_prompt(p), "problem": p, "answer": a, "reference": ref}
        | {"problem_id": f"p{g}"}
        for g, (p, a, ref) in enumerate(ROWS)
    ]
    method = build_method(
        name,
        task,
        tokenizer,
        [tokenizer.eos_token_id],
        segmentation=settings.segmentation,
        credit=settings.credit,
        mc=settings.mc,
        resets=settings.resets,
    )
    weights = FirstStep()
    trainer = CreditGRPOTrainer(
        model=build_tiny_model(ARCH, tokenizer, seed=0).train(),
        reward_funcs=[reward],
        args=grpo_config(settings, tmp_path),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        method=method,
        callbacks=[weights],
    )
    trainer.train()
    (log,) = [h for h in trainer.state.log_history if "loss" in h]
    changed = [n for n in weights.before if not torch.equal(weights.before[n], weights.after[n])]
    return log, changed


@pytest.mark.parametrize("name", ["grpo", "rredcot", "mc", "rrpo", "srpo"])
def test_reward_variance_in_every_group_moves_every_method(tokenizer, tmp_path, name):
    log, changed = one_step(tokenizer, tmp_path, name, alternating)
    assert log["frac_reward_zero_std"] == 0.0  # over the groups the method normalises by
    if name in ("rrpo", "srpo"):
        assert log["credit/reset_groups"] == 2.0  # both prompts found a parent: two halves each
    assert log["grad_norm"] > 0
    assert changed, f"{name}: no weight changed"


@pytest.mark.parametrize("name", ["grpo", "rrpo", "srpo"])
def test_without_reward_variance_the_outcome_methods_take_no_step(tokenizer, tmp_path, name):
    """Their advantages are 0 in a group without variance: no gradient, the weights stay (the
    smoke test asks this of its steps without variance)."""
    log, changed = one_step(tokenizer, tmp_path, name, constant)
    assert log["frac_reward_zero_std"] == 1.0
    assert log["grad_norm"] == 0.0
    assert changed == []
