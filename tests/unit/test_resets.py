"""RRPO/SRPO (rredcot.training.methods.resets, rrpo, srpo; rredcot.training.localization):
group composition, the reset prefix, per-group advantages, the on-policy loss, localization."""

from __future__ import annotations

import math
import random
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset
from hypothesis import given, settings
from hypothesis import strategies as st

from rredcot.credit.advantages import per_group_advantages
from rredcot.credit.segmentation import SegmentationConfig
from rredcot.generation.base import Completion
from rredcot.models.tiny import build_tiny_model
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.tasks import get_task
from rredcot.tasks.base import Grade
from rredcot.training import CreditGRPOTrainer, TrainingSettings, correctness_reward, grpo_config
from rredcot.training.localization import (
    LOCALIZATION_STATUSES,
    localization_prompt,
    localize_first_error,
    localize_many,
    numbered_steps,
    parse_error_step,
)
from rredcot.training.methods import METHODS, RolloutBatch, build_method
from rredcot.training.methods.resets import (
    Chain,
    Parent,
    ResetConfig,
    RolloutContext,
    check_on_policy_loss,
    collect_fresh,
)
from rredcot.training.methods.rrpo import uniform_step

ARCH = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
}
PROBLEMS = ["a=3, b=8. c=a+b. d=c*a. Find d.", "a=1, b=2. c=b-a. d=c+b. Find d."]
RIGHT = "c=a+b=3+8=1\nd=c*a=1*3=3\nAnswer: 1."  # graded against answer "1"
WRONG = "c=a+b=3+8=2\nd=c*a=2*3=6\ne=d+a=6+3=9\nAnswer: 9."  # 4 keyword steps
SUFFIX = "d=c*a=1*3=3\nAnswer: 1."
KEYWORD = SegmentationConfig(strategy="keyword", num_segments=None)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model(tokenizer):
    return build_tiny_model(ARCH, tokenizer, seed=0).eval()


def rows_for(n: int, problems=PROBLEMS) -> list[dict]:
    task = get_task("synthetic")
    return [
        {"prompt": task.build_prompt(p), "problem": p, "answer": "1", "problem_id": f"p{g}"}
        for g, p in enumerate(problems)
        for _ in range(n)
    ]


class ScriptedSampler:
    """Fresh chains from a per-prompt script of texts (cycled); suffixes are SUFFIX. Records
    every prompt it was asked to complete."""

    def __init__(self, tokenizer, scripts: dict[str, list[str]], suffix: str = SUFFIX) -> None:
        self.tok = tokenizer
        self.suffix = suffix
        self.scripts = {tuple(tokenizer(p)["input_ids"]): list(s) for p, s in scripts.items()}
        self.cursor = Counter()
        self.calls: list[list[list[int]]] = []

    def ids(self, text: str) -> list[int]:
        return self.tok(text)["input_ids"] + [self.tok.eos_token_id]

    def __call__(self, prompt_ids: list[list[int]]) -> list[list[int]]:
        self.calls.append([list(p) for p in prompt_ids])
        out = []
        for p in prompt_ids:
            key = next(k for k in self.scripts if tuple(p[: len(k)]) == k)
            if len(p) > len(key):  # x ⊕ prefix: a Group 2 suffix
                out.append(self.ids(self.suffix))
                continue
            script = self.scripts[key]
            out.append(self.ids(script[self.cursor[key] % len(script)]))
            self.cursor[key] += 1
        return out


def context(sampler, policy, n=8, budget=200, seed=0, step=0) -> RolloutContext:
    return RolloutContext(sampler, policy, n, budget, 1.0, seed, step)


def method(name, tokenizer, segmentation=KEYWORD, **resets):
    return build_method(
        name,
        get_task("synthetic"),
        tokenizer,
        [tokenizer.eos_token_id],
        segmentation=segmentation,
        resets=ResetConfig(**resets),
    )


# --- phase 1: Group 1 and the parent --------------------------------------------------------


