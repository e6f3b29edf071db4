"""The regime of a policy on a world split: greedy and T = 1 pass@1, luck and the share of its
errors that are systematic (docs/positive_control.md).

A gain at T = 1 that vanishes under greedy decoding is sharpening, not a fixed rule; a regime in
which credit can matter has a base whose greedy output fails, and fails on the misconception's
steps. Per response, from its grade and its text:
- right: reward 1;
- wrong: the step checker finds an error (`first_error` not null), lucky ones included;
- lucky: right and wrong (a right answer from a wrong chain);
- systematic: wrong, and the first error is the misconception's (`rredcot.data.error_kinds`).
pass@1 and luck are avg@k (mean over problems of the per-problem rate; over seeds, the mean of
the seeds' values) with a percentile bootstrap 95% CI over problems of each problem's rate
pooled over seeds and samples, as the benchmark tables do (`rredcot.evaluation.tables`). The
systematic share is a ratio: systematic over wrong responses, pooled over the row's seeds and
samples, given with its denominator and no interval; null without a misconception or errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from rredcot.data.error_kinds import first_error_kind
from rredcot.data.misconceptions import Misconception, rule_applies
from rredcot.data.programs import Program
from rredcot.evaluation.metrics import avg_at_k, bootstrap_ci

GRADE_COLUMNS = ("problem_id", "sample_index", "method", "seed", "reward", "first_error")
GENERATION_COLUMNS = ("problem_id", "sample_index", "text")
PROTOCOLS = ("t1", "greedy")  # column prefixes: the split's sampling protocol, greedy decoding
POOLED = "all"  # the `seed` of a row pooled over a method's seeds
KEY_ORDER = ["seed", "problem_id", "sample_index"]


@dataclass(frozen=True)
class PolicyEvaluation:
    """One policy's grades and generations on the split under both protocols."""

    t1_grades: pl.DataFrame
    t1_generations: pl.DataFrame
    greedy_grades: pl.DataFrame
    greedy_generations: pl.DataFrame


