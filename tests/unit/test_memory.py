"""Memory bounds (issue #29): credit in chunks under a slot budget, logits chunked over positions.

Every bounded path is checked against the unbounded one it replaces (same numbers), and the
bound against what was actually resident (the slots of each encoding that ran).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest
import torch
from test_methods import make_batch  # the hand-made TRL batch of the method tests
from test_rredcot_estimator import ARCH  # 2 layers, GQA, scores that depend on context

import rredcot.planning.memory_plan as memory_plan
import rredcot.scoring.chunks as chunks_module
import rredcot.scoring.logprobs as logprobs_module
import rredcot.scoring.packed as packed_module
import rredcot.scoring.passes as passes_module
from rredcot.credit.rredcot import ReferencePath, RREDCoTConfig, rredcot_credit_batch
from rredcot.credit.segmentation import SegmentationConfig, keyword_boundaries
from rredcot.credit.segmented_trace import Trace
from rredcot.models.tiny import build_tiny_model
from rredcot.planning.memory_plan import ModelShape, advice, credit_phases, rule_phases
from rredcot.scoring.chunks import (
    ChunkedEncoding,
    encode_within_budget,
    plan_resident_chunks,
    resident_slots,
)
from rredcot.scoring.encoding import ENCODE_CHUNK
from rredcot.scoring.layout import SHARED_ROW_MAX, SHARED_ROW_TOKENS, default_row_tokens
from rredcot.scoring.logprobs import position_ids_from_mask, response_entropies, token_logprobs
from rredcot.scoring.packed import EncodedTraces, encode_traces
from rredcot.tasks import get_task
from rredcot.training.methods import build_method

ROWS = [
    {"problem": "a=3, b=8, c=2. d=a+b. e=d*a. f=e-c. Find f.", "answer": "1"},
    {"problem": "a=1, b=2, c=4. d=c-a. e=d+b. Find e.", "answer": "5"},
]
ROWS[0]["solution"] = "d=a+b=3+8=1\ne=d*a=1*3=3\nf=e-c=3-2=1\nAnswer: 1."
ROWS[1]["solution"] = "d=c-a=4-1=3\ne=d+b=3+2=5\nAnswer: 5."
RESPONSES = [  # (problem, response, reward): lengths differ, so chunks pad differently
    (0, "d=a+b=3+8=1\ne=d*a=1*3=3\nf=e-c=3-2=1\nAnswer: 1.", 1.0),
    (0, "d=a+b=3+8=1\ne=d*a=1*3=4\nf=e-c=4-2=2\nAnswer: 2.", 0.0),
    (0, "d=a+b=3+8=2\ne=d*a=2*3=6\nAnswer: 6.", 0.0),
    (1, "d=c-a=4-1=3\ne=d+b=3+2=5\nAnswer: 5.", 1.0),
    (1, "d=c-a=4-1=3\nAnswer: 3.", 0.0),
]


@pytest.fixture(scope="module")
def model(tokenizer):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    m = build_tiny_model(ARCH, tokenizer, seed=0).to(torch.float64)
    m.set_attn_implementation("sdpa")
    yield m.eval()
    torch.set_num_threads(threads)


def _traces(tokenizer) -> list[Trace]:
    task = get_task("synthetic")
    out = []
    for problem, text, reward in RESPONSES:
        row = ROWS[problem]
        prompt = tokenizer(task.build_prompt(row["problem"]))["input_ids"]
        response = tokenizer(text)["input_ids"]
        bounds = keyword_boundaries([tokenizer.decode([t]) for t in response])
        out.append(Trace(prompt, response, bounds, ReferencePath.from_row(task, row), reward))
    return out


def _prompt_tokens(traces, chunk) -> int:
    """Tokens of the distinct prompts of the traces in `chunk` (each encoded once there)."""
    return sum(map(len, {tuple(traces[i].prompt_ids) for i in chunk}))


@pytest.fixture()
def encodings(monkeypatch):
    """The (prompt lengths, response lengths) of every encoding the chunked path runs."""
    seen: list[tuple[list[int], list[int]]] = []
    real = chunks_module.encode_traces

    def spy(model, prompts, responses, **kwargs):
        seen.append(([len(p) for p in prompts], [len(r) for r in responses]))
        return real(model, prompts, responses, **kwargs)

    monkeypatch.setattr(chunks_module, "encode_traces", spy)
    return seen


# --------------------------------------------------------------------------- chunk plan


def test_resident_slots_is_rows_times_the_padded_width():
    assert resident_slots([4, 6], [10, 2]) == 2 * (6 + 10)
    assert resident_slots([], []) == 0


def test_chunk_plan_by_hand():
    prompts, responses = [4, 4, 4, 4], [10, 2, 6, 8]
    assert resident_slots(prompts, responses) == 56
    # no budget, or everything fits: one chunk in the given order (the unchunked path)
    assert plan_resident_chunks(prompts, responses, None) == [[0, 1, 2, 3]]
    assert plan_resident_chunks(prompts, responses, 56) == [[0, 1, 2, 3]]
    # budget 30, longest first (P + T: 14, 12, 10, 6): [0] 14 slots, [0, 3] 2·14 = 28,
    # [0, 3, 2] 42 > 30 -> new chunk; [2] 10, [2, 1] 2·10 = 20
    assert plan_resident_chunks(prompts, responses, 30) == [[0, 3], [2, 1]]
    # a trace longer than the budget is a chunk of its own
    assert plan_resident_chunks(prompts, responses, 5) == [[0], [3], [2], [1]]
    assert plan_resident_chunks([], [], 5) == []
    with pytest.raises(ValueError, match="max_resident_tokens"):
        plan_resident_chunks(prompts, responses, 0)


def test_config_takes_and_checks_the_budget():
    assert RREDCoTConfig().max_resident_tokens is None
    assert RREDCoTConfig.from_dict({"max_resident_tokens": 512}).max_resident_tokens == 512
    for bad in (0, -3, 1.5, True):
        with pytest.raises(ValueError, match="estimator.rredcot.max_resident_tokens"):
            RREDCoTConfig(max_resident_tokens=bad)


# --------------------------------------------------------------------------- bounded credit


@pytest.mark.parametrize("prune_nats", [None, 30.0])
def test_chunked_credit_equals_the_unchunked_credit(model, tokenizer, encodings, prune_nats):
    task = get_task("synthetic")
    traces = _traces(tokenizer)
    p = [len(t.prompt_ids) for t in traces]
    r = [len(t.response_ids) for t in traces]
    budget = 2 * (max(p) + max(r))  # two of the longest traces at a time
    assert resident_slots(p, r) > budget
    config = RREDCoTConfig(prune_nats=prune_nats, max_resident_tokens=budget)
    unchunked = rredcot_credit_batch(
        model, tokenizer, task, traces, RREDCoTConfig(prune_nats=prune_nats)
    )
    assert len(encodings) == 1  # no budget: one encoding of all five traces
    encodings.clear()
    chunked = rredcot_credit_batch(model, tokenizer, task, traces, config)
    assert len(encodings) == 3  # 5 traces, at most 2 a chunk
    assert sum(len(e[0]) for e in encodings) == len(traces)
    assert all(resident_slots(*e) <= budget for e in encodings)
    for got, want in zip(chunked, unchunked, strict=True):
        assert torch.equal(torch.isinf(got.suffix_logprobs), torch.isinf(want.suffix_logprobs))
        for name in ("answer_logprob", "suffix_logprobs", "r_hat", "v_hat", "phi", "sigma"):
            torch.testing.assert_close(getattr(got, name), getattr(want, name), atol=1e-12, rtol=0)
    # the cost: the same continuations; a prompt is encoded once per chunk that holds it
    extra = sum(_prompt_tokens(traces, chunk) for chunk in plan_resident_chunks(p, r, budget))
    extra -= _prompt_tokens(traces, range(len(traces)))
    assert extra > 0
    assert (
        sum(x.forward_tokens for x in chunked) == sum(x.forward_tokens for x in unchunked) + extra
    )


def test_chunked_encoding_reads_the_same_token_scores(model, tokenizer, encodings):
    traces = _traces(tokenizer)
    prompts = [list(t.prompt_ids) for t in traces]
    responses = [list(t.response_ids) for t in traces]
    whole = encode_within_budget(model, prompts, responses, max_resident_tokens=None)
    assert isinstance(whole, EncodedTraces)
    fits = resident_slots([len(x) for x in prompts], [len(x) for x in responses])
    assert isinstance(
        encode_within_budget(model, prompts, responses, max_resident_tokens=fits), EncodedTraces
    )
    encodings.clear()
    chunked = encode_within_budget(model, prompts, responses, max_resident_tokens=fits // 3)
    assert isinstance(chunked, ChunkedEncoding) and chunked.forward_tokens == 0
    assert not encodings  # nothing is encoded before it is read
    got, want = chunked.token_scores(model), whole.token_scores(model)
    assert len(encodings) > 1 and all(resident_slots(*e) <= fits // 3 for e in encodings)
    for (lp, h), (lp0, h0) in zip(got, want, strict=True):
        torch.testing.assert_close(lp, lp0, atol=1e-12, rtol=0)
        torch.testing.assert_close(h, h0, atol=1e-12, rtol=0)
    # each response once, each prompt once per chunk that holds it
    plan = plan_resident_chunks([len(x) for x in prompts], [len(x) for x in responses], fits // 3)
    per_chunk = sum(_prompt_tokens(traces, chunk) for chunk in plan)
    assert chunked.forward_tokens == sum(map(len, responses)) + per_chunk
    assert chunked.token_scores(model) is got  # read once


def test_credit_on_a_chunked_encoding_of_longer_responses(model, tokenizer):
    """The method hands over a ChunkedEncoding of the full responses and scores traces cut at
    b_{K−1}: the same credit as on a resident encoding of those responses."""
    task = get_task("synthetic")
    traces = _traces(tokenizer)
    cut = [
        Trace(
            t.prompt_ids,
            t.response_ids[: t.boundaries[-2]],
            t.boundaries[:-1],
            t.reference,
            t.reward,
        )
        for t in traces
    ]
    prompts = [list(t.prompt_ids) for t in traces]
    responses = [list(t.response_ids) for t in traces]
    rows = list(range(len(traces)))
    resident = encode_traces(model, prompts, responses)
    budget = resident_slots([len(x) for x in prompts], [len(x) for x in responses]) // 2
    config = RREDCoTConfig(max_resident_tokens=budget)
    chunked = ChunkedEncoding(prompts, responses, max_resident_tokens=budget)
    want = rredcot_credit_batch(
        model, tokenizer, task, cut, config, encoded=resident, encoded_rows=rows
    )
    got = rredcot_credit_batch(
        model, tokenizer, task, cut, config, encoded=chunked, encoded_rows=rows
    )
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.phi, b.phi, atol=1e-12, rtol=0)
    # the resident encoding was the caller's cost; the chunked one is encoded here and counted
    encoded_here = sum(map(len, responses))
    assert sum(a.forward_tokens for a in got) > sum(b.forward_tokens for b in want) + encoded_here


def test_rredcot_method_under_a_budget_gives_the_same_sigmas(model, tokenizer, encodings):
    """The training method passes `max_resident_tokens` through: its encoding for the
    segmentation and its credit both run in chunks within the budget, with the same σ."""
    batch = make_batch(tokenizer)  # test_methods' 4 rows of 2 problems
    task, eos = get_task("synthetic"), [tokenizer.eos_token_id]
    seg = SegmentationConfig(num_segments=3)  # hybrid: reads the encoding's entropies
    free = build_method("rredcot", task, tokenizer, eos, segmentation=seg)
    credit = free.segment_credit(batch, model)
    sigmas, bounds, tokens = credit.sigmas, credit.boundaries, credit.forward_tokens
    assert len(encodings) == 1
    encodings.clear()
    widths = [len(batch.prompt(i)) + len(batch.completion(i)) for i in range(len(batch))]
    budget = 2 * max(widths)
    bounded = build_method(
        "rredcot",
        task,
        tokenizer,
        eos,
        segmentation=seg,
        rredcot=RREDCoTConfig(max_resident_tokens=budget),
    )
    limited = bounded.segment_credit(batch, model)
    got, got_bounds, got_tokens = limited.sigmas, limited.boundaries, limited.forward_tokens
    assert len(encodings) > 2 and all(resident_slots(*e) <= budget for e in encodings)
    assert got_bounds == bounds
    for a, b in zip(got, sigmas, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    assert got_tokens > tokens  # the traces are encoded twice: for the segmentation, for credit


# --------------------------------------------------------------------------- chunked logits


def _full_scores(model, ids, mask):
    """The reference: the model's (B, L, V) logits, then log π and H of the next token."""
    logits = model(
        input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)
    ).logits[:, :-1]
    log_pi = torch.log_softmax(logits.double(), -1)
    lp = log_pi.gather(-1, ids[:, 1:, None]).squeeze(-1)
    h = -(log_pi.exp() * log_pi).sum(-1)
    valid = mask[:, :-1].bool() & mask[:, 1:].bool()
    return lp.masked_fill(~valid, 0.0), h.masked_fill(~valid, 0.0)


