"""The one RL trainer (rredcot.training): GRPO equivalence, the sampling hook, runs, resume, NaN."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import torch
import yaml
from datasets import Dataset
from transformers import TrainerCallback, set_seed
from trl import GRPOTrainer
from trl.trainer.grpo_trainer import RepeatSampler

from rredcot.credit.advantages import outcome_advantages, per_group_advantages
from rredcot.data.schema import write_parquet
from rredcot.data.synthetic import WorldConfig, generate_split
from rredcot.models.loading import load_model, load_tokenizer
from rredcot.models.sft import SFTSettings, run_sft
from rredcot.models.tiny import build_tiny_model
from rredcot.steps.train_policy import NOT_IDENTITY, build_parser, record_blocks
from rredcot.tasks import get_task
from rredcot.tasks.base import Grade
from rredcot.training import (
    CSV_COLUMNS,
    CreditGRPOTrainer,
    NonFiniteLossError,
    TrainingSettings,
    correctness_reward,
    grpo_config,
    resume_point,
    train_policy,
    training_rows,
)
from rredcot.training.curves import CurveSettings, evaluate_policy
from rredcot.training.launch import accelerate_command, shutdown_timeout
from rredcot.training.methods import Method, MethodOutput, RolloutBatch
from rredcot.training.methods.grpo import GRPOMethod
from rredcot.training.methods.rredcot import RREDCoTMethod
from rredcot.training.run_dir import (
    RUN_RECORD,
    RunDirectoryLocked,
    claim_run_dir,
    fingerprint,
    job_record,
    lock_path,
    run_dir_lock,
    run_record,
    unreadable_checkpoint,
)
from rredcot.training.stopping import RETRY_EXIT_CODE, CheckpointGuard, TrainingInterrupted
from rredcot.training.trainer import EpochRepeatSampler

REPO = Path(__file__).resolve().parents[2]

ARCH = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
}
ROWS = [
    {"prompt": "a=3, b=8. c=a+b. Find c.\n", "answer": "1", "reference": "x", "problem_id": "p0"},
    {"prompt": "a=1, b=2. c=b-a. Find c.\n", "answer": "1", "reference": "y", "problem_id": "p1"},
]


pytestmark = pytest.mark.usefixtures("one_thread")


def digit_share(completions, **_):
    """A reward with spread even for a random model: the share of digits in the completion."""
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def settings(**kw) -> TrainingSettings:
    base = {
        "prompts_per_step": 2,
        "num_generations": 2,
        "max_completion_length": 12,
        "max_steps": 1,
        "learning_rate": 1e-2,
        "save_steps": 100,
    }
    return TrainingSettings.from_dict({**base, **kw})


def pair(tokenizer, tmp_path, method: Method):
    """A plain GRPOTrainer and a CreditGRPOTrainer with identical config, seed and weights."""
    data = Dataset.from_list(ROWS)
    plain = GRPOTrainer(
        model=build_tiny_model(ARCH, tokenizer, seed=0).train(),
        reward_funcs=[digit_share],
        args=grpo_config(settings(), tmp_path / "plain"),
        train_dataset=data,
        processing_class=tokenizer,
    )
    ours = CreditGRPOTrainer(
        model=build_tiny_model(ARCH, tokenizer, seed=0).train(),  # the same weights
        reward_funcs=[digit_share],
        args=grpo_config(settings(), tmp_path / "ours"),
        train_dataset=data,
        processing_class=tokenizer,
        method=method,
    )
    return plain, ours


def loss_and_grads(trainer, inputs):
    trainer.current_gradient_accumulation_steps = 1  # set by HF's training loop
    trainer.model.zero_grad()
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in trainer.model.named_parameters()}


class Broadcast(Method):
    """GRPO's advantages written per token (B, T): must give TRL's loss and gradients."""

    name = "broadcast"

    def advantages(self, batch: RolloutBatch, policy: torch.nn.Module) -> MethodOutput:
        return MethodOutput(batch.outcome_advantages[:, None] * batch.completion_mask)


# --- GRPO equivalence ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", [GRPOMethod(), Broadcast()], ids=["grpo", "per_token"])
def test_grpo_reproduces_trls_loss_and_gradients(tokenizer, tmp_path, method):
    plain, ours = pair(tokenizer, tmp_path, method)
    rows = [ROWS[0], ROWS[0], ROWS[1], ROWS[1]]  # TRL's layout: n = 2 copies of each prompt
    torch.manual_seed(0)
    want = plain._generate_and_score_completions([dict(r) for r in rows])
    torch.manual_seed(0)
    got = ours._generate_and_score_completions([dict(r) for r in rows])
    assert torch.equal(got["completion_ids"], want["completion_ids"])
    texts = tokenizer.batch_decode(want["completion_ids"], skip_special_tokens=True)
    rewards = digit_share(texts)
    assert len(set(rewards)) > 1  # the check below is not 0 == 0
    torch.testing.assert_close(want["advantages"], outcome_advantages(rewards, 2))
    if isinstance(method, GRPOMethod):
        assert torch.equal(got["advantages"], want["advantages"])
    else:
        assert got["advantages"].shape == got["completion_ids"].shape
    loss_want, grads_want = loss_and_grads(plain, want)
    loss_got, grads_got = loss_and_grads(ours, got)
    assert any(g.abs().sum() > 0 for g in grads_want.values())  # the check is not 0 == 0
    torch.testing.assert_close(loss_got, loss_want, atol=1e-7, rtol=0)
    for name, grad in grads_want.items():
        torch.testing.assert_close(grads_got[name], grad, atol=1e-7, rtol=0)


def padded_batch(trainer, tokenizer):
    """A generated micro-batch with real padding: row 0's prompt left-padded by 3 tokens, row
    1's completion cut after 4 tokens, row 2's after 1 (TRL's layout)."""
    rows = [ROWS[0], ROWS[0], ROWS[1], ROWS[1]]
    torch.manual_seed(0)
    inputs = trainer._generate_and_score_completions([dict(r) for r in rows])
    inputs["prompt_mask"][0, :3] = 0
    inputs["prompt_ids"][0, :3] = tokenizer.pad_token_id
    for row, keep in ((1, 4), (2, 1)):
        inputs["completion_mask"][row, keep:] = 0
    return inputs


@pytest.mark.parametrize("packed", [False, True], ids=["row_by_row", "packed"])
def test_padding_free_gives_the_padded_loss_and_gradients(tokenizer, tmp_path, monkeypatch, packed):
    """The default (padded) path is TRL's; padding-free scoring (one unpadded row at a time
    under SDPA, or rows packed as flash-attention takes them) gives its loss and gradients to
    float tolerance, and the row-by-row path gives SDPA no mask."""
    padded, free = (
        pair(tokenizer, tmp_path, GRPOMethod())[1],
        pair(tokenizer, tmp_path, GRPOMethod())[1],
    )
    assert not padded.padding_free  # the default: TRL's padded batch
    free.padding_free = True
    inputs = padded_batch(padded, tokenizer)
    assert inputs["completion_mask"].sum(1).tolist()[1:3] == [4, 1]
    loss_want, grads_want = loss_and_grads(padded, inputs)
    masks = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        masks.append(kwargs.get("attn_mask"))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    if packed:  # SDPA reads packed rows off position_ids too (with a block mask): same math
        monkeypatch.setattr("rredcot.training.trainer.packs_rows", lambda model: True)
    loss_got, grads_got = loss_and_grads(free, inputs)
    assert masks and (packed or all(m is None for m in masks))
    assert any(g.abs().sum() > 0 for g in grads_want.values())
    torch.testing.assert_close(loss_got, loss_want, atol=1e-6, rtol=1e-5)
    for name, grad in grads_want.items():
        torch.testing.assert_close(grads_got[name], grad, atol=1e-6, rtol=1e-4)


def test_grpo_training_step_gives_trls_parameters(tokenizer, tmp_path):
    plain, ours = pair(tokenizer, tmp_path, GRPOMethod())
    before = {n: p.detach().clone() for n, p in plain.model.named_parameters()}
    set_seed(0)  # generation draws from the global RNG
    plain.train()
    set_seed(0)
    ours.train()
    changed = False
    ours_params = dict(ours.model.named_parameters())
    for name, p in plain.model.named_parameters():
        torch.testing.assert_close(ours_params[name], p, atol=0, rtol=0)
        changed |= not torch.equal(p, before[name])
    assert changed


# --- sampling hook (resets) ------------------------------------------------------------------


class FakeTask:
    """Records every text it grades; correct when the text has an even number of '1's."""

    name = "fake"

    def __init__(self) -> None:
        self.graded: list[str] = []

    def grade(self, response: str, gold: str) -> Grade:
        self.graded.append(response)
        return Grade(response.count("1") % 2 == 0, None)


class ResetProbe(Method):
    """Group 1: n/2 fresh chains; Group 2: n/2 suffixes after the first chain's first 3 tokens."""

    name = "reset_probe"

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.prefixes: list[list[int]] = []

    def rollout(self, trainer, rows):
        n = trainer.num_generations
        prompt_ids, completion_ids, response_prefix, group = [], [], [], []
        for g in range(len(rows) // n):
            x = self.tokenizer(rows[g * n]["prompt"])["input_ids"]
            fresh = trainer.sample([x] * (n // 2))
            prefix = fresh[0][:3]
            self.prefixes.append(prefix)
            suffixes = trainer.sample([x + prefix] * (n // 2))
            prompt_ids += [x] * (n // 2) + [x + prefix] * (n // 2)
            completion_ids += fresh + suffixes
            text = self.tokenizer.decode(prefix, skip_special_tokens=True)
            response_prefix += [""] * (n // 2) + [text] * (n // 2)
            group += [2 * g] * (n // 2) + [2 * g + 1] * (n // 2)
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": None,
            "response_prefix": response_prefix,
            "group": group,
        }

    def advantages(self, batch: RolloutBatch, policy: torch.nn.Module) -> MethodOutput:
        return MethodOutput(per_group_advantages(batch.rewards, batch.groups))


def test_a_method_can_build_groups_with_resets(tokenizer, tmp_path):
    task = FakeTask()
    probe = ResetProbe(tokenizer)
    model = build_tiny_model(ARCH, tokenizer, seed=0).train()
    trainer = CreditGRPOTrainer(
        model=model,
        reward_funcs=[correctness_reward(task)],
        args=grpo_config(settings(num_generations=4), tmp_path),
        train_dataset=Dataset.from_list(ROWS),
        processing_class=tokenizer,
        method=probe,
    )
    rows = [dict(ROWS[g]) for g in (0, 0, 0, 0, 1, 1, 1, 1)]  # one dict per row, as TRL's loader
    torch.manual_seed(0)
    out = trainer._generate_and_score_completions(rows)
    completions = [
        tokenizer.decode(c[m.bool()], skip_special_tokens=True)
        for c, m in zip(out["completion_ids"], out["completion_mask"], strict=True)
    ]
    prefixes = [tokenizer.decode(p, skip_special_tokens=True) for p in probe.prefixes]
    for i in range(8):
        prompt = out["prompt_ids"][i][out["prompt_mask"][i].bool()].tolist()
        reset = i % 4 >= 2
        x = tokenizer(rows[i]["prompt"])["input_ids"]
        # the prefix is part of the prompt: conditioned on, no loss
        assert prompt == (x + probe.prefixes[i // 4] if reset else x)
        # the reward grades prefix ⊕ suffix
        assert task.graded[i] == (prefixes[i // 4] if reset else "") + completions[i]
    rewards = torch.tensor([float(t.count("1") % 2 == 0) for t in task.graded])
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    torch.testing.assert_close(out["advantages"], per_group_advantages(rewards, groups))


# --- settings and checkpoints ------------------------------------------------------------------


def test_settings_parse_nested_blocks_and_name_bad_keys():
    s = TrainingSettings.from_dict(
        {"method": "rredcot", "credit": {"mode": "mixed", "beta": 0.5}, "mc": {"n_rollouts": 4}}
    )
    assert s.credit.mode == "mixed" and s.credit.beta == 0.5 and s.mc.n_rollouts == 4
    assert json.loads(json.dumps(s.to_dict()))["segmentation"]["strategy"] == "hybrid"
    with pytest.raises(ValueError, match="unknown training key"):
        TrainingSettings.from_dict({"lr": 1.0})
    with pytest.raises(ValueError, match="training.method"):
        TrainingSettings(method="ppo")
    with pytest.raises(ValueError, match="training.num_generations"):
        TrainingSettings(num_generations=1)
    with pytest.raises(ValueError, match="unknown credit key"):
        TrainingSettings.from_dict({"credit": {"gamma": 1.0}})


def test_a_warm_up_the_schedule_ignores_is_refused_naming_both_keys():
    with pytest.raises(ValueError, match="training.warmup_ratio: 0.1 .* training.lr_scheduler"):
        TrainingSettings(lr_scheduler="constant", warmup_ratio=0.1)
    assert TrainingSettings(lr_scheduler="constant_with_warmup", warmup_ratio=0.1).warmup_ratio
    assert TrainingSettings(lr_scheduler="constant", warmup_ratio=0.0).lr_scheduler == "constant"


def test_training_rows_leave_out_problems_without_a_reference(tokenizer):
    table = pl.DataFrame(
        {
            "id": ["a", "b", "c"],
            "problem": ["x=1. Find x.", "y=2. Find y.", "z=3. Find z."],
            "answer": ["1", "2", "3"],
            "solution": ["s1", None, " "],
        }
    )
    data, left_out, too_long = training_rows(table, get_task("synthetic"), tokenizer, settings())
    assert left_out == ["b", "c"] and too_long == []
    assert data.to_list() == [
        {
            "prompt": "x=1. Find x.\n",
            "problem": "x=1. Find x.",
            "answer": "1",
            "reference": "s1",
            "problem_id": "a",
        }
    ]
    with pytest.raises(ValueError, match="lacks column"):
        training_rows(table.drop("answer"), get_task("synthetic"), tokenizer, settings())
    blank = table.with_columns(pl.Series("answer", ["1", "", "3"]))
    with pytest.raises(ValueError, match="row 'b': 'answer'"):
        training_rows(blank, get_task("synthetic"), tokenizer, settings())


def test_training_rows_leave_out_prompts_over_the_prompt_budget(tokenizer):
    """A prompt longer than training.max_prompt_tokens would overflow the vLLM context sized
    from it (issue 46, item 5): left out for every method, named with its length."""
    table = pl.DataFrame(
        {
            "id": ["short", "long"],
            "problem": ["x=1. Find x.", "x=1. " * 40 + "Find x."],
            "answer": ["1", "1"],
            "solution": ["s1", "s2"],
        }
    )
    task = get_task("synthetic")
    budget = len(tokenizer(task.build_prompt("x=1. Find x.", tokenizer))["input_ids"]) + 4
    data, _, too_long = training_rows(table, task, tokenizer, settings(max_prompt_tokens=budget))
    assert data["problem_id"] == ["short"]
    assert len(too_long) == 1 and too_long[0].startswith("long (") and "tokens)" in too_long[0]
    with pytest.raises(ValueError, match=r"within training.max_prompt_tokens \(2\)"):
        training_rows(table, task, tokenizer, settings(max_prompt_tokens=2))


def test_resume_point_skips_and_removes_incomplete_checkpoints(tmp_path):
    for step, complete in ((2, True), (4, True), (6, False)):
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        if complete:
            (d / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    assert resume_point(tmp_path) == tmp_path / "checkpoint-4"
    assert not (tmp_path / "checkpoint-6").exists()
    assert resume_point(tmp_path / "absent") is None


# --- tiny-model runs (slow) ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def base(tmp_path_factory, tokenizer):
    """A tiny policy that writes the synthetic format (mod-2 world: about half its answers are
    right, so groups have reward spread), and its train table."""
    out = tmp_path_factory.mktemp("base")
    world = WorldConfig(modulus=2, chain="any", shape="chain", avoid_misconception=None)
    table = generate_split(64, [2], 5, "train", world)
    task = get_task("synthetic")
    examples = [
        {"prompt": task.build_prompt(r["problem"]), "completion": task.reference_completion(r)}
        for r in table.iter_rows(named=True)
    ]
    arch = {**ARCH, "hidden_size": 64, "head_dim": 32, "num_hidden_layers": 2}
    model = build_tiny_model(arch, tokenizer, seed=0)
    sft = SFTSettings(
        max_steps=120, batch_size=32, learning_rate=5e-3, max_length=96, anneal_steps=None
    )
    run_sft(model, tokenizer, examples, sft, out)
    write_parquet(table, out / "train.parquet")
    return out, table


def run_settings(method: str, **kw) -> TrainingSettings:
    base_kw = {
        "method": method,
        "prompts_per_step": 2,
        "num_generations": 4,
        "max_completion_length": 40,
        "max_steps": 2,
        "save_steps": 2,
        "learning_rate": 1e-3,
        "segmentation": {"num_segments": 2},
        "mc": {"n_rollouts": 2, "budget": 24},
    }
    return TrainingSettings.from_dict({**base_kw, **kw})


def metrics_rows(out: Path) -> list[dict[str, str]]:
    with (out / "metrics.csv").open() as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["grpo", "rredcot", "mc", "oracle_step", "oppo"])
def test_a_short_run_changes_the_policy(base, tmp_path, method):
    path, table = base
    model = load_model(path)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    # 4 groups of 8: enough that some group has a reward spread (GRPO learns nothing otherwise)
    settings_ = run_settings(method, prompts_per_step=4, num_generations=8)
    summary = train_policy(model, load_tokenizer(path), table, settings_, tmp_path)
    assert summary["steps"] == 2
    rows = metrics_rows(tmp_path)
    assert [int(r["step"]) for r in rows] == [1, 2]
    assert set(CSV_COLUMNS) <= set(rows[0])
    for r in rows:
        assert all(map(torch.isfinite, torch.tensor([float(r["loss/policy"])])))
        assert float(r["time/step_seconds"]) > 0
    if method in ("rredcot", "mc", "oppo"):  # the oracle reads the checker: no forward pass
        assert all(float(r["credit/forward_tokens"]) > 0 for r in rows)
    if method == "oracle_step":
        assert all(0 <= float(r["credit/oracle_line_accuracy"]) <= 1 for r in rows)
    if method == "oppo":  # x ⊕ z off the generation; only x ⊕ O ⊕ z is run
        assert all(float(r["credit/generation_reused"]) == 1.0 for r in rows)
        assert all(0 <= float(r["credit/p_end_mean"]) <= 1 for r in rows)
    final = load_model(tmp_path / "final")
    changed = [n for n, p in final.named_parameters() if not torch.equal(p, before[n])]
    assert changed, f"{method}: no parameter changed (rewards {[r['reward/mean'] for r in rows]})"


class StopAt(TrainerCallback):
    """Interrupts training (like Ctrl-C) once `step` optimizer steps are done."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt


@pytest.mark.slow
def test_an_interrupted_run_resumes_and_finishes(base, tmp_path):
    path, table = base
    settings_ = run_settings("rredcot", max_steps=5, save_steps=2)
    with pytest.raises(KeyboardInterrupt):
        train_policy(
            load_model(path), load_tokenizer(path), table, settings_, tmp_path, [StopAt(3)]
        )
    assert resume_point(tmp_path) == tmp_path / "checkpoint-2"
    assert not (tmp_path / "final").exists()
    summary = train_policy(load_model(path), load_tokenizer(path), table, settings_, tmp_path)
    assert summary["resumed_from_step"] == 2 and summary["steps"] == 5
    assert [int(r["step"]) for r in metrics_rows(tmp_path)] == [1, 2, 3, 4, 5]
    assert (tmp_path / "final" / "config.json").is_file()


@pytest.mark.slow
def test_a_nan_loss_stops_and_keeps_the_last_good_checkpoint(base, tmp_path, monkeypatch):
    path, table = base
    compute = CreditGRPOTrainer._compute_loss

    def poisoned(self, model, inputs):
        loss = compute(self, model, inputs)
        return loss * float("nan") if self.state.global_step == 2 else loss

    monkeypatch.setattr(CreditGRPOTrainer, "_compute_loss", poisoned)
    settings_ = run_settings("grpo", max_steps=4, save_steps=2)
    with pytest.raises(NonFiniteLossError, match="at optimizer step 3"):
        train_policy(load_model(path), load_tokenizer(path), table, settings_, tmp_path)
    assert resume_point(tmp_path) == tmp_path / "checkpoint-2"
    assert not (tmp_path / "final").exists()
    kept = load_model(tmp_path / "checkpoint-2")
    assert all(torch.isfinite(p).all() for p in kept.parameters())
    assert [int(r["step"]) for r in metrics_rows(tmp_path)] == [1, 2]


# --- runs that survive a cluster (issue 32) -------------------------------------------------------

# 4 problems, 2 per step: 2 steps per epoch, so a run of 6 steps spans 3 epochs and a resume
# at step 2 or 3 lands in epoch 1, where TRL's sampler replayed epoch 0's order.
EXACT = {"max_problems": 4, "max_steps": 6}


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    return load_model(out / "final").state_dict()


def assert_same_weights(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    differ = [k for k in want if not torch.equal(got[k], want[k])]
    assert not differ, f"{len(differ)} tensors differ from the uninterrupted run, e.g. {differ[:3]}"


@pytest.fixture(scope="module")
def uninterrupted(base, tmp_path_factory):
    """The final weights of the 6-step GRPO run, in one go."""
    path, table = base
    out = tmp_path_factory.mktemp("uninterrupted")
    settings_ = run_settings("grpo", save_steps=2, **EXACT)
    train_policy(load_model(path), load_tokenizer(path), table, settings_, out)
    return final_weights(out)


def test_the_sampler_order_is_a_function_of_the_epoch():
    """TRL's RepeatSampler draws each epoch's order from one generator seeded once, so a run
    resumed in epoch e (a new sampler) replays epoch 0's order; `EpochRepeatSampler` gives
    epoch e the order TRL's gives it in an uninterrupted run, whatever was iterated before."""
    trl_sampler = RepeatSampler(list(range(6)), mini_repeat_count=2, batch_size=2, seed=3)
    epochs = [list(trl_sampler) for _ in range(3)]  # one process, epoch after epoch
    assert epochs[1] != epochs[0] and epochs[2] != epochs[1]  # the orders tell epochs apart
    assert list(RepeatSampler(list(range(6)), 2, batch_size=2, seed=3)) == epochs[0]  # the bug
    ours = EpochRepeatSampler.like(RepeatSampler(list(range(6)), 2, batch_size=2, seed=3))
    for epoch in (2, 0, 1, 1):  # as a resume asks: any epoch first, any number of times
        ours.set_epoch(epoch)
        assert list(ours) == epochs[epoch]


class SignalDuring(TrainerCallback):
    """Sends this process `signum` while optimizer step `step` is under way."""

    def __init__(self, step: int, signum: int = signal.SIGTERM) -> None:
        self.step, self.signum = step, signum

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step - 1:
            os.kill(os.getpid(), self.signum)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1], ids=["TERM", "USR1"])
def test_a_signal_saves_the_current_step_and_the_resume_is_exact(
    base, uninterrupted, tmp_path, caplog, signum
):
    """SIGTERM (SLURM's time limit) or SIGUSR1 during step 3 (epoch 1): the step is finished and
    saved as checkpoint-3, not one step more; the rerun resumes there and ends with the weights
    of the uninterrupted run, bit for bit."""
    path, table = base
    settings_ = run_settings("grpo", save_steps=100, **EXACT)  # no step checkpoint before 6
    handler = signal.getsignal(signum)
    with caplog.at_level("WARNING"), pytest.raises(TrainingInterrupted) as stop:
        train_policy(load_model(path), load_tokenizer(path), table, settings_, tmp_path,
                     [SignalDuring(3, signum)])  # fmt: skip
    name = signal.Signals(signum).name
    assert stop.value.step == 3 and stop.value.signal_name == name
    assert f"{name} received: step 3 done" in caplog.text
    assert resume_point(tmp_path) == tmp_path / "checkpoint-3" == stop.value.checkpoint
    assert not (tmp_path / "final").exists()
    assert [int(r["step"]) for r in metrics_rows(tmp_path)] == [1, 2, 3]
    assert signal.getsignal(signum) == handler  # ours was in place during training only
    summary = train_policy(load_model(path), load_tokenizer(path), table, settings_, tmp_path)
    assert summary["resumed_from_step"] == 3 and summary["steps"] == 6
    assert [int(r["step"]) for r in metrics_rows(tmp_path)] == [1, 2, 3, 4, 5, 6]
    assert_same_weights(final_weights(tmp_path), uninterrupted)


@pytest.mark.slow
def test_a_kill_after_the_first_epoch_resumes_to_the_uninterrupted_weights(
    base, uninterrupted, tmp_path
):
    """Killed during step 3, the run resumes from checkpoint-2 (the end of epoch 0) and sees
    epoch 1's order, not epoch 0's again: the final weights are the uninterrupted run's."""
    path, table = base
    settings_ = run_settings("grpo", save_steps=2, **EXACT)
    with pytest.raises(KeyboardInterrupt):
        train_policy(load_model(path), load_tokenizer(path), table, settings_, tmp_path,
                     [StopAt(3)])  # fmt: skip
    assert resume_point(tmp_path) == tmp_path / "checkpoint-2"
    summary = train_policy(load_model(path), load_tokenizer(path), table, settings_, tmp_path)
    assert summary["resumed_from_step"] == 2 and summary["steps"] == 6
    assert_same_weights(final_weights(tmp_path), uninterrupted)


def test_checkpoint_guard_saves_by_wall_time_and_refuses_a_bad_interval():
    """save_minutes: a checkpoint at the first step end 30 minutes after the last save, none
    before; a save starts the interval again."""
    from transformers import TrainerControl, TrainerState

    guard = CheckpointGuard(save_minutes=30)
    state = TrainerState(global_step=7)

    def saves_after(minutes: float) -> bool:
        guard._last_save = time.monotonic() - 60 * minutes  # the last save, that long ago
        control = guard.on_step_end(None, state, TrainerControl())
        assert not control.should_training_stop
        return control.should_save

    assert not saves_after(29) and saves_after(31)
    guard.on_save(None, state, TrainerControl())
    assert not guard.on_step_end(None, state, TrainerControl()).should_save
    assert not CheckpointGuard(None).on_step_end(None, state, TrainerControl()).should_save
    for bad in (0, -5, float("nan")):
        with pytest.raises(ValueError, match="training.save_minutes"):
            CheckpointGuard(bad)


# Two CPU processes (gloo), as `accelerate launch` starts them: the signal reaches rank 1 only,
# the wall-time interval has run out on rank 0 only.
AGREE = """
import json, os, signal, sys, time
from accelerate import Accelerator
from transformers import TrainerControl, TrainerState
from rredcot.training.stopping import CheckpointGuard

accelerator = Accelerator(cpu=True)
guard = CheckpointGuard(save_minutes=30)
guard.accelerator = accelerator
rank = accelerator.process_index
if rank == 1:
    guard.received = signal.SIGTERM
if rank == 0:
    guard._last_save = time.monotonic() - 31 * 60
control = guard.on_step_end(None, TrainerState(global_step=5), TrainerControl())
n = accelerator.num_processes
print(json.dumps({"stop": control.should_training_stop, "save": control.should_save, "n": n}))
"""


@pytest.mark.slow
def test_processes_save_and_stop_at_the_same_step(tmp_path):
    """Under `accelerate launch` a signal or an elapsed interval seen by one process makes every
    process save (and stop) at the same step, or they would wait on each other's collectives."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", AGREE],
            env={
                **os.environ,
                "OMP_NUM_THREADS": "1",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "WORLD_SIZE": "2",
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": "2",
            },  # fmt: skip
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [p.communicate() for p in procs]
    for p, (out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-2000:]
        assert json.loads(out.splitlines()[-1]) == {"stop": True, "save": True, "n": 2}


# A rank that saves on SIGTERM, as the trainer does (CheckpointGuard's handler records the signal,
# the step and the save finish): the save takes SAVE_S, longer than the elastic agent's 30 s.
SAVE_ON_SIGNAL = """
import os, time
from pathlib import Path
import torch.distributed as dist
from rredcot.training.stopping import CheckpointGuard

dist.init_process_group("gloo")
out, rank = Path(os.environ["RANKS_OUT"]), dist.get_rank()
guard = CheckpointGuard()
with guard.installed():
    (out / f"ready{rank}").write_text("")
    while guard.received is None:
        time.sleep(0.1)
    time.sleep(float(os.environ["SAVE_S"]))  # the step and the checkpoint
    (out / f"saved{rank}").write_text(guard.received.name)
raise SystemExit(75)
"""


@pytest.mark.slow
def test_the_ranks_under_accelerate_launch_save_before_the_agent_kills_them(tmp_path):
    """SIGTERM to `accelerate launch` (as the workflow builds it, on the CPU: gloo, 2 ranks):
    torch's elastic agent passes it to the ranks and SIGKILLs them after
    TORCH_ELASTIC_SHUTDOWN_TIMEOUT (30 s by default), so a 40 s save survives only if the
    command sets the timeout from the SLURM profile's signal lead (issue 46, item 2)."""
    (tmp_path / "save_on_signal.py").write_text(SAVE_ON_SIGNAL)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    profile = REPO / "workflow/profiles/slurm/profile.yaml"
    options = yaml.safe_load(profile.read_text())["set-resources"]["train_policy"]["slurm_extra"]
    lead = shutdown_timeout(options)
    argv = accelerate_command("ddp", 2, port, mixed_precision="no", shutdown_s=lead)
    assert argv[:2] == ["env", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=900"]
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]),
        "OMP_NUM_THREADS": "1",
        "RANKS_OUT": str(tmp_path),
        "SAVE_S": "40",
    }
    env.pop("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", None)
    launcher = subprocess.Popen(
        [*argv, "save_on_signal"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"ready{r}").exists() for r in (0, 1)):
            assert launcher.poll() is None and time.monotonic() < deadline, "ranks did not start"
            time.sleep(0.2)
        launcher.send_signal(signal.SIGTERM)  # the launcher only: the agent must pass it on
        output, _ = launcher.communicate(timeout=180)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    for rank in (0, 1):
        saved = tmp_path / f"saved{rank}"
        assert saved.exists(), f"rank {rank} was killed before its save:\n{output[-3000:]}"
        assert saved.read_text() == "SIGTERM"


HOLD_LOCK = """
import sys
from rredcot.training.run_dir import run_dir_lock
with run_dir_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_second_trainer_on_a_held_run_directory_is_refused(tmp_path):
    """The lock of an orphaned job that still runs: a second train_policy on its directory stops
    at once, naming the holder's host and pid, before touching the directory; the kernel frees
    the lock when the holder dies (here by SIGKILL), and the next trainer takes it."""
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"  # blocks until the holder has the lock
        with pytest.raises(RunDirectoryLocked) as refused:
            train_policy(None, None, None, TrainingSettings(), out)  # refused before any use
        assert f"host {socket.gethostname()} pid {holder.pid}" in str(refused.value)
        assert str(out) in str(refused.value) and not out.exists()
    finally:
        holder.kill()
        holder.wait()
    with run_dir_lock(out) as fh:
        fh.seek(0)
        assert fh.read() == f"host {socket.gethostname()} pid {os.getpid()}\n"
    assert lock_path(out) == tmp_path / "run.lock"


def test_the_lock_is_refused_within_one_process_too(tmp_path):
    refused = pytest.raises(RunDirectoryLocked, match=f"pid {os.getpid()}")
    with run_dir_lock(tmp_path / "run"), refused, run_dir_lock(tmp_path / "run"):
        pass
    with run_dir_lock(tmp_path / "run"):  # released on leaving the block
        pass


# The step script with a callback that reports each checkpoint's step on a pipe as soon as it is
# saved and, the first time, waits there for the test's signal: the test acts on that event,
# never on a deadline (issue 34). The relay, put in front of the trainer's SIGTERM handler
# before the event is sent, lets a SIGTERM that comes before the wait begins end it too.
NOTIFY_ON_SAVE = """
import os, signal, sys, threading
from transformers import TrainerCallback
from rredcot.steps import train_policy as step

EVENTS = int(sys.argv[1])  # the pipe's write end


class Notify(TrainerCallback):
    waited = False

    def on_save(self, args, state, control, **kwargs):
        first, self.waited = not self.waited, True
        if first:
            came, trainers = threading.Event(), signal.getsignal(signal.SIGTERM)

            def relay(signum, frame):
                came.set()
                trainers(signum, frame)

            signal.signal(signal.SIGTERM, relay)
        os.write(EVENTS, f"{state.global_step}\\n".encode())
        if first:
            came.wait()  # until SIGTERM (passed on to the trainer's handler) or SIGKILL
            signal.signal(signal.SIGTERM, trainers)


train = step.train_policy
step.train_policy = lambda *a, **k: train(*a, callbacks=[Notify()], **k)
sys.argv = ["train_policy", *sys.argv[2:]]
step.main()
"""


@pytest.mark.slow
def test_the_step_script_exits_retryably_on_sigterm_and_resumes_after_a_kill(
    base, uninterrupted, tmp_path
):
    """The job as Snakemake runs it. SIGTERM right after the first checkpoint (step 2): the
    step under way (3) is finished and saved, exit status 75. Rerun, SIGKILL right after its
    first checkpoint (step 4): nothing else is saved. Rerun to the end: it resumes at 4, every
    step is in metrics.csv once, and the weights are the uninterrupted run's."""
    path, _ = base
    out = tmp_path / "run"
    params = run_settings("grpo", save_steps=2, **EXACT).to_dict()
    args = ["--model", str(path), "--train", str(path / "train.parquet"), "--out", str(out),
            "--params", json.dumps(params)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def run_until_first_save(signum: int) -> tuple[int, int, str]:
        read, write = os.pipe()
        cmd = [sys.executable, "-c", NOTIFY_ON_SAVE, str(write), *args]
        proc = subprocess.Popen(cmd, env=env, pass_fds=(write,), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        os.close(write)
        with os.fdopen(read) as events:
            first = events.readline()  # blocks until the first checkpoint is saved
            assert first, f"no checkpoint was saved: {proc.communicate()[1][-2000:]}"
            proc.send_signal(signum)
            _, stderr = proc.communicate()
        return int(first), proc.returncode, stderr

    first, status, stderr = run_until_first_save(signal.SIGTERM)
    assert first == 2 and status == RETRY_EXIT_CODE, stderr[-2000:]
    assert "SIGTERM received: step 3 done" in stderr
    assert resume_point(out) == out / "checkpoint-3" and not (out / "final").exists()
    first, status, _ = run_until_first_save(signal.SIGKILL)
    assert first == 4 and status == -signal.SIGKILL
    assert resume_point(out) == out / "checkpoint-4"
    done = subprocess.run([sys.executable, "-m", "rredcot.steps.train_policy", *args], env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["resumed_from_step"] == 4 and summary["steps"] == 6
    assert [int(r["step"]) for r in metrics_rows(out)] == [1, 2, 3, 4, 5, 6]
    assert_same_weights(final_weights(out), uninterrupted)


@pytest.mark.slow
def test_rredcot_reads_the_traces_off_generation(base, tmp_path, monkeypatch):
    # RREDCoT takes the keys, values and logits HF generate computed while sampling instead of
    # encoding the traces again: the advantages are those of a fresh encoding (float32
    # rounding apart) and no encoding tokens are counted.
    path, table = base
    seen = []
    original = RREDCoTMethod.advantages

    def spy(self, batch, policy):
        out = original(self, batch, policy)
        fresh = original(self, dataclasses.replace(batch, generation=None), policy)
        seen.append((batch.generation is not None, out, fresh))
        return out

    monkeypatch.setattr(RREDCoTMethod, "advantages", spy)
    settings_ = run_settings("rredcot", prompts_per_step=2, num_generations=4)
    train_policy(load_model(path), load_tokenizer(path), table, settings_, tmp_path)
    assert [kept for kept, *_ in seen] == [True, True]
    for _, out, fresh in seen:
        torch.testing.assert_close(out.advantages, fresh.advantages, atol=1e-4, rtol=0)
        assert out.metrics["credit/generation_reused"] == 1.0
        assert fresh.metrics["credit/generation_reused"] == 0.0
        assert out.forward_tokens < fresh.forward_tokens  # the encoding pass is not run
    assert all(float(r["credit/generation_reused"]) == 1.0 for r in metrics_rows(tmp_path))


@pytest.mark.slow
def test_changed_settings_start_fresh_same_settings_resume_and_done_runs_take_no_step(
    base, tmp_path
):
    """The run record: another learning rate moves the old directory aside and trains from
    scratch; the same settings resume; a run already at max_steps takes no extra step."""
    path, table = base
    first = run_settings("grpo", max_steps=2, save_steps=1)
    train_policy(load_model(path), load_tokenizer(path), table, first, tmp_path)
    old_weights = load_model(tmp_path / "final").state_dict()
    again = train_policy(load_model(path), load_tokenizer(path), table, first, tmp_path)
    assert again["resumed_from_step"] == 2 and again["steps"] == 2  # at max_steps: no step
    assert [int(r["step"]) for r in metrics_rows(tmp_path)] == [1, 2]
    same = load_model(tmp_path / "final").state_dict()
    assert all(torch.equal(same[k], old_weights[k]) for k in old_weights)
    changed = run_settings("grpo", max_steps=2, save_steps=1, learning_rate=5e-2)
    fresh = train_policy(load_model(path), load_tokenizer(path), table, changed, tmp_path)
    assert fresh["resumed_from_step"] is None and fresh["steps"] == 2
    assert (tmp_path.parent / f"{tmp_path.name}.stale-0" / "final").is_dir()
    new = load_model(tmp_path / "final").state_dict()
    assert any(not torch.equal(new[k], old_weights[k]) for k in old_weights)
    record = json.loads((tmp_path / RUN_RECORD).read_text())
    assert record["settings"]["learning_rate"] == 5e-2


def test_claim_run_dir_names_what_changed(tmp_path, caplog):
    out = tmp_path / "run"
    claim_run_dir(out, {"settings": {"lr": 1}, "inputs": {"model": "a"}})
    (out / "checkpoint-1").mkdir()
    claim_run_dir(out, {"settings": {"lr": 1}, "inputs": {"model": "a"}})
    assert (out / "checkpoint-1").is_dir()  # same record: kept for resuming
    with caplog.at_level("WARNING"):
        record = {"settings": {"lr": 1}, "inputs": {"model": "b"}}
        claim_run_dir(out, record, keep_stale_checkpoints=True)
    assert "inputs.model" in caplog.text and "not in the old record" not in caplog.text
    assert "inputs" in caplog.text and (tmp_path / "run.stale-0" / "checkpoint-1").is_dir()
    assert not (out / "checkpoint-1").exists()


def step_args(tmp_path: Path, *extra: str, build=build_parser):
    model, train = tmp_path / "model", tmp_path / "train.parquet"
    if not model.exists():
        model.mkdir()
        (model / "w.bin").write_bytes(b"w")
        train.write_bytes(b"t")
    argv = ["--model", str(model), "--train", str(train), "--out", str(tmp_path / "run"), *extra]
    return build().parse_args(argv)


def test_the_record_holds_every_argument_of_the_step_but_those_it_names(tmp_path):
    """Issue 21: the record is built from the whole namespace, so --dtype (never listed by hand)
    is compared, and so is an argument added later; --threads and --out are not identity."""
    arguments, inputs = record_blocks(step_args(tmp_path))
    assert arguments["dtype"] == "float32" and inputs["curve_problems"] is None
    assert set(arguments) | set(inputs) | set(NOT_IDENTITY) >= set(vars(step_args(tmp_path)))
    assert record_blocks(step_args(tmp_path, "--dtype", "bfloat16"))[0]["dtype"] == "bfloat16"
    assert record_blocks(step_args(tmp_path, "--threads", "7")) == (arguments, inputs)

    def with_new_argument():
        p = build_parser()
        p.add_argument("--new-knob", default="a")
        return p

    new, _ = record_blocks(step_args(tmp_path, "--new-knob", "b", build=with_new_argument))
    assert new == {**arguments, "new_knob": "b"}
    (tmp_path / "model" / "w.bin").write_bytes(b"v")  # another base model, same path
    assert record_blocks(step_args(tmp_path))[1]["model"] != inputs["model"]


def test_a_path_argument_must_be_declared_an_input(tmp_path):
    args = {"model": tmp_path, "extra": tmp_path / "x", "dtype": "float32"}
    with pytest.raises(ValueError, match=r"\['extra'\] are paths"):
        job_record(args, ["model"], {})
    assert job_record(args, ["model"], {"extra": "why"})[0] == {"dtype": "float32"}
    with pytest.raises(ValueError, match="not arguments"):
        job_record(args, ["absent"], {})


def test_another_dtype_starts_fresh_naming_the_key_and_prunes_stale_checkpoints(tmp_path, caplog):
    """The dtype probe at the directory level: the record differs in arguments.dtype, the old
    directory is moved aside and its checkpoints deleted (final/ and metrics kept); older stale
    copies are pruned the same way; keep_stale_checkpoints keeps them."""
    out = tmp_path / "run"
    settings_ = TrainingSettings()

    def record(dtype: str) -> dict:
        return run_record(settings_, {"model": "m"}, {"dtype": dtype}, {"processes": 1})

    def fill(path: Path) -> None:
        for d in ("checkpoint-2", "checkpoint-4", "final"):
            (path / d).mkdir(parents=True, exist_ok=True)
            (path / d / "model.safetensors").write_bytes(b"x")
        (path / "metrics.csv").write_text("step\n1\n")

    claim_run_dir(out, record("float32"))
    fill(out)
    with caplog.at_level("WARNING"):
        claim_run_dir(out, record("bfloat16"))
    stale0 = tmp_path / "run.stale-0"
    assert "arguments.dtype" in caplog.text and "settings." not in caplog.text
    assert "deleting checkpoint" in caplog.text and "checkpoint-4" in caplog.text
    assert not list(stale0.glob("checkpoint-*"))
    assert (stale0 / "final" / "model.safetensors").is_file() and (stale0 / "metrics.csv").exists()
    assert json.loads((stale0 / RUN_RECORD).read_text())["arguments"] == {"dtype": "float32"}
    assert list(out.iterdir()) == [out / RUN_RECORD]
    fill(out)
    (stale0 / "checkpoint-9").mkdir()  # left by an older version: pruned with the new move
    claim_run_dir(out, record("float32"))
    assert not list(stale0.glob("checkpoint-*"))
    assert not list((tmp_path / "run.stale-1").glob("checkpoint-*"))
    fill(out)
    claim_run_dir(out, record("float16"), keep_stale_checkpoints=True)
    assert (tmp_path / "run.stale-2" / "checkpoint-4").is_dir()


def test_a_record_without_a_block_is_another_run(tmp_path, caplog):
    """A directory written before a block existed (no `arguments`) is not resumed: what it was
    started with is unknown."""
    out = tmp_path / "run"
    new = run_record(TrainingSettings(), {"model": "m"}, {"dtype": "float32"}, {})
    out.mkdir()
    old = {k: v for k, v in new.items() if k != "arguments"}
    (out / RUN_RECORD).write_text(json.dumps(old))
    (out / "checkpoint-1").mkdir()
    with caplog.at_level("WARNING"):
        claim_run_dir(out, new)
    assert "arguments (not in the old record)" in caplog.text
    assert (tmp_path / "run.stale-0").is_dir() and not (out / "checkpoint-1").exists()


def test_the_machine_block_is_not_identity(tmp_path):
    out = tmp_path / "run"
    record = run_record(TrainingSettings(), {"model": "m"}, {"dtype": "float32"}, {})
    claim_run_dir(out, record)
    (out / "checkpoint-1").mkdir()
    claim_run_dir(out, {**record, "machine": {"cpu_model": "elsewhere"}})
    assert (out / "checkpoint-1").is_dir()


def save_checkpoint(path: Path) -> None:
    from safetensors.torch import save_file

    path.mkdir(parents=True)
    save_file({"w": torch.arange(64, dtype=torch.float32)}, path / "model.safetensors")
    torch.save({"step": 1}, path / "optimizer.pt")
    step = int(path.name.split("-")[1])
    log_history = [{"loss": 0.5, "step": s} for s in range(1, step + 1)]
    state = {"global_step": step, "log_history": log_history}
    (path / "trainer_state.json").write_text(json.dumps(state, indent=2))


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.pt", "trainer_state.json"])
def test_a_truncated_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog, name):
    """Issues 21, 32: a newest checkpoint with a file cut short (the weights, the optimizer
    state, or trainer_state.json itself, as a full disk leaves it) is skipped with a warning
    naming the file, and removed; the one before is resumed."""
    for step in (2, 4):
        save_checkpoint(tmp_path / f"checkpoint-{step}")
    broken = tmp_path / "checkpoint-4" / name
    broken.write_bytes(broken.read_bytes()[:-40])
    with caplog.at_level("WARNING"):
        assert resume_point(tmp_path) == tmp_path / "checkpoint-2"
    assert str(broken) in caplog.text
    assert not (tmp_path / "checkpoint-4").exists()
    assert resume_point(tmp_path) == tmp_path / "checkpoint-2"


@pytest.mark.slow
def test_a_run_whose_newest_weights_were_cut_short_resumes_from_the_checkpoint_before(
    base, tmp_path, caplog
):
    path, table = base
    settings_ = run_settings("grpo", max_steps=4, save_steps=2)
    train_policy(load_model(path), load_tokenizer(path), table, settings_, tmp_path)
    weights = tmp_path / "checkpoint-4" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with caplog.at_level("WARNING"):
        summary = train_policy(load_model(path), load_tokenizer(path), table, settings_, tmp_path)
    assert str(weights) in caplog.text
    assert summary["resumed_from_step"] == 2 and summary["steps"] == 4
    assert [int(r["step"]) for r in metrics_rows(tmp_path)] == [1, 2, 3, 4]
    assert unreadable_checkpoint(tmp_path / "checkpoint-4") is None  # written again, whole


def test_intact_checkpoints_are_readable(tmp_path):
    save_checkpoint(tmp_path / "checkpoint-2")
    assert unreadable_checkpoint(tmp_path / "checkpoint-2") is None
    (tmp_path / "checkpoint-2" / "model.safetensors").write_bytes(b"\xff" * 8)
    assert "shorter than its header" in unreadable_checkpoint(tmp_path / "checkpoint-2")


def test_a_trainer_state_of_another_step_is_unreadable(tmp_path):
    """A trainer_state.json that parses but is not this checkpoint's (copied, or left by an
    older save) does not make the checkpoint complete."""
    save_checkpoint(tmp_path / "checkpoint-4")
    state = tmp_path / "checkpoint-4" / "trainer_state.json"
    state.write_text(json.dumps({"global_step": 2}))
    assert "global_step 2, not the checkpoint's checkpoint-4" in unreadable_checkpoint(state.parent)
    state.write_text("[]")
    assert "global_step None" in unreadable_checkpoint(state.parent)


def test_fingerprint_sees_content_and_names(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    (d / "w.bin").write_bytes(b"\0" * 10)
    first = fingerprint(d)
    (d / "w.bin").write_bytes(b"\0" * 9 + b"\1")
    assert fingerprint(d) != first
    assert fingerprint(tmp_path / "nope") == f"id:{tmp_path / 'nope'}"


@pytest.mark.slow
def test_the_learning_curve_evaluates_in_run_and_leaves_training_unchanged(base, tmp_path):
    """Curve points at every `every` steps (not 0, not max_steps), one row per sample; the run's
    weights equal a run without the curve (the evaluation restores the RNG state)."""
    path, table = base
    settings_ = run_settings("grpo", max_steps=3, save_steps=3)
    problems = table.head(5)
    curve = CurveSettings(every=1, samples_per_problem=2, temperature=1.0, top_p=1.0,
                          max_new_tokens=24, seed=0)  # fmt: skip
    train_policy(load_model(path), load_tokenizer(path), table, settings_, tmp_path / "a",
                 curve=(problems, curve))  # fmt: skip
    train_policy(load_model(path), load_tokenizer(path), table, settings_, tmp_path / "b")
    rows = list(csv.DictReader((tmp_path / "a" / "curve.csv").open()))
    assert sorted({int(r["step"]) for r in rows}) == [1, 2]
    assert len(rows) == 2 * 5 * 2 and {r["reward"] for r in rows} <= {"0.0", "1.0"}
    a = load_model(tmp_path / "a" / "final").state_dict()
    b = load_model(tmp_path / "b" / "final").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


# --- LoRA (training.lora) ------------------------------------------------------------------------


class Weights(TrainerCallback):
    """The policy's parameters at the start of training and after its first optimizer step."""

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.before = {n: p.detach().clone() for n, p in model.named_parameters()}
        self.trainable = {n for n, p in model.named_parameters() if p.requires_grad}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step == 1:
            self.after = {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.slow
@pytest.mark.parametrize("method", ["grpo", "rredcot", "mc", "rrpo", "srpo"])
def test_one_lora_step_changes_only_the_adapters(base, tmp_path, method):
    """With `lora` every method trains the adapters alone (its credit passes run the adapted
    policy in place); final/ is base ⊕ adapter merged, loadable as any checkpoint, and
    final/adapter/ is the adapter, which peft loads onto the base to give the same weights."""
    from peft import PeftModel

    from rredcot.training.lora import ADAPTER_DIR

    path, table = base
    lora = {"r": 4, "alpha": 8, "target_modules": "all-linear", "dropout": 0.0}
    extra = {"loss_type": "grpo"} if method in ("rrpo", "srpo") else {}
    settings_ = run_settings(method, max_steps=1, save_steps=1, lora=lora, learning_rate=5e-2,
                             prompts_per_step=4, num_generations=8, **extra)  # fmt: skip
    weights = Weights()
    train_policy(load_model(path), load_tokenizer(path), table, settings_, tmp_path,
                 callbacks=[weights])  # fmt: skip
    assert weights.trainable and all(".lora_" in n for n in weights.trainable)
    changed = {n for n in weights.before if not torch.equal(weights.before[n], weights.after[n])}
    assert changed, f"{method}: no adapter weight changed"
    assert changed <= weights.trainable
    assert any(".lora_B." in n for n in changed)  # B starts at 0: the update is no longer 0
    row = metrics_rows(tmp_path)[0]
    if method != "grpo":
        assert float(row["credit/forward_tokens"]) > 0
    assert (tmp_path / "checkpoint-1" / "adapter_model.safetensors").is_file()
    assert not (tmp_path / "checkpoint-1" / "model.safetensors").exists()
    final = load_model(tmp_path / "final")  # the merged policy, as the evaluation loads it
    base_weights = load_model(path).state_dict()
    moved = {k for k, v in final.state_dict().items() if not torch.equal(v, base_weights[k])}
    assert moved and all(k.endswith("proj.weight") for k in moved)  # adapted linear layers only
    adapted = PeftModel.from_pretrained(load_model(path), tmp_path / "final" / ADAPTER_DIR)
    merged = adapted.merge_and_unload().state_dict()
    for k, v in final.state_dict().items():
        torch.testing.assert_close(v, merged[k])
    if method == "grpo":  # the learning curve evaluates the in-run (peft) policy
        curve = CurveSettings(every=1, samples_per_problem=2, temperature=1.0, top_p=1.0,
                              max_new_tokens=24, seed=0)  # fmt: skip
        task = get_task("synthetic")
        rewards = evaluate_policy(adapted, load_tokenizer(path), task, table.head(3), curve)
        assert rewards.height == 6 and set(rewards["reward"].to_list()) <= {0.0, 1.0}
