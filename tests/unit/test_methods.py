"""Training methods on hand-made batches (rredcot.training.methods): shapes, masks, credit sums."""

from __future__ import annotations

import dataclasses
from itertools import pairwise

import pytest
import torch

from rredcot.credit.advantages import CreditConfig, token_advantages
from rredcot.credit.bayes import OPPOConfig
from rredcot.credit.mc import MCConfig
from rredcot.credit.placebo import permute_within_traces
from rredcot.credit.rredcot import RREDCoTConfig, rredcot_credit
from rredcot.credit.segmentation import SegmentationConfig
from rredcot.data.synthetic import Program, Step
from rredcot.generation.base import Completion
from rredcot.models.tiny import build_tiny_model
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.scoring import response_entropies
from rredcot.scoring.packed import encode_traces
from rredcot.tasks import get_task
from rredcot.training.methods import METHODS, RolloutBatch, build_method
from rredcot.training.methods import rredcot as rredcot_method_module
from rredcot.training.methods.base import response_scores, segment_completions, strip_eos
from rredcot.training.methods.mc import fill_missing_values
from rredcot.training.methods.rredcot import reference_path
from rredcot.training.settings import TrainingSettings

ARCH = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
}
ROWS = [
    {
        "problem_id": "p0",
        "problem": "a=3, b=8, c=2. d=a+b. e=d*a. Find e.",
        "answer": "3",
        "reference": "d=a+b=3+8=1\ne=d*a=1*3=3\nAnswer: 3.",
    },
    {
        "problem_id": "p1",
        "problem": "a=1, b=2, c=4. d=c-a. e=d+b. Find e.",
        "answer": "5",
        "reference": "d=c-a=4-1=3\ne=d+b=3+2=5\nAnswer: 5.",
    },
]
# (problem, response text, ends with EOS, reward); rows 0-1 are group 0, rows 2-3 group 1
RESPONSES = [
    (0, "d=a+b=3+8=1\ne=d*a=1*3=3\nAnswer: 3.", True, 1.0),
    (0, "d=a+b=3+8=2\ne=d*a=2*3=6\nAnswer: 6.", True, 0.0),
    (1, "d=c-a=4-1=3\ne=d+b=3+2=5\nAnswer: 5.", True, 1.0),
    (1, "d=c-a=4-1=3\ne=d+b", False, 0.0),  # truncated: no EOS
]


@pytest.fixture(scope="module")
def tokenizer():
    return build_byte_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    m = build_tiny_model(ARCH, tokenizer, seed=0)
    m.set_attn_implementation("sdpa")
    yield m.eval()
    torch.set_num_threads(threads)


def make_batch(tokenizer, outcome=None, responses=RESPONSES) -> RolloutBatch:
    """Left-padded prompts, right-padded completions, as TRL hands them over."""
    task = get_task("synthetic")
    rows, prompts, completions = [], [], []
    for problem, text, eos, _ in responses:
        row = ROWS[problem]
        prompt = task.build_prompt(row["problem"])
        rows.append({**row, "prompt": prompt})
        prompts.append(tokenizer(prompt)["input_ids"])
        ids = tokenizer(text)["input_ids"]
        completions.append(ids + [tokenizer.eos_token_id] if eos else ids)
    p, t, b = max(map(len, prompts)), max(map(len, completions)), len(prompts)
    prompt_ids = torch.full((b, p), tokenizer.pad_token_id)
    prompt_mask = torch.zeros(b, p, dtype=torch.long)
    completion_ids = torch.full((b, t), tokenizer.pad_token_id)
    completion_mask = torch.zeros(b, t, dtype=torch.long)
    for i, (x, c) in enumerate(zip(prompts, completions, strict=True)):
        prompt_ids[i, p - len(x) :], prompt_mask[i, p - len(x) :] = torch.tensor(x), 1
        completion_ids[i, : len(c)], completion_mask[i, : len(c)] = torch.tensor(c), 1
    rewards = torch.tensor([r for *_, r in responses])
    return RolloutBatch(
        rows=rows,
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        completions=[text for _, text, _, _ in responses],
        rewards=rewards,
        outcome_advantages=torch.tensor([0.7, -0.7, 0.7, -0.7]) if outcome is None else outcome,
        groups=torch.tensor([0, 0, 1, 1]),
        step=3,
        seed=0,
    )


