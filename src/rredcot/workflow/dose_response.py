"""A dose-response: the whole workflow once per level of one config key (config key `doses`).

Each dose gets the config it runs with (the config with the key set to the level and the
`doses.at` entries of that level merged in, `doses` and `extends` left out, so it is a plain
workflow config) and a directory of its own, `results/credit_regimes/<name><level>/`, that its
paths use in place of `results/` (workflow/rules/doses.smk loads the Snakefile once per dose as a
Snakemake module). Every dose config is checked against the schema here, so an error names the
dose it is in.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rredcot.config import ConfigError, validate_config

ROOT = "results/credit_regimes"
"""Where the doses' directories lie; the dose-response table and figure go to results/."""

DOSE_TABLE = "results/credit_regimes.csv"
DOSE_FIGURE = "results/figures/credit_regimes.png"


@dataclass(frozen=True)
class Dose:
    """One level of the dose: its label, its directory and the config it runs with."""

    level: float
    label: str  # "rate0.6": the key's last part and the level, the directory's name
    module: str  # "rate0p6": a Python name for the Snakemake module and its rules' prefix
    config: dict[str, Any]

    @property
    def root(self) -> str:
        """The directory that takes the place of `results/` in the dose's paths."""
        return f"{ROOT}/{self.label}/"

    def path(self, results_path: str) -> str:
        """Where the dose's workflow writes `results_path` (a path under results/)."""
        if not results_path.startswith("results/"):
            raise ValueError(f"{results_path!r}: expected a path under results/")
        return self.root + results_path.removeprefix("results/")


def merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over` merged into a copy of `base` as Snakemake merges config files: mappings key by key,
    any other value (lists included) replaced whole."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _set(config: dict[str, Any], key: str, value: Any) -> None:
    """Set the dotted `key` of `config`, which must already hold it."""
    *parents, leaf = key.split(".")
    block: Any = config
    for i, part in enumerate(parents):
        block = block.get(part) if isinstance(block, dict) else None
        if not isinstance(block, dict):
            where = ".".join(parents[: i + 1])
            raise ConfigError(
                f"config key 'doses.key': {key!r} needs {where!r} to be a block of the config, "
                f"but it is {block!r}; set it in the config the doses vary"
            )
    if leaf not in block:
        holder = repr(".".join(parents)) if parents else "the config's top level"
        raise ConfigError(
            f"config key 'doses.key': {key!r} is not a key of the config ({holder} "
            f"holds {sorted(block)})"
        )
    block[leaf] = value


def level_label(level: float) -> str:
    """A level as written in a directory name: 0, 0.6, 1e-05 (Python's `g` format)."""
    return f"{level:g}"


def dose_configs(config: Mapping[str, Any], schema: Mapping[str, Any]) -> list[Dose]:
    """The doses of a validated config whose `doses` is set, in the order of `doses.levels`.

    Raises ConfigError naming the key when `doses.key` is not in the config, when a `doses.at`
    entry names a level not in `doses.levels`, or when a dose's config is invalid (the dose is
    named; the schema's message follows)."""
    doses = config["doses"]
    key, levels = doses["key"], [float(v) for v in doses["levels"]]  # ordering and labels
    for i, entry in enumerate(doses["at"]):
        if float(entry["level"]) not in levels:
            raise ConfigError(
                f"config key 'doses.at.{i}.level': {entry['level']!r} is not one of "
                f"doses.levels {doses['levels']}"
            )
    plain = {k: v for k, v in config.items() if k not in ("doses", "extends")}
    name = key.rsplit(".", 1)[-1]
    out = []
    for level, value in zip(levels, doses["levels"], strict=True):
        dose = copy.deepcopy(plain)
        _set(dose, key, value)  # as written: an integer key stays an integer
        for entry in doses["at"]:
            if float(entry["level"]) == level:
                dose = merge(dose, entry["config"])
        try:
            validate_config(dose, schema)
        except ConfigError as err:
            raise ConfigError(f"dose {key} = {level_label(level)}: {err}") from None
        label = f"{name}{level_label(level)}"
        module = label.replace(".", "p").replace("-", "m").replace("+", "")
        out.append(Dose(level, label, module, dose))
    labels = [d.label for d in out]
    if len(set(labels)) != len(labels):
        raise ConfigError(
            f"config key 'doses.levels': {doses['levels']} give the directories {labels}; "
            "two levels that print alike share one"
        )
    return out


def share_world(doses: list[Dose]) -> bool:
    """Whether every dose draws the same world (equal `world` blocks): then only the SFT and
    what follows differ, and the copies of the world must be identical files."""
    return all(d.config["world"] == doses[0].config["world"] for d in doses)
