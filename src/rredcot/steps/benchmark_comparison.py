"""Rule `benchmark_comparison`: every method − GRPO and − base on each benchmark, paired."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rredcot.data.schema import read_table
from rredcot.reporting.benchmark_comparison import benchmark_comparison
from rredcot.steps.cli import log, parser, require, setup


def main() -> None:
    p = parser(__doc__)
    p.add_argument(
        "--grades",
        required=True,
        nargs="+",
        type=Path,
        help="results/eval/{method}/seed{seed}/{benchmark}/grades.parquet of every policy",
    )
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    setup()
    methods, baseline_method, base = require(args.params, "methods", "reference", "base")
    by_benchmark: dict[str, list[pl.DataFrame]] = {}
    for path in args.grades:
        by_benchmark.setdefault(path.parent.name, []).append(read_table(path))
    tables = [
        benchmark_comparison(
            name,
            pl.concat(frames, how="vertical_relaxed"),
            methods,
            baseline_method=baseline_method,
            base=base,
            n_resamples=args.params.get("bootstrap_resamples", 10_000),
            seed=args.params.get("seed", 0),
        )
        for name, frames in by_benchmark.items()
    ]
    table = pl.concat(tables, how="vertical_relaxed")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.write_csv(args.out)
    log.info("wrote %s:\n%s", args.out, table.select("benchmark", "method", "against",
                                                     "difference", "verdict"))  # fmt: skip


if __name__ == "__main__":
    main()
