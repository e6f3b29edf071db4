"""The memory planner's credit estimate against the CPU peak of scaled shapes (issue #29).

For each shape in `SHAPES` (layers, width, KV heads, trace length T, traces per step, resident
budget), a tiny Qwen3 model of that shape (random weights, float32, byte vocabulary) scores one
step's traces with `rredcot_credit_batch` (pruning off, so no kept keys: the planner's
`pruning_bound` is a bound, not an estimate), and the process's peak resident memory above its
start (VmHWM, the bench's meter) is set against `rredcot.planning.memory_plan.credit_phases`. Writes
a markdown table (`--markdown`, e.g. into docs/memory/measurements.md) and a CSV (`--csv`);
exits 1 when a shape is outside ±`--tolerance` (0.25).

    OMP_NUM_THREADS=1 python bench/check_memory_plan.py --markdown /tmp/plan.md  # ~2 min
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
from pathlib import Path

import torch

from rredcot.credit.rredcot import RREDCoTConfig, rredcot_credit_batch
from rredcot.models.tiny import build_tiny_model
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.planning.memory_plan import ModelShape, credit_phases
from rredcot.tasks.synthetic import SyntheticTask

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_credit_scaling import _mmap_large_blocks, make_batch, timed  # noqa: E402

SHAPES = [  # (layers, hidden, KV heads, T, traces, max_resident_tokens in traces or None)
    (8, 128, 4, 1024, 4, None),
    (8, 128, 4, 2048, 4, None),
    (12, 128, 4, 1024, 8, 4),
    (8, 256, 8, 1024, 8, 2),
    (16, 128, 2, 1024, 8, 2),
    (8, 128, 4, 512, 16, 4),
    (12, 192, 6, 768, 8, 4),
]
PROMPT, K, HEAD_DIM = 64, 8, 32
COLUMNS = ["layers", "hidden", "kv_heads", "T", "traces", "max_resident_tokens", "cache_MiB",
           "estimate_MiB", "measured_MiB", "ratio"]  # fmt: skip


def measure(shape: tuple, args: argparse.Namespace) -> dict[str, object]:
    """Estimate and CPU peak of one shape."""
    layers, hidden, kv, length, n, budget_traces = shape
    heads = hidden // HEAD_DIM
    arch = {
        "hidden_size": hidden,
        "intermediate_size": 3 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": HEAD_DIM,
        "max_position_embeddings": 2 * (length + PROMPT),
    }
    tokenizer = build_byte_tokenizer()
    model = build_tiny_model(arch, tokenizer, seed=0)
    budget = None if budget_traces is None else budget_traces * (PROMPT + length)
    config = RREDCoTConfig(prune_nats=None, max_resident_tokens=budget)
    # a short reference (J ≈ T/640 lines): the unpruned scoring stays quick; memory is set by
    # the cache and the passes, not by J
    batch = argparse.Namespace(traces=n, prompt_tokens=PROMPT, line_tokens=64, ref_ratio=0.1)
    traces = make_batch(random.Random(0), length, K, batch)[0]
    task = SyntheticTask()
    rredcot_credit_batch(model, tokenizer, task, traces[:1], config)  # first-call allocations
    _, peak, _ = timed(
        lambda: rredcot_credit_batch(model, tokenizer, task, traces, config), 1, time_clock
    )
    plan = ModelShape(layers, hidden, 3 * hidden, heads, kv, HEAD_DIM, len(tokenizer), True, 4)
    estimate = credit_phases(
        plan,
        [len(t.prompt_ids) for t in traces],
        [len(t.response_ids) for t in traces],
        states=K + 1,
        max_resident_tokens=budget,
    )
    mib = 2**20
    return {
        "layers": layers,
        "hidden": hidden,
        "kv_heads": kv,
        "T": length,
        "traces": n,
        "max_resident_tokens": budget or "",
        "cache_MiB": round(estimate["cache"] / mib, 1),
        "estimate_MiB": round(estimate["peak"] / mib, 1),
        "measured_MiB": round(peak / mib, 1),
        "ratio": round(peak / estimate["peak"], 3),
    }


def time_clock() -> float:
    import time

    return time.process_time()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tolerance", type=float, default=0.25)
    parser.add_argument("--csv", type=Path, default=None)
    parser.add_argument("--markdown", type=Path, default=None)
    args = parser.parse_args()
    _mmap_large_blocks()
    torch.set_num_threads(1)
    rows = []
    for shape in SHAPES:
        rows.append(measure(shape, args))
        print(rows[-1], flush=True)
    if args.csv is not None:
        with args.csv.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows]
    table = "\n".join(lines)
    print(table)
    if args.markdown is not None:
        args.markdown.write_text(table + "\n")
    bad = [r for r in rows if abs(float(r["ratio"]) - 1) > args.tolerance]
    if bad:
        print(f"{len(bad)} shape(s) outside ±{args.tolerance:.0%}")
        sys.exit(1)


if __name__ == "__main__":
    main()
