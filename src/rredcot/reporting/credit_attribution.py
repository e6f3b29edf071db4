"""Is a credit method's gain credit *assignment*? Each method against its placebo
(results/credit_attribution.csv, results/figures/credit_attribution.png; docs/attribution.md).

A placebo (`credit.placebo`, METHOD.md §9) keeps how much signal each trace and group gets and
destroys where it goes, so method − placebo isolates placement. Every row pairs the method's run
of each seed with the placebo's run of the same seed, on the same held-out problems
(`rredcot.evaluation.paired`: two-level bootstrap and the t interval over seeds, the more
conservative verdict, the MDE at 80% power). Measures, all "higher is better":

- `auc` (the pre-registered primary endpoint) and `final`: the learning curve's area and its
  last point, as in `method_comparison.csv` (`rredcot.reporting.learning_curves.method_comparison`);
- `t1_avoids_systematic` / `t1_avoids_random`: the share of the final policy's held-out samples
  (the split's protocol) whose first error is *not* systematic (the misconception's rule step) /
  *not* random; the difference is minus the difference in that error's rate, so a method that
  removes the misconception better than its placebo gains on the first;
- `greedy_pass1`: the final policy's greedy pass@1;
- `auc` on each stratum of the held-out problems (`stratum` rule / no_rule: whether the
  misconception's rule applies to the problem), when the step is given the strata;
- `final_equal_seconds` / `final_equal_tokens`, for a baseline given a method's budget
  (`training.variants.<i>.budget_of`: GRPO with more steps or samples): the method against it
  at equal cumulative wall seconds and forward tokens (`method_comparison`'s rule), and
  `auc_equal_seconds`, the area under each held-out curve against cumulative wall seconds up
  to the smaller of the two runs' totals (`rredcot.reporting.learning_curves.seconds_area`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from rredcot.evaluation.paired import paired_comparison
from rredcot.reporting.figures import ci_error_bars, save_figure, says_no_rows
from rredcot.reporting.learning_curves import (
    RunScores,
    mean_cumulative_compute,
    method_comparison,
    problem_grid,
    run_points,
    seconds_area,
)

PRIMARY = "auc"
ALL = "all"
STRATA: tuple[str, ...] = ("rule", "no_rule")
"""Held-out problems whose right solution has a step the misconception's rule changes, and the
others (`rredcot.data.misconceptions.rule_applies`)."""
EQUAL_COMPUTE = ("final_equal_seconds", "final_equal_tokens")
"""`method_comparison`'s measures at equal cumulative wall seconds and forward tokens."""
SECONDS_AREA = "auc_equal_seconds"
"""The area under the held-out curve against cumulative wall seconds, to a common budget."""
STATS = ("difference", "ci95_low", "ci95_high", "bootstrap_verdict", "seed_t_ci95_low",
         "seed_t_ci95_high", "seed_t_verdict", "verdict", "seeds", "problems", "seed_sd",
         "mde80")  # fmt: skip
"""The columns of a paired comparison (`rredcot.evaluation.paired.paired_comparison`)."""


def _kind_points(labelled: pl.DataFrame) -> pl.DataFrame:
    """Per (method, seed, problem): the share of samples right, and free of each error kind."""
    if labelled["systematic"].null_count():
        raise ValueError("labelled responses: first-error kinds need the world's misconception")
    random = pl.col("wrong") & ~pl.col("systematic")
    return labelled.group_by("method", "seed", "problem_id").agg(
        pl.col("right").cast(pl.Float64).mean().alias("right"),
        (~pl.col("systematic")).cast(pl.Float64).mean().alias("avoids_systematic"),
        (~random).cast(pl.Float64).mean().alias("avoids_random"),
    )


def _row(
    method: str,
    against: str,
    measure: str,
    error_kind: str,
    stats: Mapping[str, Any],
    stratum: str = ALL,
) -> dict[str, Any]:
    return {
        "method": method,
        "against": against,
        "measure": measure,
        "error_kind": error_kind,
        "stratum": stratum,
        "endpoint": "primary" if (measure, stratum) == (PRIMARY, ALL) else "secondary",
        **stats,
    }


