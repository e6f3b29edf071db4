"""The public TRL API (`from rredcot import RREDCoTConfig, RREDCoTTrainer`): plain TRL datasets
and reward functions, GRPO parity, rows without a reference, the TRL version check, the example."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from datasets import Dataset
from safetensors.torch import load_file
from test_trainer import ARCH, loss_and_grads  # the tiny policy and TRL's loss on a batch
from trl import GRPOConfig, GRPOTrainer

import rredcot.training.trl_support
from rredcot import RREDCoTConfig, RREDCoTTrainer
from rredcot.models.tiny import build_tiny_model
from rredcot.models.tokenizer import build_chat_tokenizer
from rredcot.training.method_registry import METHOD_SPECS
from rredcot.trl import ESTIMATORS

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[2]
SOLVED = {
    "problem": "a=3, b=8. Find a+b.",
    "solution": "We add the two numbers.\n3 + 8 = 11.\nSo the sum is $\\boxed{11}$.",
}
UNSOLVED = {"problem": "a=1, b=2. Find b-a.", "solution": ""}
COMMON = {
    "use_cpu": True,
    "bf16": False,
    "per_device_train_batch_size": 4,
    "num_generations": 2,
    "max_completion_length": 12,
    "max_steps": 1,
    "learning_rate": 1e-2,
    "logging_steps": 1,
    "save_strategy": "no",
    "report_to": "none",
    "seed": 0,
}


def digit_share(completions, **_):
    """A user's reward: the share of digits in the completion (spread even for a random model)."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]


def dataset(rows, conversational: bool) -> Dataset:
    def prompt(row):
        if conversational:
            return [{"role": "user", "content": row["problem"]}]
        return f"Problem: {row['problem']}\nSolution:\n"

    return Dataset.from_list([{**row, "prompt": prompt(row)} for row in rows])


def trainer(tmp_path, rows, conversational=False, **config) -> RREDCoTTrainer:
    tokenizer = build_chat_tokenizer()
    return RREDCoTTrainer(
        model=build_tiny_model(ARCH, tokenizer, seed=0).train(),
        reward_funcs=digit_share,
        args=RREDCoTConfig(output_dir=str(tmp_path / "out"), **{**COMMON, **config}),
        train_dataset=dataset(rows, conversational),
        processing_class=tokenizer,
    )


def batch(t: RREDCoTTrainer, rows) -> list[dict]:
    """TRL's layout: n consecutive copies of each row."""
    n = t.num_generations
    return [dict(r) for r in rows for _ in range(n)]


@pytest.mark.parametrize("conversational", [False, True], ids=["plain", "conversational"])
def test_a_plain_dataset_and_a_user_reward_train_with_rredcot_credit(tmp_path, conversational):
    t = trainer(tmp_path, [SOLVED, {**SOLVED, "problem": "a=4, b=4. Find a+b."}], conversational)
    assert t.method.name == "rredcot"
    rows = t.method_rows(batch(t, [t.train_dataset[0]]))
    assert rows[0]["answer"] == "11"  # the last \boxed{} of the solution, no answer column
    assert rows[0]["reference"].endswith("\n\nFinal answer: \\boxed{11}")
    assert isinstance(rows[0]["prompt"], str)  # the chat template applied as TRL applies it
    before = {n: p.detach().clone() for n, p in t.model.named_parameters()}
    t.train()
    logged = {k for entry in t.state.log_history for k in entry}
    assert {"credit/advantage_std", "credit/forward_tokens", "credit/num_segments"} <= logged
    assert any(not torch.equal(p, before[n]) for n, p in t.model.named_parameters())


