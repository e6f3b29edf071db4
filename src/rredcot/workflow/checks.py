"""The checks a config passes while Snakemake parses the workflow, before any job is queued:
each names the config key to change, so a mistake costs seconds instead of a failed job.
`check_config` runs them all in the order the workflow has always run them (the first error
found is the one reported)."""

from __future__ import annotations

from pathlib import Path

from rredcot.config import ConfigError, block_errors, mirror_error, model_path_error
from rredcot.data.registry import KNOWN_TRAINING_SETS
from rredcot.training.settings_checks import process_layout, settings_error, tracker_error
from rredcot.workflow import Config
from rredcot.workflow.evaluation_settings import curve_split, eval_settings
from rredcot.workflow.paths import BASE_MODEL, STAND_IN_MODEL
from rredcot.workflow.problem_sets import (
    problem_table,
    registry_used,
    study_set,
    train_data,
    world_splits,
)
from rredcot.workflow.runs import training_methods, training_settings, variants
from rredcot.workflow.targets import builds_regime_table


def check_conda_env(config: Config, basedir: Path) -> None:
    """`conda_env` is an environment file of the repository (every job's under --use-conda)."""
    if not (basedir / config["conda_env"]).is_file():
        envs = sorted(f"envs/{p.name}" for p in (basedir / "envs").glob("*.yaml"))
        raise ValueError(
            f"config key 'conda_env': {config['conda_env']!r} is not a file of the repository; "
            f"choose one of {envs}"
        )


def check_trackers(config: Config, basedir: Path, use_conda: bool) -> None:
    """The trackers of training.report_to are importable here, or pinned in the jobs' env file
    under --use-conda (rredcot.training.settings_checks.tracker_error; the job checks again)."""
    env = basedir / config["conda_env"] if use_conda else None
    error = tracker_error(config["training"]["report_to"], env)
    if error is not None:
        raise ConfigError(error)


def check_problem_sets(config: Config) -> None:
    """The training set and the studies' split are problem sets the workflow can build."""
    for key, name in (("data.train", train_data(config)), ("studies.split", study_set(config))):
        try:
            problem_table(config, name)
        except ValueError as err:
            raise ValueError(f"config key '{key}': {err}") from None


def check_stand_in(config: Config) -> None:
    """The rehearsal's stand-ins go where the workflow builds them, for a registry training set."""
    if config["stand_in"]["model"] and config["model"]["name_or_path"] != STAND_IN_MODEL:
        raise ConfigError(
            f"config key 'model.name_or_path': {config['model']['name_or_path']!r}; with "
            f"stand_in.model true it must be {STAND_IN_MODEL!r} (where the stand-in is built)"
        )
    if config["stand_in"]["training_rows"] and train_data(config) not in KNOWN_TRAINING_SETS:
        raise ConfigError(
            f"config key 'stand_in.training_rows': data.train {train_data(config)!r} is not a "
            f"registry training set {list(KNOWN_TRAINING_SETS)}; set it to null"
        )


def check_local_paths(config: Config) -> None:
    """The model directory, and the benchmark mirror when the config's own targets read a
    registry dataset (a registry table asked for on the command line is checked by its input
    function, `inputs.mirror_input`, still before any job runs)."""
    for error in (
        None if config["stand_in"]["model"] else model_path_error(config["model"]["name_or_path"]),
        mirror_error(config["data"]["mirror"]) if registry_used(config) else None,
    ):
        if error is not None:
            raise ConfigError(error)


def check_training_runs(config: Config, base_model: str = BASE_MODEL) -> None:
    """Every run's settings taken together (`rredcot.training.settings_checks`, the rules the job
    applies) with the launch's processes, before any job: e.g. an odd num_generations for rrpo,
    or a batch that gradient_accumulation_steps does not divide, or an override that leaves the
    run's estimator sampling suffixes for another value than ref_suffix_sum. (Whether a process
    holds whole groups is left to the job: it needs the method classes.) Then the runs'
    vLLM contexts and GPU memory, by the planners (the model's shape from `base_model`'s
    config.json once fetched, else rredcot.planning.vllm_memory.KNOWN_MODELS)."""
    seed = config["training"]["seeds"][0]
    runs = {}
    for name in training_methods(config):
        values = runs[name] = training_settings(config, name, seed)
        estimator = block_errors(values["rredcot"], "estimator.rredcot")
        if estimator:
            raise ConfigError(
                f"run {name} (estimator.rredcot with the run's per_method and variant "
                f"`rredcot` overrides): {'; '.join(estimator)}"
            )
        error = settings_error(values)
        try:
            if error is None:
                process_layout(values, config["training"]["num_processes"], False)
        except ValueError as err:
            error = str(err)
        if error is not None:
            key, _, what = error.partition(": ")
            raise ConfigError(
                f"config key '{key}' (run {name}: training with its per_method and variant "
                f"overrides): {what}"
            )
    from rredcot.planning import memory_plan
    from rredcot.planning.vllm_memory import config_errors

    # A vLLM context must hold its jobs' prompts and budgets, and one full-length sequence must
    # fit its memory share.
    memory = config_errors(config, runs, base_model)
    if memory:
        raise ConfigError("\n  - ".join(["vLLM context and memory:", *memory]))
    # Each GPU run's train_policy job must fit one GPU of devices.memory_gb by the memory
    # planner (scripts/memory_plan.py prints its phases; docs/memory.md).
    memory = memory_plan.config_errors(config, runs, base_model)
    if memory:
        raise ConfigError("\n  - ".join(["GPU memory (rredcot.planning.memory_plan):", *memory]))


def check_curve_split(config: Config) -> None:
    """The learning curve's split is a world split (or null: no curve)."""
    split = curve_split(config)
    if split is not None and split not in world_splits(config):
        raise ValueError(
            f"config key 'training.curve.split': {split!r} is not a world split; "
            f"choose one of {world_splits(config)} or null"
        )


def check_regime_protocol(config: Config) -> None:
    """The regime table's T = 1 columns read the curve split: it must be scored at T = 1 with
    no nucleus when the table is built."""
    if not builds_regime_table(config):
        return
    split = curve_split(config)
    t1 = eval_settings(config, split, generates=False)
    if (t1["temperature"], t1["top_p"]) != (1.0, 1.0):
        raise ConfigError(
            f"config key 'evaluation.per_benchmark.{split}': the curve split is scored at "
            f"temperature {t1['temperature']}, top_p {t1['top_p']}; the regime table's T = 1 "
            "columns read it, so set {temperature: 1.0, top_p: 1.0} (or training.curve.split "
            "null, or score another protocol on a split of its own)"
        )


def check_config(config: Config, basedir: Path, use_conda: bool) -> None:
    """Every parse-time check of a validated config, in order; `basedir` the workflow's
    directory, `use_conda` whether jobs run in conda environments (--use-conda)."""
    check_conda_env(config, basedir)
    check_trackers(config, basedir, use_conda)
    variants(config)  # two variants of one name
    check_problem_sets(config)
    check_stand_in(config)
    check_local_paths(config)
    check_training_runs(config)
    check_curve_split(config)
    check_regime_protocol(config)
