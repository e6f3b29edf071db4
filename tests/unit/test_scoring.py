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
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.qwen3 import modeling_qwen3 as qwen3

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
from rredcot.scoring.encoding import ENCODE_CHUNK
from rredcot.scoring.packed import (
    EncodedTraces,
    GenerationCache,
    Pruning,
    StateQuery,
    _Block,
    _length_buckets,
    _pack_rows,
    _plan_passes,
    _Row,
    encode_traces,
    encoding_from_generation,
    score_encoded,
)
from rredcot.scoring.split import dispatch

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


_F64 = _model("sdpa", torch.float64)  # exact comparisons (the property tests share one model)


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


def _pruned(model, spec: TraceSpec, prune: Pruning | None, **kwargs) -> tuple[torch.Tensor, int]:
    encoded = encode_traces(model, [spec.prompt_ids], [spec.response_ids])
    query = StateQuery(0, list(spec.boundaries), spec.continuations)
    run: list[int] = []
    table = score_encoded(model, encoded, [query], prune=prune, tokens=run, **kwargs)[0]
    return table, run[0]


def test_continuations_that_follow_the_trace_read_its_encoding(vocab):
    # A continuation that starts with the trace's own next tokens τ[b : b + k] is scored from
    # the encoding for those k tokens; only the rest runs. The scores stay the naive ones.
    model = _model("sdpa", torch.float64)
    rng = random.Random(7)
    prompt, response = _ids(rng, 4, vocab), _ids(rng, 12, vocab)
    boundaries = [0, 3, 8, 12]
    other = [v for v in range(vocab) if v not in response][:3]
    continuations = [
        response[3:7] + other[:2],  # follows τ for 4 tokens after b = 3
        response[:12],  # τ itself: at b = 0 every input is the trace's
        other,  # never follows τ
        [response[8]] + other[:1],  # follows τ for one token after b = 8
    ]
    spec = TraceSpec(prompt, response, boundaries, continuations)
    table, run = _pruned(model, spec, None)
    torch.testing.assert_close(table, _naive_states(model, spec), atol=1e-10, rtol=0)

    # inputs run: len(c) − 1 − k per (state, continuation), k = tokens following τ from b
    def follows(c: list[int], b: int) -> int:
        k = 0
        while k < len(c) - 1 and b + k < len(response) and c[k] == response[b + k]:
            k += 1
        return k

    expected = sum(len(c) - 1 - follows(c, b) for b in boundaries for c in continuations)
    assert run == expected
    assert follows(continuations[0], 3) == 4 and follows(continuations[1], 0) == 11
    assert expected < len(boundaries) * sum(len(c) - 1 for c in continuations)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_pruned_scores_are_exact_or_provably_small_property(vocab, data):
    # Rounds of first_chunk, 2·first_chunk … tokens on the keys of the earlier rounds, in waves
    # of at most max_kept tokens: every kept entry equals the naive score; a dropped one (−inf)
    # is naively below anchor − nats.
    model = _F64
    prompt_len = data.draw(st.integers(1, 5), label="P")
    response_len = data.draw(st.integers(0, 12), label="T")
    inner = data.draw(st.sets(st.integers(1, max(response_len - 1, 1)), max_size=3), label="b")
    boundaries = sorted({0, response_len} | {b for b in inner if 0 < b < response_len})
    lengths = data.draw(st.lists(st.integers(1, 14), min_size=2, max_size=4), label="|c|")
    nats = data.draw(st.sampled_from([1e9, 2.0, 8.0, 20.0]), label="nats")
    first = data.draw(st.integers(1, 5), label="first_chunk")
    anchor = data.draw(st.integers(0, len(lengths) - 1), label="anchor")
    max_kept = data.draw(st.one_of(st.none(), st.integers(1, 20)), label="max_kept")
    cap = data.draw(st.one_of(st.none(), st.integers(1, 12)), label="cap")
    row_tokens = data.draw(st.sampled_from([None, 0, 5]), label="row_tokens")
    rng = random.Random(data.draw(st.integers(0, 2**16), label="seed"))
    response = _ids(rng, response_len, vocab)
    continuations = [_ids(rng, n, vocab) for n in lengths]
    if response_len > 2 and data.draw(st.booleans(), label="follows τ"):
        continuations[-1] = response[1:] + continuations[-1]  # skips, then rounds
    spec = TraceSpec(_ids(rng, prompt_len, vocab), response, boundaries, continuations)
    table, _ = _pruned(
        model,
        spec,
        Pruning(nats, first, anchor, max_kept),
        max_tokens_per_pass=cap,
        row_tokens=row_tokens,
    )
    naive = _naive_states(model, spec)
    kept = torch.isfinite(table)
    torch.testing.assert_close(table[kept], naive[kept], atol=1e-10, rtol=0)
    assert kept[:, anchor].all()
    bound = (naive[:, anchor : anchor + 1] - nats).expand_as(naive)
    assert (naive[~kept] < bound[~kept] + 1e-10).all()
    if nats > 1e6:
        assert kept.all()


