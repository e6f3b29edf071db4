"""How far do the method comparisons travel between two machines (or two configurations of one)?

    python scripts/machine_spread.py --runs DIR_A DIR_B --labels avx512 avx2 [--out spread.csv]

DIR_A and DIR_B are two workflow directories that ran the same config (e.g. a fresh clone run
as is, and one run with `ATEN_CPU_CAPABILITY=avx2`; or two machines). Reads each one's
`results/method_comparison.csv` and `results/main_table.csv`, prints per method the held-out
pass@1 on both with the shift, then every pooled comparison row on both: the difference, its
seed interval, the shift between the machines against half the seed interval, and the verdict
that holds on both (`rredcot.reporting.machines.machine_spread`). Only the rows both ran are
compared; a config that trained other methods on one side is an error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rredcot.reporting.machines import machine_spread  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", nargs=2, type=Path, required=True, help="two workflow directories")
    p.add_argument("--labels", nargs=2, required=True, help="a name for each")
    p.add_argument("--benchmark", default="synth_id", help="main_table column to compare")
    p.add_argument("--out", type=Path, help="write the comparison rows as CSV")
    args = p.parse_args()
    comparisons, mains = [], []
    for run, label in zip(args.runs, args.labels, strict=True):
        comparisons.append(pl.read_csv(run / "results" / "method_comparison.csv"))
        main = pl.read_csv(run / "results" / "main_table.csv")
        mains.append(
            main.select(
                "method",
                pl.col(args.benchmark).alias(f"pass_at_1_{label}"),
                pl.col(f"{args.benchmark}_std").alias(f"std_over_seeds_{label}"),
                pl.col("machine").alias(f"machine_{label}")
                if "machine" in main.columns
                else pl.lit("not recorded").alias(f"machine_{label}"),
            )
        )
    a, b = args.labels
    scores = (
        mains[0]
        .join(mains[1], on="method", how="inner")
        .with_columns((pl.col(f"pass_at_1_{b}") - pl.col(f"pass_at_1_{a}")).alias("shift"))
    )
    spread = machine_spread(comparisons[0], comparisons[1], (a, b))
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=200, fmt_str_lengths=80):
        print(scores.drop(f"machine_{a}", f"machine_{b}"))
        for label in (a, b):
            print(f"machine {label}: {scores[f'machine_{label}'][0]}")
        print(
            spread.select(
                "method", "against", "measure", f"difference_{a}", f"difference_{b}", "shift",
                "seed_t_half_width_a", f"verdict_{a}", f"verdict_{b}", "verdict_both_machines",
            )
        )  # fmt: skip
    if args.out:
        spread.write_csv(args.out)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