def official_loop(script: list[Chain], size: int, max_attempts: int):
    """SRPOAgentLoop._fill_rollout_buffer's phase 1, transcribed (one chain at a time)."""
    group1, parent, attempts, chains = [], None, 0, iter(script)
    while (len(group1) < size or parent is None) and attempts < max_attempts:
        chain = next(chains)
        attempts += 1
        if not chain.has_steps:
            if len(group1) < size:
                group1.append(chain)
            continue
        if parent is None and not chain.correct:
            parent = chain
        elif len(group1) < size:
            group1.append(chain)
    return group1, parent, attempts


def chain(i: int, correct: bool, has_steps: bool = True) -> Chain:
    return Chain([i], f"chain {i}", correct, has_steps)


def scripted(scripts: list[list[Chain]]):
    cursors = [0] * len(scripts)
    asked = []

    def sample(indices: list[int]) -> list[Chain]:
        asked.append(list(indices))
        out = []
        for p in indices:
            out.append(scripts[p][cursors[p]])
            cursors[p] += 1
        return out

    return sample, cursors, asked


def test_group1_keeps_four_and_excludes_the_first_failure():
    script = [chain(0, True), chain(1, False), chain(2, True), chain(3, False), chain(4, True)]
    script += [chain(i, True) for i in range(5, 20)]
    sample, cursors, _ = scripted([script])
    (draw,) = collect_fresh(sample, 1, 4, 12)
    assert draw.parent is script[1]
    assert draw.group1 == [script[0], script[2], script[3], script[4]]  # a later failure is kept
    assert draw.attempts == cursors[0] == 5  # no chain sampled past the stopping point


def test_no_failure_in_twelve_attempts_gives_no_parent():
    script = [chain(i, True) for i in range(30)]
    sample, cursors, asked = scripted([script])
    (draw,) = collect_fresh(sample, 1, 4, 12)
    assert draw.parent is None and draw.attempts == cursors[0] == 12
    assert draw.group1 == script[:4] and draw.discarded == script[4:12]
    assert [len(a) for a in asked] == [5, 1, 1, 1, 1, 1, 1, 1]  # never more than still needed


def test_an_empty_chain_is_never_the_parent():
    script = [chain(0, False, has_steps=False), chain(1, False)] + [
        chain(i, True) for i in range(2, 9)
    ]
    sample, _, _ = scripted([script])
    (draw,) = collect_fresh(sample, 1, 4, 12)
    assert draw.parent is script[1] and script[0] in draw.group1


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.booleans(), st.booleans()), min_size=12, max_size=12),
        min_size=1,
        max_size=4,
    ),
    st.integers(1, 4),
    st.integers(1, 12),
)
def test_batched_rounds_equal_the_official_sequential_loop(flags, size, max_attempts):
    scripts = [
        [chain(10 * p + i, ok, steps) for i, (ok, steps) in enumerate(row)]
        for p, row in enumerate(flags)
    ]
    sample, cursors, _ = scripted(scripts)
    draws = collect_fresh(sample, len(scripts), size, max_attempts)
    for p, (draw, script) in enumerate(zip(draws, scripts, strict=True)):
        group1, parent, attempts = official_loop(script, size, max_attempts)
        assert (draw.group1, draw.parent, draw.attempts) == (group1, parent, attempts)
        assert cursors[p] == attempts <= max_attempts


# --- the reset rollout (fake sampler) ---------------------------------------------------------


