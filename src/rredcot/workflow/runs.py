"""The RL runs a config asks for: its methods and named variants, each one's seeds, and each
run's training settings (the `--params` of its train_policy job)."""

from __future__ import annotations

from typing import Any

from rredcot.workflow import Config
from rredcot.workflow.problem_sets import task_of, train_data
from rredcot.workflow.run_params import run_settings

# The untrained base policy's name in the tables, beside the runs.
BASE_METHOD = "base"


def variants(config: Config) -> dict[str, dict[str, Any]]:
    """The variants by name: extra runs of a method under other settings, named and reported
    like a method (e.g. the side setting of credit.center): [{name, method, <overrides>}]."""
    listed = config["training"]["variants"]
    by_name = {v["name"]: v for v in listed}
    if len(by_name) != len(listed):
        raise ValueError("config key 'training.variants': two variants share a name")
    return by_name


def training_methods(config: Config) -> list[str]:
    """Every run name: the configured methods, then the variants."""
    return [*config["training"]["methods"], *variants(config)]


def base_method(config: Config, name: str) -> str:
    """The training method a run name stands for (itself, or a variant's method)."""
    found = variants(config)
    return found[name]["method"] if name in found else name


def seeds_of(config: Config, name: str) -> list[int]:
    """The training seeds of a run name: training.seeds, then its training.extra_seeds."""
    extra = [e["seeds"] for e in config["training"]["extra_seeds"] if e["run"] == name]
    return [*config["training"]["seeds"], *(s for seeds in extra for s in seeds)]


def training_runs(config: Config) -> list[tuple[str, int]]:
    """Every RL run (run name, seed)."""
    return [(m, s) for m in training_methods(config) for s in seeds_of(config, m)]


def methods_and_seeds(config: Config) -> list[tuple[str, int]]:
    """Every (method, seed) that gets a row in the benchmark tables: the base, then RL runs."""
    return [(BASE_METHOD, config["seed"]), *training_runs(config)]


def training_settings(config: Config, method: str, seed: int) -> dict[str, Any]:
    """The `--params` of one RL run (`rredcot.workflow.run_params.run_settings`): config `training`
    with the method's and the variant's overrides, plus the shared segmentation and estimator
    blocks (so studies and training use one definition)."""
    return run_settings(
        config,
        base_method(config, method),
        seed,
        task=task_of(config, train_data(config)),
        variant=variants(config).get(method),
    )


def lora_targets(config: Config) -> dict[str, list[str]]:
    """The runs' LoRA `target_modules` lists by the config key that sets them ("all-linear"
    fits any model and needs no check)."""
    found = variants(config)
    seed = config["training"]["seeds"][0]
    targets = {}
    for name in training_methods(config):
        lora = training_settings(config, name, seed).get("lora")
        modules = (lora or {}).get("target_modules", "all-linear")
        if isinstance(modules, str):
            continue
        if "lora" in found.get(name, {}):
            key = f"training.variants.{list(found).index(name)}.lora"
        elif "lora" in config["training"]["per_method"].get(base_method(config, name), {}):
            key = f"training.per_method.{base_method(config, name)}.lora"
        else:
            key = "training.lora"
        targets[f"{key}.target_modules"] = modules
    return targets