def _stratum(
    runs: Sequence[RunScores], base: pl.DataFrame, problems: set[str]
) -> tuple[list[RunScores], pl.DataFrame]:
    """The runs and the base on `problems` only."""
    keep = pl.col("problem_id").is_in(sorted(problems))
    runs = [replace(r, curve=r.curve.filter(keep), final=r.final.filter(keep)) for r in runs]
    return runs, base.filter(keep)


def _paired_runs(
    runs: Sequence[RunScores], method: str, against: str
) -> tuple[list[RunScores], dict[str, list[int]]]:
    """The runs of both sides and their seeds, which must be the same (never dropped)."""
    both = [r for r in runs if r.method in (method, against)]
    seeds = {m: sorted(r.seed for r in both if r.method == m) for m in (method, against)}
    if not seeds[method] or seeds[method] != seeds[against]:
        raise ValueError(
            f"{method} vs {against}: the runs must share their seeds, got {seeds[method]} "
            f"and {seeds[against]}"
        )
    return both, seeds


def _curve_rows(
    runs: Sequence[RunScores],
    base: pl.DataFrame,
    method: str,
    against: str,
    measures: Sequence[str],
    n_resamples: int,
    seed: int,
) -> list[dict[str, Any]]:
    """`method_comparison`'s pooled rows of `method` against `against` for `measures`."""
    curves = method_comparison(runs, base, against, n_resamples=n_resamples, seed=seed)
    rows = []
    for measure in measures:
        (stats,) = (
            curves.filter(
                (pl.col("method") == method)
                & (pl.col("against") == against)
                & (pl.col("measure") == measure)
                & (pl.col("seed") == "all")
            )
            .select(*STATS)
            .iter_rows(named=True)
        )
        rows.append(_row(method, against, measure, ALL, stats))
    return rows


def _seconds_area_row(
    runs: Sequence[RunScores],
    base: pl.DataFrame,
    method: str,
    against: str,
    seeds: Sequence[int],
    n_resamples: int,
    seed: int,
) -> dict[str, Any]:
    """`method` − `against`, the area under the held-out curve against cumulative wall seconds
    up to the smaller of the two runs' totals (each step at its run's mean seconds over seeds)."""
    problems = sorted(base["problem_id"].unique().to_list())
    compute = mean_cumulative_compute(runs)
    seconds, points = {}, {}
    for name in (method, against):
        seconds[name] = {st: sec for (m, st), (sec, _) in compute.items() if m == name}
        own = [r for r in runs if r.method == name]
        points[name] = pl.concat([run_points(r, base) for r in own], how="vertical_relaxed")
    final = {name: max(r.steps for r in runs if r.method == name) for name in (method, against)}
    budget = min(seconds[name][final[name]] for name in (method, against))
    grids = [
        problem_grid(seconds_area(points[name], seconds[name], budget), "auc", seeds, problems)
        for name in (method, against)
    ]
    stats = paired_comparison(*grids, n_resamples=n_resamples, seed=seed)
    return _row(method, against, SECONDS_AREA, ALL, {k: stats[k] for k in STATS})


def _kind_rows(
    kinds: Mapping[str, pl.DataFrame],
    method: str,
    against: str,
    seeds: Mapping[str, list[int]],
    problems: Sequence[str],
    n_resamples: int,
    seed: int,
) -> list[dict[str, Any]]:
    """`method` − `against` on the final samples free of each first-error kind and on greedy
    pass@1 (`_kind_points`), paired over (seed, problem)."""
    rows = []
    for protocol, column, measure, kind in (
        ("t1", "avoids_systematic", "t1_avoids_systematic", "systematic"),
        ("t1", "avoids_random", "t1_avoids_random", "random"),
        ("greedy", "right", "greedy_pass1", ALL),
    ):
        points = kinds[protocol]
        grids = [
            problem_grid(points.filter(pl.col("method") == m), column, seeds[m], problems)
            for m in (method, against)
        ]
        stats = paired_comparison(*grids, n_resamples=n_resamples, seed=seed)
        rows.append(_row(method, against, measure, kind, stats))
    return rows


