# Config validation, input functions and wildcard constraints shared by every rule.

import json
import shlex
import sys
from pathlib import Path

from snakemake.utils import validate

SRC = str(Path(workflow.basedir) / "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)
# Step scripts run as `python -m rredcot.steps.<name>`, also inside --use-conda environments
# where the package is not installed.
shell.prefix(f'export PYTHONPATH="{SRC}${{{{PYTHONPATH:+:$PYTHONPATH}}}}"; ')

from rredcot.config import load_schema, validate_config  # noqa: E402
from rredcot.data.registry import KNOWN_BENCHMARKS, registry_entry  # noqa: E402

SCHEMA = "../schemas/config.schema.yaml"
# Our own check first: it names the offending key and what is allowed.
validate_config(
    config,
    load_schema(Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"),
)
validate(config, SCHEMA)

CONDA_ENV = "../../envs/rredcot.yaml"
WORLD_SPLITS = list(config["world"]["splits"])
BASE_METHOD = "base"
TRAINING_METHODS = list(config["training"]["methods"])


wildcard_constraints:
    seed=r"\d+",
    method=r"[a-z0-9_]+",
    benchmark=r"[a-z0-9_]+",
    split="|".join(["train", *WORLD_SPLITS]),


def arg(value) -> str:
    """A config value as one shell-quoted JSON argument for a step script."""
    return shlex.quote(json.dumps(value, sort_keys=True))


def res(rule: str, key: str):
    """A resource of `rule` from config `resources` (rule entry, then `default`)."""
    table = config.get("resources", {})
    defaults = {"mem_mb": 4000, "runtime": 60, "cpus_per_task": 1, "gpu": 0}
    return table.get(rule, {}).get(
        key, table.get("default", {}).get(key, defaults[key])
    )


def is_world_split(benchmark: str) -> bool:
    return benchmark in WORLD_SPLITS


def benchmark_data(wildcards):
    """The normalized parquet of a benchmark: a world split or a prepared registry benchmark."""
    b = wildcards.benchmark
    if is_world_split(b):
        return f"results/data/world/{b}.parquet"
    if b in KNOWN_BENCHMARKS:
        return f"results/data/benchmarks/{b}.parquet"
    raise ValueError(
        f"unknown benchmark '{b}': not a world split {WORLD_SPLITS} "
        f"and not a registry benchmark {list(KNOWN_BENCHMARKS)}"
    )


def task_of(benchmark: str) -> str:
    return "synthetic" if is_world_split(benchmark) else registry_entry(benchmark).task


def uses_tiny_model() -> bool:
    return config["model"]["name_or_path"] is None


def policy_input(wildcards):
    """The checkpoint a (method, seed) is evaluated with, when the workflow builds it."""
    if wildcards.method == BASE_METHOD:
        return {"model": "results/models/base"} if uses_tiny_model() else {}
    if wildcards.method in TRAINING_METHODS:
        return {"model": f"results/train/{wildcards.method}/seed{wildcards.seed}/final"}
    raise ValueError(
        f"unknown method '{wildcards.method}'; known: {[BASE_METHOD, *TRAINING_METHODS]}"
    )


def policy_path(wildcards) -> str:
    if wildcards.method == BASE_METHOD and not uses_tiny_model():
        return config["model"]["name_or_path"]
    return policy_input(wildcards)["model"]


def eval_settings(benchmark: str) -> dict:
    """Evaluation settings of one benchmark: the defaults with its per-benchmark overrides."""
    ev = {k: v for k, v in config["evaluation"].items() if k != "per_benchmark"}
    ev.update(config["evaluation"]["per_benchmark"].get(benchmark, {}))
    return ev


def methods_and_seeds() -> list[tuple[str, int]]:
    """Every (method, seed) that gets a row in the benchmark tables: the base, then RL runs."""
    runs = [(m, s) for m in TRAINING_METHODS for s in config["training"]["seeds"]]
    return [(BASE_METHOD, config["seed"]), *runs]


def training_settings(method: str, seed: int) -> dict:
    """The `--params` of one RL run: config `training` with the method's overrides, plus the
    shared segmentation and estimator blocks (so studies and training use one definition).
    """
    tr = config["training"]
    settings = {
        k: v for k, v in tr.items() if k not in ("methods", "seeds", "per_method", "mc")
    }
    if method in ("rrpo", "srpo"):
        # METHOD.md §6: on-policy per-sequence mean, no KL; TrainingSettings rejects anything else.
        settings.update(loss_type="grpo", kl_beta=0.0)
    settings.update(tr["per_method"].get(method, {}))
    settings.update(
        method=method,
        seed=seed,
        task="synthetic",
        reference_column="reference",
        segmentation=config["segmentation"],
        rredcot=config["estimator"]["rredcot"],
        mc={**config["estimator"]["mc"], **tr["mc"]},
    )
    return settings


def training_problems(wildcards) -> str:
    """Train problems with their verified reference solution (column `reference`)."""
    return "results/references/train.parquet"


def training_summaries(wildcards) -> list[str]:
    return [
        f"results/train/{m}/seed{s}/train_summary.json"
        for m in TRAINING_METHODS
        for s in config["training"]["seeds"]
    ]


def table_grades(wildcards) -> list[str]:
    return [
        f"results/eval/{m}/seed{s}/{wildcards.benchmark}/grades.parquet"
        for m, s in methods_and_seeds()
    ]


STUDY_ARTIFACTS = (
    "estimator_agreement",
    "attribution_correlation",
    "segmentation_sweep",
    "mc_truncation",
    "error_localization",
)


def all_targets() -> list[str]:
    training = ["results/main_table.csv"]
    if TRAINING_METHODS:
        training += [
            "results/training_curves.csv",
            "results/figures/training_curves.png",
            "results/compute_cost.csv",
        ]
    return (
        [f"results/{b}_table.csv" for b in config["benchmarks"]]
        + training
        + [
            "results/references/train.parquet",
            *[f"results/{a}.csv" for a in STUDY_ARTIFACTS],
            *[f"results/figures/{a}.png" for a in STUDY_ARTIFACTS],
        ]
    )
