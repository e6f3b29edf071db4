"""What a config builds: the artifacts `rule all` asks for, and which of them the summary reads."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping

from rredcot.workflow import Config
from rredcot.workflow.evaluation_settings import curve_split
from rredcot.workflow.paths import ATTRIBUTION_TABLE, REGIME_TABLE, SUMMARY
from rredcot.workflow.problem_sets import is_world, study_set, train_data
from rredcot.workflow.run_params import placebo_pairs
from rredcot.workflow.runs import training_methods

STUDY_ARTIFACTS = (
    "estimator_agreement",
    "attribution_correlation",
    "segmentation_sweep",
    "mc_truncation",
    "error_localization",
    "estimator_frontier",
)


def study_artifacts(config: Config) -> list[str]:
    """The study artifacts this config asks for: none when `studies.enabled` is false; error
    localization only on a world split (only its step checker knows the first wrong step)."""
    if not config["studies"]["enabled"]:
        return []
    world = is_world(config, study_set(config))
    return [a for a in STUDY_ARTIFACTS if world or a != "error_localization"]


def builds_regime_table(config: Config) -> bool:
    """Whether the config builds the regime table: on the curve split (a world split whose
    protocol is the RL temperature, T = 1, no nucleus), whenever there are runs to compare with
    the base."""
    return curve_split(config) is not None and bool(training_methods(config))


def run_targets(config: Config) -> list[str]:
    """Everything `rule all` asks for but the summary, which reads these."""
    training = ["results/main_table.csv"]
    if training_methods(config):
        training += [
            "results/benchmark_comparison.csv",
            "results/training_curves.csv",
            "results/figures/training_curves.png",
            "results/compute_cost.csv",
        ]
        if curve_split(config) is not None:
            training += [
                "results/learning_curves.csv",
                "results/figures/learning_curves.png",
                "results/method_comparison.csv",
            ]
        if builds_regime_table(config):
            training.append(REGIME_TABLE)
            # (method, placebo) of every variant with credit.placebo (docs/attribution.md)
            if placebo_pairs(config["training"]["variants"]):
                training += [ATTRIBUTION_TABLE, "results/figures/credit_attribution.png"]
    studies = study_artifacts(config)
    return (
        [f"results/{b}_table.csv" for b in config["benchmarks"]]
        + training
        + [
            f"results/references/{config['references']['source']}/{train_data(config)}.parquet",
            *[f"results/{a}.csv" for a in studies],
            *[f"results/figures/{a}.png" for a in studies],
        ]
    )


def all_targets(config: Config) -> list[str]:
    """What `rule all` asks for, every artifact of the config and then the summary of them."""
    return [*run_targets(config), SUMMARY]


def summary_tables(
    config: Config, answer_now: Callable[[], str], pick: Callable[[], str]
) -> dict[str, str]:
    """The tables `results/SUMMARY.md` reads that this config builds, by name
    (`rredcot.reporting.summary_tables.TABLES`): the answer-now rule comes with the agreement
    table, the rredcot_fast pick with the frontier. `answer_now()` and `pick()` give their
    paths, asked only when their table is built (the rules that write them are looked up only
    then)."""
    from rredcot.reporting.summary_tables import TABLES

    built = set(run_targets(config))
    tables = {name: f"results/{file}" for name, (file, _) in TABLES.items()}
    tables = {name: path for name, path in tables.items() if path in built}
    if "estimator_agreement" in tables:
        tables["answer_now_rule"] = answer_now()
    if "estimator_frontier" in tables:
        tables["estimator_pick"] = pick()
    return tables


def summary_args(names: list[str], paths: Mapping[str, object]) -> str:
    """`--<table> <path>` for every table name the summary reads, its path from `paths` (the
    job's input)."""
    return " ".join(f"--{n.replace('_', '-')} {shlex.quote(str(paths[n]))}" for n in names)
