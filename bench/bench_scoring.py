"""Packed vs naive state scoring on the embedded default's tiny Qwen3: time and tokens.

1. A realistic RREDCoT scoring job for one trace (METHOD.md §3): prompt ~40 tokens, response
   ~90 tokens, K segments, M = 1 + J continuations (the answer-now continuation and J reference
   suffixes of ~20-90 tokens). The naive scorer runs one forward pass per (state,
   continuation); the packed scorer encodes the trace once and scores all continuations in a
   few more passes.
2. A training step's job: G prompts × n responses (a GRPO batch; the responses of a prompt
   share its continuations), K states each, scored in one call with several row widths
   (`row_tokens`, the choice behind `rredcot.scoring.layout.ROW_TOKENS`), then in each layout
   at its default width (`shared`: a row of one trace per pass; `split`: rows of many traces
   per pass, no mask) with its passes and its largest |difference| from `shared`.
Times are the process's CPU seconds (median of `--repeats`), which a busy shared machine
disturbs less than wall time. Prints tables; asserts nothing.
Run: `python bench/bench_scoring.py [--threads 1]`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from rredcot.models.tiny import DEFAULT_TINY_ARCH, build_tiny_model
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.scoring.layout import LAYOUTS
from rredcot.scoring.logprobs import sequence_logprob_naive
from rredcot.scoring.packed import TraceSpec, score_states, score_states_batch


def make_trace(rng: random.Random, vocab: int, num_segments: int, num_suffixes: int) -> TraceSpec:
    """Random ids with the shapes of a real scoring job (token values do not affect cost)."""
    prompt = [rng.randrange(vocab) for _ in range(40)]
    response = [rng.randrange(vocab) for _ in range(90)]
    inner = sorted(rng.sample(range(1, 90), num_segments - 1))
    answer_now = [rng.randrange(vocab) for _ in range(12)]  # A ⊕ y* ⊕ close
    suffixes = [
        [rng.randrange(vocab) for _ in range(n)]
        for n in sorted((rng.randint(20, 90) for _ in range(num_suffixes)), reverse=True)
    ]
    return TraceSpec(prompt, response, [0, *inner, 90], [answer_now, *suffixes])


def naive_tokens(spec: TraceSpec) -> int:
    p = len(spec.prompt_ids)
    return sum(p + b + len(c) for b in spec.boundaries for c in spec.continuations)


def packed_tokens(spec: TraceSpec) -> int:
    trace = len(spec.prompt_ids) + len(spec.response_ids)
    return trace + spec.num_states * sum(len(c) - 1 for c in spec.continuations)


def timed(fn, repeats: int) -> float:
    """Median CPU seconds of `repeats` calls."""
    seconds = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        seconds.append(time.process_time() - start)
    return statistics.median(seconds)


def make_group_batch(
    rng: random.Random, vocab: int, prompts: int, responses: int, num_segments: int, j: int
) -> list[TraceSpec]:
    """G prompts × n responses with the lengths of the embedded default's training batches:
    prompt ~40, response 30-128, K states each; the continuations belong to the prompt."""
    specs = []
    for _ in range(prompts):
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(35, 45))]
        conts = [[rng.randrange(vocab) for _ in range(13)]]  # A ⊕ y* ⊕ close ⊕ EOS
        conts += [
            [rng.randrange(vocab) for _ in range(n)]
            for n in sorted((rng.randint(20, 60) for _ in range(j)), reverse=True)
        ]
        for _ in range(responses):
            t = rng.randint(30, 128)
            inner = sorted(rng.sample(range(1, t), num_segments - 1))
            response = [rng.randrange(vocab) for _ in range(inner[-1])]  # cut at b_{K−1}
            specs.append(TraceSpec(prompt, response, [0, *inner], conts))
    return specs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=3, help="timing repeats (median kept)")
    parser.add_argument("--suffixes", type=int, default=4, help="J reference suffixes")
    parser.add_argument("--prompts", type=int, default=4, help="G prompts of the batch job")
    parser.add_argument("--responses", type=int, default=8, help="n responses per prompt")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    tokenizer = build_byte_tokenizer()
    model = build_tiny_model(DEFAULT_TINY_ARCH, tokenizer, seed=0)
    vocab = len(tokenizer)
    print(
        f"model: tiny Qwen3 {DEFAULT_TINY_ARCH}, attention {model.config._attn_implementation}, "
        f"{args.threads} thread(s); M = 1 + J = {1 + args.suffixes}"
    )
    header = (
        f"{'K':>3} {'naive s':>9} {'packed s':>9} {'speed-up':>9} "
        f"{'naive tok':>10} {'packed tok':>11} {'max |diff|':>11}"
    )
    print(header)
    rng = random.Random(0)
    specs = []
    for num_segments in (4, 6, 8):
        spec = make_trace(rng, vocab, num_segments, args.suffixes)
        specs.append(spec)

        def naive(spec: TraceSpec = spec) -> torch.Tensor:
            return torch.tensor(
                [
                    [
                        sequence_logprob_naive(model, [*spec.prompt_ids, *spec.response_ids[:b]], c)
                        for c in spec.continuations
                    ]
                    for b in spec.boundaries
                ],
                dtype=torch.float64,
            )

        def packed(spec: TraceSpec = spec) -> torch.Tensor:
            return score_states(
                model, spec.prompt_ids, spec.response_ids, spec.boundaries, spec.continuations
            )

        diff = float((naive() - packed()).abs().max())
        t_naive, t_packed = timed(naive, args.repeats), timed(packed, args.repeats)
        print(
            f"{num_segments:>3} {t_naive:>9.4f} {t_packed:>9.4f} {t_naive / t_packed:>8.1f}x "
            f"{naive_tokens(spec):>10} {packed_tokens(spec):>11} {diff:>11.2e}"
        )

    t_each = timed(lambda: [score_states_batch(model, [s]) for s in specs], args.repeats)
    t_batch = timed(lambda: score_states_batch(model, specs), args.repeats)
    print(
        f"3 traces (K = 4, 6, 8): one score_states call each {t_each:.4f} s, "
        f"one score_states_batch call {t_batch:.4f} s"
    )

    group = make_group_batch(rng, vocab, args.prompts, args.responses, 4, args.suffixes)
    tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in group) + sum(
        s.num_states * sum(len(c) - 1 for c in s.continuations) for s in group
    )
    print(
        f"\n{args.prompts} prompts x {args.responses} responses, states b_0 … b_3 of K = 4 "
        f"(no sharing counted: {tokens:,} tokens); one score_states_batch call:"
    )
    print(f"{'row_tokens':>10} {'cpu s':>8}")
    for row_tokens in (0, 16, 32, 64, 128, 256, 1024):
        t = timed(lambda r=row_tokens: score_states_batch(model, group, row_tokens=r), args.repeats)
        print(f"{row_tokens:>10} {t:>8.3f}")

    print(f"\n{'layout':>10} {'cpu s':>8} {'passes':>7} {'max |diff|':>11}")
    default = score_states_batch(model, group)
    for layout in LAYOUTS:
        t = timed(lambda lay=layout: score_states_batch(model, group, layout=lay), args.repeats)
        calls: list[int] = []  # forward passes of the body, the encoding's included
        hook = model.get_decoder().register_forward_hook(lambda *_, c=calls: c.append(1))
        got = score_states_batch(model, group, layout=layout)
        hook.remove()
        diff = max(float((a - b).abs().max()) for a, b in zip(got, default, strict=True))
        print(f"{layout:>10} {t:>8.3f} {len(calls):>7} {diff:>11.2e}")


if __name__ == "__main__":
    main()
