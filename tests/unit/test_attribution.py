"""Attribution baselines (rredcot.credit.attribution), METHOD.md §5, on a tiny random Qwen3.

Every value is checked against an independent computation: plain one-sequence forward passes
for f, LOO and attention, a central finite difference for gradient × input, and the exact
2^K enumeration for the permutation Shapley estimate.
"""

from __future__ import annotations

import copy
import itertools
import math
import types

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

from rredcot.credit.attribution import (
    ATTRIBUTIONS,
    AttributionConfig,
    CoalitionValue,
    attention_mass,
    attribute,
    coalition_logprob,
    gradient_x_input,
    leave_one_out,
    sample_permutations,
    shapley_exact,
    shapley_exact_from_values,
    shapley_from_permutations,
    shapley_permutation,
)
from rredcot.credit.attribution import (
    AttributionTrace as T,
)
from rredcot.models.tiny import build_tiny_model
from rredcot.models.tokenizer import build_byte_tokenizer

# A large init scale so that a random model's log-probs and attention depend visibly on context.
ARCH = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "initializer_range": 0.3,
}
STEPS = ["3*4=12\n", "2+12=14\n", "ok\n", "so\n", "it is\n", "14\n"]


@pytest.fixture(scope="module")
def tokenizer():
    return build_byte_tokenizer()


