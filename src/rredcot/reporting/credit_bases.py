"""The main attribution rows on several SFT bases, pooled (results/credit_bases.csv,
results/figures/credit_bases.png; docs/attribution/bases.md).

A dose of the global `seed` (`doses.key: seed`, `rredcot.workflow.dose_response`) runs the whole
workflow once per SFT base of the same world, each in its own directory. Per base, each
comparison is the one its `credit_attribution.csv` makes (method − its placebo) or its
`method_comparison.csv` makes (each run − the baseline, GRPO): the area under the held-out curve
(`auc`, the primary endpoint), paired over (seed, problem), on all held-out problems and on each
stratum (`rule`: the misconception's rule applies to the problem; `no_rule`). The areas are read
from the runs each base's tables were made from (their `curve.csv`, final grades and the base
policy's grades, as `rredcot.reporting.learning_curves` reads them: per (seed, problem), the
trapezoid mean of pass@1 over the evaluated steps); each base's placebo rows are checked against
its own `credit_attribution.csv` (`check_base_rows`).

Rows, per (comparison, stratum): one per base (`base_seed` = its SFT seed), the base's paired
comparison over its seeds and the problems (`rredcot.evaluation.paired.paired_comparison`, with
the base's own bootstrap seed, so the row is its own table's); then the pooled row (`base_seed`
`all`): the mean over bases, the hierarchical bootstrap over bases, seeds and problems and the t
interval over the per-base means (df = bases − 1), the more conservative verdict, the within-base
seed SD, the SD of the per-base means and the between-base SD
(`rredcot.evaluation.hierarchical.pooled_comparison`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from rredcot.data.misconceptions import Misconception, rule_applies  # noqa: E402
from rredcot.data.programs import Program  # noqa: E402
from rredcot.data.schema import read_json, read_parquet, read_table  # noqa: E402
from rredcot.evaluation.hierarchical import pooled_comparison  # noqa: E402
from rredcot.evaluation.paired import paired_comparison  # noqa: E402
from rredcot.evaluation.regime import programs_of  # noqa: E402
from rredcot.reporting.credit_attribution import ALL, PRIMARY, STRATA  # noqa: E402
from rredcot.reporting.figures import (  # noqa: E402
    ci_error_bars,
    legend_right,
    save_figure,
    says_no_rows,
)
from rredcot.reporting.learning_curves import (  # noqa: E402
    RunScores,
    problem_grid,
    read_run,
    run_points,
    step_area,
)

POOLED = "all"
"""`base_seed` of the rows pooled over bases."""
COMPARISONS = ("placebo", "baseline")
"""A method against its placebo (credit_attribution.csv), or a run against the baseline (GRPO)."""
COLUMNS = (
    "method", "against", "comparison", "measure", "stratum", "endpoint", "base_seed", "bases",
    "seeds", "problems", "method_score", "against_score", "difference", "ci95_low", "ci95_high",
    "bootstrap_verdict", "seed_t_ci95_low", "seed_t_ci95_high", "seed_t_verdict",
    "base_t_ci95_low", "base_t_ci95_high", "base_t_verdict", "verdict", "seed_sd", "base_sd",
    "between_base_sd", "mde80",
)  # fmt: skip
"""The table's columns; a per-base row has no base_t_* / base_sd / between_base_sd (NaN, n/a),
a pooled row no seed_t_* (t over bases instead)."""
TOLERANCE = 1e-9
"""How far a base's difference may be from its own credit_attribution.csv's (float rounding)."""


@dataclass(frozen=True)
class BaseRuns:
    """What one base's workflow left: its runs, the base policy's held-out grades, the held-out
    problems' strata."""

    seed: int  # the base's SFT seed (its config's `seed`), also its own tables' bootstrap seed
    runs: tuple[RunScores, ...]
    base: pl.DataFrame  # the base policy's grades on the curve split: every curve's step 0
    strata: Mapping[str, str]  # problem id -> rule | no_rule; empty without a misconception
    source: str  # names the base in error messages (the step: its seed and grades file)


