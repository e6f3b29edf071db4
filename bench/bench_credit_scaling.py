"""Cost of the RREDCoT credit against trace length and K, relative to one training step's pass.

On the embedded default's tiny Qwen3 (random weights, byte tokenizer) and synthetic long traces,
for every trace length T (response tokens; default 256 … 4096, with `--long` also 8192 and 16384
at K = `--long-ks`, 8 and 16) and number of segments K (default 4, 8, 16), one batch of
`--traces` traces is scored by `rredcot_credit_batch` (METHOD.md §3) in each scoring layout
(`--layouts`: `shared`, the default, whose rows read their trace's KV cache in place;
`packed`, the earlier layout, where every packed row carries a copy of it; `split`, rows of
many traces per pass without a mask) and, on the same batch, one training forward + backward
is run (model(x ⊕ τ).logits → mean −log π over the response tokens → backward). Printed per
(T, K, layout, pruning), and written with `--csv PATH`:

- forward tokens of the credit (`RREDCoTResult.forward_tokens`: trace encoding, state 0 once
  per prompt, every continuation token run) and `credit_token_ratio`, their ratio to the
  training pass's forward tokens (P + T per trace; the backward is not counted in tokens, so a
  ratio of 1 in tokens is about 1/3 in compute);
- seconds of the credit and `credit_time_ratio`, their ratio to the seconds of the training
  forward + backward;
- peak memory: the process's peak resident memory during the call above its resident memory
  before it (`/proc/self/status` VmHWM, reset before each call), and `peak_memory_ratio`, its
  ratio to the bytes of the batch's trace cache (keys and values of every layer, P + T slots
  per trace, float32): the credit's peak includes the cache itself, so the *extra* memory is
  the ratio minus 1 (`train_peak_memory_ratio`: the same for the training pass);
- cache slots read by the continuation passes (`cache_slots_read`: per row, the trace slots its
  attention reads; a `packed` row also copies them), machine-independent like the tokens;
- both for the default config (pruning on, `prune_nats` 30) and, where it fits
  (`--noprune-max-len`), pruning off (every reference suffix scored in full: the worst case).

At T ≥ 4096 the pruned time ratios are printed again against issue 47's targets (`TARGETS`:
≤ 1.0x at T = 4096, K = 8 and ≤ 1.2x at K = 16); `--targets` runs only those shapes and
T = 16384 (`--target-lengths`, `--target-ks`), pruning on, in the `shared` and `split` layouts.

Then, at K = `--naive-k` (16), packed scoring vs naive: `rredcot_credit_batch` without pruning
(each layout) and with it (default layout) against the naive path, which scores the same
(state, continuation) pairs (recorded from the packed call's `score_encoded` queries:
answer-now, every C*_j, and A, A ⊕ y* ⊕ close for the conditional answer-now) by one full
forward pass each (`sequence_logprob_naive`, the reference the packed scorer is tested
against). The naive path's tokens grow like K·J·T (J ∝ T), so it only runs for
T ≤ `--naive-max-len`. The largest |log π| difference between the naive and the packed
(no pruning) tables is printed as a check that both computed the same thing.

Synthetic data (token values do not change the cost, only the lengths do, except for pruning):

- prompt: `--prompt-tokens` (64) random printable ASCII bytes ending with "\\n"; all traces of a
  batch share it and the reference (a GRPO group: state 0 is scored once per batch);
- response τ: T random printable ASCII bytes in lines of about `--line-tokens` (64) bytes, each
  ending with "\\n"; boundaries evenly spaced, b_k = round(k·T/K), so most states end
  mid-line (how a continuation meets each kind of state is the config's `join` rule);
- reference U*: J = max(1, round(`--ref-ratio` · T / `--line-tokens`)) lines of `--line-tokens`
  bytes, i.e. about T/2 tokens by default: a reference solution about half as long as a sampled
  reasoning trace with lines of the same length, so J (the number of suffixes) grows with T as
  it would for longer problems; y* = "7". The continuations C*_j = U*_{≥j} ⊕ A ⊕ y* ⊕ close ⊕
  EOS then add up to about J·|U*|/2 tokens per state without pruning.

Caveat on pruning: under a random model every token costs about log(V) ≈ 5.6 nats, so a
reference suffix falls 30 nats below the short answer-now continuation (~12 tokens) within its
first 16-48 tokens and is dropped there; the pruned numbers are therefore close to the best
case, and the pruning-off column is the worst case (a trained policy that finds a suffix likely
keeps it longer). The first check (16 tokens) sits near the 30-nat line, so whether a suffix
stops after 16 or 48 tokens depends on the random text: the pruned tokens can move by up to ~2x
between draws.

Peak memory vs traces per step (`--traces-sweep 4 8 16 32`, issue #29): at T = `--sweep-length`,
K = `--sweep-k`, batches of n traces (`--sweep-prompts` prompts, n/prompts responses each, as a
GRPO step) are scored with `max_resident_tokens` = `--max-resident-tokens` (default: the slots of
4 traces) and without it; per n the peak resident memory above the start of each, written with
`--sweep-csv PATH` (columns `SWEEP_COLUMNS`). Bounded, the peak stays flat in n; unbounded, it
grows with the batch's trace cache. Only the sweep runs when it is asked for.

Times are the process's CPU seconds by default (`--clock cpu`; with one thread CPU ≈ wall on an
idle machine, and a busy shared machine disturbs it less, though not entirely: on a loaded
machine the same training pass varied by up to 1.7x between rows, so use `--repeats 3` for
figures that matter), median over `--repeats`. The `packed` layout is slow and large at long
T: its rows' cache copies took 12 GiB at T = 8192, K = 8 and over 18 GiB (killed for memory on
a 23 GiB machine) at K = 16; `--packed-max-len` skips it above a length. Prints tables;
asserts nothing.

    OMP_NUM_THREADS=1 python bench/bench_credit_scaling.py --csv credit.csv  # ~30 min, loaded
    OMP_NUM_THREADS=1 python bench/bench_credit_scaling.py --quick           # a few minutes
    OMP_NUM_THREADS=1 python bench/bench_credit_scaling.py --lengths --long \\
        --layouts shared --csv long.csv            # T = 8192, 16384 at K = 8, 16 (~15 min)
    OMP_NUM_THREADS=1 python bench/bench_credit_scaling.py --traces-sweep 4 8 16 32 \\
        --sweep-csv sweep.csv                      # peak memory vs traces per step (~2 min)
    OMP_NUM_THREADS=1 python bench/bench_credit_scaling.py --targets --repeats 3 \\
        --csv targets.csv                          # issue 47's T × K, shared and split
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
import random
import re
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

import rredcot.credit.rredcot as rredcot_module
import rredcot.scoring.packed as packed_module
import rredcot.scoring.pruning as pruning_module
from rredcot.credit.rredcot import ReferencePath, RREDCoTConfig, Trace, rredcot_credit_batch
from rredcot.models.tiny import DEFAULT_TINY_ARCH, build_tiny_model
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.scoring.layout import LAYOUTS, _plan_passes, _Row, split_passes
from rredcot.scoring.logprobs import sequence_logprob_naive
from rredcot.tasks.synthetic import SyntheticTask

PRINTABLE = [
    ord(c) for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 +-*=()"
]


def random_lines(rng: random.Random, total: int, line: int, jitter: bool) -> list[int]:
    """`total` byte ids: printable ASCII in lines of about `line` bytes, each ending with "\\n"
    (line lengths uniform in [line/2, 3·line/2] with `jitter`, else exactly `line`)."""
    ids: list[int] = []
    while len(ids) < total:
        n = rng.randint(max(1, line // 2), max(1, 3 * line // 2)) if jitter else line
        ids += [rng.choice(PRINTABLE) for _ in range(max(0, n - 1))] + [ord("\n")]
    return ids[:total]


def make_batch(
    rng: random.Random, length: int, k: int, args: argparse.Namespace
) -> tuple[list[Trace], int]:
    """`args.traces` traces of T = `length` response tokens and K = `k` segments sharing one
    prompt and one reference of J lines; returns (traces, J)."""
    prompt = random_lines(rng, args.prompt_tokens - 1, args.line_tokens, True) + [ord("\n")]
    j = max(1, round(args.ref_ratio * length / args.line_tokens))
    reasoning = bytes(random_lines(rng, j * args.line_tokens, args.line_tokens, False))
    reference = ReferencePath.from_text(reasoning.decode("ascii"), "7")
    boundaries = sorted({round(i * length / k) for i in range(k + 1)})
    traces = [
        Trace(prompt, random_lines(rng, length, args.line_tokens, True), boundaries, reference, 1.0)
        for _ in range(args.traces)
    ]
    return traces, reference.num_segments


def _status_kib(field: str) -> int:
    text = Path("/proc/self/status").read_text()
    return int(re.search(rf"{field}:\s+(\d+)", text).group(1))


def _mmap_large_blocks() -> None:
    """Serve every block of ≥ 64 KiB by mmap (glibc otherwise raises that threshold as blocks
    are freed and serves them from a heap that keeps its pages), so freed tensors leave the
    resident memory and its peak measures what was live."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD


