"""Rule `regime_table`: `results/regime_table.csv`, greedy and T = 1 pass@1, luck and the
systematic-error share of every policy on the curve split (`rredcot.evaluation.regime`)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rredcot.data.misconceptions import Misconception
from rredcot.data.schema import read_parquet, read_table
from rredcot.evaluation.regime import PolicyEvaluation, regime_table
from rredcot.steps.cli import add_per_run_files, log, parser, per_run_files, require, setup

INPUTS = ("t1_grades", "t1_generations", "greedy_grades", "greedy_generations")


def main() -> None:
    p = parser(__doc__)
    add_per_run_files(p, INPUTS, "policy")
    p.add_argument("--problems", required=True, type=Path, help="the split (column `program`)")
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    setup()
    split, block, n_resamples, seed = require(
        args.params, "split", "misconception", "bootstrap_resamples", "seed"
    )
    files = per_run_files(args, INPUTS, "policy")
    policies = [PolicyEvaluation(*map(read_table, four)) for four in zip(*files, strict=True)]
    misconception = None if block is None else Misconception(**block)
    table = regime_table(policies, read_parquet(args.problems), misconception, n_resamples, seed)
    table = table.with_columns(split=pl.lit(split))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.write_csv(args.out)
    log.info("wrote %s:\n%s", args.out, table.select("method", "seed", "t1_pass1", "greedy_pass1"))


if __name__ == "__main__":
    main()