def held_out_strata(
    programs: Mapping[str, Program], misconception: Misconception
) -> dict[str, str]:
    """Each held-out problem's stratum: `rule` when the misconception's rule applies to its right
    solution, else `no_rule`."""
    applies = {p: rule_applies(prog, misconception) for p, prog in programs.items()}
    return {p: "rule" if rule else "no_rule" for p, rule in applies.items()}


def read_base(
    seed: int,
    summaries: list[Path],
    grades: list[Path],
    base: Path,
    problems: Path,
    misconception: Misconception | None,
) -> BaseRuns:
    """One base's runs (each run's summary and final grades on the curve split, in one order),
    the base policy's grades and the split's strata."""
    if len(summaries) != len(grades):
        raise ValueError(f"base {seed}: {len(summaries)} summaries but {len(grades)} grade files")
    runs = []
    for summary, final in zip(summaries, grades, strict=True):
        # the run's name (a method or a variant of one) is its directory: train/{name}/seed{s}
        name, run_seed = summary.parent.parent.name, int(read_json(summary)["settings"]["seed"])
        runs.append(read_run(name, run_seed, summary.parent, final))
    strata = {}
    if misconception is not None:  # the held-out problems by whether the rule applies
        strata = held_out_strata(programs_of(read_parquet(problems)), misconception)
    return BaseRuns(seed, tuple(runs), read_table(base), strata, f"base {seed} ({base})")


def area_grids(base: BaseRuns) -> tuple[list[str], dict[str, tuple[int, list[int], np.ndarray]]]:
    """(the held-out problems, sorted; per run name: its steps, its seeds and the (seeds,
    problems) grid of each run's area under its held-out curve)."""
    problems = sorted(base.base["problem_id"].unique().to_list())
    out = {}
    for name in dict.fromkeys(r.method for r in base.runs):
        own = [r for r in base.runs if r.method == name]
        steps = sorted({r.steps for r in own})
        if len(steps) != 1:
            raise ValueError(f"{base.source}: the runs of {name} ran {steps} steps; expected one")
        seeds = sorted(r.seed for r in own)
        points = pl.concat([run_points(r, base.base) for r in own], how="vertical_relaxed")
        area = step_area(points, steps[0])
        out[name] = (steps[0], seeds, problem_grid(area, "auc", seeds, problems))
    return problems, out


def _pair(
    areas: Mapping[str, tuple[int, list[int], np.ndarray]], method: str, against: str, source: str
) -> tuple[np.ndarray, np.ndarray]:
    """The (seeds, problems) areas of `method` and of `against` on the method's seeds, which
    `against` must have, over the same steps."""
    missing = [n for n in (method, against) if n not in areas]
    if missing:
        raise ValueError(f"{source}: no run of {missing}")
    (steps, seeds, grid), (their_steps, their_seeds, theirs) = areas[method], areas[against]
    lacking = sorted(set(seeds) - set(their_seeds))
    if lacking or steps != their_steps:
        raise ValueError(
            f"{source}: {method} - {against} pairs the method's seeds {seeds} over its {steps} "
            f"steps; {against} lacks seeds {lacking} or ran {their_steps} steps"
        )
    return grid, theirs[[their_seeds.index(s) for s in seeds]]


def _row(
    method: str,
    against: str,
    comparison: str,
    stratum: str,
    base_seed: str,
    stats: Mapping[str, Any],
) -> dict[str, Any]:
    pooled = base_seed == POOLED
    primary = pooled and comparison == "placebo" and stratum == ALL
    none = {c: float("nan") for c in COLUMNS} | {
        c: "n/a" for c in ("bootstrap_verdict", "seed_t_verdict", "base_t_verdict", "verdict")
    }
    return none | {
        "method": method,
        "against": against,
        "comparison": comparison,
        "measure": PRIMARY,
        "stratum": stratum,
        "endpoint": "primary" if primary else "secondary",
        "base_seed": base_seed,
        "bases": 1,
        **stats,
    }