def test_pruning_drops_and_saves_tokens_by_hand(vocab):
    # Random weights: a 12-token continuation has log-prob ≈ −12·log V, far below a 2-token
    # anchor, so with nats 1 and first_chunk 2 it is dropped after its first round.
    model = _F64
    rng = random.Random(3)
    spec = TraceSpec(
        _ids(rng, 3, vocab),
        _ids(rng, 6, vocab),
        [0, 3, 6],
        [_ids(rng, 2, vocab), _ids(rng, 12, vocab), _ids(rng, 3, vocab)],
    )
    naive = _naive_states(model, spec)
    table, run = _pruned(model, spec, Pruning(1.0, first_chunk=2))
    _, full = _pruned(model, spec, None)
    waved, waved_run = _pruned(model, spec, Pruning(1.0, first_chunk=2, max_kept=11))
    assert (
        torch.equal(torch.isinf(waved), torch.isinf(table)) and waved_run == run
    )  # one wave per item
    assert (naive[:, 1] < naive[:, 0] - 30).all()  # the long one cannot matter
    assert torch.isinf(table[:, 1]).all() and (table[:, 1] < 0).all()
    # each state: anchor 1 input, the long one 2 (first round), the 3-token one 2 (≤ chunk)
    assert full == 3 * (1 + 11 + 2) and run == 3 * (1 + 2 + 2)
    torch.testing.assert_close(table[:, [0, 2]], naive[:, [0, 2]], atol=1e-10, rtol=0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"nats": 0.0}, "nats"),
        ({"nats": math.inf}, "nats"),
        ({"first_chunk": 0}, "first_chunk"),
        ({"anchor": -1}, "anchor"),
        ({"max_kept": 0}, "max_kept"),
    ],
)
def test_pruning_rejects_bad_fields(kwargs, field):
    with pytest.raises(ValueError, match=field):
        Pruning(**{"nats": 10.0, **kwargs})


def test_pruning_anchor_must_be_a_column(vocab):
    rng = random.Random(0)
    spec = TraceSpec(_ids(rng, 2, vocab), _ids(rng, 3, vocab), [0, 3], [_ids(rng, 2, vocab)])
    with pytest.raises(ValueError, match="anchor"):
        _pruned(_F64, spec, Pruning(10.0, anchor=1))


def _generate(model, prompts: list[list[int]], new_tokens: int) -> GenerationCache:
    """Sample with HF generate as TRL does (left-padded prompts) and keep what it computed."""
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    torch.manual_seed(0)
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=True,
        pad_token_id=0,
        return_dict_in_generate=True,
        output_logits=True,
    )
    layers = out.past_key_values.layers
    return GenerationCache(
        ids,
        mask,
        out.sequences,
        [layer.keys for layer in layers],
        [layer.values for layer in layers],
        torch.stack(out.logits, 1),
    )


