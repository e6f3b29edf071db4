"""Rule `credit_bases`: the main attribution rows on every SFT base of a dose of the global
`seed`, per base and pooled (`rredcot.reporting.credit_bases`): results/credit_bases.csv and its
figure. Each base's placebo rows are checked against its own credit_attribution.csv first."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import polars as pl

from rredcot.data.misconceptions import Misconception
from rredcot.data.schema import read_table
from rredcot.reporting.credit_bases import (
    BaseRuns,
    bases_table,
    check_base_rows,
    headline,
    plot_bases,
    read_base,
)
from rredcot.steps.cli import log, parser, require, setup


def per_base(p: argparse.ArgumentParser, flag: str, what: str) -> None:
    """`flag` given once per base (in the order of params' `bases`), each with its files."""
    p.add_argument(flag, required=True, nargs="+", action="append", type=Path, help=what)


def dose_parser(doc: str | None) -> argparse.ArgumentParser:
    """The arguments of a step that reads every level of a dose (rredcot.workflow.base_inputs):
    each run's files once per level, one file per level of the rest, the table and figure."""
    p = parser(doc)
    per_base(p, "--summaries", "each run's train_summary.json, one group per level")
    per_base(p, "--grades", "each run's final grades on the curve split, as --summaries")
    for flag, what in (
        ("--base", "the base policy's grades on the curve split"),
        ("--problems", "the curve split (column `program`)"),
        ("--attribution", "its credit_attribution.csv"),
    ):
        p.add_argument(flag, required=True, nargs="+", type=Path, help=f"one per level: {what}")
    p.add_argument("--table", required=True, type=Path)
    p.add_argument("--figure", required=True, type=Path)
    return p


def read_levels(args: argparse.Namespace, seeds: list[int], block: dict | None) -> list[BaseRuns]:
    """Every level's runs from the parsed `dose_parser` arguments, one per bootstrap seed in
    `seeds` (the levels' order); `block` is the misconception whose rule makes the strata."""
    files = (args.summaries, args.grades, args.base, args.problems, args.attribution)
    if {len(f) for f in files} != {len(seeds)}:
        raise ValueError(f"{len(seeds)} levels {seeds}; got {[len(f) for f in files]} per option")
    misconception = None if block is None else Misconception(**block)
    return [
        read_base(s, summaries, grades, base, problems, misconception)
        for s, summaries, grades, base, problems in zip(seeds, *files[:4], strict=True)
    ]


def main() -> None:
    args = dose_parser(__doc__).parse_args()
    setup()
    seeds, pairs, block, n_resamples, seed = require(
        args.params, "bases", "pairs", "misconception", "bootstrap_resamples", "seed"
    )
    bases = read_levels(args, seeds, block)
    table = bases_table(bases, [tuple(pair) for pair in pairs], n_resamples, seed)
    checked = [
        check_base_rows(table, s, read_table(p), str(p))
        for s, p in zip(seeds, args.attribution, strict=True)
    ]
    write_outputs(args, table, plot_bases, checked, headline(table), "pooled over bases")


def write_outputs(
    args: argparse.Namespace,
    table: pl.DataFrame,
    plot: Callable[[pl.DataFrame, Path], Path],
    checked: list[int],
    lines: dict[str, str],
    what: str,
) -> None:
    """Write the table and its figure; log how many of each level's rows its own
    credit_attribution.csv confirmed (`checked`) and the headline `lines`."""
    for path, n in zip(args.attribution, checked, strict=True):
        log.info("%d rows equal to %s", n, path)
    args.table.parent.mkdir(parents=True, exist_ok=True)
    table.write_csv(args.table)
    plot(table, args.figure)
    for pair, line in lines.items():
        log.info("%s (area, %s): %s", pair, what, line)
    log.info("wrote %s and %s", args.table, args.figure)


if __name__ == "__main__":
    main()