def test_rollout_groups_prefix_and_prompts(tokenizer, model):
    rows = rows_for(8)
    prompts = [rows[0]["prompt"], rows[8]["prompt"]]
    sampler = ScriptedSampler(tokenizer, {prompts[0]: [RIGHT, WRONG], prompts[1]: [RIGHT]})
    rrpo = method("rrpo", tokenizer)
    out = rrpo.build(context(sampler, model), rows)
    assert set(out) == {
        "prompt_ids",
        "completion_ids",
        "logprobs",
        "response_prefix",
        "group",
        "reset_step",
    }
    assert len(out["completion_ids"]) == 16 and out["logprobs"] is None
    x0, x1 = (tokenizer(p)["input_ids"] for p in prompts)
    # prompt 0: R W R W R → parent = the first W; Group 1 = R R W R; Group 2 = 4 suffixes
    assert out["group"] == [0] * 4 + [1] * 4 + [2] * 8
    right, wrong = sampler.ids(RIGHT), sampler.ids(WRONG)
    assert out["completion_ids"][:4] == [right, right, wrong, right]
    step = out["reset_step"][4]
    assert out["reset_step"] == [0] * 4 + [step] * 4 + [0] * 8 and 1 <= step <= 4
    steps = ["c=a+b=3+8=2", "\nd=c*a=2*3=6", "\ne=d+a=6+3=9", "\nAnswer: 9."]  # keyword split
    prefix = tokenizer("".join(steps[: step - 1]))["input_ids"]
    assert wrong[: len(prefix)] == prefix  # token-aligned steps 1 … N−1 of the parent
    for i in range(4, 8):
        assert out["prompt_ids"][i] == x0 + prefix
        assert out["response_prefix"][i] == "".join(steps[: step - 1])
        assert out["completion_ids"][i] == sampler.ids(SUFFIX)
    assert all(out["prompt_ids"][i] == x0 for i in range(4))
    # prompt 1: never fails → 8 fresh chains, one group, no reset
    assert out["prompt_ids"][8:] == [x1] * 8 and out["completion_ids"][8:] == [right] * 8
    assert out["response_prefix"][8:] == [""] * 8
    # the suffix call asked for x ⊕ prefix, the top-up call for x1 (both in one final call)
    assert sampler.calls[-1].count(x0 + prefix) == 4 and sampler.calls[-1].count(x1) == 4
    metrics = rrpo._pending[1]
    assert metrics["credit/reset_groups"] == 1 and metrics["credit/reset_step_mean"] == step
    assert metrics["credit/reset_num_steps_mean"] == 4
    assert metrics["credit/fresh_attempts_mean"] == (5 + 12) / 2
    assert metrics["credit/fresh_chains"] == 5 + 12 + 4


@pytest.mark.parametrize("step", [1, 2, 3, 4])
def test_every_reset_step_cuts_whole_steps(tokenizer, model, step):
    rrpo = method("rrpo", tokenizer)
    completion = tokenizer(WRONG)["input_ids"] + [tokenizer.eos_token_id]
    parent = rrpo.cut(model, 0, [1, 2], Chain(completion, WRONG, False, True), "p")
    assert parent.num_steps == 4 and parent.boundaries[-1] == len(completion) - 1  # EOS dropped
    assert "".join(parent.steps) == WRONG
    prefix = parent.prefix(step)
    assert prefix == completion[: parent.boundaries[step - 1]]
    assert tokenizer.decode(prefix) == "".join(parent.steps[: step - 1])
    with pytest.raises(ValueError, match="outside"):
        parent.prefix(5)


def test_hybrid_steps_come_from_the_policys_entropies(tokenizer, model):
    rrpo = method("rrpo", tokenizer, SegmentationConfig(num_segments=3))
    completion = tokenizer(WRONG)["input_ids"] + [tokenizer.eos_token_id]
    parent = rrpo.cut(
        model, 0, tokenizer("x\n")["input_ids"], Chain(completion, "", False, True), ""
    )
    assert parent.num_steps == 3 and "".join(parent.steps) == WRONG


def test_suffixes_keep_the_fresh_chain_budget(tokenizer, model):
    rows = rows_for(8, PROBLEMS[:1])
    long_suffix = SUFFIX * 4
    sampler = ScriptedSampler(tokenizer, {rows[0]["prompt"]: [WRONG, RIGHT]}, long_suffix)
    rrpo = method("rrpo", tokenizer)
    budget = len(sampler.ids(WRONG))  # L: the parent used all of it
    out = rrpo.build(context(sampler, model, budget=budget), rows)
    prefix_len = len(out["prompt_ids"][4]) - len(out["prompt_ids"][0])
    for i in range(4, 8):
        assert out["completion_ids"][i] == sampler.ids(long_suffix)[: budget - prefix_len]
        assert prefix_len + len(out["completion_ids"][i]) == budget


