"""The dose-response of credit's value (results/credit_regimes.csv,
results/figures/credit_regimes.png): each dose's gain over GRPO, per method, side by side.

Every dose ran the whole workflow in a directory of its own (`rredcot.workflow.dose_response`); its
`method_comparison.csv` (`rredcot.reporting.learning_curves.method_comparison`) holds the paired
comparisons. Per dose and method (GRPO excluded), two rows are taken from it, both pooled over
seeds against GRPO:
- the pre-registered primary endpoint, the area under the held-out curve (`auc`, endpoint
  `primary`); a run shorter than GRPO's (MC, cut for cost) has its area over its own steps
  against GRPO's same steps instead (`auc_equal_steps`, which that file calls secondary);
- the final-step difference (`final`, or `final_equal_steps`), secondary.
Each keeps its CIs (two-level bootstrap and the t interval over seeds), its verdict (the more
conservative of the two), the seed SD and the minimum detectable effect at 80% power
(`rredcot.evaluation.power`), and gains the number of seeds that would bring that MDE to a
target. Where each dose built `regime_table.csv`, the base policy's row of it (greedy and T = 1
pass@1, systematic share of its errors) is added to the dose's rows.

Each dose generates its own copy of the world; when the doses share the world's settings (only
the SFT and what follows differ), `check_same_world` requires the copies to be identical files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from rredcot.data.schema import read_table  # noqa: E402
from rredcot.evaluation.power import seeds_for_mde  # noqa: E402
from rredcot.reporting.figures import save_figure, says_no_rows  # noqa: E402

COMPARISON = "method_comparison.csv"
REGIME = "regime_table.csv"
AREA = ("auc", "auc_equal_steps")
FINAL = ("final", "final_equal_steps")
KEPT = (
    "method", "against", "measure", "endpoint", "method_score", "against_score", "difference",
    "ci95_low", "ci95_high", "seed_t_ci95_low", "seed_t_ci95_high", "verdict", "seeds",
    "problems", "seed_sd", "mde80", "method_step", "against_step",
)  # fmt: skip
"""The columns of a method_comparison.csv row carried into the dose-response table."""
REGIME_COLUMNS = {
    "greedy_pass1": "base_greedy_pass1",
    "t1_pass1": "base_t1_pass1",
    "greedy_systematic_share": "base_greedy_systematic_share",
    "t1_systematic_share": "base_t1_systematic_share",
}
"""regime_table.csv's columns of the base policy, as the dose-response table names them."""


@dataclass(frozen=True)
class DoseResults:
    """What one dose's run left: its comparison table and (when built) its regime table."""

    level: float
    comparison: pl.DataFrame
    source: str  # the comparison's path, for error messages
    regime: pl.DataFrame | None = None
    regime_source: str = ""


def _require_file(path: Path, level: float) -> Path:
    if not path.is_file():
        raise FileNotFoundError(
            f"dose {level:g}: {path} does not exist; the dose's workflow writes it (run the "
            "dose-response config to the end, or drop the level from doses.levels)"
        )
    return path


def read_dose(root: str | Path, level: float, regime: bool) -> DoseResults:
    """A dose's tables from its directory (the one that takes the place of results/)."""
    root = Path(root)
    comparison = _require_file(root / COMPARISON, level)
    out = DoseResults(level, read_table(comparison), str(comparison))
    if not regime:
        return out
    table = _require_file(root / REGIME, level)
    return DoseResults(out.level, out.comparison, out.source, read_table(table), str(table))


def dose_rows(dose: DoseResults, reference: str) -> pl.DataFrame:
    """The dose's area and final rows of every method against `reference` (pooled over seeds).

    Raises ValueError naming the file when a column is missing, when no method is compared
    with `reference`, or when a method lacks its area or final row or has two of one."""
    missing = [c for c in (*KEPT, "seed") if c not in dose.comparison.columns]
    if missing:
        raise ValueError(f"{dose.source}: missing column(s) {missing}")
    pooled = dose.comparison.filter(
        (pl.col("seed").cast(pl.String) == "all") & (pl.col("against") == reference)
    )
    methods = list(dict.fromkeys(pooled["method"].to_list()))
    if not methods:
        raise ValueError(f"{dose.source}: no method is compared with {reference}")
    rows = []
    for method in methods:
        mine = pooled.filter(pl.col("method") == method)
        for measures, what in ((AREA, "area under the held-out curve"), (FINAL, "final step")):
            found = mine.filter(pl.col("measure").is_in(list(measures)))
            if found.height != 1:
                raise ValueError(
                    f"{dose.source}: {method} - {reference} has {found.height} rows of the "
                    f"{what} (measure {' or '.join(measures)}), expected 1"
                )
            rows.append(found.select(KEPT))
    return pl.concat(rows, how="vertical_relaxed").with_columns(
        pl.lit(dose.level, pl.Float64).alias("dose")
    )