@pytest.fixture()
def head_rows(model, monkeypatch):
    """Rows of every LM-head call, with the chunk cut to 3 positions' logits."""
    vocab = model.get_output_embeddings().weight.shape[0]
    monkeypatch.setattr(logprobs_module, "_MAX_CHUNK_ELEMENTS", 3 * vocab)
    seen: list[int] = []
    handle = model.get_output_embeddings().register_forward_hook(
        lambda _m, args, _out: seen.append(args[0].reshape(-1, args[0].shape[-1]).shape[0])
    )
    yield seen
    handle.remove()


def test_token_logprobs_never_builds_the_full_logits(model, tokenizer, head_rows):
    traces = _traces(tokenizer)[:3]
    seqs = [[*t.prompt_ids, *t.response_ids] for t in traces]
    width = max(map(len, seqs))
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):  # left padding, as TRL hands prompts over
        ids[i, width - len(s) :], mask[i, width - len(s) :] = torch.tensor(s), 1
    want_lp, want_h = _full_scores(model, ids, mask)
    head_rows.clear()
    with torch.no_grad():
        lp, h = token_logprobs(model, ids, mask)
    assert head_rows and max(head_rows) <= 3  # never more than 3 positions' logits at once
    valid = int((mask[:, :-1].bool() & mask[:, 1:].bool()).sum())
    assert sum(head_rows) == valid  # padding is not projected
    torch.testing.assert_close(lp, want_lp, atol=1e-12, rtol=0)
    torch.testing.assert_close(h, want_h, atol=1e-12, rtol=0)