def test_evaluation_samples_plain_fresh_chains(tokenizer, model):
    rows = rows_for(3)
    sampler = ScriptedSampler(tokenizer, {rows[0]["prompt"]: [WRONG], rows[3]["prompt"]: [RIGHT]})
    ctx = RolloutContext(sampler, model, 3, 200, 1.0, 0, 0, evaluating=True)
    out = method("srpo", tokenizer).build(ctx, rows)
    x = [tokenizer(r["prompt"])["input_ids"] for r in rows]
    assert out["prompt_ids"] == x and len(sampler.calls) == 1
    assert out["completion_ids"] == [sampler.ids(WRONG)] * 3 + [sampler.ids(RIGHT)] * 3
    assert out["group"] == [0, 0, 0, 2, 2, 2] and out["reset_step"] == [0] * 6


def test_rows_must_come_in_groups_of_n(tokenizer, model):
    rrpo = method("rrpo", tokenizer)
    sampler = ScriptedSampler(tokenizer, {})
    with pytest.raises(ValueError, match="even n"):
        rrpo.build(context(sampler, model, n=3), rows_for(3))
    mixed = rows_for(4)
    with pytest.raises(ValueError, match="copies of one prompt"):
        rrpo.build(context(sampler, model, n=8), mixed)


# --- RRPO's uniform reset ------------------------------------------------------------------


def test_rrpo_step_is_uniform_and_seeded(tokenizer):
    rrpo = method("rrpo", tokenizer)
    parents = [Parent(p, [1], [5] * 8, [0, 2, 4, 6, 8], ["a"] * 4, "") for p in range(4)]
    ctx = context(None, None, seed=7, step=3)
    first = [c.step for c in rrpo.reset_steps(ctx, parents)]
    assert first == [c.step for c in rrpo.reset_steps(ctx, parents)]  # seeded
    other = context(None, None, seed=7, step=4)
    draws = [uniform_step(4, s) for s in range(4000)]
    counts = Counter(draws)
    assert set(counts) == {1, 2, 3, 4}
    assert all(abs(c - 1000) < 150 for c in counts.values())  # ±4.7σ of Binomial(4000, 1/4)
    seen = {tuple(c.step for c in rrpo.reset_steps(other, parents))}
    seen |= {
        tuple(c.step for c in rrpo.reset_steps(context(None, None, s, 0), parents))
        for s in range(20)
    }
    assert len(seen) > 1  # the stream moves with seed and step
    assert uniform_step(1, 123) == 1


# --- per-group advantages -----------------------------------------------------------------


def batch_of(rewards, groups, rows) -> RolloutBatch:
    b = len(rewards)
    return RolloutBatch(
        rows=rows,
        prompt_ids=torch.ones(b, 2, dtype=torch.long),
        prompt_mask=torch.ones(b, 2, dtype=torch.long),
        completion_ids=torch.ones(b, 3, dtype=torch.long),
        completion_mask=torch.ones(b, 3, dtype=torch.long),
        completions=[""] * b,
        rewards=torch.tensor(rewards),
        outcome_advantages=torch.zeros(b),
        groups=torch.tensor(groups),
        step=0,
        seed=0,
    )


def test_each_group_is_normalised_on_its_own(tokenizer):
    rrpo = method("rrpo", tokenizer)
    rrpo._pending = (0, {})
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0]
    groups = [0] * 4 + [1] * 4 + [2] * 4
    rows = [{"reset_step": 0}] * 4 + [{"reset_step": 2}] * 4 + [{"reset_step": 0}] * 4
    out = rrpo.advantages(batch_of(rewards, groups, rows), None)
    std = math.sqrt(0.25 * 0.75)  # population std of (1, 0, 0, 0)
    want = [0.75 / std] + [-0.25 / std] * 3 + [0.0] * 4 + [1.0, -1.0, 1.0, -1.0]
    torch.testing.assert_close(out.advantages, torch.tensor(want))
    assert out.metrics["credit/group2_accuracy"] == 1.0
    with pytest.raises(RuntimeError, match="without a rollout"):
        rrpo.advantages(batch_of(rewards, groups, rows), None)


def test_a_near_constant_group_gets_zero_advantage():
    a = per_group_advantages([0.5, 0.5 + 1e-9, 0.5, 0.5], [0, 0, 0, 0])
    assert torch.equal(a, torch.zeros(4))


# --- the loss: TRL's inherited loss is the on-policy formula ------------------------------------


