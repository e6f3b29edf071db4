"""Rule `credit_regimes`: the dose-response table and figure from every dose's results
(`rredcot.reporting.credit_regimes`), after checking that the doses share one world."""

from __future__ import annotations

from pathlib import Path

from rredcot.reporting.credit_regimes import (
    check_same_world,
    credit_regimes,
    headline,
    plot_credit_regimes,
    read_dose,
)
from rredcot.steps.cli import log, parser, require, setup


def main() -> None:
    p = parser(__doc__)
    p.add_argument(
        "--roots", required=True, nargs="+", type=Path,
        help="each dose's directory (in place of results/), in the order of params' levels",
    )  # fmt: skip
    p.add_argument("--table", required=True, type=Path)
    p.add_argument("--figure", required=True, type=Path)
    args = p.parse_args()
    setup()
    key, levels, regime, world, target, reference = require(
        args.params, "key", "levels", "regime", "world_tables", "mde_target", "reference"
    )
    if len(levels) != len(args.roots):
        raise ValueError(f"{len(levels)} levels but {len(args.roots)} dose directories")
    if world:  # the doses share the world's settings: its copies must be the same files
        world_dirs = {str(root): root / "data" / "world" for root in args.roots}
        check_same_world({r: [d / f"{t}.parquet" for t in world] for r, d in world_dirs.items()})
        log.info("the %d doses share one world (%s)", len(levels), ", ".join(world))
    else:
        log.info("the doses vary the world's settings; their worlds are not compared")
    pairs = zip(args.roots, levels, strict=True)
    doses = [read_dose(root, float(level), regime) for root, level in pairs]
    table = credit_regimes(doses, key, float(target), reference)
    args.table.parent.mkdir(parents=True, exist_ok=True)
    table.write_csv(args.table)
    plot_credit_regimes(table, args.figure)
    log.info("dose-response over %s:\n%s", key, table)
    for method, line in headline(table).items():
        log.info("%s - %s (area under the held-out curve): %s", method, reference, line)
    log.info("wrote %s and %s", args.table, args.figure)


if __name__ == "__main__":
    main()