def test_response_entropies_in_chunks_equal_the_full_logits(model, tokenizer, head_rows):
    trace = _traces(tokenizer)[0]
    x, tau = list(trace.prompt_ids), list(trace.response_ids)
    ids = torch.tensor([[*x, *tau]])
    want_lp, want_h = _full_scores(model, ids, torch.ones_like(ids))
    head_rows.clear()
    lp, h = response_entropies(model, x, tau)
    assert max(head_rows) <= 3 and sum(head_rows) == len(tau)
    torch.testing.assert_close(lp, want_lp[0, len(x) - 1 :], atol=1e-12, rtol=0)
    torch.testing.assert_close(h, want_h[0, len(x) - 1 :], atol=1e-12, rtol=0)


def test_scorer_projects_a_few_rows_at_a_time_with_the_same_credit(model, tokenizer, monkeypatch):
    """The continuation passes and the leading tokens read off the encoding project their
    hidden states in chunks of rows (`chunk_rows`); 3 rows a chunk gives the same credit."""
    task = get_task("synthetic")
    traces = _traces(tokenizer)[:2]
    config = RREDCoTConfig(prune_nats=None)
    want = rredcot_credit_batch(model, tokenizer, task, traces, config)
    head = model.get_output_embeddings()
    seen: list[int] = []
    handle = head.register_forward_hook(lambda _m, args, _o: seen.append(args[0].shape[0]))
    monkeypatch.setattr(passes_module, "chunk_rows", lambda vocab: 3)
    monkeypatch.setattr(packed_module, "chunk_rows", lambda vocab: 3)
    try:
        got = rredcot_credit_batch(model, tokenizer, task, traces, config)
    finally:
        handle.remove()
    assert seen and max(seen) <= 3
    for a, b in zip(got, want, strict=True):
        assert a.forward_tokens == b.forward_tokens
        torch.testing.assert_close(a.suffix_logprobs, b.suffix_logprobs, atol=1e-12, rtol=0)
        torch.testing.assert_close(a.answer_logprob, b.answer_logprob, atol=1e-12, rtol=0)


