"""Rule `main_table`: `results/main_table.csv`, methods × benchmarks (pass@1 mean ± std, CI)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rredcot.reporting.training import main_table
from rredcot.steps.cli import log, parser, setup


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--tables", required=True, nargs="+", type=Path)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    setup()
    tables = {}
    for path in args.tables:
        table = pl.read_csv(path)
        tables[str(table["benchmark"][0])] = table
    wide = main_table(tables)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    wide.write_csv(args.out)
    log.info("wrote %s:\n%s", args.out, wide.select("method", *tables))


if __name__ == "__main__":
    main()