def test_encoding_from_generation_scores_as_encode_traces(vocab):
    # The keys, values and logits generate computed while sampling serve the scorer as the
    # encoding pass would: same scores, same token log-probs and entropies, no tokens run
    # (up to float32: generate hands back its logits in float32 even for a float64 model).
    model = _model("sdpa", torch.float64)
    rng = random.Random(5)
    prompts = [_ids(rng, 3, vocab), _ids(rng, 6, vocab), _ids(rng, 6, vocab)]
    generation = _generate(model, prompts, 9)
    rows = generation.sequences[:, 6:].tolist()
    responses = [rows[0][:9], rows[1][:3], rows[2][:0]]  # row 0: all 9 (the last never fed)
    reused = encoding_from_generation(model, generation, responses)
    fresh = encode_traces(model, prompts, responses)
    assert reused is not None and reused.prompt_ids == prompts
    assert reused.forward_tokens == 1  # row 0's last token, run on top of the cache
    queries = [
        StateQuery(i, list(range(len(r) + 1)), [_ids(rng, n, vocab) for n in (1, 4, 7)])
        for i, r in enumerate(responses)
    ]
    for got, want in zip(
        score_encoded(model, reused, queries, prune=Pruning(1e9, 2)),
        score_encoded(model, fresh, queries),
        strict=True,
    ):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
        assert want.shape[0] == 1 or (want.max(0).values - want.min(0).values).min() > 1e-2
    for got, want in zip(reused.token_scores(model), fresh.token_scores(model), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)  # entropies ≈ 5 nats
    assert encoding_from_generation(model, generation, [r[:3] for r in rows]).forward_tokens == 0
    assert encoding_from_generation(model, generation, [[]] * 2) is None  # rows disagree
    with pytest.raises(ValueError, match="responses\\[1\\]"):
        encoding_from_generation(model, generation, [[], [vocab - rows[1][0] - 1], []])


@pytest.mark.parametrize("cap", [None, 10])
def test_batch_of_traces_matches_single(model, vocab, cap):
    rng = random.Random(5)
    shared = _ids(rng, 4, vocab)  # two traces of one prompt: its pass and state 0 are shared
    specs = [
        TraceSpec(shared, _ids(rng, 12, vocab), [0, 5, 12], [_ids(rng, 6, vocab)]),
        TraceSpec(
            _ids(rng, 2, vocab),
            _ids(rng, 3, vocab),
            [0, 1, 2, 3],
            [_ids(rng, 1, vocab), _ids(rng, 4, vocab), _ids(rng, 9, vocab)],
        ),
        TraceSpec(_ids(rng, 7, vocab), [], [0], [_ids(rng, 2, vocab), _ids(rng, 5, vocab)]),
        TraceSpec(shared, _ids(rng, 5, vocab), [0, 2, 5], [_ids(rng, 3, vocab)]),
    ]
    batched = score_states_batch(model, specs, max_tokens_per_pass=cap)
    assert [tuple(s.shape) for s in batched] == [(3, 1), (4, 3), (1, 2), (3, 1)]
    for spec, scores in zip(specs, batched, strict=True):
        torch.testing.assert_close(scores, _naive_states(model, spec), atol=1e-5, rtol=0)


def _draw_queries(
    data: st.DataObject, vocab: int, *, max_len: int, max_cont: int, follows: bool
) -> tuple[list[tuple[list[int], list[int]]], list[StateQuery]]:
    """Several traces (some sharing a prompt; T ≤ max_len) and queries naming any of their
    states in any order, continuations of ≤ max_cont tokens (with `follows`, some start with
    the trace's own next tokens: read off the encoding, then run)."""
    rng = random.Random(data.draw(st.integers(0, 2**16), label="seed"))
    prompts = [_ids(rng, data.draw(st.integers(1, 6), label="P"), vocab) for _ in range(2)]
    traces = [
        (prompts[data.draw(st.integers(0, 1), label="prompt")], _ids(rng, n, vocab))
        for n in data.draw(st.lists(st.integers(0, max_len), min_size=1, max_size=4), label="T")
    ]
    queries = []
    for _ in range(data.draw(st.integers(1, 4), label="queries")):
        i = data.draw(st.integers(0, len(traces) - 1), label="trace")
        t = len(traces[i][1])
        states = data.draw(st.lists(st.integers(0, t), min_size=1, max_size=4), label="b")
        lengths = data.draw(st.lists(st.integers(1, max_cont), min_size=1, max_size=3), label="|c|")
        conts = [_ids(rng, n, vocab) for n in lengths]
        if follows and t > 2 and data.draw(st.booleans(), label="follows τ"):
            conts[-1] = traces[i][1][1:] + conts[-1]
        queries.append(StateQuery(i, states, conts))
    return traces, queries


