"""The inputs of the rules whose inputs depend on the config: mirrored datasets, the policy a
job evaluates, the files the tables and the learning curves read."""

from __future__ import annotations

from rredcot.config import ConfigError, mirror_error
from rredcot.data.registry import mirror_dir
from rredcot.workflow import Config
from rredcot.workflow.evaluation_settings import curve_split
from rredcot.workflow.paths import (
    BASE_MODEL,
    LORA_CHECK,
    STAND_IN_MIRROR,
    STAND_IN_MODEL,
    STAND_IN_SOURCE,
)
from rredcot.workflow.problem_sets import problem_table, train_data
from rredcot.workflow.runs import (
    BASE_METHOD,
    lora_targets,
    methods_and_seeds,
    training_methods,
    training_runs,
)

# The two passes every policy gets on the curve split: sampled (the split's protocol) and greedy,
# by the prefix of their input names and their subdirectory.
PASSES = (("t1", ""), ("greedy", "greedy/"))


def mirror_input(config: Config, name: str) -> dict[str, str]:
    """`<mirror>/<name>.jsonl` as the input `mirror` when the mirror holds it (without it the Hub
    is read): editing the file, or pointing RREDCOT_MIRROR or data.mirror at another mirror,
    reruns the rule and everything built from its table."""
    error = mirror_error(config["data"]["mirror"])
    if error is not None:
        raise ConfigError(error)
    mirror = mirror_dir(config["data"]["mirror"])
    path = None if mirror is None else mirror / f"{name}.jsonl"
    return {"mirror": str(path)} if path is not None and path.is_file() else {}


def training_set_input(config: Config, dataset: str) -> dict[str, str]:
    """The mirror file a registry training set is read from: the rehearsal's stand-in, or the
    mirror's own copy (none: the Hub)."""
    if config["stand_in"]["training_rows"]:
        return {"mirror": f"{STAND_IN_MIRROR}/{dataset}.jsonl"}
    return mirror_input(config, dataset)


def stand_in_source(config: Config) -> dict[str, str]:
    """The mirrored benchmark the stand-in training set is written from."""
    found = mirror_input(config, STAND_IN_SOURCE)
    if not found:
        raise ConfigError(
            f"config key 'stand_in.training_rows': the stand-in training set is written from "
            f"the mirror's {STAND_IN_SOURCE}.jsonl, which {mirror_dir(config['data']['mirror'])} "
            "lacks"
        )
    return found


def base_model_input(config: Config) -> dict[str, str]:
    """What fetch_base_model copies from the workflow itself: the rehearsal's stand-in model."""
    return {"model": STAND_IN_MODEL} if config["stand_in"]["model"] else {}


def lora_check_input(config: Config) -> dict[str, str]:
    """The LoRA target check a training run waits for (none when no run names modules)."""
    return {"lora_check": LORA_CHECK} if lora_targets(config) else {}


def policy_input(config: Config, method: str, seed: int | str) -> dict[str, str]:
    """The checkpoint a (method, seed) is evaluated with."""
    if method == BASE_METHOD:
        return {"model": BASE_MODEL}
    methods = training_methods(config)
    if method in methods:
        return {"model": f"results/train/{method}/seed{seed}/final"}
    raise ValueError(f"unknown method '{method}'; known: {[BASE_METHOD, *methods]}")


def training_problems(config: Config) -> str:
    """Train problems with their verified reference solution (column `reference`)."""
    return f"results/references/{config['references']['source']}/{train_data(config)}.parquet"


def training_summaries(config: Config) -> list[str]:
    """Every RL run's training summary."""
    return [f"results/train/{m}/seed{s}/train_summary.json" for m, s in training_runs(config)]


def curve_input(config: Config) -> dict[str, str]:
    """The problems a run scores its learning curve on (none without a curve split)."""
    split = curve_split(config)
    return {} if split is None else {"curve_problems": problem_table(config, split)}


def eval_file(method: str, seed: int, benchmark: str, name: str, sub: str = "") -> str:
    """A policy's evaluation file (`generations` or `grades`) on a benchmark; `sub` "greedy/"
    for its greedy pass."""
    return f"results/eval/{method}/seed{seed}/{benchmark}/{sub}{name}.parquet"


def comparison_grades(config: Config) -> list[str]:
    """Every policy's grades on every configured benchmark (the paired comparison's input)."""
    return [
        eval_file(m, s, b, "grades")
        for b in config["benchmarks"]
        for m, s in methods_and_seeds(config)
    ]


def table_grades(config: Config, benchmark: str) -> list[str]:
    """Every policy's grades on one benchmark, in `methods_and_seeds` order (its table's rows)."""
    return [eval_file(m, s, benchmark, "grades") for m, s in methods_and_seeds(config)]


def regime_inputs(config: Config) -> dict[str, list[str] | str]:
    """What the regime table reads: every policy's generations and grades on the curve split,
    sampled (the split's protocol) and greedy, in `methods_and_seeds` order, and the split."""
    split = curve_split(config)
    paths: dict[str, list[str] | str] = {
        f"{protocol}_{kind}": [
            eval_file(m, s, split, kind, sub) for m, s in methods_and_seeds(config)
        ]
        for protocol, sub in PASSES
        for kind in ("generations", "grades")
    }
    return {**paths, "problems": problem_table(config, split)}


def curve_runs(config: Config) -> dict[str, list[str] | str]:
    """What the learning curves read: every run's summary and its final grades on the split."""
    split = curve_split(config)
    return {
        "summaries": training_summaries(config),
        "grades": [eval_file(m, s, split, "grades") for m, s in training_runs(config)],
        "base": eval_file(BASE_METHOD, config["seed"], split, "grades"),
    }


def attribution_inputs(config: Config) -> dict[str, list[str] | str]:
    """What the placebo table reads: every run's summary, its final grades and generations on
    the curve split (sampled and greedy), the base's grades and the split (every run is also
    set against GRPO per first-error kind)."""
    split = curve_split(config)
    runs = training_runs(config)
    return {
        "summaries": training_summaries(config),
        **{
            f"{protocol}_{kind}": [eval_file(m, s, split, kind, sub) for m, s in runs]
            for protocol, sub in PASSES
            for kind in ("generations", "grades")
        },
        "base": curve_runs(config)["base"],
        "problems": problem_table(config, split),
    }