def test_grpo_credit_gives_grpotrainers_loss_and_gradients(tmp_path):
    ours = trainer(tmp_path, [SOLVED, UNSOLVED], credit="grpo")
    tokenizer = build_chat_tokenizer()
    plain = GRPOTrainer(
        model=build_tiny_model(ARCH, tokenizer, seed=0).train(),  # the same weights
        reward_funcs=digit_share,
        args=GRPOConfig(output_dir=str(tmp_path / "plain"), **COMMON),
        train_dataset=dataset([SOLVED, UNSOLVED], False),
        processing_class=tokenizer,
    )
    rows = batch(ours, list(dataset([SOLVED, UNSOLVED], False)))
    torch.manual_seed(0)
    want = plain._generate_and_score_completions([dict(r) for r in rows])
    torch.manual_seed(0)
    got = ours._generate_and_score_completions([dict(r) for r in rows])
    assert torch.equal(got["completion_ids"], want["completion_ids"])
    assert torch.equal(got["advantages"], want["advantages"])
    assert want["advantages"].abs().sum() > 0  # the check below is not 0 == 0
    loss_want, grads_want = loss_and_grads(plain, want)
    loss_got, grads_got = loss_and_grads(ours, got)
    assert any(g.abs().sum() > 0 for g in grads_want.values())
    torch.testing.assert_close(loss_got, loss_want, atol=0, rtol=0)
    for name, grad in grads_want.items():
        torch.testing.assert_close(grads_got[name], grad, atol=0, rtol=0)


def test_rows_without_a_reference_are_refused_or_get_grpo_credit_when_asked(tmp_path):
    with pytest.raises(ValueError, match=r"1 of 2 rows \(e.g. \[1\]\) have no reference"):
        trainer(tmp_path, [SOLVED, UNSOLVED])
    with pytest.raises(ValueError, match="reads each row's reference solution from column 'ref'"):
        trainer(tmp_path, [SOLVED], reference_column="ref")
    t = trainer(tmp_path, [SOLVED, UNSOLVED], missing_reference="grpo")
    assert t.rows_without_reference == 1
    rows = batch(t, list(t.train_dataset))
    torch.manual_seed(0)
    out = t._generate_and_score_completions(rows)
    n, mask = t.num_generations, out["completion_mask"]
    assert t._metrics["train"]["credit/rows_without_reference"] == [float(n)]
    assert "credit/num_segments" in t._metrics["train"]  # the other rows got RREDCoT's credit
    texts = t.processing_class.batch_decode(out["completion_ids"], skip_special_tokens=True)
    rewards = torch.tensor(digit_share(texts)[n:])
    grpo = (rewards - rewards.mean()) / (rewards.std() + 1e-4)  # TRL's group advantage
    torch.testing.assert_close(out["advantages"][n:], grpo[:, None] * mask[n:], atol=1e-6, rtol=0)


def test_config_refuses_unknown_credits_and_keys_and_reads_json_blocks(tmp_path):
    out = str(tmp_path)
    with pytest.raises(ValueError, match="'bogus' is not one of"):
        RREDCoTConfig(output_dir=out, credit="bogus", **COMMON)
    with pytest.raises(ValueError, match="reference: 'mine' is not one of"):
        RREDCoTConfig(output_dir=out, reference="mine", **COMMON)
    with pytest.raises(ValueError, match=r"unknown estimator.rredcot key\(s\) \['bogus'\]"):
        RREDCoTConfig(output_dir=out, estimator={"bogus": 1}, **COMMON)
    config = RREDCoTConfig(output_dir=out, segmentation='{"strategy": "keyword"}', **COMMON)
    assert config.method_settings().segmentation.strategy == "keyword"
    config = RREDCoTConfig(output_dir=out, credit="mc", estimator={"batch_size": 8}, **COMMON)
    assert config.method_settings().mc_batch_size == 8


@pytest.mark.parametrize("method", sorted(METHOD_SPECS))
def test_the_workflows_run_settings_reach_its_methods_through_the_public_config(tmp_path, method):
    """The workflow trains through RREDCoTConfig: every block of a run's settings (none left to
    the public config's defaults) comes back from `method_settings` as the run set it."""
    from rredcot.training.settings import TrainingSettings
    from rredcot.training.trl_config import grpo_config

    settings = TrainingSettings.from_dict(
        {
            "method": method,
            "seed": 0,
            "device": "cpu",
            "padding_free": True,
            **({"loss_type": "grpo"} if method in ("rrpo", "srpo") else {}),
            "reference": "own_path" if method == "rredcot" else "configured",
            "segmentation": {"strategy": "keyword", "num_segments": 3},
            "credit": {"mode": "immediate", "beta": 0.5, "placebo": "perm"},
            "rredcot": {"w_v": 0.5, "answer_now": "joint"},
            "mc": {"n_rollouts": 3},
            "mc_batch_size": 5,
            "oppo": {"level": "segment", "prior": "half"},
            "misconception": {"rule": "smaller_from_larger", "rate": 0.8},
        }
    )
    config = grpo_config(settings, tmp_path, num_processes=1)
    got = config.method_settings()
    assert config.credit == method and config.padding_free
    for block in ("segmentation", "credit", "reference", "misconception"):
        want = getattr(settings, block)
        want = dataclasses.asdict(want) if dataclasses.is_dataclass(want) else want
        have = getattr(got, block)
        assert (dataclasses.asdict(have) if dataclasses.is_dataclass(have) else have) == want
    if method in ESTIMATORS:
        key = ESTIMATORS[method][1]
        assert getattr(got, key) == getattr(settings, key)
    if method == "mc":
        assert got.mc_batch_size == 5


