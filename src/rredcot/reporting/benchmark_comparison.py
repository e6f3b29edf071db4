"""Every method against GRPO and against the base on each benchmark's final evaluation.

The benchmark tables give each method's pass@1 with a CI over problems; a reviewer asks the
paired question: is the method's difference from GRPO, on the same problems and seeds, larger
than its noise? Each row pairs the method's final policy with the reference's run of the same
training seed (and with the base, which has one), per problem, and reports the two-level
bootstrap CI over seeds and problems, the t interval over seeds and the more conservative of
their verdicts, as `results/method_comparison.csv` does along the learning curve.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from rredcot.evaluation.paired import paired_comparison
from rredcot.reporting.learning_curves import problem_grid

COLUMNS: tuple[str, ...] = (
    "benchmark", "method", "against", "method_score", "against_score", "difference",
    "ci95_low", "ci95_high", "bootstrap_verdict", "seed_t_ci95_low", "seed_t_ci95_high",
    "seed_t_verdict", "verdict", "seeds", "problems",
)  # fmt: skip


def per_problem(grades: pl.DataFrame) -> pl.DataFrame:
    """pass@1 (mean reward over the k samples) per (method, seed, problem)."""
    missing = {"method", "seed", "problem_id", "reward"} - set(grades.columns)
    if missing:
        raise ValueError(f"grades: missing column(s) {sorted(missing)}")
    return grades.group_by("method", "seed", "problem_id").agg(
        pl.col("reward").cast(pl.Float64).mean().alias("pass_at_1")
    )


def benchmark_comparison(
    benchmark: str,
    grades: pl.DataFrame,
    methods: Sequence[str],
    baseline_method: str,
    base: str = "base",
    n_resamples: int = 10_000,
    seed: int = 0,
) -> pl.DataFrame:
    """Rows `method − base` for every method in `methods` and `method − baseline_method` (the
    reference) for every other method, on `benchmark`'s grades (all policies' rows, `base`
    among them).

    Every problem the base was graded on must be graded for every run (a missing one is an
    error, never dropped for one method alone); a method's seeds must all have a reference run.
    """
    points = per_problem(grades)
    problems = sorted(points.filter(pl.col("method") == base)["problem_id"].unique().to_list())
    if not problems:
        raise ValueError(f"{benchmark}: no grades of the base policy ({base!r})")
    seeds = {
        m: sorted(points.filter(pl.col("method") == m)["seed"].unique().to_list())
        for m in (base, *methods)
    }
    empty = [m for m, s in seeds.items() if not s]
    if empty:
        raise ValueError(f"{benchmark}: no grades for {empty}")
    base_row = problem_grid(points.filter(pl.col("method") == base), "pass_at_1",
                            seeds[base][:1], problems)  # fmt: skip
    rows = []
    for method in methods:
        own = problem_grid(points.filter(pl.col("method") == method), "pass_at_1",
                           seeds[method], problems)  # fmt: skip
        pairs = [(base, np.tile(base_row, (len(seeds[method]), 1)))]
        if method != baseline_method and baseline_method in seeds:
            extra = sorted(set(seeds[method]) - set(seeds[baseline_method]))
            if extra:
                raise ValueError(
                    f"{benchmark}: {method} seeds {extra} have no {baseline_method} run to pair "
                    "with"
                )
            ref = points.filter(pl.col("method") == baseline_method)
            pairs.append((baseline_method, problem_grid(ref, "pass_at_1", seeds[method], problems)))
        for against, other in pairs:
            rows.append(
                {
                    "benchmark": benchmark,
                    "method": method,
                    "against": against,
                    "method_score": float(own.mean()),
                    "against_score": float(other.mean()),
                    **paired_comparison(own, other, n_resamples=n_resamples, seed=seed),
                }
            )
    return pl.DataFrame(rows, schema=_schema(), strict=False)


def _schema() -> dict[str, pl.DataType]:
    text = ("benchmark", "method", "against", "bootstrap_verdict", "seed_t_verdict", "verdict")
    counts = ("seeds", "problems")
    return {c: pl.String() if c in text else pl.Int64() if c in counts else pl.Float64()
            for c in COLUMNS}  # fmt: skip