def _rms_norm_float64(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """Qwen3RMSNorm without its float32 round trip, so a float64 model is float64 throughout."""
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * hidden_states * torch.rsqrt(variance + self.variance_epsilon)


@pytest.fixture(scope="module")
def model(tokenizer):
    """A float64 tiny model: finite differences need more than Qwen3RMSNorm's float32."""
    torch.set_num_threads(1)
    model = build_tiny_model(ARCH, tokenizer, seed=0).double()
    for module in model.modules():
        if isinstance(module, Qwen3RMSNorm):
            module.forward = types.MethodType(_rms_norm_float64, module)
    return model


@pytest.fixture(scope="module")
def trace(tokenizer):
    """(prompt_ids, response_ids, boundaries, answer_ids, trigger_len) with K = 6 segments."""
    prompt = tokenizer("Q: 2+3*4\n")["input_ids"]
    response, boundaries = [], [0]
    for step in STEPS:
        response += tokenizer(step)["input_ids"]
        boundaries.append(len(response))
    trigger = tokenizer("\nAnswer: ")["input_ids"]
    answer = trigger + tokenizer("14.")["input_ids"]
    return prompt, response, boundaries, answer, len(trigger)


@pytest.fixture(scope="module")
def short_trace(trace):
    """The first three segments of `trace` (K = 3)."""
    prompt, response, boundaries, answer, trigger_len = trace
    return prompt, response[: boundaries[3]], boundaries[:4], answer, trigger_len


def naive_f(model, prompt, response, boundaries, coalition, answer, trigger_len) -> float:
    """log π(y* ⊕ close | x ⊕ τ_S ⊕ A) from one unpadded pass and a full log-softmax."""
    kept = [t for k in sorted(coalition) for t in response[boundaries[k] : boundaries[k + 1]]]
    ids = torch.tensor([prompt + kept + answer])
    with torch.no_grad():
        logp = model(ids).logits[0].double().log_softmax(-1)  # (L, V)
    n = len(answer) - trigger_len
    positions = range(ids.shape[1] - n - 1, ids.shape[1] - 1)
    return sum(float(logp[p, ids[0, p + 1]]) for p in positions)


def all_subsets(k: int) -> list[frozenset[int]]:
    return [frozenset(c) for r in range(k + 1) for c in itertools.combinations(range(k), r)]


# --- f ----------------------------------------------------------------------------------------


def test_full_and_partial_coalitions_equal_naive_passes(model, trace):
    prompt, response, boundaries, answer, trigger_len = trace
    coalitions = [frozenset(range(6)), frozenset(), frozenset({0, 2, 5}), frozenset({4})]
    got = coalition_logprob(model, T(prompt, response, boundaries, answer, trigger_len), coalitions)
    want = [
        naive_f(model, prompt, response, boundaries, c, answer, trigger_len) for c in coalitions
    ]
    assert got.shape == (4,) and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    assert len(set(np.round(got, 6))) == 4  # the coalitions really differ


def test_trigger_tokens_are_context_not_score(model, trace):
    """trigger_len = 0 also scores A, so f drops by log π(A | x ⊕ τ)."""
    prompt, response, boundaries, answer, trigger_len = trace
    full = [frozenset(range(6))]
    with_trigger = coalition_logprob(model, T(prompt, response, boundaries, answer, 0), full)[0]
    answer_only = coalition_logprob(
        model, T(prompt, response, boundaries, answer, trigger_len), full
    )
    trigger_score = naive_f(model, prompt, response, boundaries, range(6), answer, 0)
    assert with_trigger == pytest.approx(trigger_score, abs=1e-10)
    assert with_trigger < answer_only[0] - 1e-6


def test_batched_equals_unbatched_and_duplicates_are_scored_once(model, trace):
    prompt, response, boundaries, answer, trigger_len = trace
    coalitions = all_subsets(6)
    batched = CoalitionValue(model, T(prompt, response, boundaries, answer, trigger_len))
    one_row = CoalitionValue(
        model, T(prompt, response, boundaries, answer, trigger_len), max_tokens_per_pass=1
    )
    a = batched(coalitions)
    np.testing.assert_allclose(a, one_row(coalitions), rtol=0, atol=1e-10)
    fed = [len(batched.sequence(c)) - 1 for c in coalitions]  # the last token is not fed
    assert one_row.forward_tokens == sum(fed)  # one row per pass: no padding
    assert batched.forward_tokens == len(fed) * max(fed)  # all 64 rows in one padded pass
    tokens = batched.forward_tokens
    again = batched([coalitions[5], coalitions[5], coalitions[0]])
    np.testing.assert_array_equal(again, a[[5, 5, 0]])
    assert batched.forward_tokens == tokens  # cached: nothing new fed


def test_bad_inputs_raise(model, trace):
    prompt, response, boundaries, answer, trigger_len = trace
    with pytest.raises(ValueError, match="out of range"):
        coalition_logprob(model, T(prompt, response, boundaries, answer, trigger_len), [{6}])
    with pytest.raises(ValueError, match="boundaries"):
        leave_one_out(model, T(prompt, response, [0, 5, 5, len(response)], answer, trigger_len))
    with pytest.raises(ValueError, match="boundaries"):
        leave_one_out(model, T(prompt, response, [0, 5], answer, trigger_len))
    with pytest.raises(ValueError, match="trigger_len"):
        leave_one_out(model, T(prompt, response, boundaries, answer, len(answer)))
    with pytest.raises(ValueError, match="prompt_ids"):
        gradient_x_input(model, T([], response, boundaries, answer, trigger_len))
    with pytest.raises(ValueError, match="max_segments"):
        shapley_exact(model, T(prompt, response, boundaries, answer, trigger_len), max_segments=5)
    with pytest.raises(ValueError, match="shapley_permutations"):
        AttributionConfig(shapley_permutations=0)
    with pytest.raises(ValueError, match="unknown name"):
        attribute("lime", model, T(prompt, response, boundaries, answer, trigger_len))


# --- LOO and Shapley --------------------------------------------------------------------------


def test_leave_one_out_by_hand(model, trace):
    prompt, response, boundaries, answer, trigger_len = trace
    result = leave_one_out(model, T(prompt, response, boundaries, answer, trigger_len))
    full = naive_f(model, prompt, response, boundaries, range(6), answer, trigger_len)
    for k in range(6):
        rest = set(range(6)) - {k}
        without = naive_f(model, prompt, response, boundaries, rest, answer, trigger_len)
        assert result.values[k] == pytest.approx(full - without, abs=1e-10)
    assert result.forward_tokens > 0 and np.abs(result.values).max() > 1e-3


def test_shapley_over_all_permutations_equals_exact_enumeration(model, trace):
    prompt, response, boundaries, answer, trigger_len = trace
    exact = shapley_exact(model, T(prompt, response, boundaries, answer, trigger_len))
    perms = shapley_permutation(
        model, T(prompt, response, boundaries, answer, trigger_len), all_permutations=True
    )
    np.testing.assert_allclose(perms.values, exact.values, rtol=0, atol=1e-10)
    assert exact.forward_tokens == perms.forward_tokens  # the same 64 coalitions, once each
    everyone_and_no_one = [frozenset(range(6)), frozenset()]
    f = coalition_logprob(model, T(*trace), everyone_and_no_one)
    assert exact.values.sum() == pytest.approx(f[0] - f[1], abs=1e-10)  # efficiency


def test_sampled_shapley_converges_to_exact(model, short_trace):
    prompt, response, boundaries, answer, trigger_len = short_trace
    exact = shapley_exact(model, T(prompt, response, boundaries, answer, trigger_len)).values
    errors = {}
    for m in (3, 300, 30000):
        est = shapley_permutation(
            model, T(prompt, response, boundaries, answer, trigger_len), permutations=m, seed=1
        ).values
        errors[m] = np.abs(est - exact).max()
        assert est.sum() == pytest.approx(exact.sum(), abs=1e-10)  # telescoping, any M
    assert errors[30000] < errors[300] < errors[3]
    assert errors[30000] < 0.02 * np.abs(exact).max()


def test_antithetic_pairs_each_order_with_its_reverse():
    orders = sample_permutations(5, 7, seed=3, antithetic=True)
    assert len(orders) == 7
    for first, second in zip(orders[0::2], orders[1::2], strict=False):
        assert second == first[::-1]
    assert sample_permutations(5, 7, seed=3) == sample_permutations(5, 7, seed=3)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.floats(-10, 10), min_size=2**n, max_size=2**n),
        )
    )
)
def test_shapley_of_random_games(game):
    """Any game: all-orders average = exact formula, efficiency, and the null player gets 0."""
    n, table = game
    index = {c: i for i, c in enumerate(all_subsets(n))}

    def f(coalitions):
        return np.array([table[index[c]] for c in coalitions])

    exact = shapley_exact_from_values(f, n)
    by_orders = shapley_from_permutations(f, n, list(itertools.permutations(range(n))))
    np.testing.assert_allclose(by_orders, exact, atol=1e-9)
    assert exact.sum() == pytest.approx(table[index[frozenset(range(n))]] - table[0], abs=1e-9)

    # Player n (added, contributes nothing) gets 0 and the others keep their values.
    def g(coalitions):
        return f([c - {n} for c in coalitions])

    with_null = shapley_exact_from_values(g, n + 1)
    np.testing.assert_allclose(with_null, [*exact, 0.0], atol=1e-9)