def _trim() -> None:
    """Hand freed heap memory back to the system, so resident memory starts from what is live."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def timed(
    fn: Callable[[], Any], repeats: int, clock: Callable[[], float]
) -> tuple[float, int, Any]:
    """(median seconds of `repeats` calls, largest peak resident bytes above the resident bytes
    before a call, the last call's result). Peaks need Linux (/proc/self/clear_refs)."""
    seconds, peaks, out = [], [], None
    for _ in range(repeats):
        out = None
        _trim()
        before = _status_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        start = clock()
        out = fn()
        seconds.append(clock() - start)
        peaks.append((_status_kib("VmHWM") - before) * 1024)
    return statistics.median(seconds), max(peaks), out


def split_slots(rows: list[_Row], width: int) -> int:
    """Trace cache slots the `split` passes of `rows` read: per pass, each (trace, state) run's
    span once (P + b + skip; row.span is P plus the row's largest b + skip)."""
    total = 0
    for batch in split_passes(rows, width):
        spans = set()
        for row in batch:
            prompt = row.span - max(bl.b + bl.skip for bl in row.blocks)
            spans |= {(row.trace, prompt + bl.b + bl.skip) for bl in row.blocks}
        total += sum(span for _, span in spans)
    return total


class SlotCounter:
    """Counts the trace cache slots the continuation passes read (wraps `run_rows`): a
    `shared` row reads its span once; a `packed` pass reads (and copies) its longest span per
    row; a `split` pass reads the span of each of its (trace, state) runs once."""

    def __init__(self) -> None:
        self.slots = 0
        self.original = packed_module.run_rows

    def __enter__(self) -> SlotCounter:
        def counting(*args: Any) -> Any:
            rows, passes = args[3], args[7]
            if passes.layout == "packed":
                self.slots += sum(
                    len(batch) * max(row.span for row in batch)
                    for batch in _plan_passes(rows, passes.cap)
                )
            elif passes.layout == "split":
                self.slots += split_slots(rows, passes.row_tokens)
            else:
                self.slots += sum(row.span for row in rows)
            return self.original(*args)

        packed_module.run_rows = pruning_module.run_rows = counting
        return self

    def __exit__(self, *_: object) -> None:
        packed_module.run_rows = pruning_module.run_rows = self.original


def train_step(model: torch.nn.Module, traces: list[Trace]) -> None:
    """One training forward + backward on the batch: mean −log π of the response tokens."""
    ids = torch.tensor([[*t.prompt_ids, *t.response_ids] for t in traces], dtype=torch.long)
    p = len(traces[0].prompt_ids)
    model.train()
    logits = model(input_ids=ids).logits[:, p - 1 : -1]  # (B, T, V): predicts τ
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), ids[:, p:].reshape(-1)
    )
    loss.backward()
    model.zero_grad(set_to_none=True)
    model.eval()