def attribution_table(
    runs: Sequence[RunScores],
    base: pl.DataFrame,
    t1: pl.DataFrame,
    greedy: pl.DataFrame,
    pairs: Sequence[tuple[str, str]],
    n_resamples: int = 10_000,
    seed: int = 0,
    budget_pairs: Sequence[tuple[str, str]] = (),
    strata: Mapping[str, str] | None = None,
    reference: str | None = None,
) -> pl.DataFrame:
    """One row per (pair, measure): method − placebo, paired over (seed, problem); then each
    `budget_pairs` (run, baseline given its budget) at equal seconds and equal forward tokens.

    runs: every run of both sides of every pair (`read_run`); base: the base's held-out grades
    (step 0 of every curve); t1 / greedy: labelled final responses of those runs
    (`rredcot.evaluation.regime.labelled_responses`, with first-error kinds). Both sides of a
    pair must share their seeds (an unpaired seed is an error, never dropped). `strata`
    (problem id -> `rule` | `no_rule`) adds each pair's area on each stratum of the held-out
    problems (column `stratum`; every other row is `all`). `reference` (GRPO): every other run
    of `runs` also gets the first-error-kind and greedy rows against it (`_kind_rows`)."""
    if not pairs:
        raise ValueError("pairs: no placebo variant (training.variants with credit.placebo)")
    kinds = {"t1": _kind_points(t1), "greedy": _kind_points(greedy)}
    problems = sorted(base["problem_id"].unique().to_list())
    rows = []
    for method, against in pairs:
        both, seeds = _paired_runs(runs, method, against)
        rows += _curve_rows(both, base, method, against, (PRIMARY, "final"), n_resamples, seed)
        for label in STRATA if strata else ():
            chosen = {p for p, s in strata.items() if s == label}
            if not chosen:
                continue
            part = _curve_rows(*_stratum(both, base, chosen), method, against, (PRIMARY,),
                               n_resamples, seed)  # fmt: skip
            rows += [{**r, "stratum": label, "endpoint": "secondary"} for r in part]
        rows += _kind_rows(kinds, method, against, seeds, problems, n_resamples, seed)
    names = list(dict.fromkeys(r.method for r in runs))
    for method in names if reference in names else ():
        if method != reference:  # on the method's seeds, which the reference must have
            own = sorted(r.seed for r in runs if r.method == method)
            missing = sorted(set(own) - {r.seed for r in runs if r.method == reference})
            if missing:
                raise ValueError(f"{method}: seeds {missing} have no {reference} run to pair with")
            seeds = {method: own, reference: own}
            rows += _kind_rows(kinds, method, reference, seeds, problems, n_resamples, seed)
    for method, against in budget_pairs:
        both, seeds = _paired_runs(runs, method, against)
        rows += _curve_rows(both, base, method, against, EQUAL_COMPUTE, n_resamples, seed)
        rows.append(
            _seconds_area_row(both, base, method, against, seeds[method], n_resamples, seed)
        )
        # per first-error kind at both runs' ends: the baseline's end is the method's budget
        rows += _kind_rows(kinds, method, against, seeds, problems, n_resamples, seed)
    return pl.DataFrame(rows, infer_schema_length=None)


@says_no_rows("Each credit method against its placebo")
def plot_attribution(table: pl.DataFrame, path: str | Path) -> Path:
    """Method − its comparison run per measure, the bootstrap CI as a bar, a panel per pair."""
    import matplotlib.pyplot as plt

    pairs = list(dict.fromkeys(zip(table["method"], table["against"], strict=True)))
    fig, axes = plt.subplots(1, len(pairs), figsize=(4.5 * len(pairs), 3.2), squeeze=False)
    for ax, (method, against) in zip(axes[0], pairs, strict=True):
        part = table.filter((pl.col("method") == method) & (pl.col("against") == against))
        y = np.arange(part.height)
        xerr = ci_error_bars(part, "difference", "ci95_low", "ci95_high")
        ax.errorbar(part["difference"].to_numpy(), y, xerr=xerr, fmt="o", capsize=3)
        ax.axvline(0.0, color="grey", lw=0.8)
        ax.set_yticks(y, part["measure"].to_list())
        ax.invert_yaxis()
        ax.set_xlabel(f"{method} − {against} (share of held-out samples)")
        ax.set_title(f"{method} vs {against}", fontsize=9)
    return save_figure(fig, path)