def reset_trainer(tokenizer, tmp_path, name="rrpo", **kw):
    base = {
        "method": name,
        "prompts_per_step": 1,
        "num_generations": 4,
        "max_completion_length": 12,
        "max_steps": 1,
        "loss_type": "grpo",
        "save_steps": 100,
    }
    s = TrainingSettings.from_dict({**base, **kw})
    task = get_task("synthetic")
    return CreditGRPOTrainer(
        model=build_tiny_model(ARCH, tokenizer, seed=0).train(),
        reward_funcs=[correctness_reward(task)],
        args=grpo_config(s, tmp_path),
        train_dataset=Dataset.from_list(rows_for(1)[:1]),
        processing_class=tokenizer,
        method=build_method(name, task, tokenizer, [tokenizer.eos_token_id], resets=s.resets),
    )


def test_loss_gradient_is_the_reset_formula(tokenizer, tmp_path):
    trainer = reset_trainer(tokenizer, tmp_path)
    check_on_policy_loss(trainer)
    model = trainer.model
    x = tokenizer("a=3, b=8. Find c.\n")["input_ids"]
    prefix = tokenizer("c=a+b")["input_ids"]
    eos = tokenizer.eos_token_id
    # Group 1: responses with x as prompt; Group 2: x ⊕ prefix as prompt, suffix as completion
    prompts = [x, x, x + prefix, x + prefix]
    completions = [
        tokenizer("c=1\nAnswer: 1.")["input_ids"] + [eos],
        tokenizer("c=2")["input_ids"],
        tokenizer("=1\nAnswer: 1.")["input_ids"] + [eos],
        tokenizer("=5")["input_ids"],
    ]
    advantages = torch.tensor([1.0, -1.0, 0.5, -1.5])
    p, t = max(map(len, prompts)), max(map(len, completions))
    pad = tokenizer.pad_token_id
    inputs = {
        "prompt_ids": torch.tensor([[pad] * (p - len(q)) + q for q in prompts]),
        "prompt_mask": torch.tensor([[0] * (p - len(q)) + [1] * len(q) for q in prompts]),
        "completion_ids": torch.tensor([c + [pad] * (t - len(c)) for c in completions]),
        "completion_mask": torch.tensor([[1] * len(c) + [0] * (t - len(c)) for c in completions]),
        "advantages": advantages,
        "old_per_token_logps": None,
    }
    trainer.current_gradient_accumulation_steps = 1
    model.zero_grad()
    trainer.compute_loss(model, inputs).backward()
    got = {n: q.grad.clone() for n, q in model.named_parameters()}

    def formula(loss_tokens):
        """−mean_i A_i·(1/|S_i|) Σ_{k∈S_i} log π(o_{i,k}) over the same padded forward pass."""
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
        mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
        logp = model(input_ids=ids, attention_mask=mask).logits[:, :-1].log_softmax(-1)
        logp = logp.gather(-1, ids[:, 1:, None])[..., 0]  # (B, L−1): log π of token j+1
        terms = []
        for i, s in enumerate(loss_tokens):
            terms.append(advantages[i] * torch.stack([logp[i, k - 1] for k in s]).mean())
        return -torch.stack(terms).mean()

    # S_i: the response tokens of Group 1, only the suffix tokens of Group 2 (prefix excluded)
    suffix_only = [range(p, p + len(c)) for c in completions]
    model.zero_grad()
    formula(suffix_only).backward()
    for name, grad in got.items():
        torch.testing.assert_close(grad, model.get_parameter(name).grad, atol=1e-6, rtol=1e-5)
    with_prefix = [
        range(p - (len(prefix) if i >= 2 else 0), p + len(c)) for i, c in enumerate(completions)
    ]
    model.zero_grad()
    formula(with_prefix).backward()
    diff = max((got[n] - q.grad).abs().max().item() for n, q in model.named_parameters())
    assert diff > 1e-4  # the test can tell a loss that trains on the prefix