def base_regime(dose: DoseResults) -> dict[str, float | None]:
    """The base policy's regime figures of the dose (`REGIME_COLUMNS`), from its regime table's
    base row (the row pooled over seeds, `seed` "all", when there are several)."""
    assert dose.regime is not None
    table = dose.regime
    missing = [c for c in ("method", "seed", *REGIME_COLUMNS) if c not in table.columns]
    if missing:
        raise ValueError(f"{dose.regime_source}: missing column(s) {missing}")
    base = table.filter(pl.col("method") == "base")
    if base.height > 1:
        base = base.filter(pl.col("seed").cast(pl.String) == "all")
    if base.height != 1:
        raise ValueError(f"{dose.regime_source}: expected one row of the base policy")
    row = base.row(0, named=True)
    return {new: row[old] for old, new in REGIME_COLUMNS.items()}


def credit_regimes(
    doses: Sequence[DoseResults],
    key: str,
    mde_target: float,
    reference: str,
) -> pl.DataFrame:
    """The dose-response table: per dose (in the order given) and method, the area row then the
    final row against `reference`, with the dose key, the seeds that would reach an MDE of
    `mde_target` at the row's seed SD, and the base's regime figures when every dose has them."""
    if not doses:
        raise ValueError("doses: none given")
    with_regime = [d.regime is not None for d in doses]
    if any(with_regime) and not all(with_regime):
        raise ValueError("doses: some have a regime table and some not; give all or none")
    parts = []
    for dose in doses:
        rows = dose_rows(dose, reference)
        if dose.regime is not None:
            rows = rows.with_columns(
                pl.lit(v, pl.Float64).alias(k) for k, v in base_regime(dose).items()
            )
        parts.append(rows)
    table = pl.concat(parts, how="vertical_relaxed")
    needed = [_seeds_for(sd, mde_target) for sd in table["seed_sd"].to_list()]
    first = ["dose_key", "dose"]
    return table.with_columns(
        pl.lit(key).alias("dose_key"),
        pl.Series(f"seeds_for_mde_{mde_target:g}", needed, dtype=pl.Int64),
    ).select(*first, pl.exclude(first))


def _seeds_for(sd: float | None, target: float) -> int | None:
    """Seeds for an MDE of `target` at seed SD `sd` (None when the SD is unknown)."""
    if sd is None or not np.isfinite(sd):
        return None
    return seeds_for_mde(float(sd), target)


def check_same_world(worlds: Mapping[str, Sequence[str | Path]]) -> None:
    """Every dose's world files (dose label -> its files, in one order) are byte-identical to
    the first dose's; raises ValueError naming the first file that differs."""
    labels = list(worlds)
    if not labels:
        return
    first = labels[0]

    def digest(path: str | Path) -> str:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()

    expected = [(Path(p).name, digest(p)) for p in worlds[first]]
    for label in labels[1:]:
        got = [(Path(p).name, digest(p)) for p in worlds[label]]
        if [n for n, _ in got] != [n for n, _ in expected]:
            raise ValueError(
                f"dose {label}: world files {[n for n, _ in got]} are not those of dose {first} "
                f"{[n for n, _ in expected]}"
            )
        for (name, a), (_, b), path in zip(expected, got, worlds[label], strict=True):
            if a != b:
                raise ValueError(
                    f"dose {label}: {path} differs from dose {first}'s {name}; the doses must "
                    "share one world (only the dose key may differ between them)"
                )


@says_no_rows("Gain over the reference against the dose")
def plot_credit_regimes(table: pl.DataFrame, path: str | Path) -> Path:
    """Gain over the reference on the area under the held-out curve against the dose: one line
    per method, 95% bootstrap CI bars, the zero line."""
    area = table.filter(pl.col("measure").is_in(list(AREA)))
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ax.axhline(0.0, color="black", linewidth=1)
    methods = list(dict.fromkeys(area["method"].to_list()))
    span = float(area["dose"].max() - area["dose"].min()) or 1.0
    for i, method in enumerate(methods):
        part = area.filter(pl.col("method") == method).sort("dose")
        shift = (i - (len(methods) - 1) / 2) * 0.01 * span  # the methods' bars side by side
        x = part["dose"].to_numpy() + shift
        y = part["difference"].to_numpy()
        err = np.vstack([y - part["ci95_low"].to_numpy(), part["ci95_high"].to_numpy() - y])
        shorter = "auc_equal_steps" in part["measure"].to_list()
        label = f"{method} (area over its {part['method_step'][0]} steps)" if shorter else method
        ax.errorbar(x, y, yerr=err, marker="o", capsize=4, label=label)
    ax.set_xlabel(f"dose ({table['dose_key'][0]})")
    ax.set_ylabel(
        f"gain over {area['against'][0]}: area under the held-out curve\n"
        "(method − reference, 95% CI)"
    )
    ax.legend(title="method")
    fig.tight_layout()
    return save_figure(fig, path)


def headline(table: pl.DataFrame) -> dict[str, str]:
    """Per method, the doses where its area row is better / worse than the reference, for the
    log."""
    area = table.filter(pl.col("measure").is_in(list(AREA)))
    out = {}
    for method in dict.fromkeys(area["method"].to_list()):
        part = area.filter(pl.col("method") == method)
        by = {
            v: [f"{d:g}" for d in part.filter(pl.col("verdict") == v)["dose"].to_list()]
            for v in ("better", "worse")
        }
        out[method] = f"better at doses {by['better']}, worse at {by['worse']}"
    return out
