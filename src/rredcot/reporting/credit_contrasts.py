"""The attribution rows across the levels of a treatment dose, and their contrasts
(results/credit_contrasts.csv, results/figures/credit_contrasts.png; docs/attribution/dose.md).

A dose of a key other than the global seed (`rredcot.workflow.dose_response`; e.g.
`training.rule_share`, the share of RL problems on which the misconception's rule applies) runs
the whole workflow once per level on one base, each in its own directory. Its levels are
treatments, not replicates, so they are contrasted, not pooled (`rredcot.reporting.credit_bases`
pools the levels of a dose of the seed). Per (comparison, stratum), as that module reads them
(each method − its placebo, or each run − the baseline, GRPO; the area under the held-out curve
per (seed, problem), on all held-out problems and on each stratum):
- one row per level (`kind` `at_dose`): the level's paired comparison over its seeds and the
  problems, with the level's own bootstrap seed, so the row is its own credit_attribution.csv's;
- one row per later level against the first (`kind` `contrast`): the difference of the two
  levels' differences, (A − B at level j) − (A − B at the first level), paired over the seeds
  (every level runs the same seeds from the same base) and the problems (one world, one held-out
  split): the same two-level bootstrap and t interval over seeds as every comparison row
  (`rredcot.evaluation.paired.paired_comparison` on the two levels' difference grids), its
  verdict (`better`: the difference grows from the first level to level j), seed SD and MDE.

The contrast of a placebo pair on the rule stratum, last level against the first, is the dose's
pre-registered test (`endpoint` primary; docs/attribution/preregistration.md, P6 and P7): a
method whose credit lands on the misconception's steps gains more over its placebo there as the
share of RL problems with the rule rises.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from rredcot.evaluation.paired import paired_comparison  # noqa: E402
from rredcot.reporting.credit_attribution import PRIMARY  # noqa: E402
from rredcot.reporting.credit_bases import BaseRuns, pair_grids, shared_grids  # noqa: E402
from rredcot.reporting.figures import ci_error_bars, legend_right, save_figure, says_no_rows  # noqa: E402
from rredcot.workflow.dose_response import level_label  # noqa: E402

AT_DOSE = "at_dose"
CONTRAST = "contrast"
TESTED_STRATUM = "rule"
"""The stratum whose placebo contrast is the pre-registered test."""
COLUMNS = (
    "method", "against", "comparison", "measure", "stratum", "endpoint", "kind", "dose_key",
    "dose", "versus_dose", "seeds", "problems", "method_score", "against_score", "difference",
    "ci95_low", "ci95_high", "bootstrap_verdict", "seed_t_ci95_low", "seed_t_ci95_high",
    "seed_t_verdict", "verdict", "seed_sd", "mde80",
)  # fmt: skip
"""The table's columns. An at_dose row's scores are the two runs' areas and its `versus_dose`
is "n/a"; a contrast row's scores are the pair's differences at `dose` and at `versus_dose`."""


def _same_seeds(
    doses: Sequence[BaseRuns], grids: Sequence[dict[str, Any]], method: str, against: str
) -> None:
    """Every level ran `method` on the first level's seeds (the contrasts pair them)."""
    first = grids[0][method][1]
    for dose, areas in zip(doses[1:], grids[1:], strict=True):
        if areas[method][1] != first:
            raise ValueError(
                f"{dose.source}: {method} - {against} ran seeds {areas[method][1]}; "
                f"{doses[0].source} ran {first}; the levels must run the same seeds"
            )