def test_settings_that_break_the_on_policy_loss_are_refused(tokenizer, tmp_path):
    trainer = reset_trainer(tokenizer, tmp_path)
    for attr, value, match in [
        ("loss_type", "dapo", "loss_type"),
        ("beta", 0.1, "beta"),
        ("num_iterations", 2, "num_iterations"),
        ("top_entropy_quantile", 0.5, "top_entropy_quantile"),
    ]:
        changed = SimpleNamespace(**{**vars(trainer), attr: value, "args": trainer.args})
        with pytest.raises(ValueError, match=match):
            check_on_policy_loss(changed)
    with pytest.raises(ValueError, match="loss_type 'grpo'"):
        TrainingSettings(method="srpo")  # TRL's default dapo aggregates over tokens
    with pytest.raises(ValueError, match="even num_generations"):
        TrainingSettings(method="rrpo", loss_type="grpo", num_generations=5)
    s = TrainingSettings.from_dict(
        {"method": "srpo", "loss_type": "grpo", "resets": {"localization_max_new_tokens": 16}}
    )
    assert s.resets.localization_max_new_tokens == 16 and s.resets.max_fresh_attempts == 12
    with pytest.raises(ValueError, match="unknown resets key"):
        TrainingSettings.from_dict({"resets": {"attempts": 3}})
    with pytest.raises(ValueError, match="localization_unparsed"):
        ResetConfig(localization_unparsed="last")
    assert {"rrpo", "srpo"} <= set(METHODS)


# --- SRPO's self-localization ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("Step 2 looks fine but step 3 is wrong.\n\\boxed{3}", (3, "boxed")),
        ("\\boxed{ 2 }", (2, "boxed")),
        ("first \\boxed{1} then \\boxed{4}", (4, "boxed")),  # the last box counts
        ("\\boxed{0}", (1, "no_error")),
        ("\\boxed{9} but really Step 2", (2, "prose")),  # out of range → prose fallback
        ("the error is in step 4", (4, "prose")),
        ("\\boxed{\\frac{1}{2}}", (1, "unparsed")),
        ("no idea", (1, "unparsed")),
        ("\\boxed{3", (1, "unparsed")),  # unclosed
        ("", (2, "empty")),  # n // 2
    ],
)
def test_parse_error_step(text, want):
    assert parse_error_step(text, 5) == want


def test_parse_fallbacks_name_n_the_number_of_steps():
    assert parse_error_step("", 1) == (1, "empty")  # max(1, n // 2)
    assert parse_error_step("", 9) == (4, "empty")
    assert parse_error_step("nothing", 9, unparsed_step="middle") == (4, "unparsed")
    with pytest.raises(ValueError, match="num_steps"):
        parse_error_step("\\boxed{1}", 0)


def test_localization_prompt_plain_and_chat(tokenizer):
    steps = ["c=a+b=3+8=2", "\nd=c*a=2*3=6"]
    assert numbered_steps(steps) == "\nStep 1: c=a+b=3+8=2\nStep 2: d=c*a=2*3=6"
    plain = localization_prompt(tokenizer, " a=3. Find d. ", steps)
    assert plain.startswith("You are tasked with localizing the first erroneous thought")
    assert "Problem: a=3. Find d.\n\nYour incorrect reasoning chain:\n\nStep 1: c=a" in plain
    assert "(1 to 2)" in plain and plain.endswith("text after the \\boxed{N}.\n")
    chat = build_byte_tokenizer()
    chat.chat_template = (
        "{% for m in messages %}<u>{{ m['content'] }}</u>{% endfor %}"
        "{% if add_generation_prompt %}<a>{% endif %}"
    )
    wrapped = localization_prompt(chat, "a=3. Find d.", steps)
    assert wrapped == f"<u>{plain}</u><a>"
    with pytest.raises(ValueError, match="at least one step"):
        localization_prompt(tokenizer, "p", [])


def test_localization_falls_back_on_errors_and_empty_outputs(tokenizer, model, monkeypatch):
    def raises(self, prompts, params):
        raise RuntimeError("out of memory")

    monkeypatch.setattr("rredcot.training.localization.HFBackend.generate", raises)
    got = localize_many(model, tokenizer, ["p", "q"], [["a"] * 6, ["b"] * 3])
    assert [(r.step, r.status) for r in got] == [(1, "error"), (1, "error")]

    def empty(self, prompts, params):
        assert params.temperature == 0.3 and params.max_new_tokens == 4096
        assert params.stop_strings == ()  # the task's stop strings would cut the answer
        return [Completion(i, 0, "", [], "stop", 0) for i in range(len(prompts))]

    monkeypatch.setattr("rredcot.training.localization.HFBackend.generate", empty)
    got = localize_many(model, tokenizer, ["p", "q"], [["a"] * 6, ["b"] * 3])
    assert [(r.step, r.status) for r in got] == [(3, "empty"), (1, "empty")]
    assert model.training is False