def _require(frame: pl.DataFrame, columns: Sequence[str], name: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{name}: missing column(s) {missing}; has {frame.columns}")


def labelled_responses(
    grades: pl.DataFrame,
    generations: pl.DataFrame,
    programs: dict[str, Program],
    misconception: Misconception | None,
    name: str = "grades",
) -> pl.DataFrame:
    """One row per response: `problem_id, sample_index, method, seed` and the booleans `right,
    wrong, lucky, systematic` (systematic null without a misconception). Grades and generations
    must hold the same responses; every problem must be in `programs`."""
    _require(grades, GRADE_COLUMNS, name)
    _require(generations, GENERATION_COLUMNS, f"{name} (generations)")
    key = ["problem_id", "sample_index"]
    for frame, what in ((grades, name), (generations, f"{name} (generations)")):
        if frame.height == 0:
            raise ValueError(f"{what}: no rows")
        if frame.select(pl.struct(key).is_duplicated().any()).item():
            raise ValueError(f"{what}: two rows share a (problem_id, sample_index)")
    both = grades.select(*GRADE_COLUMNS).join(generations.select(*GENERATION_COLUMNS), on=key)
    if not both.height == grades.height == generations.height:
        raise ValueError(
            f"{name}: {grades.height} grades and {generations.height} generations, {both.height} "
            "of them on the same (problem_id, sample_index); grade the generations again"
        )
    unknown = sorted(set(both["problem_id"].to_list()) - set(programs))
    if unknown:
        raise ValueError(f"{name}: problem ids not in the problems table: {unknown[:10]}")
    wrong = both["first_error"].is_not_null()
    systematic = pl.lit(None, dtype=pl.Boolean)
    if misconception is not None:
        kinds = [
            bool(w) and first_error_kind(programs[pid], text, misconception) == "systematic"
            for pid, text, w in zip(both["problem_id"], both["text"], wrong, strict=True)
        ]
        systematic = pl.Series(kinds, dtype=pl.Boolean)
    right = both["reward"].cast(pl.Float64) == 1.0
    return both.select(*key, "method", "seed").with_columns(
        right.alias("right"),
        wrong.alias("wrong"),
        (right & wrong).alias("lucky"),
        systematic.alias("systematic"),
    )


def _rate(responses: pl.DataFrame, column: str, n_resamples: int, seed: int) -> list[float]:
    """[mean over seeds of avg@k, CI low, CI high] of a boolean column."""
    per_seed = [
        avg_at_k(part.select("problem_id", "sample_index", pl.col(column).alias("reward")))
        for _, part in responses.sort(KEY_ORDER).group_by("seed", maintain_order=True)
    ]  # one order: the means' last bits do not depend on how the rows came
    pooled = (
        responses.group_by("problem_id")
        .agg(pl.col(column).cast(pl.Float64).mean())
        .sort("problem_id")  # the bootstrap indexes the array: one order, one CI
    )
    low, high = bootstrap_ci(pooled[column].to_numpy(), n_resamples=n_resamples, seed=seed)
    return [float(np.mean(per_seed)), low, high]


def protocol_figures(
    responses: pl.DataFrame, prefix: str, n_resamples: int = 10_000, seed: int = 0
) -> dict[str, Any]:
    """`{prefix}_k, _pass1 (+ CI), _luck (+ CI), _wrong, _systematic_share` of labelled
    responses (`labelled_responses`; one or more seeds of one policy)."""
    k = responses.group_by("problem_id", "seed").len()["len"]
    out: dict[str, Any] = {f"{prefix}_k": int(k.max()) if k.min() == k.max() else None}
    for name, column in (("pass1", "right"), ("luck", "lucky")):
        mean, low, high = _rate(responses, column, n_resamples, seed)
        out |= {f"{prefix}_{name}": mean, f"{prefix}_{name}_ci95_low": low}
        out[f"{prefix}_{name}_ci95_high"] = high
    wrong = int(responses["wrong"].sum())
    systematic = responses["systematic"]
    out[f"{prefix}_wrong"] = wrong
    defined = wrong > 0 and systematic.null_count() == 0
    out[f"{prefix}_systematic_share"] = int(systematic.sum()) / wrong if defined else None
    return out


def rule_applies_share(programs: Sequence[Program], misconception: Misconception | None) -> Any:
    """Share of problems whose right solution has a step where the rule changes the value (null
    without a misconception)."""
    if misconception is None:
        return None
    if not programs:
        raise ValueError("programs: none given")
    return sum(rule_applies(p, misconception) for p in programs) / len(programs)


def _identity(frame: pl.DataFrame, name: str) -> tuple[str, int]:
    pairs = frame.select("method", "seed").unique().rows()
    if len(pairs) != 1:
        raise ValueError(f"{name}: expected one (method, seed), got {sorted(pairs)}")
    return pairs[0][0], int(pairs[0][1])


def _labelled(
    policy: PolicyEvaluation, programs: dict[str, Program], misconception: Misconception | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The policy's labelled responses under both protocols, checked to be one policy on one
    problem set."""
    t1 = labelled_responses(
        policy.t1_grades, policy.t1_generations, programs, misconception, "t1 grades"
    )
    greedy = labelled_responses(
        policy.greedy_grades, policy.greedy_generations, programs, misconception, "greedy grades"
    )
    who = _identity(t1, "t1 grades")
    if _identity(greedy, "greedy grades") != who:
        raise ValueError(f"greedy grades: not of the same policy as the t1 grades {who}")
    if set(t1["problem_id"].to_list()) != set(greedy["problem_id"].to_list()):
        raise ValueError(f"{who}: the t1 and greedy grades hold different problems")
    return t1, greedy


def _row(
    t1: pl.DataFrame,
    greedy: pl.DataFrame,
    programs: dict[str, Program],
    misconception: Misconception | None,
    n_resamples: int,
    seed: int,
) -> dict[str, Any]:
    seeds = sorted(set(t1["seed"].to_list()))
    problems = sorted(set(t1["problem_id"].to_list()))
    return {
        "method": t1["method"][0],
        "seed": str(seeds[0]) if len(seeds) == 1 else POOLED,
        "n_seeds": len(seeds),
        "n_problems": len(problems),
        **protocol_figures(t1, "t1", n_resamples, seed),
        **protocol_figures(greedy, "greedy", n_resamples, seed),
        "rule_applies_share": rule_applies_share([programs[p] for p in problems], misconception),
        "misconception": "none" if misconception is None else misconception.rule,
    }


def programs_of(problems: pl.DataFrame) -> dict[str, Program]:
    """The world problems' programs by id (column `program`)."""
    _require(problems, ("id", "program"), "problems")
    return {
        pid: Program.from_json(p)
        for pid, p in zip(problems["id"], problems["program"], strict=True)
    }


def regime_row(
    policy: PolicyEvaluation,
    problems: pl.DataFrame,
    misconception: Misconception | None,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> dict[str, Any]:
    """One policy's row: method, seed, t1_/greedy_ pass@1, luck (with CIs over problems), wrong
    responses and systematic share, and the share of problems the rule applies to."""
    programs = programs_of(problems)
    t1, greedy = _labelled(policy, programs, misconception)
    return _row(t1, greedy, programs, misconception, n_resamples, seed)


def regime_table(
    policies: Sequence[PolicyEvaluation],
    problems: pl.DataFrame,
    misconception: Misconception | None,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> pl.DataFrame:
    """A row per policy (in the order given), then per method (first-appearance order) a row
    pooled over its seeds (`seed` "all"): pass@1 and luck the mean over seeds with a CI over
    problems, systematic shares from the pooled counts."""
    if not policies:
        raise ValueError("policies: none given; the regime table needs at least one")
    programs = programs_of(problems)
    labelled = [_labelled(p, programs, misconception) for p in policies]
    rows = [_row(t1, g, programs, misconception, n_resamples, seed) for t1, g in labelled]
    seen = [(r["method"], r["seed"]) for r in rows]
    if len(set(seen)) != len(seen):
        raise ValueError(f"policies: a (method, seed) is given twice: {seen}")
    methods = [r["method"] for r in rows]
    for method in dict.fromkeys(methods):
        mine = [pair for pair, m in zip(labelled, methods, strict=True) if m == method]
        t1 = pl.concat([t for t, _ in mine])
        greedy = pl.concat([g for _, g in mine])
        rows.append(
            {**_row(t1, greedy, programs, misconception, n_resamples, seed), "seed": POOLED}
        )
    return pl.DataFrame(rows, infer_schema_length=None)
