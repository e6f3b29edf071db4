"""Rule `credit_bases`: the main attribution rows on every SFT base of a dose of the global
`seed`, per base and pooled (`rredcot.reporting.credit_bases`): results/credit_bases.csv and its
figure. Each base's placebo rows are checked against its own credit_attribution.csv first."""

from __future__ import annotations

import argparse
from pathlib import Path

from rredcot.data.misconceptions import Misconception
from rredcot.data.schema import read_json, read_parquet, read_table
from rredcot.evaluation.regime import programs_of
from rredcot.reporting.credit_bases import (
    BaseRuns,
    bases_table,
    check_base_rows,
    headline,
    held_out_strata,
    plot_bases,
)
from rredcot.reporting.learning_curves import read_run
from rredcot.steps.cli import log, parser, require, setup


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


def per_base(p: argparse.ArgumentParser, flag: str, what: str) -> None:
    """`flag` given once per base (in the order of params' `bases`), each with its files."""
    p.add_argument(flag, required=True, nargs="+", action="append", type=Path, help=what)


def main() -> None:
    p = parser(__doc__)
    per_base(p, "--summaries", "each run's train_summary.json, one group per base")
    per_base(p, "--grades", "each run's final grades on the curve split, as --summaries")
    for flag, what in (
        ("--base", "the base policy's grades on the curve split"),
        ("--problems", "the curve split (column `program`)"),
        ("--attribution", "its credit_attribution.csv"),
    ):
        p.add_argument(flag, required=True, nargs="+", type=Path, help=f"one per base: {what}")
    p.add_argument("--table", required=True, type=Path)
    p.add_argument("--figure", required=True, type=Path)
    args = p.parse_args()
    setup()
    seeds, pairs, block, n_resamples, seed = require(
        args.params, "bases", "pairs", "misconception", "bootstrap_resamples", "seed"
    )
    files = (args.summaries, args.grades, args.base, args.problems, args.attribution)
    if {len(f) for f in files} != {len(seeds)}:
        raise ValueError(f"{len(seeds)} bases {seeds}; got {[len(f) for f in files]} per option")
    misconception = None if block is None else Misconception(**block)
    bases = [
        read_base(s, summaries, grades, base, problems, misconception)
        for s, summaries, grades, base, problems in zip(seeds, *files[:4], strict=True)
    ]
    table = bases_table(bases, [tuple(pair) for pair in pairs], n_resamples, seed)
    for s, path in zip(seeds, args.attribution, strict=True):
        checked = check_base_rows(table, s, read_table(path), str(path))
        log.info("base %s: %d rows equal to %s", s, checked, path)
    args.table.parent.mkdir(parents=True, exist_ok=True)
    table.write_csv(args.table)
    plot_bases(table, args.figure)
    for pair, line in headline(table).items():
        log.info("%s (area, all held-out problems, pooled over bases): %s", pair, line)
    log.info("wrote %s and %s", args.table, args.figure)


if __name__ == "__main__":
    main()