def contrasts_table(
    doses: Sequence[BaseRuns],
    levels: Sequence[float],
    key: str,
    pairs: Sequence[tuple[str, str, str]],
    n_resamples: int = 10_000,
    seed: int = 0,
) -> pl.DataFrame:
    """Per (method, against, comparison) of `pairs` and per stratum: a row per level in the
    order given, then each later level's contrast with the first (module docstring). `seed` is
    the contrasts' bootstrap seed; each level's row uses its own (`BaseRuns.seed`)."""
    if len(levels) != len(doses):
        raise ValueError(f"levels: {len(levels)} given for {len(doses)} doses")
    labels = [level_label(v) for v in levels]
    if len(set(labels)) != len(labels):
        raise ValueError(f"levels: {labels} repeat; each level is one dose")
    grids, strata = shared_grids(doses)
    rows = []
    for method, against, comparison in pairs:
        both = pair_grids(doses, grids, method, against, comparison)
        _same_seeds(doses, grids, method, against)
        for stratum, cols in strata:
            mine = [(a[:, cols], r[:, cols]) for a, r in both]
            common = {"method": method, "against": against, "comparison": comparison}
            common |= {"measure": PRIMARY, "stratum": stratum, "dose_key": key}
            for dose, label, (a, r) in zip(doses, labels, mine, strict=True):
                stats = paired_comparison(a, r, n_resamples=n_resamples, seed=dose.seed)
                stats |= {"method_score": float(a.mean()), "against_score": float(r.mean())}
                rows.append(common | stats | _kind(AT_DOSE, label, "n/a", False))
            first = mine[0][0] - mine[0][1]
            for label, (a, r) in zip(labels[1:], mine[1:], strict=True):
                later = a - r
                stats = paired_comparison(later, first, n_resamples=n_resamples, seed=seed)
                stats |= {"method_score": float(later.mean()), "against_score": float(first.mean())}
                tested = comparison == "placebo" and stratum == TESTED_STRATUM
                tested = tested and label == labels[-1]
                rows.append(common | stats | _kind(CONTRAST, label, labels[0], tested))
    return pl.DataFrame(rows, infer_schema_length=None).select(COLUMNS)


def _kind(kind: str, dose: str, versus: str, tested: bool) -> dict[str, str]:
    endpoint = "primary" if tested else "secondary"
    return {"kind": kind, "dose": dose, "versus_dose": versus, "endpoint": endpoint}


@says_no_rows("Each method against its placebo and GRPO across the dose")
def plot_contrasts(table: pl.DataFrame, path: str | Path) -> Path:
    """One panel per stratum: per comparison, its difference at each level against the level
    (95% bootstrap CI bars), the zero line."""
    rows = table.filter(pl.col("kind") == AT_DOSE)
    strata = list(dict.fromkeys(rows["stratum"].to_list()))
    pairs = list(dict.fromkeys(zip(rows["method"], rows["against"], strict=True)))
    fig, axes = plt.subplots(1, len(strata), figsize=(4.6 * len(strata), 4.2), squeeze=False)
    for ax, stratum in zip(axes[0], strata, strict=True):
        part = rows.filter(pl.col("stratum") == stratum)
        for i, (method, against) in enumerate(pairs):
            mine = part.filter((pl.col("method") == method) & (pl.col("against") == against))
            x = np.array([float(d) for d in mine["dose"]]) + 0.01 * (i - (len(pairs) - 1) / 2)
            err = ci_error_bars(mine, "difference", "ci95_low", "ci95_high")
            ax.errorbar(x, mine["difference"], yerr=err, marker="o", capsize=3,
                        label=f"{method} − {against}")  # fmt: skip
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_title(f"area under the held-out curve: {stratum} problems", fontsize=9)
        ax.set_xlabel(f"dose ({rows['dose_key'][0]})")
    axes[0][0].set_ylabel("difference (share of held-out samples, 95% CI)")
    fig.tight_layout()
    legend_right(fig, axes[0][-1], "comparison")
    return save_figure(fig, path)


def headline(table: pl.DataFrame) -> dict[str, str]:
    """Per placebo pair and stratum, the differences at each level and the contrast of the last
    level with the first, for the log."""
    out = {}
    placebo = table.filter(pl.col("comparison") == "placebo")
    for (method, against, stratum), part in placebo.group_by(
        ["method", "against", "stratum"], maintain_order=True
    ):
        at = part.filter(pl.col("kind") == AT_DOSE)
        last = part.filter(pl.col("kind") == CONTRAST).tail(1)
        text = ", ".join(
            f"{d}: {v:+.4f}" for d, v in zip(at["dose"], at["difference"], strict=True)
        )
        if last.height:
            r = last.row(0, named=True)
            text += (
                f"; {r['dose']} - {r['versus_dose']}: {r['difference']:+.4f} "
                f"[{r['ci95_low']:+.4f}, {r['ci95_high']:+.4f}] {r['verdict']}"
            )
        out[f"{method} - {against} ({stratum})"] = text
    return out