def test_localize_first_error_with_the_tiny_policy(tokenizer, model):
    steps = ["c=a+b=3+8=2", "\nd=c*a=2*3=6", "\nAnswer: 6."]
    task = get_task("synthetic")
    first = localize_first_error(model, tokenizer, task, PROBLEMS[0], steps, max_new_tokens=6)
    again = localize_first_error(model, tokenizer, task, PROBLEMS[0], steps, max_new_tokens=6)
    assert first == again  # seeded
    step, status = first
    assert 1 <= step <= 3 and status in LOCALIZATION_STATUSES


def test_srpo_rollout_localizes_each_parent(tokenizer, model):
    rows = rows_for(8)
    prompts = [rows[0]["prompt"], rows[8]["prompt"]]
    sampler = ScriptedSampler(tokenizer, {prompts[0]: [WRONG, RIGHT], prompts[1]: [RIGHT, WRONG]})
    srpo = method("srpo", tokenizer, localization_max_new_tokens=4)
    model.train()
    out = srpo.build(context(sampler, model), rows)
    assert model.training  # the policy's mode is restored
    model.eval()
    assert out["group"] == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
    steps = out["reset_step"][4], out["reset_step"][12]
    assert all(1 <= s <= 4 for s in steps)
    metrics = srpo._pending[1]
    assert sum(metrics[f"credit/localization_{s}"] for s in LOCALIZATION_STATUSES) == 2
    assert set(metrics) == set(srpo.metric_names) - {"credit/group2_accuracy"}
    assert srpo._pending[0] > 2 * 1000  # the localization prompts are in the cost


@pytest.mark.parametrize(("unparsed", "step"), [(None, 2), ("middle", 2), ("first", 1)])
def test_srpo_resets_where_the_config_says_when_the_localization_names_no_step(
    tokenizer, model, monkeypatch, unparsed, step
):
    """The policy's localization output has no N ("no idea"): SRPO resets the 4-step parent at
    n // 2 = 2 under `middle` (the default, METHOD.md §6) and at step 1 under `first` (the
    official code); the method hands training.resets.localization_unparsed to the parser."""
    ids = tokenizer("no idea")["input_ids"]

    def unparseable(self, prompts, params):
        return [Completion(i, 0, "no idea", ids, "stop", len(ids)) for i in range(len(prompts))]

    monkeypatch.setattr("rredcot.training.localization.HFBackend.generate", unparseable)
    rows = rows_for(8, PROBLEMS[:1])
    sampler = ScriptedSampler(tokenizer, {rows[0]["prompt"]: [WRONG, RIGHT]})
    resets = {} if unparsed is None else {"localization_unparsed": unparsed}
    srpo = method("srpo", tokenizer, localization_max_new_tokens=4, **resets)
    out = srpo.build(context(sampler, model), rows)
    steps = ["c=a+b=3+8=2", "\nd=c*a=2*3=6", "\ne=d+a=6+3=9", "\nAnswer: 9."]  # the parent's
    assert out["reset_step"] == [0] * 4 + [step] * 4
    assert out["response_prefix"][4:] == ["".join(steps[: step - 1])] * 4
    metrics = srpo._pending[1]
    assert (
        metrics["credit/localization_unparsed"] == 1 and metrics["credit/reset_step_mean"] == step
    )


def test_the_unparsed_reset_defaults_to_the_middle_step(repo):
    """METHOD.md §6's n // 2 is the default everywhere it is set: ResetConfig, config.yaml and
    the schema."""
    import yaml

    assert ResetConfig().localization_unparsed == "middle"
    config = yaml.safe_load((repo / "config.yaml").read_text())
    assert config["training"]["resets"]["localization_unparsed"] == "middle"
    schema = yaml.safe_load((repo / "workflow" / "schemas" / "config.schema.yaml").read_text())
    resets = schema["properties"]["training"]["properties"]["resets"]["properties"]
    assert resets["localization_unparsed"]["default"] == "middle"