Job = tuple[list[int], list[int], list[int], list[list[int]]]
"""(prompt x, response τ, prefix lengths b, continuations c_1 … c_M): what one `StateQuery` asks."""


def packed_credit_with_jobs(
    model: torch.nn.Module, tokenizer: Any, task: Any, traces: list[Trace], config: RREDCoTConfig
) -> tuple[list[Any], list[Job], list[torch.Tensor]]:
    """`rredcot_credit_batch` with its `score_encoded` call recorded: (results, the
    (state, continuation) jobs it scored, their packed log-prob tables (states, M) per job).

    Recording the queries (rather than rebuilding the continuations here) makes the naive run
    score exactly the pairs the packed call scores, whatever the config adds (e.g. A and
    A ⊕ y* ⊕ close for the conditional answer-now), each shared state (s_0) once per batch.
    """
    original = packed_module.score_encoded
    jobs: list[Job] = []
    tables: list[torch.Tensor] = []

    def recording(model_: torch.nn.Module, encoded: Any, queries: Any, **kwargs: Any) -> Any:
        out = original(model_, encoded, queries, **kwargs)
        for q in queries:
            conts = [list(c) for c in q.continuations]
            prompt, response = encoded.prompt_ids[q.trace], encoded.response_ids[q.trace]
            jobs.append((list(prompt), list(response), list(q.states), conts))
        tables.extend(out)
        return out

    patched = [m for m in (packed_module, rredcot_module) if hasattr(m, "score_encoded")]
    for m in patched:
        m.score_encoded = recording
    try:
        results = rredcot_credit_batch(model, tokenizer, task, traces, config)
    finally:
        for m in patched:
            m.score_encoded = original
    if not jobs:
        raise RuntimeError("rredcot_credit_batch no longer calls packed.score_encoded: update me")
    return results, jobs, tables