def test_additive_game_is_recovered_by_any_sample():
    weights = np.array([0.5, -2.0, 3.0, 0.25])

    def f(coalitions):
        return np.array([weights[sorted(c)].sum() for c in coalitions])

    orders = sample_permutations(4, 3, seed=0)
    np.testing.assert_allclose(shapley_from_permutations(f, 4, orders), weights, atol=1e-12)
    assert math.isclose(shapley_exact_from_values(f, 4).sum(), weights.sum())


# --- gradient × input -------------------------------------------------------------------------


def f_of_embeddings(model, embeds, n_target, targets) -> float:
    with torch.no_grad():
        logp = model(inputs_embeds=embeds).logits[0, -n_target:].double().log_softmax(-1)
    return float(logp.gather(-1, targets[:, None]).sum())


def test_gradient_x_input_matches_finite_difference(model, trace):
    """Σ_j ⟨∇_{e_j} f, e_j⟩ over segment k = d/dα f(segment k's embeddings scaled by 1 + α)."""
    prompt, response, boundaries, answer, trigger_len = trace
    was_training = model.training
    result = gradient_x_input(model, T(prompt, response, boundaries, answer, trigger_len))
    assert all(p.grad is None for p in model.parameters())
    assert model.training == was_training

    ids = torch.tensor([prompt + response + answer[:-1]])
    targets = torch.tensor(answer[trigger_len:])
    base = model.get_input_embeddings()(ids).detach()
    h = 1e-5
    for k in range(6):
        span = slice(len(prompt) + boundaries[k], len(prompt) + boundaries[k + 1])
        up, down = base.clone(), base.clone()
        up[0, span] *= 1 + h
        down[0, span] *= 1 - h
        fd = (
            f_of_embeddings(model, up, len(targets), targets)
            - f_of_embeddings(model, down, len(targets), targets)
        ) / (2 * h)
        assert result.values[k] == pytest.approx(fd, rel=1e-6, abs=1e-9)
    assert np.abs(result.values).max() > 1e-4
    assert result.forward_tokens == result.backward_tokens == ids.shape[1]