def _naive_query(
    model: torch.nn.Module, prompt: list[int], response: list[int], query
) -> torch.Tensor:
    return torch.tensor(
        [
            [
                sequence_logprob_naive(model, prompt + response[:b], list(c))
                for c in query.continuations
            ]
            for b in query.states
        ],
        dtype=torch.float64,
    )


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_queries_over_shared_prompts_match_naive_property(model, vocab, data):
    """Several traces (some sharing a prompt), queries naming any states in any order, any row
    width and cap: every score equals the naive one."""
    traces, queries = _draw_queries(data, vocab, max_len=12, max_cont=7, follows=False)
    row_tokens = data.draw(st.sampled_from([0, 1, 5, 32, 1000]), label="row_tokens")
    cap = data.draw(st.one_of(st.none(), st.integers(1, 16)), label="cap")
    encoded = encode_traces(
        model, [p for p, _ in traces], [r for _, r in traces], max_tokens_per_pass=cap
    )
    got = score_encoded(model, encoded, queries, max_tokens_per_pass=cap, row_tokens=row_tokens)
    for query, table in zip(queries, got, strict=True):
        prompt, response = traces[query.trace]
        want = _naive_query(model, prompt, response, query)
        torch.testing.assert_close(table, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize(("impl", "dtype", "atol"), VARIANTS)
def test_encoded_token_scores_match_token_logprobs(vocab, impl, dtype, atol, split, monkeypatch):
    """The encoding's per-token log-probs and entropies (the segmentation's input) are those of
    one plain teacher-forced pass, whatever the batch: shared prompts, other lengths, padding;
    `split` (no mask) in chunks of 4 tokens, so the 9-token response takes three."""
    monkeypatch.setattr("rredcot.scoring.encoding.SPLIT_PASS_TOKENS", 4)
    model = _model(impl, dtype)
    rng = random.Random(8)
    prompt = _ids(rng, 5, vocab)
    prompts = [prompt, prompt, _ids(rng, 2, vocab), prompt]
    responses = [_ids(rng, 9, vocab), _ids(rng, 3, vocab), _ids(rng, 6, vocab), []]
    encoded = encode_traces(model, prompts, responses, split=split)
    assert encoded.forward_tokens == 5 + 2 + 9 + 3 + 6  # each distinct prompt once
    assert encoded.hidden.shape[:2] == (4, 1 + 9)
    scores = encoded.token_scores(model)
    for (p, r), (lp, h) in zip(zip(prompts, responses, strict=True), scores, strict=True):
        assert lp.shape == h.shape == (len(r),)
        if not r:
            continue
        ids = torch.tensor([p + r])
        want_lp, want_h = token_logprobs(model, ids, torch.ones_like(ids))
        torch.testing.assert_close(lp, want_lp[0, len(p) - 1 :], atol=atol, rtol=0)
        torch.testing.assert_close(h, want_h[0, len(p) - 1 :], atol=atol, rtol=0)


def _count_passes(model, fn) -> int:
    """Forward passes of the model body (the scorer runs the decoder and projects itself)."""
    calls = []
    handle = model.get_decoder().register_forward_hook(lambda *_: calls.append(1))
    try:
        fn()
    finally:
        handle.remove()
    return len(calls)


@pytest.mark.parametrize(("num_segments", "num_continuations"), [(1, 1), (3, 2), (8, 5), (12, 7)])
def test_passes_do_not_grow_with_k_and_m(
    model, vocab, num_segments, num_continuations, monkeypatch
):
    # Equal continuation lengths and no split by span: every row has the same width, so one
    # continuation pass holds them all, after one prompt pass and one response pass.
    monkeypatch.setattr("rredcot.scoring.layout.SPAN_SLACK", math.inf)
    rng = random.Random(num_segments)
    response = _ids(rng, 30, vocab)
    boundaries = [0, *sorted(rng.sample(range(1, 30), num_segments - 1)), 30]
    continuations = [_ids(rng, 6, vocab) for _ in range(num_continuations)]
    spec = TraceSpec(_ids(rng, 4, vocab), response, boundaries, continuations)
    passes = _count_passes(
        model, lambda: score_states_batch(model, [spec], row_tokens=0, layout="packed")
    )
    assert passes == 3


def test_passes_with_cap_and_one_token_continuations(model, vocab, monkeypatch):
    monkeypatch.setattr("rredcot.scoring.layout.SPAN_SLACK", math.inf)
    rng = random.Random(6)
    prompt, response = _ids(rng, 3, vocab), _ids(rng, 10, vocab)
    single = [[t] for t in _ids(rng, 4, vocab)]
    # one-token continuations are read off the encoding: prompt pass + response pass only
    assert _count_passes(model, lambda: score_states(model, prompt, response, [0, 10], single)) == 2
    # 11 states × 2 blocks of 4 packed tokens; rows of ≤ 8 tokens hold one state each; at most
    # 40 tokens per pass → 5 rows per pass → 3 continuation passes.
    conts = [_ids(rng, 5, vocab), _ids(rng, 5, vocab)]
    spec = TraceSpec(prompt, response, list(range(11)), conts)
    passes = _count_passes(
        model,
        lambda: score_states_batch(
            model, [spec], max_tokens_per_pass=40, row_tokens=8, layout="packed"
        ),
    )
    assert passes == 2 + 3


def test_length_buckets_pack_rows_and_plan_passes_hand_cases(monkeypatch):
    # longest first; a pass grows while rows × longest ≤ (1 + slack) × Σ lengths (and ≤ cap)
    assert _length_buckets([4, 0, 4, 2, 6], None, 1.0) == [[4, 0, 2, 3]]
    assert _length_buckets([4, 0, 4, 2, 6], None, 0.25) == [[4, 0], [2], [3]]
    assert _length_buckets([4, 0, 4, 2, 6], None, 0.0) == [[4], [0, 2], [3]]
    assert _length_buckets([4, 4, 4], 8, 0.0) == [[0, 1], [2]]
    assert _length_buckets([9, 1], 4, 1.0) == [[0], [1]]  # longer than the cap: alone
    assert _length_buckets([0, 0], None) == []

    # query 0: trace 0 at states b = 3 and 1; query 1: trace 1 at b = 0
    queries = [
        StateQuery(0, [3, 1], [[1, 2, 3], [4], [5, 6]]),  # blocks of 2, 0 (skipped), 1 tokens
        StateQuery(1, [0], [[7, 8, 9, 9]]),  # one block of 3
    ]
    per_state = _pack_rows(queries, [5, 2], 0)
    assert [(r.trace, r.width, r.span) for r in per_state] == [(0, 3, 8), (0, 3, 6), (1, 3, 2)]
    assert per_state[0].blocks == (_Block(0, 0, 0, 3), _Block(0, 0, 2, 3))
    packed = _pack_rows(queries, [5, 2], 4)  # trace 0's blocks, earliest state first, ≤ 4
    assert [(r.trace, r.width, r.span) for r in packed] == [(0, 3, 6), (0, 3, 8), (1, 3, 2)]
    assert packed[0].blocks == (_Block(0, 1, 0, 1), _Block(0, 1, 2, 1))

    def row(width: int, span: int) -> _Row:
        return _Row(trace=0, blocks=(), width=width, span=span)

    monkeypatch.setattr("rredcot.scoring.layout.PAD_SLACK", 0.0)
    monkeypatch.setattr("rredcot.scoring.layout.SPAN_SLACK", 0.25)
    rows = [row(4, 10), row(4, 40), row(2, 10), row(4, 12)]
    # widths: [4, 4, 4] and [2]; spans of the first: 40 alone, then 12 with 10 (2 × 12 ≤ 27.5)
    assert _plan_passes(rows, None) == [[rows[1]], [rows[3], rows[0]], [rows[2]]]
    # cap 8: two rows of width 4 per pass at most: [4, 4] (spans 10, 40: split), [4], [2]
    assert _plan_passes(rows, 8) == [[rows[1]], [rows[0]], [rows[3]], [rows[2]]]
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


def test_queries_and_encoding_reject_bad_input(model):
    with pytest.raises(ValueError, match="states"):
        StateQuery(0, [], [[1]])
    with pytest.raises(ValueError, match="continuations"):
        StateQuery(0, [0], [[1], []])
    with pytest.raises(ValueError, match="prompt_ids/response_ids"):
        encode_traces(model, [[1]], [[2], [3]])
    with pytest.raises(ValueError, match="empty prompt"):
        encode_traces(model, [[1], []], [[2], [3]])
    encoded = encode_traces(model, [[1, 2]], [[3, 4, 5]])
    with pytest.raises(ValueError, match=r"queries\[0\].trace"):
        score_encoded(model, encoded, [StateQuery(1, [0], [[1, 2]])])
    with pytest.raises(ValueError, match=r"queries\[0\].states"):
        score_encoded(model, encoded, [StateQuery(0, [0, 4], [[1, 2]])])
    with pytest.raises(ValueError, match="max_tokens_per_pass"):
        score_encoded(model, encoded, [StateQuery(0, [0], [[1, 2]])], max_tokens_per_pass=0)
    assert score_encoded(model, encoded, []) == []


# --------------------------------------------------------------------------- shared layout
# Rows read their trace's KV cache in place (`rredcot.scoring.layout`); the scores stay exact.

VOCAB = len(build_byte_tokenizer())


def _check(table: torch.Tensor, naive: torch.Tensor, prune: Pruning | None, atol: float) -> None:
    """Kept entries equal the naive scores; a dropped one (−inf) is naively below its bound."""
    kept = torch.isfinite(table)
    torch.testing.assert_close(table[kept], naive[kept], atol=atol, rtol=0)
    if prune is None:
        assert kept.all()
        return
    assert kept[:, prune.anchor].all()
    bound = (naive[:, prune.anchor : prune.anchor + 1] - prune.nats).expand_as(naive)
    assert (naive[~kept] < bound[~kept] + atol).all()


@pytest.mark.parametrize("layout", ["shared", "split"])
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_shared_and_split_layouts_match_naive_property(layout, data):
    """Random traces (some sharing a prompt, lengths 0-24), queries at any states, any row
    (`split`: pass) width and cap, with or without pruning (any first chunk and kept-token
    bound)."""
    traces, queries = _draw_queries(data, VOCAB, max_len=24, max_cont=14, follows=True)
    prune = None
    if data.draw(st.booleans(), label="prune"):
        prune = Pruning(
            data.draw(st.sampled_from([1.0, 8.0, 1e9]), label="nats"),
            data.draw(st.integers(1, 4), label="first_chunk"),
            0,
            data.draw(st.one_of(st.none(), st.integers(1, 20)), label="max_kept"),
        )
    row_tokens = data.draw(st.sampled_from([None, 0, 1, 5, 1000]), label="row_tokens")
    cap = data.draw(st.one_of(st.none(), st.integers(1, 16)), label="cap")
    encoded = encode_traces(_F64, [p for p, _ in traces], [r for _, r in traces])
    got = score_encoded(
        _F64,
        encoded,
        queries,
        max_tokens_per_pass=cap,
        row_tokens=row_tokens,
        prune=prune,
        layout=layout,
    )
    for query, table in zip(queries, got, strict=True):
        prompt, response = traces[query.trace]
        _check(table, _naive_query(_F64, prompt, response, query), prune, 1e-10)


def _long_case(rng: random.Random) -> tuple[list[list[int]], list[list[int]], list[StateQuery]]:
    """Traces of several lengths, one longer than the encoding's chunk, two sharing a prompt;
    states spread over each trace, end included; continuations of 1-40 tokens."""
    shared = _ids(rng, 6, VOCAB)
    prompts = [shared, _ids(rng, 3, VOCAB), shared]
    responses = [_ids(rng, ENCODE_CHUNK + 44, VOCAB), _ids(rng, 9, VOCAB), _ids(rng, 61, VOCAB)]
    queries = []
    for i, r in enumerate(responses):
        t = len(r)
        states = sorted({0, t // 3, t // 2, t - 1, t} - {-1})
        queries.append(StateQuery(i, states, [_ids(rng, n, VOCAB) for n in (3, 40, 1, 17)]))
    return prompts, responses, queries


@pytest.mark.parametrize(
    ("impl", "dtype", "atol"),
    [
        ("sdpa", torch.float32, 1e-4),
        ("eager", torch.float32, 1e-4),
        ("sdpa", torch.float64, 1e-10),
        ("eager", torch.float64, 1e-5),  # float32 softmax over 40-token continuations
    ],
)
@pytest.mark.parametrize("prune", [None, Pruning(4.0, first_chunk=2)])
def test_shared_layout_matches_naive_and_packed_on_long_traces(impl, dtype, atol, prune):
    model = _model(impl, dtype)
    prompts, responses, queries = _long_case(random.Random(11))
    encoded = encode_traces(model, prompts, responses)
    shared = score_encoded(model, encoded, queries, prune=prune, layout="shared")
    packed = score_encoded(model, encoded, queries, prune=prune, layout="packed")
    for query, got, old in zip(queries, shared, packed, strict=True):
        naive = _naive_query(model, prompts[query.trace], responses[query.trace], query)
        _check(got, naive, prune, atol)
        torch.testing.assert_close(got, old, atol=2 * atol, rtol=0)  # same −inf entries too


@pytest.mark.parametrize("layout", ["shared", "split"])
def test_shared_and_split_layouts_under_lora_score_the_adapted_policy(with_lora, layout):
    """A peft model (base ⊕ adapter): the rows run the adapter too, pruned or not."""
    adapted = with_lora(_F64).eval()
    rng = random.Random(4)
    specs = [
        TraceSpec(
            _ids(rng, 4, VOCAB),
            _ids(rng, n, VOCAB),
            [0, n // 2, n],
            [_ids(rng, 2, VOCAB), _ids(rng, 11, VOCAB)],
        )
        for n in (5, 30)
    ]
    for prune in (None, Pruning(6.0, first_chunk=3)):
        encoded = encode_traces(
            adapted, [s.prompt_ids for s in specs], [s.response_ids for s in specs]
        )
        queries = [StateQuery(i, s.boundaries, s.continuations) for i, s in enumerate(specs)]
        got = score_encoded(adapted, encoded, queries, prune=prune, layout=layout)
        base = score_encoded(
            _F64,
            encode_traces(_F64, [s.prompt_ids for s in specs], [s.response_ids for s in specs]),
            queries,
        )
        for spec, query, table, on_base in zip(specs, queries, got, base, strict=True):
            naive = _naive_query(adapted, list(spec.prompt_ids), list(spec.response_ids), query)
            _check(table, naive, prune, 1e-10)
            assert (table[:, 0] - on_base[:, 0]).abs().max() > 1e-3  # the adapter matters
    assert score_states_batch(adapted, specs, layout=layout)[1].shape == (3, 2)


class _KeySpy:
    """Records the storage and length of the keys every attention call receives."""

    def __init__(self, impl: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[int, int]] = []
        if impl == "eager":  # the model's module-level default, not in the registry
            self.original = qwen3.eager_attention_forward
            monkeypatch.setattr(qwen3, "eager_attention_forward", self)
        else:
            self.original = ALL_ATTENTION_FUNCTIONS[impl]
            monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS._global_mapping, impl, self)

    def __call__(self, module, query, key, value, *args, **kwargs):
        self.calls.append((key.untyped_storage().data_ptr(), key.shape[2]))
        return self.original(module, query, key, value, *args, **kwargs)


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_shared_rows_read_the_trace_cache_in_place_packed_rows_copy_it(impl, monkeypatch):
    """Continuation passes of the shared layout hand the attention views of the encoding's own
    key buffers (one storage per layer, however many rows), each as long as its row's span plus
    its row; the packed layout's rows get fresh copies. States end well before the traces'
    ends, so every row has room to be written in place."""
    model = _model(impl)
    rng = random.Random(9)
    prompts, responses = (
        [_ids(rng, 5, VOCAB), _ids(rng, 3, VOCAB)],
        [_ids(rng, 60, VOCAB), _ids(rng, 50, VOCAB)],
    )
    queries = [
        StateQuery(
            i, [0, 7, 15, 22], [_ids(rng, 6, VOCAB), _ids(rng, 4, VOCAB), _ids(rng, 9, VOCAB)]
        )
        for i in (0, 1)
    ]
    encoded = encode_traces(model, prompts, responses)
    buffers = {k.untyped_storage().data_ptr() for k in encoded.keys}
    for layout, prune in (("shared", None), ("shared", Pruning(1e9, 2)), ("packed", None)):
        spy = _KeySpy(impl, monkeypatch)
        score_encoded(model, encoded, queries, row_tokens=8, prune=prune, layout=layout)
        monkeypatch.undo()
        seen = {ptr for ptr, _ in spy.calls}
        if layout == "shared":
            assert len(spy.calls) // len(encoded.keys) > 2 * len(queries)  # rows (= passes)
            assert seen <= buffers  # no row got a copy of its trace's cache
            assert max(n for _, n in spy.calls) <= encoded.keys[0].shape[2]
        else:
            assert not seen & buffers


@pytest.mark.parametrize("layout", ["shared", "split"])
def test_shared_and_split_scoring_leave_the_encoding_as_it_was(layout):
    """Shared rows are written into the trace's cache for their pass and put back (split
    passes never write it): after scoring (pruning rounds, states at the traces' ends) the
    encoding is bit for bit the same."""
    prompts, responses, queries = _long_case(random.Random(2))
    encoded = encode_traces(_F64, prompts, responses)
    before = EncodedTraces(
        encoded.prompt_ids,
        encoded.response_ids,
        encoded.prompt_width,
        [k.clone() for k in encoded.keys],
        [v.clone() for v in encoded.values],
        encoded.hidden.clone(),
        encoded.forward_tokens,
    )
    prune = Pruning(3.0, first_chunk=2)
    first = score_encoded(_F64, encoded, queries, prune=prune, layout=layout)
    for got, want in zip(encoded.keys + encoded.values, before.keys + before.values, strict=True):
        assert torch.equal(got, want)
    again = score_encoded(_F64, encoded, queries, prune=prune, layout=layout)
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a, b)


def test_layout_must_be_known():
    encoded = encode_traces(_F64, [[1, 2]], [[3, 4]])
    with pytest.raises(ValueError, match="layout"):
        score_encoded(_F64, encoded, [StateQuery(0, [0], [[1, 2]])], layout="tree")
    with pytest.raises(ValueError, match="layout"):
        score_states_batch(_F64, [], layout="tree")


# --------------------------------------------------------------------------- split layout
# Rows of many traces per pass, no mask: each token's trace slots and its own block attended
# apart and joined by their log-sum-exps (`rredcot.scoring.split`); exact to float rounding.


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
@pytest.mark.parametrize(
    "prune", [None, Pruning(4.0, first_chunk=2), Pruning(1e9, first_chunk=3)], ids=str
)
@pytest.mark.parametrize("row_tokens", [None, 0, 7])
def test_split_layout_equals_the_shared_layout_in_float32(impl, prune, row_tokens, monkeypatch):
    """The split path (its encoding, in chunks of 100 tokens, and its passes) against the
    default (`shared`, dense encoding) in float32, within 1e-5: several traces (one longer
    than the encoding's chunks, two sharing a prompt), ragged continuations (1-40 tokens),
    pruning off, on, and on with nothing dropped (every later round runs on the keys of the
    earlier ones); one pass for all (None), a pass per state (0), narrow passes (7)."""
    monkeypatch.setattr("rredcot.scoring.encoding.SPLIT_PASS_TOKENS", 100)
    model = _model(impl)
    prompts, responses, queries = _long_case(random.Random(11))
    encoded = encode_traces(model, prompts, responses)
    shared = score_encoded(model, encoded, queries, prune=prune)
    split = score_encoded(
        model,
        encode_traces(model, prompts, responses, split=True),
        queries,
        prune=prune,
        row_tokens=row_tokens,
        layout="split",
    )
    for got, want in zip(split, shared, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)  # same −inf entries too


def test_split_layout_scores_the_rows_of_many_traces_in_one_pass():
    """Six traces' continuations (414 tokens) fit one split pass; the shared layout runs a
    row of one trace per pass."""
    rng = random.Random(5)
    prompts = [_ids(rng, 4, VOCAB) for _ in range(6)]
    responses = [_ids(rng, 20, VOCAB) for _ in range(6)]
    conts = [[_ids(rng, n, VOCAB) for n in (3, 9, 14)] for _ in range(6)]
    queries = [StateQuery(i, [0, 7, 20], conts[i]) for i in range(6)]
    encoded = encode_traces(_F64, prompts, responses)
    passes = {
        layout: _count_passes(
            _F64, lambda layout=layout: score_encoded(_F64, encoded, queries, layout=layout)
        )
        for layout in ("shared", "split")
    }
    assert passes == {"shared": 6, "split": 1}


def test_split_layout_refuses_what_it_cannot_score(monkeypatch):
    encoded = encode_traces(_F64, [[1, 2]], [[3, 4]])
    queries = [StateQuery(0, [0, 2], [[5, 6, 7]])]
    meta = _model().to("meta")
    with pytest.raises(ValueError, match="CPU only.*meta"):
        score_encoded(meta, encoded, queries, layout="split")
    with pytest.raises(ValueError, match="CPU only.*meta"):
        encode_traces(meta, [[1, 2]], [[3, 4]], split=True)
    monkeypatch.setattr("rredcot.scoring.split._FLASH_OP", "_no_such_op")
    with pytest.raises(ValueError, match="_no_such_op"):
        score_encoded(_F64, encoded, queries, layout="split")


def test_split_attention_refuses_a_pass_without_its_plan():
    """Under `dispatch` an attention call without its plan (a model that built or got a plain
    mask) fails loudly; the configured attention is put back after."""
    model = _model()
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool).tril()
    with pytest.raises(RuntimeError, match="SplitPlan"), dispatch(model):
        model(input_ids=torch.tensor([[1, 2, 3]]), attention_mask=mask)
    assert model.config._attn_implementation == "sdpa"