def shared_grids(
    bases: Sequence[BaseRuns],
) -> tuple[list[dict[str, tuple[int, list[int], np.ndarray]]], list[tuple[str, list[int]]]]:
    """Every base's area grids (`area_grids`) and the strata as (name, problem columns): all
    problems, then each of `STRATA` when the bases have strata. The bases must share their
    held-out problems and strata (one world); raises ValueError naming the base that does not."""
    if not bases:
        raise ValueError("bases: none given")
    found = [area_grids(b) for b in bases]
    for base, (problems, _) in zip(bases[1:], found[1:], strict=True):
        if problems != found[0][0] or dict(base.strata) != dict(bases[0].strata):
            raise ValueError(
                f"{base.source}: its held-out problems or their strata are not those of "
                f"{bases[0].source}; the bases must share one world"
            )
    problems = found[0][0]
    strata = [(ALL, list(range(len(problems))))] + [
        (s, [i for i, p in enumerate(problems) if bases[0].strata.get(p) == s])
        for s in (STRATA if bases[0].strata else ())
    ]
    return [areas for _, areas in found], [(s, cols) for s, cols in strata if cols]


def pair_grids(
    bases: Sequence[BaseRuns],
    grids: Sequence[Mapping[str, tuple[int, list[int], np.ndarray]]],
    method: str,
    against: str,
    comparison: str,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per base, the (seeds, problems) areas of `method` and `against` (`_pair`)."""
    if comparison not in COMPARISONS:
        raise ValueError(f"pairs: comparison {comparison!r} is not one of {COMPARISONS}")
    return [_pair(areas, method, against, b.source) for b, areas in zip(bases, grids, strict=True)]


def bases_table(
    bases: Sequence[BaseRuns],
    pairs: Sequence[tuple[str, str, str]],
    n_resamples: int = 10_000,
    seed: int = 0,
) -> pl.DataFrame:
    """Per (method, against, comparison) of `pairs` and per stratum (all problems, then each of
    `STRATA` when the bases have strata): a row per base in the order given, then the pooled row
    (module docstring). The bases must share their held-out problems and strata (one world);
    `seed` is the pooled bootstrap's."""
    seeds = [b.seed for b in bases]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"bases: SFT seeds {seeds} repeat; each base is one")
    grids, strata = shared_grids(bases)
    rows = []
    for method, against, comparison in pairs:
        both = pair_grids(bases, grids, method, against, comparison)
        for stratum, cols in strata:
            mine = [(a[:, cols], r[:, cols]) for a, r in both]
            scores = [(float(a.mean()), float(r.mean())) for a, r in mine]
            for base, (a, r), (m, t) in zip(bases, mine, scores, strict=True):
                stats = paired_comparison(a, r, n_resamples=n_resamples, seed=base.seed)
                stats |= {"method_score": m, "against_score": t}
                rows.append(_row(method, against, comparison, stratum, str(base.seed), stats))
            stats = pooled_comparison(mine, n_resamples=n_resamples, seed=seed)
            m, t = np.mean(scores, axis=0)
            stats |= {"method_score": float(m), "against_score": float(t)}
            rows.append(_row(method, against, comparison, stratum, POOLED, stats))
    return pl.DataFrame(rows, infer_schema_length=None).select(COLUMNS)


def check_base_rows(
    table: pl.DataFrame,
    seed: int | str,
    attribution: pl.DataFrame,
    source: str,
    column: str = "base_seed",
) -> int:
    """The base's rows that its `credit_attribution.csv` (`attribution`, read from `source`) also
    holds, the area of a placebo pair on all problems or a stratum, have its difference (to
    `TOLERANCE`): the pooled table read the runs that table was made from. Returns how many
    rows were checked (the base's rows: `column` equal to `seed`, as the table names it); raises
    ValueError naming the file when a pair's row on all problems is
    missing from it or a difference is not its own."""
    keys = ["method", "against", "measure", "stratum"]
    mine = table.filter((pl.col(column) == str(seed)) & (pl.col("comparison") == "placebo")).select(
        *keys, "difference"
    )
    theirs = attribution.filter(pl.col("measure") == PRIMARY).select(
        *keys, pl.col("difference").alias("theirs")
    )
    joined = mine.join(theirs, on=keys, how="left")
    absent = joined.filter(pl.col("theirs").is_null() & (pl.col("stratum") == ALL))
    if absent.height:
        raise ValueError(f"{source}: no row of {absent.select(keys).rows()}; rebuild it")
    off = joined.filter((pl.col("difference") - pl.col("theirs")).abs() > TOLERANCE)
    if off.height:
        raise ValueError(
            f"{source}: differences {off.select(*keys, 'theirs').rows()} are not those of the "
            f"base's runs {off['difference'].to_list()}; the table is older than its runs"
        )
    return joined.filter(pl.col("theirs").is_not_null()).height


