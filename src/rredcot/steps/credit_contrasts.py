"""Rule `credit_contrasts`: every level of a treatment dose's attribution rows and each later
level's contrast with the first (`rredcot.reporting.credit_contrasts`): results/credit_contrasts.csv
and its figure. Each level's placebo rows are checked against its own credit_attribution.csv."""

from __future__ import annotations

from rredcot.data.schema import read_table
from rredcot.reporting.credit_bases import check_base_rows
from rredcot.reporting.credit_contrasts import AT_DOSE, contrasts_table, headline, plot_contrasts
from rredcot.steps.cli import require, setup
from rredcot.steps.credit_bases import dose_parser, read_levels, write_outputs
from rredcot.workflow.dose_response import level_label


def main() -> None:
    args = dose_parser(__doc__).parse_args()
    setup()
    key, levels, seeds, pairs, block, n_resamples, seed = require(
        args.params, "key", "levels", "level_seeds", "pairs", "misconception",
        "bootstrap_resamples", "seed",
    )  # fmt: skip
    doses = read_levels(args, seeds, block)
    table = contrasts_table(doses, levels, key, [tuple(p) for p in pairs], n_resamples, seed)
    at_dose = table.filter(table["kind"] == AT_DOSE)
    checked = [
        check_base_rows(at_dose, level_label(v), read_table(p), str(p), "dose")
        for v, p in zip(levels, args.attribution, strict=True)
    ]
    write_outputs(args, table, plot_contrasts, checked, headline(table), f"across {key}")


if __name__ == "__main__":
    main()
