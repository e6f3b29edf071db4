"""Rule `credit_attribution`: every segment-credit method against its placebo
(`rredcot.reporting.credit_attribution`): results/credit_attribution.csv and its figure."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rredcot.data.misconceptions import Misconception, rule_applies
from rredcot.data.schema import read_json, read_parquet, read_table
from rredcot.evaluation.regime import labelled_responses, programs_of
from rredcot.reporting.credit_attribution import attribution_table, plot_attribution
from rredcot.reporting.learning_curves import read_run
from rredcot.steps.cli import add_per_run_files, log, parser, per_run_files, require, setup

PER_RUN = ("summaries", "grades", "t1_generations", "greedy_grades", "greedy_generations")


def main() -> None:
    p = parser(__doc__)
    add_per_run_files(p, PER_RUN, "run")
    p.add_argument("--base", required=True, type=Path, help="the base policy's grades on the split")
    p.add_argument("--problems", required=True, type=Path, help="the split (column `program`)")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--figure", required=True, type=Path)
    args = p.parse_args()
    setup()
    pairs, budget, reference, block, n_resamples, seed = require(
        args.params, "pairs", "budget_pairs", "reference", "misconception",
        "bootstrap_resamples", "seed",
    )  # fmt: skip
    files = per_run_files(args, PER_RUN, "run")
    programs = programs_of(read_parquet(args.problems))
    misconception = None if block is None else Misconception(**block)
    runs, t1, greedy = [], [], []
    for summary, grades, t1_gen, g_grades, g_gen in zip(*files, strict=True):
        # the run's name (a method or a variant of one) is its directory: train/{name}/seed{s}
        name, run_seed = summary.parent.parent.name, int(read_json(summary)["settings"]["seed"])
        runs.append(read_run(name, run_seed, summary.parent, grades))
        for out, g, gen in ((t1, grades, t1_gen), (greedy, g_grades, g_gen)):
            labelled = labelled_responses(read_table(g), read_table(gen), programs, misconception)
            out.append(labelled.with_columns(method=pl.lit(name), seed=pl.lit(run_seed)))
    strata = None
    if misconception is not None:  # the held-out problems by whether the rule applies
        strata = {
            pid: "rule" if rule_applies(program, misconception) else "no_rule"
            for pid, program in programs.items()
        }
    table = attribution_table(
        runs, read_table(args.base), pl.concat(t1), pl.concat(greedy),
        [tuple(pair) for pair in pairs], n_resamples, seed, [tuple(pair) for pair in budget],
        strata, reference,
    )  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.write_csv(args.out)
    plot_attribution(table, args.figure)
    log.info("wrote %s:\n%s", args.out, table.select("method", "against", "measure", "difference"))


if __name__ == "__main__":
    main()