@says_no_rows("The main attribution rows on every SFT base, pooled")
def plot_bases(table: pl.DataFrame, path: str | Path) -> Path:
    """One panel per stratum: per comparison (rows), each base's difference with its seed-t
    interval (small markers) and the pooled difference with its hierarchical bootstrap interval
    (black diamond), the zero line."""
    strata = list(dict.fromkeys(table["stratum"].to_list()))
    pairs = list(dict.fromkeys(zip(table["method"], table["against"], strict=True)))
    size = (4.8 * len(strata), 0.5 * len(pairs) + 1.6)
    fig, axes = plt.subplots(1, len(strata), figsize=size, squeeze=False, sharey=True)
    bases = [s for s in dict.fromkeys(table["base_seed"].to_list()) if s != POOLED]
    for ax, stratum in zip(axes[0], strata, strict=True):
        part = table.filter(pl.col("stratum") == stratum)
        for i, base in enumerate(bases):
            mine = part.filter(pl.col("base_seed") == base)
            shift = -0.3 + 0.45 * i / max(1, len(bases) - 1)  # the bases side by side
            y = [pairs.index(p) + shift for p in zip(mine["method"], mine["against"], strict=True)]
            xerr = ci_error_bars(mine, "difference", "seed_t_ci95_low", "seed_t_ci95_high")
            label = f"base {base} (t over seeds)"
            ax.errorbar(mine["difference"], y, xerr=xerr, fmt="o", ms=4, capsize=2, label=label)
        pooled = part.filter(pl.col("base_seed") == POOLED)
        y = [pairs.index(p) + 0.3 for p in zip(pooled["method"], pooled["against"], strict=True)]
        xerr = ci_error_bars(pooled, "difference", "ci95_low", "ci95_high")
        label = "pooled (bootstrap over bases, seeds, problems)"
        ax.errorbar(pooled["difference"], y, xerr=xerr, fmt="D", color="black", label=label)
        ax.axvline(0.0, color="grey", lw=0.8)
        ax.set_yticks(range(len(pairs)), [f"{m} − {a}" for m, a in pairs])
        ax.set_title(f"area under the held-out curve: {stratum} problems", fontsize=9)
        ax.set_xlabel("difference (share of held-out samples, 95% CI)")
    axes[0][0].invert_yaxis()
    fig.tight_layout()
    legend_right(fig, axes[0][-1], "difference")
    return save_figure(fig, path)


def headline(table: pl.DataFrame) -> dict[str, str]:
    """Per comparison, the pooled area on all problems with both intervals and the verdict,
    for the log."""
    out = {}
    pooled = table.filter((pl.col("base_seed") == POOLED) & (pl.col("stratum") == ALL))
    for r in pooled.iter_rows(named=True):
        out[f"{r['method']} - {r['against']}"] = (
            f"{r['difference']:+.4f} bootstrap [{r['ci95_low']:+.4f}, {r['ci95_high']:+.4f}] "
            f"t over {r['bases']} bases [{r['base_t_ci95_low']:+.4f}, "
            f"{r['base_t_ci95_high']:+.4f}]: {r['verdict']} (seed SD {r['seed_sd']:.4f}, "
            f"base SD {r['base_sd']:.4f}, between-base SD {r['between_base_sd']:.4f})"
        )
    return out