# --- the real trainer ------------------------------------------------------------------------


class ParityTask:
    """Correct when the character codes of the response sum to an even number: about half of a
    random policy's responses, so groups have reward spread. Records what it grades."""

    name = "parity"

    def __init__(self) -> None:
        self.graded: list[str] = []

    def grade(self, response: str, gold: str) -> Grade:
        self.graded.append(response)
        return Grade(sum(map(ord, response)) % 2 == 0, None)


class AlternatingTask(ParityTask):
    """Right, wrong, right, … in the order it is asked: hand-made groups. Phase 1 grades a
    step's first 2 × 5 chains in one call, so every prompt meets a failure among its first two
    (a parent for each prompt); the reward pass then grades the 16 rows in order, and each group
    (four consecutive rows) gets two right and two wrong."""

    def grade(self, response: str, gold: str) -> Grade:
        self.graded.append(response)
        return Grade(len(self.graded) % 2 == 1, None)


def parity_trainer(tokenizer, tmp_path, name, task=None, **kw):
    base = {
        "method": name,
        "prompts_per_step": 2,
        "num_generations": 8,
        "max_completion_length": 12,
        "max_steps": 2,
        "loss_type": "grpo",
        "save_steps": 100,
        "learning_rate": 1e-2,
        "resets": {"localization_max_new_tokens": 4},
    }
    s = TrainingSettings.from_dict({**base, **kw})
    task = ParityTask() if task is None else task
    trainer = CreditGRPOTrainer(
        model=build_tiny_model(ARCH, tokenizer, seed=0).train(),
        reward_funcs=[correctness_reward(task)],
        args=grpo_config(s, tmp_path),
        train_dataset=Dataset.from_list(rows_for(1)),
        processing_class=tokenizer,
        method=build_method(
            name,
            task,
            tokenizer,
            [tokenizer.eos_token_id],
            segmentation=s.segmentation,
            resets=s.resets,
        ),
    )
    return trainer, task


def test_the_trainer_grades_prefix_and_suffix_and_keeps_the_prefix_out_of_the_loss(
    tokenizer, tmp_path
):
    trainer, task = parity_trainer(tokenizer, tmp_path, "rrpo")
    rows = rows_for(8)  # TRL's loader hands over one dict per row; the extras are merged in
    random.seed(0)
    torch.manual_seed(0)
    out = trainer._generate_and_score_completions(rows)
    graded = task.graded[-16:]  # the reward function's pass over the final rows
    for i, row in enumerate(rows):
        x = tokenizer(row["prompt"])["input_ids"]
        prompt = out["prompt_ids"][i][out["prompt_mask"][i].bool()].tolist()
        completion = out["completion_ids"][i][out["completion_mask"][i].bool()].tolist()
        text = tokenizer.decode(completion, skip_special_tokens=True)
        prefix = tokenizer.decode(prompt[len(x) :], skip_special_tokens=True)
        assert prompt[: len(x)] == x
        assert graded[i] == prefix + text  # r graded on prefix ⊕ suffix
        assert (len(prompt) > len(x)) <= (row["group"] % 2 == 1)  # only Group 2 has a prefix
    rewards = torch.tensor([float(sum(map(ord, t)) % 2 == 0) for t in graded])
    groups = torch.tensor([r["group"] for r in rows])
    torch.testing.assert_close(out["advantages"], per_group_advantages(rewards, groups))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rrpo", "srpo"])
def test_a_short_run_changes_the_policy(tokenizer, tmp_path, name):
    """Hand-made groups (`AlternatingTask`): both prompts of each step reset, every group has
    reward variance, and two steps change the policy."""
    trainer, _ = parity_trainer(tokenizer, tmp_path, name, task=AlternatingTask())
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs)
    assert [h["credit/reset_groups"] for h in logs] == [2.0, 2.0]
    assert [h["frac_reward_zero_std"] for h in logs] == [0.0, 0.0]
    assert all(h["grad_norm"] > 0 for h in logs)
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])]
    assert changed
