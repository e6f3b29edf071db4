"""Two cost ratios of RREDCoT from one workflow run (METHOD.md §3 cost target, §5 study).

1. Packed vs naive scoring: the RREDCoT continuations (answer-now and every reference suffix C*_j)
   of the study traces at every state, scored by the packed scorer (`rredcot_credit_batch`: trace
   encoded once, a few batched passes, every suffix in full) and by one full forward pass per
   (state, continuation) (`sequence_logprob_naive`). Prints wall times, tokens, the speed-up,
   and the largest difference between the two log-prob tables (they must agree); then the
   default scorer with pruning (`prune_nats`): its time, tokens and largest relative change of
   Φ_k (the dropped mass is below J·e^−nats·R̂_k; the rest is float32 rounding of the kept
   scores, which run in other passes).
2. RREDCoT vs MC at equal agreement: from `results/estimator_agreement.csv`, the MC N whose mean
   Spearman with the ground truth reaches RREDCoT's (linear in log2 N between measured N), MC's
   cost per trace at that N (interpolated the same way) and the ratio to RREDCoT's cost per trace.

Run after `snakemake --cores all results/estimator_agreement.csv`:
    python bench/bench_estimators.py [--results results] [--traces 16] [--threads 1]
Asserts nothing; prints a table.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import polars as pl
import torch

from rredcot.credit.rredcot import (
    RREDCoTConfig,
    Trace,
    build_continuations,
    rredcot_credit_batch,
    state_kinds,
)
from rredcot.scoring.logprobs import sequence_logprob_naive
from rredcot.steps.study_common import load_policy
from rredcot.studies.cost_match import crossing
from rredcot.studies.estimators import reference_path
from rredcot.studies.segmentations import MAIN
from rredcot.tasks import get_task


def study_traces(results: Path, n: int, task) -> list[Trace]:
    traces = pl.read_parquet(results / "studies" / "traces.parquet")
    seg = pl.read_parquet(results / "studies" / "segmentations.parquet").filter(
        pl.col("segmentation") == MAIN
    )
    bounds = dict(seg.select("trace_index", "boundaries").iter_rows())
    out = []
    for row in traces.iter_rows(named=True):
        ref = reference_path(task, row["reference"], row["answer"])
        if ref is None or row["trace_index"] not in bounds:
            continue
        b = bounds[row["trace_index"]]
        out.append(Trace(row["prompt_ids"], row["response_ids"], b, ref, row["reward"]))
        if len(out) == n:
            break
    return out


def naive_scores(model, tokenizer, task, trace: Trace, config: RREDCoTConfig) -> tuple[list, int]:
    """log π(c | s_k) for every state and continuation by one full pass each; tokens fed."""
    kinds = state_kinds(tokenizer, trace.prompt_ids, trace.response_ids, trace.boundaries)
    rows, tokens = [], 0
    for b, kind in zip(trace.boundaries, kinds, strict=True):
        conts = build_continuations(
            task,
            trace.reference,
            tokenizer,
            end_with_eos=config.end_with_eos,
            state_kind=kind,
            with_conditional=config.answer_now == "conditional",
            join=config.join,
        )
        prefix = [*trace.prompt_ids, *trace.response_ids[:b]]
        row = []
        for c in conts.all_ids():
            row.append(sequence_logprob_naive(model, prefix, c))
            tokens += len(prefix) + len(c)
        rows.append(row)
    return rows, tokens


def interpolate_cost(table: pl.DataFrame, n: float, column: str) -> float:
    """MC cost per trace at N = n, linear in log2 N between the measured N."""
    mc = table.filter(pl.col("family") == "mc").sort("n_rollouts")
    x = np.log2(mc["n_rollouts"].to_numpy().astype(float))
    return float(np.interp(np.log2(n), x, mc[column].to_numpy()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--policy", default=None, help="default: <results>/models/base")
    parser.add_argument("--traces", type=int, default=16, help="study traces to score")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--variant", default="ref_suffix_sum", help="RREDCoT value variant")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    task = get_task("synthetic")
    model, tokenizer = load_policy(args.policy or str(args.results / "models" / "base"))
    config = RREDCoTConfig(value=args.variant, prune_nats=None)  # every suffix: comparable
    pruned_config = RREDCoTConfig(value=args.variant)  # the default: pruning where it applies
    traces = study_traces(args.results, args.traces, task)

    # 1. packed vs naive
    start = time.perf_counter()
    packed = rredcot_credit_batch(model, tokenizer, task, traces, config)
    packed_s = time.perf_counter() - start
    start = time.perf_counter()
    pruned = rredcot_credit_batch(model, tokenizer, task, traces, pruned_config)
    pruned_s = time.perf_counter() - start
    phi_diff = max(
        float(((a.phi - b.phi).abs() / a.phi).max()) for a, b in zip(packed, pruned, strict=True)
    )
    start = time.perf_counter()
    for t in traces:
        rredcot_credit_batch(model, tokenizer, task, [t], config)
    packed_each_s = time.perf_counter() - start
    start = time.perf_counter()
    naive, naive_tokens, diff = [], 0, 0.0
    for t, p in zip(traces, packed, strict=True):
        rows, tokens = naive_scores(model, tokenizer, task, t, config)
        naive_tokens += tokens
        table = torch.tensor(rows, dtype=torch.float64)
        j = t.reference.num_segments
        answer = table[:, -1] - table[:, -2] if config.answer_now == "conditional" else table[:, 0]
        diff = max(diff, float((answer.clamp(max=0) - p.answer_logprob).abs().max()))
        diff = max(diff, float((table[:, 1 : 1 + j] - p.suffix_logprobs).abs().max()))
        naive.append(rows)
    naive_s = time.perf_counter() - start
    packed_tokens = sum(p.forward_tokens for p in packed)
    print(
        f"RREDCoT scoring of {len(traces)} study traces ({config.value}), {args.threads} thread(s)"
    )
    print(f"  naive  : {naive_s:8.3f} s  {naive_tokens:9d} tokens (one pass per state x cont.)")
    print(f"  packed : {packed_s:8.3f} s  {packed_tokens:9d} tokens (all traces batched)")
    print(f"  packed : {packed_each_s:8.3f} s  (one trace per call)")
    pruned_tokens = sum(p.forward_tokens for p in pruned)
    print(
        f"  pruned : {pruned_s:8.3f} s  {pruned_tokens:9d} tokens (default prune_nats "
        f"{pruned_config.prune_nats}; max |ΔΦ_k| / Φ_k vs packed {phi_diff:.1e})"
    )
    print(
        f"  speed-up naive/packed: {naive_s / packed_s:.2f}x batched, "
        f"{naive_s / packed_each_s:.2f}x per trace; tokens {naive_tokens / packed_tokens:.2f}x"
    )
    print(f"  max |log-prob difference| packed vs naive: {diff:.2e}")

    # 2. RREDCoT vs MC at equal agreement
    table = pl.read_csv(args.results / "estimator_agreement.csv")
    row = table.filter(pl.col("estimator") == f"rredcot_{args.variant}").row(0, named=True)
    mc = table.filter(pl.col("family") == "mc").sort("n_rollouts")
    print(
        f"\nAgreement with the MC ground truth (mean per-trace Spearman; in brackets with flat "
        f"estimates scored 0), {row['n_defined']} defined traces:"
    )
    print(
        f"  RREDCoT {args.variant}: {row['spearman_mean']:.3f} "
        f"({row['spearman_mean_flat_as_zero']:.3f})  {row['forward_tokens_per_trace']:9.0f} "
        f"tokens/trace  {row['seconds_per_trace']:.4f} s/trace"
    )
    for r in mc.iter_rows(named=True):
        print(
            f"  MC N={r['n_rollouts']:<3d} {r['spearman_mean']:.3f} "
            f"({r['spearman_mean_flat_as_zero']:.3f})  {r['forward_tokens_per_trace']:9.0f} "
            f"tokens/trace  {r['seconds_per_trace']:.4f} s/trace"
        )
    for column in ("spearman_mean", "spearman_mean_flat_as_zero"):
        n_match, _ = crossing(
            mc["n_rollouts"].to_numpy().astype(float), mc[column].to_numpy(), row[column]
        )
        print(f"  by {column}:")
        for cost, unit in (("forward_tokens_per_trace", "tokens"), ("seconds_per_trace", "s")):
            ours = row[cost]
            if np.isfinite(n_match):
                theirs = interpolate_cost(table, n_match, cost)
                print(
                    f"    MC needs N ≈ {n_match:.2f}; cost per trace MC/RREDCoT ({unit}): "
                    f"{theirs:.4g}/{ours:.4g} = {theirs / ours:.2f}x"
                )
            else:
                top = mc.row(-1, named=True)
                print(
                    f"    no measured MC N reaches it; MC N={top['n_rollouts']} costs "
                    f"{top[cost] / ours:.2f}x RREDCoT ({unit}) and agrees less"
                )


if __name__ == "__main__":
    main()