def test_gradient_x_input_under_inference_mode(model, short_trace):
    with torch.inference_mode():
        inside = gradient_x_input(model, T(*short_trace)).values
    np.testing.assert_allclose(inside, gradient_x_input(model, T(*short_trace)).values, atol=1e-12)


# --- attention --------------------------------------------------------------------------------


def test_attention_mass_matches_full_pass_attentions(model, trace):
    prompt, response, boundaries, answer, trigger_len = trace
    assert model.config._attn_implementation == "sdpa"
    result = attention_mass(model, T(prompt, response, boundaries, answer, trigger_len))
    assert model.config._attn_implementation == "sdpa"  # restored

    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    ids = torch.tensor([prompt + response + answer])
    with torch.no_grad():
        attn = torch.stack(eager(ids, output_attentions=True).attentions)  # (layers, 1, H, L, L)
    rows = attn[:, 0, :, -(len(answer) - trigger_len) :, :]  # answer queries
    for k in range(6):
        keys = slice(len(prompt) + boundaries[k], len(prompt) + boundaries[k + 1])
        want = float(rows[..., keys].sum(-1).mean())
        assert result.values[k] == pytest.approx(want, abs=1e-7)  # eager softmax is float32
    assert (result.values >= 0).all() and result.values.sum() <= 1.0
    # an eager model stays eager and gives the same values
    np.testing.assert_allclose(
        attention_mass(eager, T(prompt, response, boundaries, answer, trigger_len)).values,
        result.values,
        atol=1e-7,
    )
    assert eager.config._attn_implementation == "eager"


def test_attention_mass_of_uniform_attention(model, trace):
    """With zero queries every position attends uniformly to itself and all earlier ones."""
    prompt, response, boundaries, answer, trigger_len = trace
    uniform = copy.deepcopy(model)
    for layer in uniform.model.layers:
        torch.nn.init.zeros_(layer.self_attn.q_proj.weight)
    values = attention_mass(uniform, T(prompt, response, boundaries, answer, trigger_len)).values
    total = len(prompt) + len(response) + len(answer)
    queries = range(total - (len(answer) - trigger_len), total)
    for k in range(6):
        size = boundaries[k + 1] - boundaries[k]
        want = np.mean([size / (q + 1) for q in queries])
        assert values[k] == pytest.approx(want, rel=1e-6)  # eager softmax is float32


# --- registry ---------------------------------------------------------------------------------


def test_registry_runs_every_attribution_with_one_signature(model, short_trace):
    config = AttributionConfig(shapley_permutations=8, seed=2)
    assert set(ATTRIBUTIONS) == {"loo", "shapley", "grad_x_input", "attention"}
    for name in ATTRIBUTIONS:
        result = attribute(name, model, T(*short_trace), config)
        assert result.values.shape == (3,) and np.isfinite(result.values).all()
        assert result.forward_tokens > 0 and result.seconds >= 0
    direct = shapley_permutation(model, T(*short_trace), permutations=8, seed=2)
    np.testing.assert_array_equal(
        attribute("shapley", model, T(*short_trace), config).values, direct.values
    )
    np.testing.assert_array_equal(
        attribute("loo", model, T(*short_trace)).values,
        leave_one_out(model, T(*short_trace)).values,
    )
