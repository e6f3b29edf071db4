"""The attribution rows across the levels of a dose: pooled over SFT bases (rule
`credit_bases`, `rredcot.reporting.credit_bases`) or contrasted between treatments (rule
`credit_contrasts`, `rredcot.reporting.credit_contrasts`): their targets, inputs, arguments and
settings (both read the same files of every level).

A dose of the global `seed` (`doses.key: seed`, `rredcot.workflow.dose_response`) is a set of SFT
bases of one world (`world.seed` is a key of its own), and only such a dose gets the pooled
table: its levels are replicates of one recipe (other draws of the SFT's initialisation,
demonstrations' slips and order), so a mean and an interval over them are a claim about bases.
The levels of any other key are treatments (a misconception rate, a rule share): pooling them
would average doses, so the dose-response table (results/credit_regimes.csv) sets them side by
side and, when every level trains placebo arms, the contrasts table compares each later level's
differences with the first level's.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from rredcot.config import ConfigError
from rredcot.workflow import Config
from rredcot.workflow.dose_response import Dose
from rredcot.workflow.evaluation_settings import curve_split
from rredcot.workflow.inputs import curve_runs
from rredcot.workflow.paths import ATTRIBUTION_TABLE
from rredcot.workflow.problem_sets import problem_table
from rredcot.workflow.run_params import placebo_pairs
from rredcot.workflow.runs import training_methods
from rredcot.workflow.targets import run_targets

BASE_KEY = "seed"
"""The dose key whose levels are SFT bases."""
BASES_TABLE = "results/credit_bases.csv"
BASES_FIGURE = "results/figures/credit_bases.png"
CONTRASTS_TABLE = "results/credit_contrasts.csv"
CONTRASTS_FIGURE = "results/figures/credit_contrasts.png"
PER_RUN = ("summaries", "grades")
"""The rule's inputs with a file per run of a base (the rest have one per base)."""
PER_BASE = ("base", "problems", "attribution")


def pools_bases(config: Config) -> bool:
    """Whether the config is a dose of the global seed, whose levels the table pools."""
    return bool(config["doses"]) and config["doses"]["key"] == BASE_KEY


def bases_pairs(config: Config) -> list[tuple[str, str, str]]:
    """(method, against, comparison) of the table: every method against its placebo
    (`placebo`, the config's order), then every other run against the baseline (`baseline`)
    when the config runs it."""
    placebo = [(m, p, "placebo") for m, p in placebo_pairs(config["training"]["variants"])]
    baseline, runs = config["training"]["baseline"], training_methods(config)
    others = [(r, baseline, "baseline") for r in runs if r != baseline] if baseline in runs else []
    return placebo + others


def contrasts_treatments(config: Config, doses: Sequence[Dose]) -> bool:
    """Whether the config is a dose of a treatment (any key but the seed) whose every level
    (`doses`) builds its placebo table: the levels' attribution rows are then contrasted."""
    if not config["doses"] or pools_bases(config) or len(doses) < 2:
        return False
    return all(ATTRIBUTION_TABLE in run_targets(d.config) for d in doses)


def check_bases(doses: Sequence[Dose]) -> None:
    """Every level builds its placebo table (credit_attribution.csv, whose rows the table checks
    its own against) and compares the same runs; raises ConfigError naming the key."""
    for dose in doses:
        name = f"dose {dose.label}"
        if ATTRIBUTION_TABLE not in run_targets(dose.config):
            raise ConfigError(
                f"config key 'training.variants': {name} builds no {ATTRIBUTION_TABLE}, which "
                "the table across the doses reads; add a variant with credit.placebo (and keep "
                "training.curve.split a world split)"
            )
        if bases_pairs(dose.config) != bases_pairs(doses[0].config):
            raise ConfigError(
                f"config key 'doses.at': {name} compares {bases_pairs(dose.config)}, "
                f"dose {doses[0].label} {bases_pairs(doses[0].config)}; the doses must run the "
                "same comparisons"
            )


def credit_bases_inputs(doses: Sequence[Dose]) -> dict[str, list[str] | str]:
    """Per base (`<input>_<module>`): every run's summary and final grades on the curve split, the
    base policy's grades there, the split and the base's credit_attribution.csv."""
    out: dict[str, list[str] | str] = {}
    for dose in doses:
        runs = curve_runs(dose.config)
        split = problem_table(dose.config, curve_split(dose.config))
        files = {
            "summaries": [dose.path(p) for p in runs["summaries"]],
            "grades": [dose.path(p) for p in runs["grades"]],
            "base": dose.path(runs["base"]),
            "problems": dose.path(split),
            "attribution": dose.path(ATTRIBUTION_TABLE),
        }
        out |= {f"{name}_{dose.module}": value for name, value in files.items()}
    return out


def credit_bases_args(paths: Mapping[str, Any], doses: Sequence[Dose]) -> str:
    """The step's file arguments from the job's input (`paths`): `--summaries` and `--grades`
    once per base, then `--base`, `--problems` and `--attribution` with one file per base, all
    in the doses' order."""

    def files(name: str, dose: Dose) -> list[str]:
        value = paths[f"{name}_{dose.module}"]
        return [str(value)] if isinstance(value, str) else [str(p) for p in value]

    args = [f"--{n} {shlex.join(files(n, d))}" for d in doses for n in PER_RUN]
    args += [f"--{n} {shlex.join(f for d in doses for f in files(n, d))}" for n in PER_BASE]
    return " ".join(args)


def credit_bases_settings(config: Config, doses: Sequence[Dose]) -> dict[str, Any]:
    """The step's `--params`: the bases' seeds (each its own tables' bootstrap seed), the pairs,
    the misconception whose rule makes the strata (the tiny base's demonstrations hold it; a
    fetched model's were not ours), the resamples and the pooled bootstrap's seed (the config's
    own `seed`, before the doses set it)."""
    return {
        "bases": [d.config[BASE_KEY] for d in doses],
        "pairs": bases_pairs(doses[0].config),
        "misconception": (
            config["sft"]["misconception"] if config["model"]["name_or_path"] is None else None
        ),
        "bootstrap_resamples": config["evaluation"]["bootstrap_resamples"],
        "seed": config["seed"],
    }


def credit_contrasts_settings(config: Config, doses: Sequence[Dose]) -> dict[str, Any]:
    """The contrasts step's `--params`: the dose key and levels, each level's own bootstrap seed
    (its config's `seed`), the pairs, the misconception, the resamples and the contrasts'
    bootstrap seed (the config's `seed`)."""
    shared = credit_bases_settings(config, doses)
    del shared["bases"]
    return shared | {
        "key": config["doses"]["key"],
        "levels": [d.level for d in doses],
        "level_seeds": [d.config["seed"] for d in doses],
    }


def credit_bases_targets(config: Config) -> list[str]:
    """The pooled table and figure when the config is a dose of the global seed; else none."""
    return [BASES_TABLE, BASES_FIGURE] if pools_bases(config) else []


def credit_contrasts_targets(config: Config, doses: Sequence[Dose]) -> list[str]:
    """The contrasts table and figure when the config is a dose of a treatment whose levels
    train placebo arms (`contrasts_treatments`); else none."""
    return [CONTRASTS_TABLE, CONTRASTS_FIGURE] if contrasts_treatments(config, doses) else []
