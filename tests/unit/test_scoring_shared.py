"""The `shared` scoring layout: rows read their trace's KV cache in place, scores stay exact.

Every score of the shared layout is checked against the naive one-pass-per-(state,
continuation) reference (and the earlier `packed` layout) on tiny random Qwen3 models: several
trace lengths (across the encoding's chunk boundary), with and without pruning, both attention
implementations, under a LoRA adapter. The no-copy property is checked on the keys the attention
receives: in the shared layout they live in the encoding's own buffers.
"""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.qwen3 import modeling_qwen3 as qwen3

from rredcot.models.tiny import build_tiny_model
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.scoring import sequence_logprob_naive
from rredcot.scoring.encoding import ENCODE_CHUNK
from rredcot.scoring.packed import (
    EncodedTraces,
    Pruning,
    StateQuery,
    encode_traces,
    score_encoded,
    score_states_batch,
)
from rredcot.scoring.queries import TraceSpec

ARCH = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "initializer_range": 0.1,
}
VOCAB = len(build_byte_tokenizer())


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _model(impl: str = "sdpa", dtype: torch.dtype = torch.float64) -> torch.nn.Module:
    model = build_tiny_model(ARCH, build_byte_tokenizer(), seed=0).to(dtype)
    model.set_attn_implementation(impl)
    return model


_F64 = _model()


def _ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(VOCAB) for _ in range(n)]


def _naive(model: torch.nn.Module, prompt: list[int], response: list[int], query) -> torch.Tensor:
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


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_shared_layout_matches_naive_property(data):
    """Random traces (some sharing a prompt, lengths 0-24), queries at any states, any row
    width and cap, with or without pruning (any first chunk and kept-token bound)."""
    rng = random.Random(data.draw(st.integers(0, 2**16), label="seed"))
    prompts = [_ids(rng, data.draw(st.integers(1, 5), label="P")) for _ in range(2)]
    traces = [
        (prompts[data.draw(st.integers(0, 1), label="prompt")], _ids(rng, n))
        for n in data.draw(st.lists(st.integers(0, 24), min_size=1, max_size=3), label="T")
    ]
    queries = []
    for _ in range(data.draw(st.integers(1, 3), label="queries")):
        i = data.draw(st.integers(0, len(traces) - 1), label="trace")
        t = len(traces[i][1])
        states = data.draw(st.lists(st.integers(0, t), min_size=1, max_size=4), label="b")
        lengths = data.draw(st.lists(st.integers(1, 14), min_size=1, max_size=3), label="|c|")
        conts = [_ids(rng, n) for n in lengths]
        if t > 2 and data.draw(st.booleans(), label="follows τ"):
            conts[-1] = traces[i][1][1:] + conts[-1]  # read off the encoding, then run
        queries.append(StateQuery(i, states, conts))
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
        layout="shared",
    )
    for query, table in zip(queries, got, strict=True):
        prompt, response = traces[query.trace]
        _check(table, _naive(_F64, prompt, response, query), prune, 1e-10)


def _long_case(rng: random.Random) -> tuple[list[list[int]], list[list[int]], list[StateQuery]]:
    """Traces of several lengths, one longer than the encoding's chunk, two sharing a prompt;
    states spread over each trace, end included; continuations of 1-40 tokens."""
    shared = _ids(rng, 6)
    prompts = [shared, _ids(rng, 3), shared]
    responses = [_ids(rng, ENCODE_CHUNK + 44), _ids(rng, 9), _ids(rng, 61)]
    queries = []
    for i, r in enumerate(responses):
        t = len(r)
        states = sorted({0, t // 3, t // 2, t - 1, t} - {-1})
        queries.append(StateQuery(i, states, [_ids(rng, n) for n in (3, 40, 1, 17)]))
    return prompts, responses, queries


@pytest.mark.parametrize(
    ("impl", "dtype", "atol"),
    [
        ("sdpa", torch.float32, 1e-4),
        ("eager", torch.float32, 1e-4),
        ("sdpa", torch.float64, 1e-10),
        ("eager", torch.float64, 1e-6),
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
        naive = _naive(model, prompts[query.trace], responses[query.trace], query)
        _check(got, naive, prune, atol)
        torch.testing.assert_close(got, old, atol=2 * atol, rtol=0)  # same −inf entries too


def test_shared_layout_under_lora_scores_the_adapted_policy():
    """A peft model (base ⊕ adapter): the shared rows run the adapter too, pruned or not."""
    import copy

    from peft import get_peft_model

    from rredcot.training.lora import LoraSettings

    torch.manual_seed(0)  # LoRA's A init draws from the global stream
    adapted = get_peft_model(copy.deepcopy(_F64), LoraSettings(r=4, alpha=8).peft_config())
    with torch.no_grad():  # B starts at 0 (adapter = identity): give it a visible update
        for name, p in adapted.named_parameters():
            if ".lora_B." in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    adapted.eval()
    rng = random.Random(4)
    specs = [
        TraceSpec(_ids(rng, 4), _ids(rng, n), [0, n // 2, n], [_ids(rng, 2), _ids(rng, 11)])
        for n in (5, 30)
    ]
    for prune in (None, Pruning(6.0, first_chunk=3)):
        encoded = encode_traces(
            adapted, [s.prompt_ids for s in specs], [s.response_ids for s in specs]
        )
        queries = [StateQuery(i, s.boundaries, s.continuations) for i, s in enumerate(specs)]
        got = score_encoded(adapted, encoded, queries, prune=prune)
        base = score_encoded(
            _F64,
            encode_traces(_F64, [s.prompt_ids for s in specs], [s.response_ids for s in specs]),
            queries,
        )
        for spec, query, table, on_base in zip(specs, queries, got, base, strict=True):
            naive = _naive(adapted, list(spec.prompt_ids), list(spec.response_ids), query)
            _check(table, naive, prune, 1e-10)
            assert (table[:, 0] - on_base[:, 0]).abs().max() > 1e-3  # the adapter matters
    assert score_states_batch(adapted, specs)[1].shape == (3, 2)


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
    prompts, responses = [_ids(rng, 5), _ids(rng, 3)], [_ids(rng, 60), _ids(rng, 50)]
    queries = [
        StateQuery(i, [0, 7, 15, 22], [_ids(rng, 6), _ids(rng, 4), _ids(rng, 9)]) for i in (0, 1)
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


def test_shared_scoring_leaves_the_encoding_as_it_was():
    """Rows are written into the trace's cache for their pass and put back: after scoring
    (pruning rounds, states at the traces' ends) the encoding is bit for bit the same."""
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
    first = score_encoded(_F64, encoded, queries, prune=Pruning(3.0, first_chunk=2))
    for got, want in zip(encoded.keys + encoded.values, before.keys + before.values, strict=True):
        assert torch.equal(got, want)
    again = score_encoded(_F64, encoded, queries, prune=Pruning(3.0, first_chunk=2))
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a, b)


def test_layout_must_be_known():
    encoded = encode_traces(_F64, [[1, 2]], [[3, 4]])
    with pytest.raises(ValueError, match="layout"):
        score_encoded(_F64, encoded, [StateQuery(0, [0], [[1, 2]])], layout="tree")
    with pytest.raises(ValueError, match="layout"):
        score_states_batch(_F64, [], layout="tree")
