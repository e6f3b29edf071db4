"""MC rollouts through TRL's vLLM engine (`training.use_vllm`), on the CPU with the fake vllm
package: one engine call per step for every state of the batch, MC's own budget, sampling
settings and stop strings, finish reasons read off the returned tokens, TRL's settings restored,
and the rollouts counted in the metrics. With LoRA, TRL syncs merged weights into the engine."""

from __future__ import annotations

import pytest
from datasets import Dataset

from rredcot.generation.base import SamplingParams
from rredcot.models.tiny import build_tiny_model
from rredcot.tasks import get_task
from rredcot.training import CreditGRPOTrainer, TrainingSettings, correctness_reward, grpo_config
from rredcot.training.methods import build_method
from rredcot.training.methods.mc import MCMethod
from rredcot.training.trainer import TRLEngineBackend

ARCH = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
}
ROWS = [
    {"prompt": "a=1, b=0. c=a+b. Find c.\n", "answer": "1", "reference": "c=1\nAnswer: 1.",
     "problem_id": "p0"},
    {"prompt": "a=1, b=1. c=a*b. Find c.\n", "answer": "1", "reference": "c=1\nAnswer: 1.",
     "problem_id": "p1"},
]  # fmt: skip
BUDGET, N = 16, 3

pytestmark = pytest.mark.usefixtures("one_thread")


def mc_trainer(tokenizer, tmp_path, lora=None) -> CreditGRPOTrainer:
    settings = TrainingSettings.from_dict({
        "method": "mc", "prompts_per_step": 2, "num_generations": 2, "max_completion_length": 24,
        "max_steps": 1, "save_steps": 100, "learning_rate": 1e-2, "temperature": 0.9,
        "segmentation": {"strategy": "keyword", "num_segments": 2}, "lora": lora,
        "mc": {"n_rollouts": N, "budget": BUDGET, "truncation": "drop", "temperature": 1.0},
    })  # fmt: skip
    config = grpo_config(settings, tmp_path)
    config.use_vllm, config.vllm_mode = True, "colocate"  # settings refuse vLLM on the CPU
    task = get_task("synthetic")
    return CreditGRPOTrainer(
        model=build_tiny_model(ARCH, tokenizer, seed=0).train(),
        reward_funcs=[correctness_reward(task)],
        args=config,
        train_dataset=Dataset.from_list(ROWS),
        processing_class=tokenizer,
        method=build_method(
            "mc",
            task,
            tokenizer,
            [tokenizer.eos_token_id],
            segmentation=settings.segmentation,
            mc=settings.mc,
        ),  # fmt: skip
        peft_config=settings.lora.peft_config() if settings.lora else None,
    )


@pytest.mark.parametrize("lora", [None, {"r": 4, "alpha": 8}])
def test_mc_rollouts_go_through_the_vllm_engine(fake_vllm, tokenizer, tmp_path, monkeypatch, lora):
    eos = tokenizer.eos_token_id
    answers = iter(["c=1\nAnswer: 1.", "c=2\nAnswer: 2."] * 8)  # training rows: right, wrong

    def respond(prompt_ids, kw):
        if kw.get("stop"):  # an MC rollout: "1" from every state, cut at the stop string
            return tokenizer("\nAnswer: 1.")["input_ids"]
        return tokenizer(next(answers))["input_ids"] + [eos]

    fake_vllm.respond = respond
    seen = []
    segment_credit = MCMethod.segment_credit

    def spy(self, batch, policy):
        out = segment_credit(self, batch, policy)
        seen.append((batch, out))
        return out

    monkeypatch.setattr(MCMethod, "segment_credit", spy)
    trainer = mc_trainer(tokenizer, tmp_path, lora)
    trainer.train()

    ((batch, credit),) = seen
    boundaries, metrics = credit.boundaries, credit.metrics
    assert isinstance(batch.engine, TRLEngineBackend)
    rollouts = [c for c in fake_vllm.trl_calls if c[1].get("stop")]
    assert len(rollouts) == 1  # every state of the batch in one engine call
    prompts, kw = rollouts[0]
    states = sum(len(b) - 1 for b in boundaries)
    assert len(prompts) == states * N and metrics["credit/mc_rollouts"] == states * N
    assert kw["max_tokens"] == BUDGET and kw["stop"] == ["."] and kw["include_stop_str_in_output"]
    assert kw["temperature"] == 1.0 and kw["top_p"] == 1.0 and kw["top_k"] == 0
    training = [c for c in fake_vllm.trl_calls if not c[1].get("stop")]
    assert training and all(c[1]["max_tokens"] == 24 and c[1]["temperature"] == 0.9
                            for c in training)  # fmt: skip
    engine = trainer.vllm_generation  # TRL's settings are back after the MC call
    assert engine.max_completion_length == 24 and engine.temperature == 0.9
    assert "stop" not in engine.generation_kwargs
    # every rollout answers 1, so V̂(s_0) = 1 and Σσ = R − 1
    assert batch.rewards.tolist() == [1.0, 0.0, 1.0, 0.0]
    for s, r in zip(credit.sigmas, batch.rewards.tolist(), strict=True):
        assert float(s.sum()) == pytest.approx(r - 1.0)
    assert metrics["credit/mc_vllm"] == 1.0 and metrics["credit/mc_drop_rate"] == 0.0
    logged = trainer.state.log_history[0]
    assert logged["credit/mc_vllm"] == 1.0 and logged["credit/mc_rollouts"] == states * N
    assert logged["credit/forward_tokens"] >= states * N * len(
        tokenizer("\nAnswer: 1.")["input_ids"]
    )
    assert fake_vllm.loaded and not any("lora" in name for name in fake_vllm.loaded)
    if lora:  # TRL merges the adapters for the sync: the engine sees base ⊕ adapter names only
        assert all("base_layer" not in name for name in fake_vllm.loaded)


def test_finish_reasons_from_engine_tokens(fake_vllm, tokenizer, tmp_path):
    trainer = mc_trainer(tokenizer, tmp_path)
    eos = tokenizer.eos_token_id
    replies = {
        "s": tokenizer("ab. cd")["input_ids"],  # stop string inside the last tokens: cut after it
        "e": tokenizer("ab")["input_ids"] + [eos],  # EOS: stop, EOS dropped
        "l": tokenizer("abcd")["input_ids"],  # the budget, no stop: length
        "x": tokenizer("ab")["input_ids"],  # short without EOS (another stop token): stop
    }
    fake_vllm.respond = lambda ids, kw: replies[tokenizer.decode(ids)[-1]]
    params = SamplingParams(n=2, max_new_tokens=4, stop_strings=(".",))
    got = TRLEngineBackend(trainer).generate(["s", "e", "l", "x"], params)
    assert [(c.prompt_index, c.sample_index) for c in got] == [
        (p, s) for p in range(4) for s in range(2)
    ]
    assert [(c.text, c.finish_reason) for c in got[::2]] == [
        ("ab.", "stop"),
        ("ab", "stop"),
        ("abcd", "length"),
        ("ab", "stop"),
    ]
    assert got[2].token_ids == tokenizer("ab")["input_ids"] and got[2].num_tokens == 2
    assert fake_vllm.trl_calls[-1][1]["max_tokens"] == 4