TUNED = {"rredcot": {"max_tokens_per_pass", "max_resident_tokens", "prune_max_kept_tokens"}}
"""Memory caps the paper configs size for their GPUs; the public config leaves them open."""


def test_the_defaults_are_the_workflows_for_math_reasoning_traces():
    """The public config's blocks, PAPER_DEFAULTS over the settings classes' defaults, are the
    paper configs' settings (over config.yaml's) key by key."""
    from rredcot.trl import PAPER_DEFAULTS

    base = yaml.safe_load((REPO / "config.yaml").read_text())
    built = RREDCoTConfig(output_dir="unused", credit="srpo", **COMMON).method_settings()
    rredcot = RREDCoTConfig(output_dir="unused", **COMMON).method_settings()
    blocks = {
        "segmentation": rredcot.segmentation,
        "rredcot": rredcot.rredcot,
        "transform": rredcot.credit,
        "resets": built.resets,
    }  # as YAML reads them (lists, not tuples)
    public = {k: json.loads(json.dumps(dataclasses.asdict(v))) for k, v in blocks.items()}
    for name in ("paper_qwen3_4b", "paper_r1_distill_1p5b"):
        paper = yaml.safe_load((REPO / "configs" / f"{name}.yaml").read_text())
        merged = {
            "segmentation": {**base["segmentation"], **paper["segmentation"]},
            "rredcot": {**base["estimator"]["rredcot"], **paper["estimator"]["rredcot"]},
            "transform": {**base["training"]["credit"], **paper["training"].get("credit", {})},
            "resets": {**base["training"]["resets"], **paper["training"]["resets"]},
        }
        for block, values in merged.items():
            assert PAPER_DEFAULTS.get(block, {}).items() <= values.items(), (name, block)
            # the keys both state agree (the paper configs tune sizes the public config leaves)
            stated = {k: v for k, v in values.items() if k in public[block]}
            differ = {k for k, v in stated.items() if public[block][k] != v}
            assert not differ - TUNED.get(block, set()), (name, block, differ)


def test_an_unsupported_trl_version_fails_at_import_naming_both_versions(monkeypatch):
    monkeypatch.setattr(rredcot.training.trl_support, "installed_trl_version", lambda: "0.19.1")
    monkeypatch.delitem(sys.modules, "rredcot.trl")  # restored afterwards
    with pytest.raises(ImportError) as err:
        importlib.import_module("rredcot.trl")
    assert "0.19.1" in str(err.value)
    assert rredcot.training.trl_support.SUPPORTED_TRL in str(err.value)


def test_the_package_root_stays_free_of_torch():
    code = "import sys, rredcot; assert 'torch' not in sys.modules; assert 'trl' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_the_example_trains_offline_on_the_cpu(tmp_path, mirror_file):
    mirror_file("minerva")  # skipped (or failed, RREDCOT_REQUIRE_MIRROR=1) without the mirror
    env = {**os.environ, "RREDCOT_MIRROR": str(mirror_file("minerva").parent)}
    env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    out = tmp_path / "run"
    script = REPO / "examples" / "rredcot_trl.py"
    command = [sys.executable, str(script), "--tiny", "--output_dir", str(out)]
    subprocess.run(command, check=True, env=env, timeout=180, cwd=tmp_path)
    base = load_file(out / "base" / "model.safetensors")
    trained = load_file(out / "model.safetensors")
    assert any(not torch.equal(base[name], trained[name]) for name in base)
    state = json.loads((out / "trainer_state.json").read_text())
    logged = {k for entry in state["log_history"] for k in entry}
    assert {"credit/advantage_std", "credit/forward_tokens", "credit/phi0_mean"} <= logged
