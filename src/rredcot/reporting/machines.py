"""How far a comparison travels between machines (or configurations of one machine).

The seed interval of `method_comparison` describes training randomness on one machine; it says
nothing about what another CPU's kernels do to the same runs (issue 17 saw every RL run 0.04
lower on another machine of the same kind). Given the comparison tables of two complete runs of
the same config on two machines, `machine_spread` lines up their pooled rows, reports the shift
of each difference beside its seed interval, and a verdict that holds on both: a direction
only where both machines' verdicts give it (`conservative_verdict`).
"""

from __future__ import annotations

import polars as pl

from rredcot.evaluation.paired import conservative_verdict

KEY = ("method", "against", "measure")


def machine_spread(a: pl.DataFrame, b: pl.DataFrame, labels: tuple[str, str]) -> pl.DataFrame:
    """One row per pooled comparison (seed "all") present in both tables.

    a, b: `method_comparison.csv` of two runs; labels name them in the columns. Columns: method,
    against, measure, difference_<label>, seed_t_ci95_low/high_<label>, verdict_<label> for each,
    shift (b − a), seed_t_half_width_a (half the seed interval's width on the first machine:
    what the seed interval alone would promise), shift_over_seed_half_width, and
    verdict_both_machines. A row missing from either table is an error (never dropped)."""
    if labels[0] == labels[1]:
        raise ValueError(f"labels: expected two different names, got {labels}")
    cols = ["difference", "seed_t_ci95_low", "seed_t_ci95_high", "verdict"]
    sides = []
    for table, label in zip((a, b), labels, strict=True):
        missing = [c for c in (*KEY, "seed", *cols) if c not in table.columns]
        if missing:
            raise ValueError(f"table {label}: missing columns {missing}")
        pooled = table.filter(pl.col("seed").cast(pl.String) == "all").select(*KEY, *cols)
        sides.append(pooled.rename({c: f"{c}_{label}" for c in cols}))
    keys_a = set(sides[0].select(KEY).iter_rows())
    keys_b = set(sides[1].select(KEY).iter_rows())
    if keys_a != keys_b:
        raise ValueError(
            f"the tables compare different rows: only in {labels[0]}: "
            f"{sorted(keys_a - keys_b)}; only in {labels[1]}: {sorted(keys_b - keys_a)}"
        )
    first, second = labels
    joined = sides[0].join(sides[1], on=list(KEY), how="inner")
    half = (pl.col(f"seed_t_ci95_high_{first}") - pl.col(f"seed_t_ci95_low_{first}")) / 2
    shift = pl.col(f"difference_{second}") - pl.col(f"difference_{first}")
    return joined.with_columns(
        shift.alias("shift"),
        half.alias("seed_t_half_width_a"),
        (shift.abs() / half).alias("shift_over_seed_half_width"),
        pl.struct(f"verdict_{first}", f"verdict_{second}")
        .map_elements(lambda r: conservative_verdict(*r.values()), return_dtype=pl.String)
        .alias("verdict_both_machines"),
    )


__all__ = ["machine_spread"]