# --------------------------------------------------------------------------- paper-shape script


@pytest.mark.slow
def test_gpu_paper_shape_runs_tiny_on_the_cpu(repo, tmp_path):
    """scripts/gpu_paper_shape.py --device cpu --tiny (CI's form): a credit and a training row
    per length, each run to the end; the training micro-batch is 8 rows of P + T tokens."""
    out = tmp_path / "shape.csv"
    env = {**os.environ, "PYTHONPATH": str(repo / "src"), "OMP_NUM_THREADS": "1"}
    subprocess.run(
        [
            sys.executable,
            str(repo / "scripts" / "gpu_paper_shape.py"),
            "--device",
            "cpu",
            "--tiny",
            "--csv",
            str(out),
        ],
        check=True,
        env=env,
        cwd=repo,
        capture_output=True,
        timeout=600,
    )
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["case"], int(r["T"])) for r in rows] == [
        (case, t) for t in (64, 128, 192) for case in ("credit", "train")
    ]
    assert all(r["status"] == "ok" and int(r["peak_bytes"]) > 0 for r in rows)
    # each row carries the planner's estimate of the same case (judged on a GPU: gpu_check.py)
    for r in rows:
        assert float(r["ratio"]) == round(int(r["peak_bytes"]) / int(r["estimate_bytes"]), 3)
    train = [r for r in rows if r["case"] == "train"]
    assert [int(r["tokens"]) for r in train] == [8 * (32 + t) for t in (64, 128, 192)]
    credit = [r for r in rows if r["case"] == "credit"]
    assert all(int(r["rows"]) == 8 for r in credit)  # 2 prompts × 4 responses
    # the budget is below one step's cache at every length: the credit ran in chunks
    assert all(int(r["max_resident_tokens"]) < 8 * (32 + int(r["T"])) for r in credit)
    tokens = [int(r["tokens"]) for r in credit]
    assert tokens == sorted(tokens) and tokens[0] > 8 * (32 + 64)


