"""MC state values (METHOD.md §5): scripted rollouts for exact values, a tiny Qwen3 end to end."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rredcot.credit.mc import (
    MCConfig,
    MCTrace,
    MCValues,
    mc_segment_credit,
    mc_state_values,
    mc_state_values_batch,
    token_to_char_boundaries,
)
from rredcot.generation import Completion, SamplingParams
from rredcot.generation.hf import HFBackend
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.tasks import get_task

TASK = get_task("synthetic")
PROMPT = "a=1, b=2. c=a+b. d=c*b. Find d.\n"
RESPONSE = "c=a+b=1+2=3\nd=c*b=3*2=6\nAnswer: 6."

pytestmark = pytest.mark.usefixtures("one_thread")
GOLD = "6"
CHARS = [0, 11, 23, len(RESPONSE)]  # a boundary before each "\n": K = 3


class ScriptedBackend:
    """Returns, for each prompt, the scripted (text, finish_reason) list; records every call."""

    def __init__(self, script: dict[str, list[tuple[str, str]]]) -> None:
        self.script = script
        self.calls: list[tuple[list[str], SamplingParams]] = []

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Completion]:
        self.calls.append((list(prompts), params))
        out = []
        for p, prompt in enumerate(prompts):
            rollouts = self.script[prompt]
            assert len(rollouts) == params.n, "script must give n rollouts per prompt"
            for s, (text, reason) in enumerate(rollouts):
                ids = list(text.encode())
                out.append(Completion(p, s, text, ids, reason, len(ids)))
        return out


STEP1 = "c=a+b=1+2=3"
STEP2 = "\nd=c*b=3*2=6"
SCRIPT = {
    PROMPT: [  # s_0: two finished correct answers, one wrong, one truncated
        (RESPONSE, "stop"),
        ("c=a+b=1+2=3\nd=c*b=3*2=5\nAnswer: 5.", "stop"),
        ("c=a+b=1+2=3\nd=c", "length"),
        ("Answer: 6.", "stop"),
    ],
    PROMPT + STEP1: [  # s_1: three of four right, none truncated
        (STEP2 + "\nAnswer: 6.", "stop"),
        (STEP2 + "\nAnswer: 6.", "stop"),
        (STEP2 + "\nAnswer: 2.", "stop"),
        (STEP2 + "\nAnswer: 6.", "stop"),
    ],
    PROMPT + STEP1 + STEP2: [("\nAns", "length")] * 4,  # s_2: every rollout truncated
}


def _run(backend: object, truncation: str = "drop", **kw: object) -> MCValues:
    options = {"n_rollouts": 4, "budget": 16, "truncation": truncation, "seed": 7} | kw
    return mc_state_values(backend, TASK, PROMPT, RESPONSE, CHARS, GOLD, **options)


# --- exact values from scripted rollouts -------------------------------------------------------


def test_drop_mode_hand_computed() -> None:
    mc = _run(ScriptedBackend(SCRIPT), "drop")
    v = mc.values.tolist()
    assert v[0] == pytest.approx(2 / 3) and v[1] == pytest.approx(3 / 4)
    assert math.isnan(v[2])  # no rollout finished: no estimate
    assert v[3] == 1.0 and mc.reward == 1.0  # V(s_K) = R, graded
    assert mc.n_used.tolist() == [3, 4, 0, 0]
    assert mc.n_truncated.tolist() == [1, 0, 4, 0]
    assert mc.n_dropped == 5 and mc.drop_rate == pytest.approx(5 / 12)
    assert mc.truncation_rate == pytest.approx(5 / 12)
    assert mc.num_segments == 3 and mc.values.dtype == torch.float64
    sigma = mc_segment_credit(mc.values, mc.reward)
    assert sigma[0].item() == pytest.approx(3 / 4 - 2 / 3)
    assert torch.isnan(sigma[1:]).all()  # NaN propagates to both neighbours


def test_zero_mode_hand_computed() -> None:
    mc = _run(ScriptedBackend(SCRIPT), "zero")
    assert mc.values.tolist() == pytest.approx([0.5, 0.75, 0.0, 1.0])
    assert mc.n_used.tolist() == [4, 4, 4, 0]
    assert mc.n_dropped == 0 and mc.drop_rate == 0.0
    assert mc.truncation_rate == pytest.approx(5 / 12)
    sigma = mc_segment_credit(mc.values, mc.reward)
    assert sigma.tolist() == pytest.approx([0.25, -0.75, 1.0])
    assert sigma.sum().item() == pytest.approx(mc.reward - mc.values[0].item())


def test_one_generate_call_with_the_prefix_states() -> None:
    backend = ScriptedBackend(SCRIPT)
    mc = _run(backend, "drop", temperature=0.7, top_p=0.9)
    assert len(backend.calls) == 1
    prompts, params = backend.calls[0]
    assert prompts == [PROMPT + RESPONSE[:c] for c in CHARS[:-1]]  # K states, not K+1
    assert (params.n, params.max_new_tokens, params.seed) == (4, 16, 7)
    assert (params.temperature, params.top_p) == (0.7, 0.9)
    assert params.stop_strings == TASK.stop_strings
    generated = sum(len(text.encode()) for rollouts in SCRIPT.values() for text, _ in rollouts)
    assert mc.forward_tokens == generated  # truncated rollouts are counted too
    assert mc.seconds >= 0


def test_a_batch_is_one_call_and_values_each_trace_alone() -> None:
    """Two traces (the scripted one, and a second with its own states and gold) in one call:
    each gets the values it gets alone; the call holds all K·N rows, trace by trace."""
    other_prompt = "a=2, b=2. c=a*b. Find c.\n"
    other = "c=a*b=2*2=4\nAnswer: 4."
    script = {
        **SCRIPT,
        other_prompt: [("c=a*b=2*2=4\nAnswer: 4.", "stop")] * 2 + [("Answer: 1.", "stop")] * 2,
        other_prompt + other[:11]: [("\nAnswer: 4.", "stop")] * 4,
    }
    traces = [
        MCTrace(PROMPT, RESPONSE, CHARS, GOLD),
        MCTrace(other_prompt, other, [0, 11, len(other)], "4"),
    ]
    backend = ScriptedBackend(script)
    options = {"n_rollouts": 4, "budget": 16, "truncation": "drop", "seed": 7}
    both = mc_state_values_batch(backend, TASK, traces, **options)
    assert len(backend.calls) == 1
    assert backend.calls[0][0] == [PROMPT + RESPONSE[:c] for c in CHARS[:-1]] + [
        other_prompt,
        other_prompt + other[:11],
    ]
    alone = _run(ScriptedBackend(SCRIPT), "drop")
    assert torch.equal(both[0].n_used, alone.n_used)
    assert both[0].values[:2].tolist() == alone.values[:2].tolist()
    assert both[0].forward_tokens == alone.forward_tokens
    assert both[1].values.tolist() == pytest.approx([0.5, 1.0, 1.0])
    assert both[1].num_segments == 2 and both[1].n_dropped == 0
    assert mc_state_values_batch(backend, TASK, [], **options) == []


def test_rollout_is_graded_with_its_prefix() -> None:
    response = "c=a+b=1+2=3\nAnswer: 3."
    cut = response.index("3.", 12)  # state ends right after "Answer: "
    script = {
        PROMPT: [("c=a+b=1+2=3\nAnswer: 4.", "stop")],
        PROMPT + response[:cut]: [("3.", "stop")],  # "3." alone has no answer line
    }
    mc = mc_state_values(
        ScriptedBackend(script),
        TASK,
        PROMPT,
        response,
        [0, cut, len(response)],
        "3",
        n_rollouts=1,
        budget=4,
        truncation="drop",
        seed=0,
    )
    assert mc.values.tolist() == [0.0, 1.0, 1.0]


def test_wrong_final_answer_gives_r_zero() -> None:
    response = RESPONSE.replace("Answer: 6.", "Answer: 5.")
    script = {PROMPT + response[:c]: [("Answer: 6.", "stop")] for c in CHARS[:-1]}
    mc = mc_state_values(
        ScriptedBackend(script),
        TASK,
        PROMPT,
        response,
        CHARS,
        GOLD,
        n_rollouts=1,
        budget=4,
        truncation="zero",
        seed=0,
    )
    assert mc.reward == 0.0 and mc.values[-1].item() == 0.0
    # Only at s_0 does "Answer: 6." start a line; after s_1, s_2 it is glued to a step line.
    assert mc.values[:-1].tolist() == [1.0, 0.0, 0.0]


def test_empty_response_needs_no_rollouts() -> None:
    backend = ScriptedBackend({})
    mc = mc_state_values(
        backend, TASK, PROMPT, "", [0], GOLD, n_rollouts=2, budget=4, truncation="drop", seed=0
    )
    assert backend.calls == [] and mc.values.tolist() == [0.0] and mc.num_segments == 0
    assert mc.drop_rate == 0.0 and mc.forward_tokens == 0


def test_config_asdict_is_the_keyword_set() -> None:
    cfg = MCConfig(n_rollouts=4, budget=16, truncation="zero")
    mc = mc_state_values(
        ScriptedBackend(SCRIPT), TASK, PROMPT, RESPONSE, CHARS, GOLD, seed=1, **asdict(cfg)
    )
    assert mc.values.tolist() == pytest.approx([0.5, 0.75, 0.0, 1.0])


def test_backend_returning_too_few_completions_is_an_error() -> None:
    class Short(ScriptedBackend):
        def generate(self, prompts, params):  # type: ignore[no-untyped-def]
            return super().generate(prompts, params)[:-1]

    with pytest.raises(ValueError, match="completions"):
        _run(Short(SCRIPT), "drop")


# --- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n_rollouts", 0),
        ("n_rollouts", True),
        ("budget", 0),
        ("budget", 2.5),
        ("truncation", "keep"),
        ("temperature", -1.0),
        ("temperature", float("inf")),
        ("top_p", 0.0),
        ("top_p", 1.1),
    ],
)
def test_config_rejects_bad_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"mc.{field}"):
        MCConfig(**{field: value})
    with pytest.raises(ValueError, match=f"mc.{field}"):
        _run(ScriptedBackend(SCRIPT), **({"truncation": "drop"} | {field: value}))


def test_config_from_dict() -> None:
    assert MCConfig.from_dict({"n_rollouts": 8, "truncation": "zero"}) == MCConfig(
        n_rollouts=8, truncation="zero"
    )
    with pytest.raises(ValueError, match="unknown mc key"):
        MCConfig.from_dict({"rollouts": 8})


@pytest.mark.parametrize(
    ("chars", "match"),
    [
        ([0, 11, 23], "end at len"),
        ([1, 11, len(RESPONSE)], "start at 0"),
        ([0, 23, 11, len(RESPONSE)], "non-decreasing"),
        ([], "non-empty"),
        ([0, 1.5, len(RESPONSE)], "ints"),
    ],
)
def test_bad_char_boundaries(chars: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        mc_state_values(
            ScriptedBackend(SCRIPT),
            TASK,
            PROMPT,
            RESPONSE,
            chars,
            GOLD,
            n_rollouts=4,
            budget=4,
            truncation="drop",
            seed=0,
        )


def test_bad_gold_and_seed() -> None:
    with pytest.raises(ValueError, match="gold"):
        mc_state_values(
            ScriptedBackend(SCRIPT),
            TASK,
            PROMPT,
            RESPONSE,
            CHARS,
            " ",
            n_rollouts=4,
            budget=4,
            truncation="drop",
            seed=0,
        )
    with pytest.raises(ValueError, match="seed"):
        _run(ScriptedBackend(SCRIPT), "drop", seed=-1)


# --- segment credit ----------------------------------------------------------------------------


def test_segment_credit_hand_computed() -> None:
    sigma = mc_segment_credit([0.5, 0.25, 1.0, 0.7], reward=1.0)  # V(s_K) := R replaces 0.7
    assert sigma.tolist() == pytest.approx([-0.25, 0.75, 0.0])
    assert mc_segment_credit([0.3], reward=1.0).numel() == 0  # K = 0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0, 1, allow_nan=False), min_size=2, max_size=12),
    st.sampled_from([0.0, 1.0]),
)
def test_segment_credit_sums_to_return_minus_v0(values: list[float], reward: float) -> None:
    sigma = mc_segment_credit(values, reward)
    assert sigma.shape == (len(values) - 1,)
    assert sigma.sum().item() == pytest.approx(reward - values[0], abs=1e-12)


def test_segment_credit_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="values"):
        mc_segment_credit([[0.1, 0.2]], 1.0)
    with pytest.raises(ValueError, match="values"):
        mc_segment_credit([0.1, math.inf], 1.0)
    with pytest.raises(ValueError, match="reward"):
        mc_segment_credit([0.1, 0.2], math.nan)


# --- token -> character boundaries ---------------------------------------------------------------


def test_token_to_char_boundaries_counts_characters_not_bytes() -> None:
    tok = build_byte_tokenizer()
    text = "aé\nbü"  # é and ü are two bytes (two tokens) each
    ids = tok(text)["input_ids"]
    assert len(ids) == 7
    assert token_to_char_boundaries(tok, ids, [0, 1, 3, 4, 7]) == [0, 1, 2, 3, 5]
    # A boundary between the two bytes of "é" snaps down to the start of the character.
    assert token_to_char_boundaries(tok, ids, [0, 2, 7]) == [0, 1, 5]
    assert token_to_char_boundaries(tok, ids, [0, 2, 7], response=text) == [0, 1, 5]
    # A response cut short (a stop string inside the last token) clips the offsets.
    assert token_to_char_boundaries(tok, ids, [0, 4, 7], response="aé") == [0, 2, 2]
    with pytest.raises(ValueError, match="response"):
        token_to_char_boundaries(tok, ids, [0, 7], response="xyz")
    with pytest.raises(ValueError, match="boundaries"):
        token_to_char_boundaries(tok, ids, [0, 3, 3, 7])


# --- a tiny random Qwen3 end to end --------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_backend(tiny_checkpoint: Callable[..., Path]) -> HFBackend:
    path = tiny_checkpoint("mc_qwen3")
    return HFBackend.from_pretrained(str(path), batch_size=16, show_progress=False, device="cpu")


class CountingBackend:
    def __init__(self, inner: HFBackend) -> None:
        self.inner = inner
        self.calls = 0

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Completion]:
        self.calls += 1
        return self.inner.generate(prompts, params)


def test_tiny_model_values(tiny_backend: HFBackend) -> None:
    backend = CountingBackend(tiny_backend)
    mc = _run(backend, "zero", budget=8, n_rollouts=3)
    assert backend.calls == 1
    v = mc.values
    assert ((v >= 0) & (v <= 1)).all()
    assert v[-1].item() == mc.reward == 1.0  # RESPONSE is correct
    assert mc.n_used.tolist() == [3, 3, 3, 0]
    assert 0 < mc.forward_tokens <= 3 * 3 * 8
    sigma = mc_segment_credit(v, mc.reward)
    assert sigma.sum().item() == pytest.approx(mc.reward - v[0].item())


def test_tiny_model_is_deterministic_under_a_seed(tiny_backend: HFBackend) -> None:
    first = _run(tiny_backend, "drop", budget=8, n_rollouts=3, seed=11)
    again = _run(tiny_backend, "drop", budget=8, n_rollouts=3, seed=11)
    assert torch.equal(first.n_truncated, again.n_truncated)
    assert torch.equal(first.values.nan_to_num(-1), again.values.nan_to_num(-1))
    assert first.forward_tokens == again.forward_tokens
    used = first.n_used[:-1] > 0
    assert ((first.values[:-1][used] >= 0) & (first.values[:-1][used] <= 1)).all()


@pytest.fixture(scope="module")
def never_stops(hand_set_lm: Callable[..., torch.nn.Module]) -> HFBackend:
    """A policy that samples "x" or "y" (probability 1/2 each) after any token: never the stop
    string "." nor EOS, so every rollout runs to its budget."""
    tok = build_byte_tokenizer()
    x, y = tok("xy")["input_ids"]
    policy = hand_set_lm(tok, {None: {x: 0.0, y: 0.0}})
    return HFBackend(policy, tok, batch_size=16, show_progress=False)


def test_a_budget_no_rollout_can_finish_in(never_stops: HFBackend) -> None:
    # One new token, never "." or EOS: every rollout is truncated, whatever the seed draws.
    drop = _run(never_stops, "drop", budget=1, n_rollouts=3, seed=0)
    assert drop.n_truncated.tolist() == [3, 3, 3, 0]
    assert torch.isnan(drop.values[:-1]).all() and drop.values[-1].item() == 1.0
    assert drop.n_used.tolist() == [0, 0, 0, 0]
    assert drop.drop_rate == 1.0 and drop.n_dropped == 9
    assert drop.forward_tokens == 9
    zero = _run(never_stops, "zero", budget=1, n_rollouts=3, seed=0)
    assert zero.values.tolist() == [0.0, 0.0, 0.0, 1.0]
    assert zero.drop_rate == 0.0 and zero.truncation_rate == 1.0
    assert mc_segment_credit(zero.values, zero.reward).tolist() == [0.0, 0.0, 1.0]
