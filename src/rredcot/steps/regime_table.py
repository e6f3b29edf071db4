"""Rule `regime_table`: `results/regime_table.csv`, greedy and T = 1 pass@1, luck and the
systematic-error share of every policy on the curve split (`rredcot.evaluation.regime`)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rredcot.data.misconceptions import Misconception
from rredcot.data.schema import read_parquet, read_table
from rredcot.evaluation.regime import PolicyEvaluation, regime_table
from rredcot.steps.cli import log, parser, require, setup

INPUTS = ("t1_grades", "t1_generations", "greedy_grades", "greedy_generations")


def main() -> None:
    p = parser(__doc__)
    for name in INPUTS:
        flag = f"--{name.replace('_', '-')}"
        p.add_argument(flag, required=True, nargs="+", type=Path, help="one per policy, in order")
    p.add_argument("--problems", required=True, type=Path, help="the split (column `program`)")
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    setup()
    split, block, n_resamples, seed = require(
        args.params, "split", "misconception", "bootstrap_resamples", "seed"
    )
    files = [getattr(args, name) for name in INPUTS]
    if len({len(f) for f in files}) != 1:
        counts = [len(f) for f in files]
        raise ValueError(f"one file per policy for each of {INPUTS}; got {counts}")
    policies = [PolicyEvaluation(*map(read_table, four)) for four in zip(*files, strict=True)]
    misconception = None if block is None else Misconception(**block)
    table = regime_table(policies, read_parquet(args.problems), misconception, n_resamples, seed)
    table = table.with_columns(split=pl.lit(split))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.write_csv(args.out)
    log.info("wrote %s:\n%s", args.out, table.select("method", "seed", "t1_pass1", "greedy_pass1"))


if __name__ == "__main__":
    main()