# --------------------------------------------------------------------------- memory planner


def _plan_shape(model) -> ModelShape:
    c = model.config
    return ModelShape(
        c.num_hidden_layers,
        c.hidden_size,
        c.intermediate_size,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.head_dim,
        c.vocab_size,
        c.tie_word_embeddings,
        next(model.parameters()).element_size(),
    )


@pytest.mark.parametrize("tied", [True, False])
def test_planner_counts_the_models_parameters_and_cache_slot(tokenizer, tied):
    model = build_tiny_model({**ARCH, "tie_word_embeddings": tied}, tokenizer, seed=0)
    shape = _plan_shape(model)
    assert shape.parameters == sum(p.numel() for p in model.parameters())
    model.set_attn_implementation("sdpa")
    encoded = encode_traces(model, [[1, 2, 3], [4, 5]], [[6, 7], [8, 9, 10, 11]])
    cache = sum(t.numel() * t.element_size() for t in [*encoded.keys, *encoded.values])
    assert cache == 2 * (3 + 4) * shape.slot_bytes  # rows × (P_max + T_max) slots
    assert shape.row_tokens() == default_row_tokens("shared", model)


def test_planner_constants_are_the_scorers():
    assert memory_plan.ENCODE_CHUNK == ENCODE_CHUNK
    assert memory_plan.CHUNK_ELEMENTS == logprobs_module._MAX_CHUNK_ELEMENTS
    assert (memory_plan.SHARED_ROW_TOKENS, memory_plan.SHARED_ROW_MAX) == (
        SHARED_ROW_TOKENS,
        SHARED_ROW_MAX,
    )