def method(name, tokenizer, **blocks):
    return build_method(name, get_task("synthetic"), tokenizer, [tokenizer.eos_token_id], **blocks)


# --- shared plumbing -------------------------------------------------------------------------


def test_registry_and_unknown_method(tokenizer):
    assert {"grpo", "rredcot", "mc"} <= set(METHODS)
    with pytest.raises(ValueError, match="choose one of"):
        method("ppo", tokenizer)


def test_strip_eos():
    assert strip_eos([5, 6, 9], [9]) == [5, 6]
    assert strip_eos([5, 6], [9]) == [5, 6]  # truncated: nothing to strip
    assert strip_eos([9], [9]) == [9]  # EOS alone stays, so the trace has K ≥ 1


def test_batched_scores_match_one_trace_at_a_time(model, tokenizer):
    batch = make_batch(tokenizer)
    logprobs, entropies, tokens = response_scores(model, batch, rows_per_pass=3)
    assert tokens == int(batch.prompt_mask.sum() + batch.completion_mask.sum())
    for i in range(len(batch)):
        lp, h = response_entropies(model, batch.prompt(i), batch.completion(i))
        n = len(batch.completion(i))
        torch.testing.assert_close(logprobs[i, :n], lp, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(entropies[i, :n], h, atol=1e-5, rtol=1e-5)


def test_segment_completions_cut_lines_and_drop_the_eos(model, tokenizer):
    batch = make_batch(tokenizer)
    keyword = SegmentationConfig(strategy="keyword", num_segments=None)
    traces, tokens = segment_completions(model, tokenizer, batch, keyword, [tokenizer.eos_token_id])
    assert tokens == 0  # the keyword split needs no entropies
    text = RESPONSES[0][1]
    assert traces[0].response_ids == tokenizer(text)["input_ids"]  # EOS dropped
    assert traces[0].boundaries == [0, 11, 23, len(text)]  # a boundary before each "\n"
    assert traces[3].response_ids == batch.completion(3)  # truncated: all tokens kept
    hybrid, tokens = segment_completions(
        model, tokenizer, batch, SegmentationConfig(num_segments=2), [tokenizer.eos_token_id]
    )
    assert tokens > 0 and all(len(t.boundaries) == 3 for t in hybrid)


def test_segment_completions_take_the_callers_scores(model, tokenizer):
    """RREDCoT hands over the log-probs and entropies of its encoding pass: the cut is the one
    the segmentation's own pass gives, and no pass runs."""
    batch = make_batch(tokenizer)
    eos = [tokenizer.eos_token_id]
    config = SegmentationConfig(num_segments=2)
    own, _ = segment_completions(model, tokenizer, batch, config, eos)
    responses = [strip_eos(batch.completion(i), eos) for i in range(len(batch))]
    prompts = [batch.prompt(i) for i in range(len(batch))]
    scores = encode_traces(model, prompts, responses).token_scores(model)
    given, tokens = segment_completions(model, tokenizer, batch, config, eos, scores=scores)
    assert tokens == 0
    assert [t.boundaries for t in given] == [t.boundaries for t in own]
    # the scores really are used: flat entropies make the merge pick other pairs
    flat = [(lp, torch.zeros_like(h)) for lp, h in scores]
    assert segment_completions(model, tokenizer, batch, config, eos, scores=flat)[0] != given
    with pytest.raises(ValueError, match="scores"):
        segment_completions(model, tokenizer, batch, config, eos, scores=scores[:2])
    with pytest.raises(ValueError, match=r"scores\[0\]"):
        short = [(lp[:-1], h[:-1]) for lp, h in scores]
        segment_completions(model, tokenizer, batch, config, eos, scores=short)


def test_reference_path_of_a_row():
    task = get_task("synthetic")
    ref = reference_path(task, ROWS[0])
    assert ref.answer == "3" and ref.segments == ("d=a+b=3+8=1\n", "e=d*a=1*3=3")
    with pytest.raises(ValueError, match="p9.*'reference'"):
        reference_path(task, {"answer": "1", "problem_id": "p9"})
    with pytest.raises(ValueError, match="p9.*answer trigger"):
        reference_path(task, {"reference": "x=1", "answer": "1", "problem_id": "p9"})


def test_own_path_reference_is_the_key_on_each_response_s_path(model, tokenizer):
    """The oracle variant: each response gets the key written in its own line order and
    operand order, so the trace and its reference share one path; configured keeps the row's."""
    program = Program(
        10,
        (("a", 3), ("b", 8), ("c", 2)),
        (Step("d", "a", "+", "b"), Step("e", "c", "*", "a"), Step("f", "d", "-", "e")),
        ("f", "d", "e"),
    )
    row = {"problem_id": "t0", "answer": program.answer, "program": program.to_json()}
    row["reference"] = program.solution_text()  # d, e, f: the dataset's path
    response = "e=a*c=3*2=6\nd=a+b=3+8=1\nf=d-e=1-6=4\nAnswer: 4."  # another path, a slip
    ids = tokenizer(response)["input_ids"]
    oracle = method("rredcot", tokenizer, reference="own_path")
    key = program.solution_text(order=("e", "d", "f"), commuted=("e",))
    task = get_task("synthetic")
    assert oracle._reference(row, ids) == reference_path(task, {**row, "reference": key})
    configured = method("rredcot", tokenizer)
    assert configured._reference(row, ids) == reference_path(task, row)
    with pytest.raises(ValueError, match="training.reference"):
        TrainingSettings(method="rredcot", reference="sampled")


# --- grpo ------------------------------------------------------------------------------------


def test_grpo_hands_back_trls_advantages(model, tokenizer):
    batch = make_batch(tokenizer)
    out = method("grpo", tokenizer).advantages(batch, model)
    assert out.advantages is batch.outcome_advantages and out.forward_tokens == 0


# --- rredcot ---------------------------------------------------------------------------------


@pytest.mark.parametrize("equivalence", ["terminal_correction", "rescale"])
def test_rredcot_sigma_is_the_estimators_and_fills_its_segments(model, tokenizer, equivalence):
    seg = SegmentationConfig(num_segments=3)
    estimator = RREDCoTConfig(return_equivalence=equivalence)
    m = method("rredcot", tokenizer, segmentation=seg, rredcot=estimator)
    batch = make_batch(tokenizer)
    credit = m.segment_credit(batch, model)
    sigmas, boundaries, tokens, metrics = (
        credit.sigmas,
        credit.boundaries,
        credit.forward_tokens,
        credit.metrics,
    )
    task = get_task("synthetic")
    for i, (sigma, b) in enumerate(zip(sigmas, boundaries, strict=True)):
        response = strip_eos(batch.completion(i), [tokenizer.eos_token_id])
        ref = reference_path(task, batch.rows[i])
        want = rredcot_credit(
            model, tokenizer, task, batch.prompt(i), response, b, ref, RESPONSES[i][3], estimator
        )
        torch.testing.assert_close(sigma, want.sigma)  # the last state is skipped when it cancels
        reward = RESPONSES[i][3]
        if equivalence == "terminal_correction":
            assert float(sigma.sum()) == pytest.approx(reward - float(want.phi[0]))
        else:  # the potential moved, so Σσ = R
            assert float(sigma.sum()) == pytest.approx(reward, abs=1e-9)
        assert len(b) == 4 and b[-1] == len(response)
    assert tokens > 0 and set(metrics) == set(m.metric_names)

    out = m.advantages(batch, model)
    mask = batch.completion_mask
    assert out.advantages.shape == mask.shape and out.forward_tokens == tokens
    assert (out.advantages[mask == 0] == 0).all()
    want = token_advantages(
        sigmas, boundaries, batch.groups, mask, m.credit, batch.outcome_advantages
    )
    torch.testing.assert_close(out.advantages, want)
    for i, b in enumerate(boundaries):  # one value per segment; the EOS joins the last one
        row = out.advantages[i]
        for left, right in zip(b, b[1:], strict=False):
            assert (row[left:right] == row[left]).all()
        if RESPONSES[i][2]:
            assert row[b[-1]] == row[b[-1] - 1]


def test_rredcot_scores_identical_responses_once(model, tokenizer):
    m = method("rredcot", tokenizer)
    twice = [RESPONSES[0], RESPONSES[0], RESPONSES[2], RESPONSES[3]]
    batch = make_batch(tokenizer, responses=twice)
    credit = m.segment_credit(batch, model)
    assert credit.metrics["credit/scored_fraction"] == 3 / 4
    torch.testing.assert_close(credit.sigmas[0], credit.sigmas[1])
    alone = m.segment_credit(make_batch(tokenizer, responses=twice[1:]), model)
    torch.testing.assert_close(credit.sigmas[1:], alone.sigmas, atol=1e-6, rtol=1e-6)
    # the duplicate costs nothing: each distinct response is encoded (and scored) once
    assert credit.forward_tokens == alone.forward_tokens


def _record(monkeypatch, name: str, keyword: str) -> list:
    """The `keyword` argument of every later call of the rredcot method module's `name`."""
    seen = []
    real = getattr(rredcot_method_module, name)

    def spy(*args, **kwargs):
        seen.append(kwargs[keyword])
        return real(*args, **kwargs)

    monkeypatch.setattr(rredcot_method_module, name, spy)
    return seen


def test_rredcot_split_layout_gives_the_default_credit(model, tokenizer, monkeypatch):
    """`layout: split` (its encoding too: the batch carries no generation to reuse) gives the
    default layout's σ to float rounding, for the same tokens."""
    split_flags = _record(monkeypatch, "encode_within_budget", "split")
    batch = make_batch(tokenizer)
    shared = method("rredcot", tokenizer).segment_credit(batch, model)
    split = method("rredcot", tokenizer, rredcot=RREDCoTConfig(layout="split"))
    credit = split.segment_credit(batch, model)
    assert split_flags == [False, True]
    assert credit.forward_tokens == shared.forward_tokens
    for got, want in zip(credit.sigmas, shared.sigmas, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_rredcot_with_sampled_suffixes_draws_per_step(model, tokenizer, monkeypatch):
    """suffixes = 1: cheaper than all, and the draw is seeded by the run's seed and the step."""
    sampled = method("rredcot", tokenizer, rredcot=RREDCoTConfig(suffixes=1))
    every = method("rredcot", tokenizer)
    batch = make_batch(tokenizer)
    credit = sampled.segment_credit(batch, model)
    again = sampled.segment_credit(batch, model)
    assert credit.forward_tokens < every.segment_credit(batch, model).forward_tokens
    for a, b in zip(credit.sigmas, again.sigmas, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    seeds = _record(monkeypatch, "rredcot_credit_batch", "seed")
    sampled.segment_credit(dataclasses.replace(batch, step=7, seed=2), model)
    assert seeds == ["2/7"]


def test_rredcot_mixed_with_beta_zero_is_grpo(model, tokenizer):
    batch = make_batch(tokenizer)
    m = method("rredcot", tokenizer, credit=CreditConfig("mixed", beta=0.0))
    out = m.advantages(batch, model)
    want = batch.outcome_advantages[:, None] * batch.completion_mask
    torch.testing.assert_close(out.advantages, want.float())


# --- mc --------------------------------------------------------------------------------------


def test_fill_missing_values_passes_the_share_on():
    nan = float("nan")
    filled, missing = fill_missing_values(torch.tensor([0.5, nan, nan, 1.0], dtype=torch.float64))
    assert filled.tolist() == [0.5, 1.0, 1.0, 1.0] and missing == 2
    with pytest.raises(ValueError, match="V̂\\(s_K\\)"):
        fill_missing_values(torch.tensor([0.5, nan]))


class ScriptedEngine:
    """A generation backend with fixed rollouts per state prompt (the text and how it ended),
    standing in for the trainer's engine (`batch.engine`): MC's values are then known exactly."""

    def __init__(self, script: dict[str, list[tuple[str, str]]]) -> None:
        self.script = script
        self.calls = 0
        self.generated = 0  # tokens of every rollout handed out

    def generate(self, prompts, params):
        self.calls += 1
        out = []
        for p, prompt in enumerate(prompts):
            assert len(self.script[prompt]) == params.n
            for s, (text, reason) in enumerate(self.script[prompt]):
                ids = list(text.encode())
                out.append(Completion(p, s, text, ids, reason, len(ids)))
                self.generated += len(ids)
        return out


def mc_script() -> dict[str, list[tuple[str, str]]]:
    """Two rollouts per state of RESPONSES (keyword steps; rows 0-1 share s_0, rows 2-3 s_0 and
    s_1), graded against the row's answer: the values in the comments, under zero | drop."""
    task = get_task("synthetic")
    p0, p1 = (task.build_prompt(row["problem"]) for row in ROWS)
    stop, cut = "stop", "length"
    return {
        p0: [("d=a+b=3+8=1\ne=d*a=1*3=3\nAnswer: 3.", stop), ("Answer: 6.", stop)],  # .5 | .5
        p0 + "d=a+b=3+8=1": [("\nAnswer: 3.", stop)] * 2,  # 1 | 1
        p0 + "d=a+b=3+8=1\ne=d*a=1*3=3": [("\nAnswer: 3.", stop), ("\nAns", cut)],  # .5 | 1
        p0 + "d=a+b=3+8=2": [("\nAnswer: 6.", stop), ("\nAnswer: 3.", stop)],  # .5 | .5
        p0 + "d=a+b=3+8=2\ne=d*a=2*3=6": [("\nAnswer: 6.", stop)] * 2,  # 0 | 0
        p1: [("Answer: 5.", stop), ("d=c", cut)],  # .5 | 1
        p1 + "d=c-a=4-1=3": [("\nAnswer: 5.", stop)] * 2,  # 1 | 1
        p1 + "d=c-a=4-1=3\ne=d+b=3+2=5": [("\nAns", cut)] * 2,  # 0 | none
    }


@pytest.mark.parametrize(
    ("truncation", "sigmas", "dropped", "missing"),
    [
        # V̂ with R last: row 0 (.5, 1, .5, 1), 1 (.5, .5, 0, 0), 2 (.5, 1, 0, 1), 3 (.5, 1, 0)
        ("zero", [[0.5, -0.5, 0.5], [0.0, -0.5, 0.0], [0.5, -1.0, 1.0], [0.5, -1.0]], 0, 0),
        # row 0 (.5, 1, 1, 1), row 2 (1, 1, none → 1, 1): the missing state passes its share on
        ("drop", [[0.5, 0.0, 0.0], [0.0, -0.5, 0.0], [0.0, 0.0, 0.0], [0.0, -1.0]], 5, 1),
    ],
)
def test_mc_sigma_from_fixed_rollout_outcomes(
    model, tokenizer, truncation, sigmas, dropped, missing
):
    """σ_k = V̂(s_k) − V̂(s_{k−1}) with V̂(s_K) = R, from rollouts whose outcomes are fixed by
    hand (the engine the trainer hands over, one call for every state of every row)."""
    engine = ScriptedEngine(mc_script())
    mc = MCConfig(n_rollouts=2, budget=6, truncation=truncation)
    keyword = SegmentationConfig(strategy="keyword", num_segments=None)
    m = method("mc", tokenizer, segmentation=keyword, mc=mc)
    batch = dataclasses.replace(make_batch(tokenizer), engine=engine)
    credit = m.segment_credit(batch, model)
    got, boundaries, tokens, metrics = (
        credit.sigmas,
        credit.boundaries,
        credit.forward_tokens,
        credit.metrics,
    )
    assert engine.calls == 1
    assert [s.tolist() for s in got] == [pytest.approx(s) for s in sigmas]
    assert [len(b) - 1 for b in boundaries] == [3, 3, 3, 2]
    assert metrics["credit/mc_rollouts"] == 11 * 2  # Σ K_i states · N rollouts
    assert metrics["credit/mc_drop_rate"] == pytest.approx(dropped / 22)
    assert metrics["credit/mc_missing_states"] == missing
    assert tokens == engine.generated  # the keyword split costs no pass; the rollouts do
    out = m.advantages(batch, model)
    mask = batch.completion_mask
    want = token_advantages(got, boundaries, batch.groups, mask, m.credit, batch.outcome_advantages)
    torch.testing.assert_close(out.advantages, want)


def test_mc_on_the_policy_is_seeded_by_the_run_and_step(model, tokenizer):
    """Without an engine the rollouts come from the policy (HF backend), seeded by (seed, step,
    row): the same batch gives the same advantages; padding gets 0."""
    mc = MCConfig(n_rollouts=2, budget=6, truncation="zero")
    m = method("mc", tokenizer, segmentation=SegmentationConfig(num_segments=2), mc=mc)
    batch = make_batch(tokenizer)
    out = m.advantages(batch, model)
    assert out.advantages.shape == batch.completion_mask.shape and out.forward_tokens > 0
    assert (out.advantages[batch.completion_mask == 0] == 0).all()
    assert out.metrics["credit/mc_rollouts"] == 4 * 2 * 2  # B rows · K states · N rollouts
    torch.testing.assert_close(out.advantages, m.advantages(batch, model).advantages)


# --- LoRA: the credit passes see the adapted policy ----------------------------------------------


@pytest.mark.parametrize("name", ["rredcot", "mc"])
def test_credit_under_lora_is_the_adapted_policys(model, tokenizer, name, monkeypatch, with_lora):
    """With `training.lora` the trainer hands the methods a peft model: RREDCoT's packed scorer
    and MC's rollouts must run base ⊕ adapter, i.e. give what the merged weights give (and not
    what the base gives)."""
    import copy

    from rredcot.generation.hf import HFBackend

    adapted = with_lora(model)
    merged = copy.deepcopy(adapted).merge_and_unload().eval()
    adapted.eval()
    rollouts = []  # MC: the token ids of every rollout, per call
    generate = HFBackend.generate

    def spy(self, prompts, params):
        out = generate(self, prompts, params)
        rollouts.append([c.token_ids for c in out])
        return out

    monkeypatch.setattr(HFBackend, "generate", spy)
    blocks = {"segmentation": SegmentationConfig(num_segments=2, strategy="hybrid")}
    if name == "mc":
        blocks["mc"] = MCConfig(n_rollouts=2, budget=6, truncation="zero")
    m = method(name, tokenizer, **blocks)
    batch = make_batch(tokenizer)
    got = m.segment_credit(batch, adapted)
    want = m.segment_credit(batch, merged)
    on_base = m.segment_credit(batch, model)
    for a, b in zip(got.sigmas, want.sigmas, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=0)
    assert got.boundaries == want.boundaries
    assert got.metrics == pytest.approx(want.metrics, abs=1e-4)
    if name == "mc":
        assert rollouts[0] == rollouts[1] != rollouts[2]
    else:  # the tiny random policy's potentials are ~1e-27: compare them relatively
        phi0 = [out.metrics["credit/phi0_mean"] for out in (got, want, on_base)]
        assert phi0[0] == pytest.approx(phi0[1], rel=1e-3, abs=0)
        assert phi0[0] != pytest.approx(phi0[2], rel=1e-2, abs=0)


# --- oracle_step: the positive control's checker values -----------------------------------------

PROGRAMS = [  # the answer keys of ROWS (modulus 10)
    Program(
        10, (("a", 3), ("b", 8), ("c", 2)), (Step("d", "a", "+", "b"), Step("e", "d", "*", "a"))
    ),
    Program(
        10, (("a", 1), ("b", 2), ("c", 4)), (Step("d", "c", "-", "a"), Step("e", "d", "+", "b"))
    ),
]


def test_oracle_line_values_by_hand():
    from rredcot.credit.oracle import checker_values, line_accuracy, lines_written

    assert lines_written("a\nbb\nc", [0, 1, 2, 4, 6]) == [0, 1, 1, 2, 3]
    assert lines_written("a\n", [1, 2]) == [1, 2]  # the empty last line ends at the end
    # right / attempted up to the first error: (3 + 1 + 0) / (3 + 2 + 1)
    assert line_accuracy([None, 2, 1], [3, 3, 3]) == pytest.approx(4 / 6)
    assert checker_values([0, 1, 2], 2, 3, 0.5) == [0.125, 0.25, 0.0]
    assert checker_values([0, 1, 2], None, 3, 0.5) == [0.125, 0.25, 0.5]
    with pytest.raises(ValueError, match="not a line"):
        line_accuracy([4], [3])


def test_oracle_step_credits_each_line_by_the_checker(model, tokenizer):
    """RESPONSES: right; wrong at line 1; right; line 2 cut short (malformed). p̂ = 7/9 (lines
    right 3 + 0 + 3 + 1 of attempted 3 + 1 + 3 + 2); V(s_k) = p̂^(3 − k) before the first
    error, 0 after it, V(s_K) = R."""
    batch = make_batch(tokenizer)
    keys = [PROGRAMS[p].to_json() for p, *_ in RESPONSES]
    rows = [{**row, "program": key} for row, key in zip(batch.rows, keys, strict=True)]
    batch = dataclasses.replace(batch, rows=rows)
    m = method("oracle_step", tokenizer)
    credit = m.segment_credit(batch, model)
    p = 7 / 9
    want = [
        [p**2 - p**3, p - p**2, 1 - p],
        [-(p**3), 0.0, 0.0],
        [p**2 - p**3, p - p**2, 1 - p],
        [p**2 - p**3, -(p**2)],
    ]
    for got, expected in zip(credit.sigmas, want, strict=True):
        torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64))
    assert credit.forward_tokens == 0
    assert credit.metrics["credit/oracle_line_accuracy"] == pytest.approx(p)
    assert credit.metrics["credit/oracle_error_share"] == 0.5
    # one segment per line: the boundaries sit before each newline of the response
    text = RESPONSES[0][1]
    cuts = [i for i, ch in enumerate(text) if ch == "\n"]
    assert credit.boundaries[0] == [0, *cuts, len(text)]  # the byte tokenizer: one token a char
    out = m.advantages(batch, model)  # the shared §4 path: the wrong line is pushed down
    b = credit.boundaries[1]
    assert (out.advantages[1, b[0] : b[1]] < 0).all() and (out.advantages[0] >= 0).all()


def test_oracle_step_needs_the_answer_key(model, tokenizer):
    with pytest.raises(ValueError, match="program"):
        method("oracle_step", tokenizer).segment_credit(make_batch(tokenizer), model)
    with pytest.raises(ValueError, match="synthetic world's step checker"):
        TrainingSettings(method="oracle_step", task="math")


def test_the_oracles_placebo_runs_through_the_methods_own_path(model, tokenizer):
    """`oracle_step` with credit.placebo perm: the same σ per trace, moved; the advantages are
    those of the shared §4 transform applied to the moved σ."""
    batch = make_batch(tokenizer)
    keys = [PROGRAMS[p].to_json() for p, *_ in RESPONSES]
    rows = [{**row, "program": key} for row, key in zip(batch.rows, keys, strict=True)]
    batch = dataclasses.replace(batch, rows=rows)
    credit = CreditConfig(mode="mixed", center="none")
    own = method("oracle_step", tokenizer, credit=credit)
    placebo = method("oracle_step", tokenizer, credit=dataclasses.replace(credit, placebo="perm"))
    sigma = own.segment_credit(batch, model)
    moved = permute_within_traces(sigma.sigmas, batch.seed, batch.step)
    want = token_advantages(
        moved,
        sigma.boundaries,
        batch.groups,
        batch.completion_mask,
        credit,
        batch.outcome_advantages,
    )
    torch.testing.assert_close(placebo.advantages(batch, model).advantages, want)


# --- oppo ------------------------------------------------------------------------------------


def oppo_by_hand(model, tokenizer, batch, m, i):
    """(r_t (T,), p (T+1,), p_0) of row i from one-trace passes with and without O."""
    from rredcot.credit.bayes import bayes_values, prior_probabilities

    response = strip_eos(batch.completion(i), [tokenizer.eos_token_id])
    plain, _ = response_entropies(model, batch.prompt(i), response)
    oracle, _ = response_entropies(model, m.oracle_ids(batch.rows[i]), response)
    r = (oracle - plain).double()
    p0 = prior_probabilities(batch.rewards, batch.groups, m.estimator.prior)[i]
    p = bayes_values(r[None], torch.ones(1, len(r)), p0[None], m.estimator.clip)[0]
    return r, p, float(p0)


def test_oppo_builds_from_the_run_settings(tokenizer):
    settings = TrainingSettings.from_dict(
        {"method": "oppo", "oppo": {"level": "segment", "prior": "half"}}
    )
    m = build_method("oppo", get_task("synthetic"), tokenizer, [tokenizer.eos_token_id], settings)
    assert (m.name, m.estimator.level, m.estimator.prior) == ("oppo", "segment", "half")
    assert m.credit == settings.credit and m.reads_reference and m.reuses_generation


def test_oppo_oracle_prompt_puts_the_reference_before_the_prompt_end(tokenizer):
    m = method("oppo", tokenizer)
    row = {**ROWS[0], "prompt": get_task("synthetic").build_prompt(ROWS[0]["problem"])}
    text = tokenizer.decode(m.oracle_ids(row))
    assert text == ROWS[0]["problem"] + "\n\nReference solution:\n" + ROWS[0]["reference"] + "\n"
    with pytest.raises(ValueError, match="'p0'.*answer trigger"):
        m.oracle_ids({**row, "reference": "no trigger in it"})


def test_oppo_token_level_sigma_is_the_bayes_advantage_of_each_token(model, tokenizer):
    m = method("oppo", tokenizer)
    batch = make_batch(tokenizer)
    credit = m.segment_credit(batch, model)
    for i, (sigma, b) in enumerate(zip(credit.sigmas, credit.boundaries, strict=True)):
        r, p, p0 = oppo_by_hand(model, tokenizer, batch, m, i)
        n, reward = len(r), RESPONSES[i][3]
        assert b == list(range(n + 1))  # every token its own segment
        want = torch.cat([p[1:n] - p[: n - 1], torch.tensor([reward]) - p[n - 1]])
        torch.testing.assert_close(sigma, want, atol=1e-5, rtol=1e-5)
        assert float(sigma.sum()) == pytest.approx(reward - p0, abs=1e-5)  # return equivalence
    # both passes are counted: x ⊕ z and x ⊕ O ⊕ z
    oracle_prompts = sum(len(m.oracle_ids(row)) for row in batch.rows)
    mask = batch.completion_mask
    want_tokens = int(batch.prompt_mask.sum()) + oracle_prompts + 2 * int(mask.sum())
    assert credit.forward_tokens == want_tokens
    assert set(credit.metrics) == set(m.metric_names)

    out = m.advantages(batch, model)
    assert out.advantages.shape == mask.shape and out.forward_tokens == want_tokens
    assert (out.advantages[mask == 0] == 0).all()
    want = token_advantages(
        credit.sigmas, credit.boundaries, batch.groups, mask, m.credit, batch.outcome_advantages
    )
    torch.testing.assert_close(out.advantages, want)
    for i, b in enumerate(credit.boundaries):  # the EOS takes its last token's advantage
        if RESPONSES[i][2]:
            assert out.advantages[i, b[-1]] == out.advantages[i, b[-1] - 1]
        assert len(set(out.advantages[i, : b[-1]].tolist())) > 1  # per token, not per row


def test_oppo_segment_level_sums_the_token_advantages_within_each_segment(model, tokenizer):
    """σ_k = p_{b_k} − p_{b_{k−1}} (last: R − p_{b_{K−1}}) is the sum of the delta token
    advantages of segment k, on the configured segmentation."""
    seg = SegmentationConfig(num_segments=3)
    tokens = method("oppo", tokenizer).segment_credit(make_batch(tokenizer), model)
    m = method("oppo", tokenizer, segmentation=seg, oppo=OPPOConfig(level="segment"))
    batch = make_batch(tokenizer)
    credit = m.segment_credit(batch, model)
    for i, (sigma, b) in enumerate(zip(credit.sigmas, credit.boundaries, strict=True)):
        assert len(b) == 4 and b[-1] == len(tokens.sigmas[i])
        sums = torch.stack([tokens.sigmas[i][left:right].sum() for left, right in pairwise(b)])
        torch.testing.assert_close(sigma, sums)
        _, p, _ = oppo_by_hand(model, tokenizer, batch, m, i)
        torch.testing.assert_close(sigma[:-1], p[b[1:-1]] - p[b[:-2]], atol=1e-5, rtol=1e-5)
    out = m.advantages(batch, model)
    assert out.advantages.shape == batch.completion_mask.shape
    assert (out.advantages[batch.completion_mask == 0] == 0).all()
