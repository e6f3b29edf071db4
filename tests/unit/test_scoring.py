"""Teacher-forced scoring (rredcot.scoring): per-token log-probs, entropies, packed state scores.

The packed scorer is checked against the naive one-pass-per-(state, continuation) reference on a
tiny randomly initialised Qwen3 (initializer_range 0.1, so the scores depend clearly on the
context and a wrong visibility or position shows up far above the tolerance).
"""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rredcot.models.tiny import build_tiny_model
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.scoring import (
    TraceSpec,
    response_entropies,
    score_states,
    score_states_batch,
    sequence_logprob_naive,
    token_logprobs,
)
from rredcot.scoring.packed import _plan_passes, _Row

ARCH = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "initializer_range": 0.1,
}

# (attention implementation, dtype, absolute tolerance on log-probs). `eager` computes its
# softmax in float32 even for a float64 model, so its float64 check is looser than sdpa's.
VARIANTS = [
    ("sdpa", torch.float32, 1e-5),
    ("eager", torch.float32, 1e-5),
    ("sdpa", torch.float64, 1e-10),
    ("eager", torch.float64, 1e-6),
]


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def vocab() -> int:
    return len(build_byte_tokenizer())


def _model(impl: str = "sdpa", dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    model = build_tiny_model(ARCH, build_byte_tokenizer(), seed=0).to(dtype)
    model.set_attn_implementation(impl)
    return model


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return _model()


def _ids(rng: random.Random, n: int, vocab: int) -> list[int]:
    return [rng.randrange(vocab) for _ in range(n)]


def _naive_states(model, spec: TraceSpec) -> torch.Tensor:
    """The reference: one full pass per (state, continuation)."""
    prompt, response = list(spec.prompt_ids), list(spec.response_ids)
    return torch.tensor(
        [
            [
                sequence_logprob_naive(model, prompt + response[:b], list(c))
                for c in spec.continuations
            ]
            for b in spec.boundaries
        ],
        dtype=torch.float64,
    )


class _UniformLM(torch.nn.Module):
    """Logits all zero: every next token has probability 1/V, whatever the context."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # gives the module a device and dtype

    def forward(self, input_ids, logits_to_keep=0, **_):
        n = input_ids.shape[1] if logits_to_keep == 0 else logits_to_keep
        return SimpleNamespace(logits=torch.zeros(input_ids.shape[0], n, self.vocab))


# --- logprobs.py -----------------------------------------------------------------------------


def test_uniform_model_hand_computed():
    """Under a uniform next-token distribution, log π(c | ·) = −|c| log V and every H = log V."""
    lm = _UniformLM(vocab=8)
    assert sequence_logprob_naive(lm, [1, 2], [3, 4, 5]) == pytest.approx(-3 * math.log(8))
    logprobs, entropies = response_entropies(lm, [1], [2, 3])
    torch.testing.assert_close(logprobs, torch.full((2,), -math.log(8)))
    torch.testing.assert_close(entropies, torch.full((2,), math.log(8)))


def test_token_logprobs_matches_manual_log_softmax(model, vocab):
    ids = torch.randint(0, vocab, (2, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    logprobs, entropies = token_logprobs(model, ids, mask)
    with torch.no_grad():
        log_pi = torch.log_softmax(model(input_ids=ids).logits.double(), dim=-1)[:, :-1]
    expected = log_pi.gather(-1, ids[:, 1:, None]).squeeze(-1)
    assert logprobs.shape == entropies.shape == (2, 8)
    torch.testing.assert_close(logprobs.double(), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(
        entropies.double(), -(log_pi.exp() * log_pi).sum(-1), atol=1e-5, rtol=0
    )


def test_entropies_between_zero_and_log_vocab(model, vocab):
    ids = torch.randint(0, vocab, (3, 20), generator=torch.Generator().manual_seed(1))
    _, entropies = token_logprobs(model, ids, torch.ones_like(ids))
    assert (entropies >= 0).all()
    assert (entropies <= math.log(vocab) + 1e-5).all()
    assert entropies.std() > 0.05  # a real spread, not a constant


@pytest.mark.parametrize("side", ["left", "right"])
def test_token_logprobs_padding_invariance(model, vocab, side):
    rng = random.Random(2)
    seqs = [_ids(rng, 11, vocab), _ids(rng, 6, vocab), _ids(rng, 2, vocab)]
    width = max(map(len, seqs))
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        cols = slice(width - len(s), width) if side == "left" else slice(0, len(s))
        ids[i, cols] = torch.tensor(s)
        mask[i, cols] = 1
    logprobs, entropies = token_logprobs(model, ids, mask)
    for i, s in enumerate(seqs):
        single_lp, single_h = token_logprobs(model, torch.tensor([s]), torch.ones(1, len(s)))
        cols = slice(width - len(s), width - 1) if side == "left" else slice(0, len(s) - 1)
        torch.testing.assert_close(logprobs[i, cols], single_lp[0], atol=1e-5, rtol=0)
        torch.testing.assert_close(entropies[i, cols], single_h[0], atol=1e-5, rtol=0)
        pad = torch.ones(width - 1, dtype=torch.bool)
        pad[cols] = False
        assert (logprobs[i, pad] == 0).all() and (entropies[i, pad] == 0).all()


def test_response_entropies_agree_with_token_logprobs_and_naive(model, vocab):
    rng = random.Random(3)
    prompt, response = _ids(rng, 5, vocab), _ids(rng, 12, vocab)
    logprobs, entropies = response_entropies(model, prompt, response)
    ids = torch.tensor([prompt + response])
    all_lp, all_h = token_logprobs(model, ids, torch.ones_like(ids))
    assert logprobs.shape == entropies.shape == (12,)
    torch.testing.assert_close(logprobs, all_lp[0, 4:], atol=1e-5, rtol=0)
    torch.testing.assert_close(entropies, all_h[0, 4:], atol=1e-5, rtol=0)
    naive = sequence_logprob_naive(model, prompt, response)
    assert float(logprobs.double().sum()) == pytest.approx(naive, abs=1e-4)


def test_logprob_inputs_rejected():
    lm = _UniformLM(vocab=8)
    with pytest.raises(ValueError, match="prefix_ids"):
        sequence_logprob_naive(lm, [], [1])
    with pytest.raises(ValueError, match="continuation_ids"):
        sequence_logprob_naive(lm, [1], [])
    with pytest.raises(ValueError, match="input_ids"):
        token_logprobs(lm, torch.zeros(2, 1, dtype=torch.long), torch.ones(2, 1))


# --- packed.py -------------------------------------------------------------------------------


@pytest.mark.parametrize(("impl", "dtype", "atol"), VARIANTS)
@pytest.mark.parametrize("cap", [None, 7])
def test_packed_matches_naive(vocab, impl, dtype, atol, cap):
    model = _model(impl, dtype)
    rng = random.Random(4)
    prompt, response = _ids(rng, 5, vocab), _ids(rng, 17, vocab)
    boundaries = [0, 1, 6, 11, 17]  # state 0 = bare prompt, state K = whole trace
    continuations = [_ids(rng, n, vocab) for n in (3, 1, 8, 2)]
    spec = TraceSpec(prompt, response, boundaries, continuations)
    packed = score_states(
        model, prompt, response, boundaries, continuations, max_tokens_per_pass=cap
    )
    naive = _naive_states(model, spec)
    assert packed.shape == (5, 4) and packed.dtype == torch.float64
    torch.testing.assert_close(packed, naive, atol=atol, rtol=0)
    # The check has power: the states differ by far more than the tolerance.
    assert (naive.max(0).values - naive.min(0).values).min() > 1000 * atol


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_packed_matches_naive_property(model, vocab, data):
    prompt_len = data.draw(st.integers(1, 6), label="P")
    response_len = data.draw(st.integers(0, 14), label="T")
    inner = data.draw(st.sets(st.integers(1, max(response_len - 1, 1)), max_size=4), label="b")
    boundaries = sorted({0, response_len} | {b for b in inner if 0 < b < response_len})
    lengths = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=4), label="|c|")
    cap = data.draw(st.one_of(st.none(), st.integers(1, 12)), label="cap")
    rng = random.Random(data.draw(st.integers(0, 2**16), label="seed"))
    spec = TraceSpec(
        _ids(rng, prompt_len, vocab),
        _ids(rng, response_len, vocab),
        boundaries,
        [_ids(rng, n, vocab) for n in lengths],
    )
    packed = score_states_batch(model, [spec], max_tokens_per_pass=cap)[0]
    assert packed.shape == (len(boundaries), len(lengths))
    torch.testing.assert_close(packed, _naive_states(model, spec), atol=1e-5, rtol=0)


@pytest.mark.parametrize("cap", [None, 10])
def test_batch_of_traces_matches_single(model, vocab, cap):
    rng = random.Random(5)
    specs = [
        TraceSpec(_ids(rng, 4, vocab), _ids(rng, 12, vocab), [0, 5, 12], [_ids(rng, 6, vocab)]),
        TraceSpec(
            _ids(rng, 2, vocab),
            _ids(rng, 3, vocab),
            [0, 1, 2, 3],
            [_ids(rng, 1, vocab), _ids(rng, 4, vocab), _ids(rng, 9, vocab)],
        ),
        TraceSpec(_ids(rng, 7, vocab), [], [0], [_ids(rng, 2, vocab), _ids(rng, 5, vocab)]),
    ]
    batched = score_states_batch(model, specs, max_tokens_per_pass=cap)
    assert [tuple(s.shape) for s in batched] == [(3, 1), (4, 3), (1, 2)]
    for spec, scores in zip(specs, batched, strict=True):
        torch.testing.assert_close(scores, _naive_states(model, spec), atol=1e-5, rtol=0)


def _count_forwards(model, fn) -> int:
    calls = []
    handle = model.register_forward_hook(lambda *_: calls.append(1))
    try:
        fn()
    finally:
        handle.remove()
    return len(calls)


@pytest.mark.parametrize(("num_segments", "num_continuations"), [(1, 1), (3, 2), (8, 5), (12, 7)])
def test_forward_calls_constant_in_k_and_m(model, vocab, num_segments, num_continuations):
    rng = random.Random(num_segments)
    response = _ids(rng, 30, vocab)
    boundaries = [0, *sorted(rng.sample(range(1, 30), num_segments - 1)), 30]
    continuations = [_ids(rng, rng.randint(2, 9), vocab) for _ in range(num_continuations)]
    calls = _count_forwards(
        model,
        lambda: score_states(model, _ids(rng, 4, vocab), response, boundaries, continuations),
    )
    assert calls == 2  # one trace pass + one continuation pass


def test_forward_calls_with_cap_and_one_token_continuations(model, vocab):
    rng = random.Random(6)
    prompt, response = _ids(rng, 3, vocab), _ids(rng, 10, vocab)
    single = [[t] for t in _ids(rng, 4, vocab)]
    assert (
        _count_forwards(model, lambda: score_states(model, prompt, response, [0, 10], single)) == 1
    )
    # 11 states × 8 packed tokens each, at most 40 tokens per pass → 5 rows per pass → 3 passes.
    conts = [_ids(rng, 5, vocab), _ids(rng, 5, vocab)]
    bounds = list(range(11))
    calls = _count_forwards(
        model, lambda: score_states(model, prompt, response, bounds, conts, max_tokens_per_pass=40)
    )
    assert calls == 1 + 3


def test_split_continuations_and_plan_passes_hand_cases():
    assert _split_continuations([0, 3, 4, 0, 2], None) == [[1, 2, 4]]
    assert _split_continuations([0, 3, 4, 0, 2], 6) == [[1], [2, 4]]
    assert _split_continuations([9, 1], 4) == [[0], [1]]  # too long for the cap: alone
    assert _split_continuations([0, 0], None) == []

    def row(width: int) -> _Row:
        group = SimpleNamespace(inputs=torch.zeros(width))
        return _Row(trace=0, state=0, group=group, visible=1)

    rows = [row(4), row(4), row(2), row(6)]
    assert [len(p) for p in _plan_passes(rows, None)] == [4]
    # (rows × widest) ≤ 12: [4, 4, 2] → 3 × 4 = 12; adding 6 → 4 × 6 > 12.
    assert [len(p) for p in _plan_passes(rows, 12)] == [3, 1]
    assert [len(p) for p in _plan_passes(rows, 5)] == [1, 1, 1, 1]
    assert _plan_passes([], 5) == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"prompt_ids": []}, "prompt_ids"),
        ({"boundaries": [1, 4]}, "boundaries"),
        ({"boundaries": [0, 3]}, "boundaries"),
        ({"boundaries": [0, 2, 2, 4]}, "boundaries"),
        ({"continuations": []}, "continuations"),
        ({"continuations": [[1], []]}, "continuations"),
    ],
)
def test_trace_spec_rejects_bad_fields(kwargs, field):
    fields = {
        "prompt_ids": [1, 2],
        "response_ids": [3, 4, 5, 6],
        "boundaries": [0, 2, 4],
        "continuations": [[7, 8]],
    }
    with pytest.raises(ValueError, match=field):
        TraceSpec(**{**fields, **kwargs})


def test_packed_rejects_unsupported_attention_and_cap(model):
    spec = TraceSpec([1], [2, 3], [0, 2], [[4, 5]])
    flash = SimpleNamespace(config=SimpleNamespace(_attn_implementation="flash_attention_2"))
    with pytest.raises(ValueError, match="_attn_implementation"):
        score_states_batch(flash, [spec])
    with pytest.raises(ValueError, match="max_tokens_per_pass"):
        score_states_batch(model, [spec], max_tokens_per_pass=0)
    assert score_states_batch(model, []) == []