def test_credit_estimate_takes_the_largest_resident_chunk():
    # 2 layers × 1 KV head × 16 × 4 bytes × 2 (keys, values) = 256 bytes a slot
    shape = ModelShape(2, 32, 64, 2, 1, 16, 259, True, 4)
    assert shape.slot_bytes == 256
    prompts, responses = [4, 4, 4, 4], [10, 2, 6, 8]
    whole = credit_phases(shape, prompts, responses, states=3)
    assert whole["cache"] == 4 * (4 + 10) * 256 and whole["hidden"] == 4 * 11 * 32 * 4
    # budget 30 slots: chunks [0, 3] (2 × 14 slots) and [2, 1] (2 × 10): the first is the peak
    bounded = credit_phases(shape, prompts, responses, states=3, max_resident_tokens=30)
    assert bounded["cache"] == 2 * 14 * 256 and bounded["hidden"] == 2 * 11 * 32 * 4
    assert bounded["peak"] < whole["peak"]
    assert bounded["pruning_bound"] == 0
    kept = credit_phases(shape, prompts, responses, states=3, prune_max_kept_tokens=100)
    assert kept["pruning_bound"] == 100 * 256


def test_rule_phases_shard_by_hand_and_name_the_key():
    config = {
        "model": {"name_or_path": "Qwen/Qwen3-4B-Instruct-2507", "dtype": "bfloat16"},
        "training": {
            "num_processes": 8,
            "accelerate": "zero3",
            "use_vllm": True,
            "vllm_gpu_memory_utilization": 0.3,
            "per_device_batch_size": 1,
            "gradient_accumulation_steps": 1,
            "max_completion_length": 512,
            "gradient_checkpointing": True,
        },
        "estimator": {"rredcot": {}},
        "segmentation": {"num_segments": 4},
    }
    shape = memory_plan.shape_of(config)
    assert (shape.layers, shape.hidden, shape.kv_heads, shape.vocab) == (36, 2560, 8, 151_936)
    assert shape.tied and shape.bytes_per_value == 2
    assert shape.slot_bytes == 144 * 1024  # the 144 KiB a token
    n, gpu = shape.parameters, 80 * 10**9
    phases = rule_phases(config, "rredcot", gpu)
    assert phases["weights"] == 2 * n // 8 + 2 * n // 36  # shards, and the layer gathered
    assert phases["gradients"] == 2 * n // 8 and phases["optimizer"] == 12 * n // 8
    # vLLM's share is of the card's real memory: an "80 GB" card has 80 GiB
    assert phases["vllm"] == int(0.3 * 80 * 2**30) and phases["credit"] > 0
    # the method's pass gathers every ZeRO-3 weight on every GPU
    assert phases["gathered"] == 2 * n
    assert rule_phases(config, "grpo", gpu)["credit"] == 0
    fixed = sum(phases[k] for k in ("weights", "gradients", "optimizer", "vllm"))
    assert phases["peak"] == fixed + max(phases["training"], phases["gathered"] + phases["credit"])
    assert advice(phases, gpu) is None
    # at 512 tokens a row the method's pass (gathered weights + credit) is the larger phase
    assert "estimator.rredcot.max_resident_tokens" in advice(phases, fixed)
    assert "training.vllm_gpu_memory_utilization" in advice(rule_phases(config, "grpo", gpu), fixed)
    longer = {**config, "training": {**config["training"], "max_completion_length": 16384}}
    assert "training.per_device_batch_size" in advice(rule_phases(longer, "grpo", gpu), fixed)
    unknown = {**config, "model": {"name_or_path": "someone/else"}}
    assert rule_phases(unknown, "grpo", gpu) is None
    tiny = memory_plan.shape_of({"model": {"name_or_path": None, "arch": ARCH}})
    assert (tiny.layers, tiny.vocab, tiny.bytes_per_value) == (2, 259, 4)