def naive_scores(model: torch.nn.Module, jobs: list[Job]) -> tuple[list[torch.Tensor], int]:
    """log π(c | x ⊕ τ[:b]) of every job's (state, continuation) pair by one full forward pass
    each (`sequence_logprob_naive`): a (states, M) table per job, and the tokens fed."""
    tables, tokens = [], 0
    for prompt, response, states, conts in jobs:
        rows = []
        for b in states:
            prefix = [*prompt, *response[:b]]
            rows.append([sequence_logprob_naive(model, prefix, c) for c in conts])
            tokens += sum(len(prefix) + len(c) for c in conts)
        tables.append(torch.tensor(rows, dtype=torch.float64))
    return tables, tokens


def fmt_ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}x"


def _slot_bytes(model: torch.nn.Module) -> int:
    """Bytes of one cache slot: keys and values of every layer."""
    c = model.config
    per_slot = 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim
    return per_slot * next(model.parameters()).element_size()


def cache_bytes(model: torch.nn.Module, traces: list[Trace]) -> int:
    """Bytes of the batch's trace cache: keys and values of every layer, P + T slots a trace."""
    return _slot_bytes(model) * sum(len(t.prompt_ids) + len(t.response_ids) for t in traces)


COLUMNS = [
    "T",
    "K",
    "J",
    "layout",
    "pruning",
    "train_tokens",
    "train_s",
    "credit_tokens",
    "credit_s",
    "credit_token_ratio",
    "credit_time_ratio",
    "peak_memory_bytes",
    "trace_cache_bytes",
    "peak_memory_ratio",
    "train_peak_memory_ratio",
    "cache_slots_read",
]


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """The table so far, `COLUMNS` in order."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0, help="data and model seed")
    parser.add_argument(
        "--lengths", type=int, nargs="*", default=[256, 512, 1024, 2048, 4096], help="T values"
    )
    parser.add_argument("--ks", type=int, nargs="+", default=[4, 8, 16], help="K values")
    parser.add_argument(
        "--long", action="store_true", help="also T = --long-lengths at K = --long-ks (slow)"
    )
    parser.add_argument("--long-lengths", type=int, nargs="+", default=[8192, 16384])
    parser.add_argument("--long-ks", type=int, nargs="+", default=[8, 16])
    parser.add_argument(
        "--layouts",
        nargs="+",
        choices=LAYOUTS,
        default=None,
        help="scoring layouts (default: all; with --targets: shared and split)",
    )
    parser.add_argument(
        "--packed-max-len", type=int, default=None, help="largest T for the packed layout"
    )
    parser.add_argument("--traces", type=int, default=2, help="traces per batch (one prompt)")
    parser.add_argument("--prompt-tokens", type=int, default=64, help="P, prompt tokens")
    parser.add_argument("--line-tokens", type=int, default=64, help="tokens per line")
    parser.add_argument(
        "--ref-ratio", type=float, default=0.5, help="reference length |U*| / T (sets J)"
    )
    parser.add_argument(
        "--noprune-max-len",
        type=int,
        default=1024,
        help="largest T for the pruning-off rows (their cost grows like K·J·T ~ K·T²)",
    )
    parser.add_argument("--naive-k", type=int, default=16, help="K of the packed-vs-naive table")
    parser.add_argument(
        "--naive-max-len", type=int, default=1024, help="largest T scored naively (slow)"
    )
    parser.add_argument(
        "--max-tokens-per-pass",
        type=int,
        default=None,
        help="RREDCoTConfig.max_tokens_per_pass for every credit run (default None, as config)",
    )
    parser.add_argument(
        "--traces-sweep",
        type=int,
        nargs="*",
        default=None,
        help="traces per step of the memory sweep (e.g. 4 8 16 32); runs only the sweep",
    )
    parser.add_argument("--sweep-length", type=int, default=1024, help="T of the memory sweep")
    parser.add_argument("--sweep-k", type=int, default=8, help="K of the memory sweep")
    parser.add_argument(
        "--sweep-prompts", type=int, default=4, help="distinct prompts per step of the sweep"
    )
    parser.add_argument(
        "--max-resident-tokens",
        type=int,
        default=None,
        help="the sweep's budget (RREDCoTConfig.max_resident_tokens); default: 4 traces' slots",
    )
    parser.add_argument("--sweep-csv", type=Path, default=None, help="write the sweep here")
    parser.add_argument(
        "--arch",
        nargs="*",
        default=[],
        metavar="KEY=INT",
        help="override the tiny model's shape (e.g. num_hidden_layers=8 num_key_value_heads=4)",
    )
    parser.add_argument("--repeats", type=int, default=1, help="timing repeats (median kept)")
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu", help="what to time")
    parser.add_argument("--csv", type=Path, default=None, help="write the table here")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="T 256 … 1024, K 4 and 16, pruning off and naive up to T 512 (about a minute)",
    )
    parser.add_argument(
        "--targets",
        action="store_true",
        help="only T = --target-lengths × K = --target-ks, pruning on, no naive table; "
        "prints each ratio against its target (TARGETS)",
    )
    parser.add_argument("--target-lengths", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--target-ks", type=int, nargs="+", default=[8, 16])
    args = parser.parse_args()
    if args.layouts is None:
        args.layouts = ["shared", "split"] if args.targets else list(LAYOUTS)
    if args.quick:
        args.lengths = [n for n in args.lengths if n <= 1024]
        args.ks = [k for k in args.ks if k in (4, 16)] or args.ks[:1]
        args.noprune_max_len = min(args.noprune_max_len, 512)
        args.naive_max_len = min(args.naive_max_len, 512)
    if args.targets:
        args.lengths, args.ks, args.long = args.target_lengths, args.target_ks, False
        args.noprune_max_len = args.naive_max_len = 0
    return args


def main() -> None:
    args = parse_args()
    _mmap_large_blocks()
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    wall_start = time.perf_counter()

    grid = [(t, k) for t in args.lengths for k in args.ks]
    if args.long:
        grid += [(t, k) for t in args.long_lengths for k in args.long_ks]
    longest = max(t for t, _ in [*grid, (args.sweep_length, 0)])
    tokenizer = build_byte_tokenizer()
    overrides = {key: int(value) for key, value in (item.split("=", 1) for item in args.arch)}
    arch = {
        **DEFAULT_TINY_ARCH,
        **overrides,
        "max_position_embeddings": max(
            DEFAULT_TINY_ARCH["max_position_embeddings"], 2 * (longest + args.prompt_tokens)
        ),
    }  # RoPE's default form does not depend on it; the weights are the same for any value
    model = build_tiny_model(arch, tokenizer, seed=args.seed)
    task = SyntheticTask()
    if args.traces_sweep:
        memory_sweep(args, model, tokenizer, task, clock)
        return
    cap = args.max_tokens_per_pass
    base = RREDCoTConfig(max_tokens_per_pass=cap)  # the default: prune_nats 30
    configs = {
        (layout, pruning): replace(
            base, layout=layout, prune_nats=base.prune_nats if pruning else None
        )
        for layout in args.layouts
        for pruning in (True, False)
    }
    n = args.traces
    print(
        f"model: tiny Qwen3 (random init, seed {args.seed}), hidden "
        f"{DEFAULT_TINY_ARCH['hidden_size']}, {DEFAULT_TINY_ARCH['num_hidden_layers']} layers, "
        f"attention {model.config._attn_implementation}; {args.threads} thread(s); "
        f"{args.clock} seconds, median of {args.repeats}"
    )
    print(
        f"batch: {n} traces sharing one prompt of P = {args.prompt_tokens} tokens and one "
        f"reference of J ≈ {args.ref_ratio}·T/{args.line_tokens} lines; credit = "
        f"rredcot_credit_batch (default config, prune_nats {base.prune_nats}, "
        f"max_tokens_per_pass {cap}) per layout; train = one forward + backward of the same "
        f"batch (loss over the response tokens); memory: peak above the start, over the "
        f"batch's trace cache"
    )

    # warm-up (first-call allocations), not timed
    warm, _ = make_batch(random.Random(-1), 64, 4, args)
    for config in configs.values():
        rredcot_credit_batch(model, tokenizer, task, warm, config)
    train_step(model, warm)

    rng = random.Random(args.seed)
    head = (
        f"{'T':>5} {'K':>3} {'J':>3} {'layout':>6} {'prune':>5} │ {'train tok':>9} "
        f"{'train s':>8} {'mem':>6} │ {'credit tok':>10} {'tok/train':>9} {'credit s':>9} "
        f"{'s/train':>8} {'mem/cache':>9} {'slots read':>11}"
    )
    print("\nper trace; ratios to the training forward + backward of the same batch")
    print(head)
    print("─" * len(head))
    rows: list[dict[str, Any]] = []
    batches: dict[tuple[int, int], list[Trace]] = {}
    naive_lengths = {t for t, _ in grid if t <= args.naive_max_len}
    for length in sorted({t for t, _ in grid}):
        ks = sorted(
            {k for t, k in grid if t == length}
            | ({args.naive_k} if length in naive_lengths else set())
        )
        for k in ks:
            traces, j = make_batch(rng, length, k, args)
            batches[length, k] = traces
            if (length, k) not in grid:
                continue
            train_s, train_peak, _ = timed(
                lambda t=traces: train_step(model, t), args.repeats, clock
            )
            train_tok = sum(len(t.prompt_ids) + len(t.response_ids) for t in traces)
            cache = cache_bytes(model, traces)
            for (layout, pruning), config in configs.items():
                if not pruning and length > args.noprune_max_len:
                    continue
                if layout == "packed" and args.packed_max_len and length > args.packed_max_len:
                    continue
                with SlotCounter() as counter:
                    credit_s, peak, res = timed(
                        lambda t=traces, c=config: rredcot_credit_batch(
                            model, tokenizer, task, t, c
                        ),
                        args.repeats,
                        clock,
                    )
                credit_tok = sum(r.forward_tokens for r in res)
                row = {
                    "T": length,
                    "K": k,
                    "J": j,
                    "layout": layout,
                    "pruning": "on" if pruning else "off",
                    "train_tokens": train_tok,
                    "train_s": round(train_s, 4),
                    "credit_tokens": credit_tok,
                    "credit_s": round(credit_s, 4),
                    "credit_token_ratio": round(credit_tok / train_tok, 3),
                    "credit_time_ratio": round(credit_s / train_s, 3),
                    "peak_memory_bytes": peak,
                    "trace_cache_bytes": cache,
                    "peak_memory_ratio": round(peak / cache, 3),
                    "train_peak_memory_ratio": round(train_peak / cache, 3),
                    "cache_slots_read": counter.slots // args.repeats,
                }
                rows.append(row)
                if args.csv is not None:  # row by row: a run killed later keeps what it measured
                    write_csv(args.csv, rows)
                print(
                    f"{length:>5} {k:>3} {j:>3} {layout:>6} {row['pruning']:>5} │ "
                    f"{train_tok / n:>9,.0f} {train_s / n:>8.3f} "
                    f"{fmt_ratio(train_peak / cache):>6} │ {credit_tok / n:>10,.0f} "
                    f"{fmt_ratio(credit_tok / train_tok):>9} {credit_s / n:>9.3f} "
                    f"{fmt_ratio(credit_s / train_s):>8} {fmt_ratio(peak / cache):>9} "
                    f"{counter.slots / args.repeats / n:>11,.0f}",
                    flush=True,
                )
    if args.csv is not None:
        print(f"wrote {args.csv}")

    speedups = []
    if naive_lengths:
        speedups = naive_table(args, model, tokenizer, task, configs, batches, naive_lengths, clock)
    summary(args, rows, speedups)
    target_table([r for r in rows if args.targets or r["T"] >= 4096])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux
    print(f"total wall time {time.perf_counter() - wall_start:.0f} s; peak RSS {peak:.1f} GiB")


SWEEP_COLUMNS = [
    "traces",
    "prompts",
    "T",
    "K",
    "max_resident_tokens",
    "chunk_cache_bytes",
    "trace_cache_bytes",
    "bounded_peak_bytes",
    "unbounded_peak_bytes",
    "bounded_credit_tokens",
    "unbounded_credit_tokens",
    "bounded_credit_s",
    "unbounded_credit_s",
]


def sweep_batch(rng: random.Random, n: int, args: argparse.Namespace) -> list[Trace]:
    """n traces of T = `--sweep-length`, K = `--sweep-k`: `--sweep-prompts` prompts (each with
    its own reference) with n / prompts responses each, as a GRPO step."""
    prompts = max(1, min(args.sweep_prompts, n))
    one = argparse.Namespace(**{**vars(args), "traces": n // prompts})
    traces: list[Trace] = []
    for g in range(prompts):
        one.traces = n // prompts + (1 if g < n % prompts else 0)
        traces += make_batch(rng, args.sweep_length, args.sweep_k, one)[0]
    return traces


def memory_sweep(
    args: argparse.Namespace,
    model: torch.nn.Module,
    tokenizer: Any,
    task: Any,
    clock: Callable[[], float],
) -> list[dict[str, Any]]:
    """Peak memory of the credit vs traces per step, with and without `max_resident_tokens`."""
    slots = args.prompt_tokens + args.sweep_length
    budget = args.max_resident_tokens or 4 * slots
    bounded = RREDCoTConfig(
        max_resident_tokens=budget, max_tokens_per_pass=args.max_tokens_per_pass
    )
    unbounded = replace(bounded, max_resident_tokens=None)
    c = model.config
    print(
        f"model: tiny Qwen3, {c.num_hidden_layers} layers, hidden {c.hidden_size}, "
        f"{c.num_key_value_heads} KV heads of {c.head_dim}: "
        f"{_slot_bytes(model)} bytes per cache slot"
    )
    print(
        f"memory sweep: T = {args.sweep_length}, K = {args.sweep_k}, P = {args.prompt_tokens}, "
        f"{args.sweep_prompts} prompts per step; max_resident_tokens {budget} "
        f"({budget / slots:.1f} traces); peak resident memory above the start of each call"
    )
    warm = sweep_batch(
        random.Random(-1), 2, argparse.Namespace(**{**vars(args), "sweep_length": 64})
    )
    for config in (bounded, unbounded):
        rredcot_credit_batch(model, tokenizer, task, warm, config)
    head = (
        f"{'traces':>6} {'cache MiB':>9} │ {'bounded MiB':>11} {'tokens':>9} {'s':>7} │ "
        f"{'unbounded MiB':>13} {'tokens':>9} {'s':>7}"
    )
    print(head)
    print("─" * len(head))
    rows: list[dict[str, Any]] = []
    rng = random.Random(args.seed)
    for n in args.traces_sweep:
        traces = sweep_batch(rng, n, args)
        cache = cache_bytes(model, traces)
        chunk = cache * budget // sum(len(t.prompt_ids) + len(t.response_ids) for t in traces)
        out = {}
        for name, config in (("bounded", bounded), ("unbounded", unbounded)):
            seconds, peak, res = timed(
                lambda c=config, t=traces: rredcot_credit_batch(model, tokenizer, task, t, c),
                args.repeats,
                clock,
            )
            out[name] = (peak, sum(r.forward_tokens for r in res), seconds)
        row = {
            "traces": n,
            "prompts": min(args.sweep_prompts, n),
            "T": args.sweep_length,
            "K": args.sweep_k,
            "max_resident_tokens": budget,
            "chunk_cache_bytes": chunk,
            "trace_cache_bytes": cache,
            "bounded_peak_bytes": out["bounded"][0],
            "unbounded_peak_bytes": out["unbounded"][0],
            "bounded_credit_tokens": out["bounded"][1],
            "unbounded_credit_tokens": out["unbounded"][1],
            "bounded_credit_s": round(out["bounded"][2], 3),
            "unbounded_credit_s": round(out["unbounded"][2], 3),
        }
        rows.append(row)
        if args.sweep_csv is not None:
            with args.sweep_csv.open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=SWEEP_COLUMNS)
                writer.writeheader()
                writer.writerows(rows)
        mib = 2**20
        print(
            f"{n:>6} {cache / mib:>9.1f} │ {out['bounded'][0] / mib:>11.1f} "
            f"{out['bounded'][1]:>9,} {out['bounded'][2]:>7.2f} │ "
            f"{out['unbounded'][0] / mib:>13.1f} {out['unbounded'][1]:>9,} "
            f"{out['unbounded'][2]:>7.2f}",
            flush=True,
        )
    peaks = [r["bounded_peak_bytes"] for r in rows]
    if peaks and min(peaks) > 0:
        print(f"bounded peak: max/min over the sweep {max(peaks) / min(peaks):.3f}")
    return rows


def naive_table(
    args: argparse.Namespace,
    model: torch.nn.Module,
    tokenizer: Any,
    task: Any,
    configs: dict[tuple[str, bool], RREDCoTConfig],
    batches: dict[tuple[int, int], list[Trace]],
    lengths: set[int],
    clock: Callable[[], float],
) -> list[tuple[int, dict[str, float]]]:
    """Packed scoring (each layout, pruning off; default layout, pruning on) vs one full pass
    per (state, continuation), at K = naive_k; per length, the speed-up of each."""
    k, n = args.naive_k, args.traces
    print(
        f"\npacked vs naive at K = {k} (per trace; naive = one full forward per (state, "
        f"continuation); T > {args.naive_max_len} skipped, --naive-max-len)"
    )
    layouts = list(args.layouts)
    head = (
        f"{'T':>5} {'J':>3} {'naive tok':>10} {'naive s':>8} │ {'packed tok':>10} "
        + " ".join(f"{name + ' s':>9} {'speed-up':>8}" for name in layouts)
        + f" │ {'pruned s':>8} {'speed-up':>8} │ {'max |Δlogπ|':>11}"
    )
    print(head)
    print("─" * len(head))
    out = []
    for length in sorted(lengths):
        traces = batches[length, k]
        j = traces[0].reference.num_segments
        seconds: dict[str, float] = {}
        diff, packed_tok, naive_s, naive_tok = 0.0, 0, 0.0, 0
        for layout in layouts:
            config = configs[layout, False]
            seconds[layout], _, (res, jobs, tables) = timed(
                lambda t=traces, c=config: packed_credit_with_jobs(model, tokenizer, task, t, c),
                args.repeats,
                clock,
            )
            packed_tok = sum(r.forward_tokens for r in res)
            if not naive_s:
                naive_s, _, (naive_tables, naive_tok) = timed(
                    lambda jobs=jobs: naive_scores(model, jobs), args.repeats, clock
                )
            diff = max(
                diff,
                *(float((a - b).abs().max()) for a, b in zip(naive_tables, tables, strict=True)),
            )
        pruned_s, _, _ = timed(
            lambda t=traces: rredcot_credit_batch(
                model, tokenizer, task, t, configs[layouts[0], True]
            ),
            args.repeats,
            clock,
        )
        speedups = {name: naive_s / s for name, s in seconds.items()}
        speedups["pruned"] = naive_s / pruned_s
        out.append((length, speedups))
        print(
            f"{length:>5} {j:>3} {naive_tok / n:>10,.0f} {naive_s / n:>8.3f} │ "
            f"{packed_tok / n:>10,.0f} "
            + " ".join(
                f"{seconds[name] / n:>9.3f} {fmt_ratio(speedups[name]):>8}" for name in layouts
            )
            + f" │ {pruned_s / n:>8.3f} {fmt_ratio(speedups['pruned']):>8} │ {diff:>11.2e}"
        )
    return out


TARGETS: dict[tuple[int, int], float] = {(4096, 8): 1.0, (4096, 16): 1.2}
"""(T, K) -> the most the pruned credit may cost, in training forwards+backwards of the same
batch, on a 2-core CPU (issue 47, item 4; the tiny model's shapes of this script)."""


def target_table(rows: list[dict[str, Any]]) -> None:
    """The pruned credit's time ratio of each of `rows`, against its target where `TARGETS`
    names one."""
    long = [r for r in rows if r["pruning"] == "on"]
    if not long:
        return
    print("\ncredit / training forward+backward (pruning on), against TARGETS:")
    for r in long:
        target = TARGETS.get((r["T"], r["K"]))
        verdict = (
            "no target"
            if target is None
            else f"target ≤ {target:.2f}x: "
            + ("met" if r["credit_time_ratio"] <= target else "not met")
        )
        print(
            f"  T = {r['T']:>5}, K = {r['K']:>2}, {r['layout']:>6}: "
            f"{r['credit_time_ratio']:.2f}x ({verdict})"
        )


def summary(
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
    speedups: list[tuple[int, dict[str, float]]],
) -> None:
    """One line per layout: the pruned credit's time ratio at the largest K, shortest to
    longest T, its peak memory over the cache; and the speed-ups over naive."""
    parts = []
    top_k = max((r["K"] for r in rows), default=None)
    for layout in args.layouts:
        at_k = [
            r for r in rows if r["K"] == top_k and r["layout"] == layout and r["pruning"] == "on"
        ]
        if at_k:
            lo, hi = at_k[0], at_k[-1]
            parts.append(
                f"{layout}: at K = {lo['K']} the credit costs {lo['credit_time_ratio']:.2f}x "
                f"(T = {lo['T']}) to {hi['credit_time_ratio']:.2f}x (T = {hi['T']}) a training "
                f"forward+backward, peak memory {hi['peak_memory_ratio']:.2f}x the trace cache"
            )
    for length, s in speedups:
        parts.append(
            f"T = {length}, K = {args.naive_k}: "
            + ", ".join(f"{name} {x:.1f}x" for name, x in s.items())
            + " faster than naive"
        )
    print("\nsummary:\n  " + "\n  ".join(parts))


if __name__ == "__main__":
    main()
