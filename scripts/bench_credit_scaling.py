"""Cost of the RREDCoT credit against trace length and K, relative to one training step's pass.

On the embedded default's tiny Qwen3 (random weights, byte tokenizer) and synthetic long traces,
for every trace length T (response tokens; default 256 … 4096) and number of segments K
(default 4, 8, 16), one batch of `--traces` traces is scored by `rredcot_credit_batch`
(METHOD.md §3) and, on the same batch, one training forward + backward is run
(model(x ⊕ τ).logits → mean −log π over the response tokens → backward). Printed per trace:

- forward tokens of the credit (`RREDCoTResult.forward_tokens`: trace encoding, state 0 once
  per prompt, every continuation token run) and its ratio to the training pass's forward
  tokens (P + T per trace; the backward is not counted in tokens, so a ratio of 1 in tokens
  is about 1/3 in compute);
- seconds of the credit and their ratio to the seconds of the training forward + backward;
- both for the default config (pruning on, `prune_nats` 30) and, where it fits
  (`--noprune-max-len`), pruning off (every reference suffix scored in full: the worst case).

Then, at K = `--naive-k` (16), packed vs naive: `rredcot_credit_batch` without and with
pruning against the naive path, which scores the same (state, continuation) pairs (recorded
from the packed call's `score_encoded` queries: answer-now, every C*_j, and A, A ⊕ y* ⊕ close
for the conditional answer-now) by one full forward pass each (`sequence_logprob_naive`, the
reference the packed scorer is tested against). The naive path's tokens grow like K·J·T
(J ∝ T), so it only runs for T ≤ `--naive-max-len` (the table says which lengths were skipped).
The largest |log π| difference between the naive and the packed (no pruning) tables is printed
as a check that both computed the same thing.

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
stops after 16 or 48 tokens depends on the random text and on how continuations are joined to
states: the pruned tokens can move by up to ~2x between draws or versions of the scorer (seen
at T = 4096, K = 16: 14k vs 30k tokens per trace).

Memory: the packed scorer gives every batch row a copy of its trace's KV cache, so a pass holds
about rows × (P + T) cache slots; with the defaults (2 traces) the process peaked at 6-11 GiB,
at T = 4096, K = 16 (`--traces 1` about halves it; `--max-tokens-per-pass` caps a pass). Pruning
off runs ~(K+1)·J·T/4 continuation tokens per trace (a row per ~32 of them, each with its cache
copy), hence `--noprune-max-len`. The peak RSS is printed at the end.

Times are the process's CPU seconds by default (`--clock cpu`; with one thread CPU ≈ wall on an
idle machine, and a busy shared machine disturbs it less), median over `--repeats`. Prints
tables; asserts nothing.

    OMP_NUM_THREADS=1 python scripts/bench_credit_scaling.py            # a few minutes, 1 thread
    OMP_NUM_THREADS=1 python scripts/bench_credit_scaling.py --quick    # under a minute
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

import rredcot.credit.rredcot as rredcot_module
import rredcot.scoring.packed as packed_module
from rredcot.credit.rredcot import ReferencePath, RREDCoTConfig, Trace, rredcot_credit_batch
from rredcot.models.tiny import DEFAULT_TINY_ARCH, build_tiny_model
from rredcot.models.tokenizer import build_byte_tokenizer
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


def timed(fn: Callable[[], Any], repeats: int, clock: Callable[[], float]) -> tuple[float, Any]:
    """(median seconds of `repeats` calls, the last call's result)."""
    seconds, out = [], None
    for _ in range(repeats):
        start = clock()
        out = fn()
        seconds.append(clock() - start)
    return statistics.median(seconds), out


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0, help="data and model seed")
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096], help="T values"
    )
    parser.add_argument("--ks", type=int, nargs="+", default=[4, 8, 16], help="K values")
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
        help="largest T for the pruning-off column (its cost grows like K·J·T ~ K·T²)",
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
    parser.add_argument("--repeats", type=int, default=1, help="timing repeats (median kept)")
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu", help="what to time")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="T 256 … 1024, K 4 and 16, pruning off and naive up to T 512 (under a minute)",
    )
    args = parser.parse_args()
    if args.quick:
        args.lengths = [n for n in args.lengths if n <= 1024]
        args.ks = [k for k in args.ks if k in (4, 16)] or args.ks[:1]
        args.noprune_max_len = min(args.noprune_max_len, 512)
        args.naive_max_len = min(args.naive_max_len, 512)
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    wall_start = time.perf_counter()

    tokenizer = build_byte_tokenizer()
    model = build_tiny_model(DEFAULT_TINY_ARCH, tokenizer, seed=args.seed)
    task = SyntheticTask()
    cap = args.max_tokens_per_pass
    pruned = RREDCoTConfig(max_tokens_per_pass=cap)  # the default: prune_nats 30
    full = RREDCoTConfig(prune_nats=None, max_tokens_per_pass=cap)  # every suffix in full
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
        f"rredcot_credit_batch (default config, prune_nats {pruned.prune_nats}, "
        f"max_tokens_per_pass {cap}); train = one "
        f"forward + backward of the same batch (loss over the response tokens)"
    )

    # warm-up (first-call allocations), not timed
    warm, _ = make_batch(random.Random(-1), 64, 4, args)
    rredcot_credit_batch(model, tokenizer, task, warm, pruned)
    train_step(model, warm)

    rng = random.Random(args.seed)
    head = (
        f"{'T':>5} {'K':>3} {'J':>3} {'train tok':>9} {'train s':>8} │ {'credit tok':>10} "
        f"{'tok/train':>9} {'credit s':>9} {'s/train':>8} │ {'noprune tok':>11} "
        f"{'tok/train':>9} {'s/train':>8}"
    )
    print("\nper trace; ratios to the training forward + backward of the same batch")
    print(head)
    print("─" * len(head))
    rows: list[dict[str, Any]] = []
    batches: dict[tuple[int, int], list[Trace]] = {}
    for length in args.lengths:
        for k in sorted(set(args.ks) | ({args.naive_k} if length <= args.naive_max_len else set())):
            traces, j = make_batch(rng, length, k, args)
            batches[length, k] = traces
            if k not in args.ks:
                continue
            train_s, _ = timed(lambda t=traces: train_step(model, t), args.repeats, clock)
            train_tok = sum(len(t.prompt_ids) + len(t.response_ids) for t in traces)
            credit_s, res = timed(
                lambda t=traces: rredcot_credit_batch(model, tokenizer, task, t, pruned),
                args.repeats,
                clock,
            )
            credit_tok = sum(r.forward_tokens for r in res)
            row = {
                "T": length,
                "K": k,
                "J": j,
                "train_tok": train_tok,
                "train_s": train_s,
                "credit_tok": credit_tok,
                "credit_s": credit_s,
                "noprune_tok": None,
                "noprune_s": None,
            }
            if length <= args.noprune_max_len:
                row["noprune_s"], res = timed(
                    lambda t=traces: rredcot_credit_batch(model, tokenizer, task, t, full),
                    args.repeats,
                    clock,
                )
                row["noprune_tok"] = sum(r.forward_tokens for r in res)
            rows.append(row)
            np_tok = row["noprune_tok"]
            np_s = row["noprune_s"]
            print(
                f"{length:>5} {k:>3} {j:>3} {train_tok / n:>9,.0f} {train_s / n:>8.3f} │ "
                f"{credit_tok / n:>10,.0f} {fmt_ratio(credit_tok / train_tok):>9} "
                f"{credit_s / n:>9.3f} {fmt_ratio(credit_s / train_s):>8} │ "
                f"{'—' if np_tok is None else f'{np_tok / n:,.0f}':>11} "
                f"{fmt_ratio(None if np_tok is None else np_tok / train_tok):>9} "
                f"{fmt_ratio(None if np_s is None else np_s / train_s):>8}",
                flush=True,
            )

    # packed vs naive at K = naive_k
    k = args.naive_k
    print(
        f"\npacked vs naive at K = {k} (per trace; naive = one full forward per (state, "
        f"continuation); T > {args.naive_max_len} skipped, --naive-max-len)"
    )
    head = (
        f"{'T':>5} {'J':>3} {'naive tok':>10} {'naive s':>8} │ {'packed tok':>10} "
        f"{'packed s':>8} {'speed-up':>8} │ {'pruned s':>8} {'speed-up':>8} │ {'max |Δlogπ|':>11}"
    )
    print(head)
    print("─" * len(head))
    speedups: list[tuple[int, float, float]] = []
    for length in args.lengths:
        if length > args.naive_max_len:
            print(f"{length:>5}   (skipped: T > --naive-max-len {args.naive_max_len})")
            continue
        traces = batches[length, k]
        j = traces[0].reference.num_segments

        packed_s, (res, jobs, packed_tables) = timed(
            lambda t=traces: packed_credit_with_jobs(model, tokenizer, task, t, full),
            args.repeats,
            clock,
        )
        packed_tok = sum(r.forward_tokens for r in res)
        naive_s, (naive_tables, naive_tok) = timed(
            lambda jobs=jobs: naive_scores(model, jobs), args.repeats, clock
        )
        pruned_s, _ = timed(
            lambda t=traces: rredcot_credit_batch(model, tokenizer, task, t, pruned),
            args.repeats,
            clock,
        )
        diff = max(
            float((a - b).abs().max()) for a, b in zip(naive_tables, packed_tables, strict=True)
        )
        speedups.append((length, naive_s / packed_s, naive_s / pruned_s))
        print(
            f"{length:>5} {j:>3} {naive_tok / n:>10,.0f} {naive_s / n:>8.3f} │ "
            f"{packed_tok / n:>10,.0f} {packed_s / n:>8.3f} {fmt_ratio(naive_s / packed_s):>8} │ "
            f"{pruned_s / n:>8.3f} {fmt_ratio(naive_s / pruned_s):>8} │ {diff:>11.2e}"
        )

    # one-line summary
    at_k = [r for r in rows if r["K"] == max(args.ks)]
    parts = []
    if at_k:
        lo, hi = at_k[0], at_k[-1]
        parts.append(
            f"at K = {lo['K']} the credit costs {lo['credit_s'] / lo['train_s']:.2f}x (T = "
            f"{lo['T']}) to {hi['credit_s'] / hi['train_s']:.2f}x (T = {hi['T']}) the seconds "
            f"of a training forward+backward ({lo['credit_tok'] / lo['train_tok']:.1f}x to "
            f"{hi['credit_tok'] / hi['train_tok']:.1f}x its forward tokens)"
        )
    if speedups:
        lengths = ", ".join(str(t) for t, _, _ in speedups)
        plain = ", ".join(f"{s:.1f}x" for _, s, _ in speedups)
        with_prune = ", ".join(f"{s:.1f}x" for _, _, s in speedups)
        parts.append(
            f"at K = {k} and T = {lengths} packed is {plain} faster than naive without pruning "
            f"and {with_prune} with it"
        )
    print(f"\nsummary: {'; '.join(parts)}.")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux
    print(f"total wall time {time.perf_counter() - wall_start:.0f} s; peak RSS {peak:.1f} GiB")


if __name__ == "__main__":
    main()
