"""What a multi-rank or ZeRO-3 launch sees, simulated on the CPU: a run resumed at max_steps
publishes its weights, a sharded head keeps the logit-cache guard, ranks share the job's CPUs."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator
from datasets import Dataset

from rredcot.data.synthetic import WorldConfig, generate_split
from rredcot.models.loading import load_model, load_tokenizer
from rredcot.steps.cli import rank_threads
from rredcot.training import CreditGRPOTrainer, TrainingSettings, grpo_config, train_policy
from rredcot.training import run as run_module
from rredcot.training import trainer as trainer_module
from rredcot.training.methods.grpo import GRPOMethod

pytestmark = pytest.mark.usefixtures("one_thread")


def deepspeed_get_state_dict(self, model, unwrap=True):
    """accelerate's `get_state_dict` under ZeRO-3: it asks the DeepSpeed engine to gather."""
    if not model.zero_gather_16bit_weights_on_model_save():
        raise ValueError("stage3_gather_16bit_weights_on_model_save is False")
    return model._zero3_consolidated_16bit_state_dict()


def test_a_zero3_run_resumed_at_its_last_step_publishes_its_weights(
    tiny_checkpoint, tmp_path, monkeypatch
):
    """A ZeRO-3 run stopped after its last checkpoint (before final/) is retried: the retry loads
    the checkpoint without preparing the model, so there is no DeepSpeed engine to gather from;
    the weights are whole on every process and are saved as they are."""
    path = tiny_checkpoint("zero3_done")
    table = generate_split(
        4,
        [2],
        3,
        "train",
        WorldConfig(modulus=2, chain="any", shape="chain", avoid_misconception=None),
    )
    settings = TrainingSettings.from_dict(
        {
            "prompts_per_step": 2,
            "num_generations": 2,
            "max_completion_length": 8,
            "max_steps": 1,
            "save_steps": 1,
        }  # fmt: skip
    )
    out = tmp_path / "run"
    train_policy(load_model(path), load_tokenizer(path), table, settings, out)
    want = load_model(out / "final").state_dict()
    (out / "final").rename(tmp_path / "first_final")  # stopped before final/ was written
    monkeypatch.setattr(run_module, "_is_zero3", lambda trainer: True)
    monkeypatch.setattr(Accelerator, "get_state_dict", deepspeed_get_state_dict)
    again = train_policy(load_model(path), load_tokenizer(path), table, settings, out)
    assert again["resumed_from_step"] == 1 and again["steps"] == 1
    got = load_model(out / "final").state_dict()
    assert all(torch.equal(got[k], want[k]) for k in want)


class ReusesGeneration(GRPOMethod):
    reuses_generation = True


def test_a_zero3_sharded_head_still_counts_the_vocabulary(tiny_checkpoint, tmp_path, monkeypatch):
    """Under ZeRO-3 the output head's weight is an empty shard (shape (0,)) whose real shape is
    `ds_shape`; the logit cache must be refused by the vocabulary, not allowed by the 0."""
    path = tiny_checkpoint("zero3_head")
    settings = TrainingSettings.from_dict(
        {"prompts_per_step": 2, "num_generations": 2, "max_completion_length": 8}
    )
    trainer = CreditGRPOTrainer(
        model=load_model(path).train(),
        reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
        args=grpo_config(settings, tmp_path),
        train_dataset=Dataset.from_list([{"prompt": "a"}] * 2),
        processing_class=load_tokenizer(path),
        method=ReusesGeneration(),
    )
    head = trainer.model.get_output_embeddings().weight
    vocab = head.shape[0]
    limit = 4 * settings.max_completion_length * vocab
    monkeypatch.setattr(trainer_module, "GENERATION_CACHE_MAX_LOGITS", limit)
    assert trainer._keeps_generation(4) and not trainer._keeps_generation(5)
    head.ds_shape = head.shape  # as DeepSpeed partitions it
    head.data = torch.empty(0, dtype=head.dtype)
    assert trainer._keeps_generation(4) and not trainer._keeps_generation(5)


@pytest.mark.parametrize(
    ("environ", "want"),
    [
        ({}, 64),
        ({"LOCAL_WORLD_SIZE": "8"}, 8),
        ({"LOCAL_WORLD_SIZE": "3"}, 21),
        ({"LOCAL_WORLD_SIZE": "128"}, 1),
    ],  # fmt: skip
)
def test_ranks_on_a_node_share_the_jobs_threads(environ, want):
    assert rank_threads(64, environ) == want
