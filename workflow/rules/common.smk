# What the rules of every file share. The config validated and checked, its derived constants,
# wildcard constraints, and the input and params functions of the rules. The logic lives in the
# package (src/rredcot/workflow/, unit-tested; each function takes the config); here it is bound
# to this workflow's `config`, and what needs Snakemake's own objects (`rules`, `workflow`)
# wraps it.

import os
import shlex
import sys
from functools import partial
from pathlib import Path

SRC = str(Path(workflow.basedir) / "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)
# Step scripts run as `python -m rredcot.steps.<name>`, also inside --use-conda environments
# where the package is not installed.
shell.prefix(f'export PYTHONPATH="{SRC}${{{{PYTHONPATH:+:$PYTHONPATH}}}}"; ')

from rredcot.config import (
    load_schema,
    resource_overrides,
    validate_config,
)  # noqa: E402
from rredcot.workflow.configfiles import swallowed_target_error  # noqa: E402
from rredcot.data.registry import KNOWN_BENCHMARKS, KNOWN_TRAINING_SETS  # noqa: E402
from rredcot.reporting.captions import CAPTIONS  # noqa: E402
from rredcot.planning.timing import check_benchmark_paths  # noqa: E402
from rredcot.workflow.run_params import budget_pairs, placebo_pairs  # noqa: E402
from rredcot.workflow import (  # noqa: E402
    checks,
    evaluation_settings,
    expected_time,
    inputs,
    launcher,
    problem_sets,
    resources,
    runs,
    targets,
)
from rredcot.workflow.paths import (  # noqa: E402
    ATTRIBUTION_TABLE,
    BASE_MODEL,
    LORA_CHECK,
    REGIME_TABLE,
    STAND_IN_MIRROR,
    STAND_IN_MODEL,
    SUMMARY,
    SUMMARY_BENCHMARK,
)
from rredcot.workflow.shell import arg  # noqa: E402
from snakemake.settings.types import DeploymentMethod  # noqa: E402

# A target written after --configfile is read as a config file: stop before its keys are
# merged into the config, naming the fix. (Snakemake has no public API for the command line's
# config files: `workflow.overwrite_configfiles`, as the Snakefile reads them too.)
_swallowed = swallowed_target_error(workflow.overwrite_configfiles, Path.cwd())
if _swallowed is not None:
    raise ValueError(_swallowed)

# The config against workflow/schemas/config.schema.yaml, defaults filled in, once: our check
# names the offending key and what is allowed (snakemake.utils.validate would repeat it).
CONFIG_SCHEMA = load_schema(
    Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"
)
validate_config(config, CONFIG_SCHEMA)
# Every parse-time check (rredcot.workflow.checks), before any job queues. Whether jobs run
# under --use-conda has no public API: `workflow.deployment_settings`.
checks.check_config(
    config,
    Path(workflow.basedir),
    DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method,
)

# Every job's conda environment under `--use-conda`: the CPU one, or envs/rredcot-gpu.yaml
# (CUDA torch, vLLM, DeepSpeed) on GPU nodes. Relative to this file, as `conda:` wants it.
CONDA_ENV = f"../../{config['conda_env']}"
WORLD_SPLITS = problem_sets.world_splits(config)
WORLD_TABLES = problem_sets.world_tables(config)
STUDY_POOL = problem_sets.STUDY_POOL
STUDY_SET = problem_sets.study_set(config)
BASE_METHOD = runs.BASE_METHOD
BASELINE = config["training"]["baseline"]  # the run every other is compared with
# Every policy is evaluated with the same sampling seed (common random numbers): the same
# problem and sample index draw the same noise for the base and every run, so paired
# differences between policies carry no more sampling noise than they must.
EVAL_SEED = config["seed"]
TRAINING_METHODS = runs.training_methods(config)
CURVE_SPLIT = evaluation_settings.curve_split(config)
# (method, placebo) of every variant with credit.placebo (docs/attribution.md)
ATTRIBUTION_PAIRS = placebo_pairs(config["training"]["variants"])
# (run, baseline given its budget) of every variant with budget_of
BUDGET_PAIRS = budget_pairs(config["training"]["variants"])
# The report captions that state their numbers include these fragments, which the summary writes.
CAPTION_FRAGMENTS = list(CAPTIONS)


wildcard_constraints:
    seed=r"\d+",
    method=r"[a-z0-9_]+",
    benchmark=r"[a-z0-9_]+",
    split="|".join(problem_sets.split_names(config)),
    prefer="dataset|sampled",


# $RREDCOT_RESOURCES (YAML, the shape of config `resources`) overrides the config's values,
# e.g. a partition's shorter time limit or smaller nodes:
#   export RREDCOT_RESOURCES='{train_policy: {runtime: 1440, mem_mb: 240000}}'
RESOURCE_OVERRIDES = resource_overrides()
res = partial(resources.resource, config, RESOURCE_OVERRIDES)
GPU_JOB = resources.gpu_job(config)


def gpu_request(rule: str) -> dict:
    return resources.gpu_request(res(rule, "gpu"), os.environ)


# Functions of the config alone, bound to it.
problem_table = partial(problem_sets.problem_table, config)
task_of = partial(problem_sets.task_of, config)
mirror_input = partial(inputs.mirror_input, config)
lora_targets = partial(runs.lora_targets, config)
training_settings = partial(runs.training_settings, config)
training_launcher = partial(launcher.training_launcher, config)
eval_settings = partial(evaluation_settings.eval_settings, config)
greedy_settings = partial(evaluation_settings.greedy_settings, config)
generation_backend = partial(evaluation_settings.generation_backend, config)
run_targets = partial(targets.run_targets, config)
all_targets = partial(targets.all_targets, config)


def uses_tiny_model() -> bool:
    return config["model"]["name_or_path"] is None


def configfiles_given() -> list[str]:
    return expected_time.configfiles_given(
        Path(workflow.basedir), workflow.overwrite_configfiles
    )


# Input functions (Snakemake calls them with the job's wildcards).
def benchmark_data(wildcards) -> str:
    return problem_table(wildcards.benchmark)


def training_set_input(wildcards) -> dict[str, str]:
    return inputs.training_set_input(config, wildcards.dataset)


def stand_in_source(wildcards) -> dict[str, str]:
    return inputs.stand_in_source(config)


def base_model_input(wildcards) -> dict[str, str]:
    return inputs.base_model_input(config)


def lora_check_input(wildcards) -> dict[str, str]:
    return inputs.lora_check_input(config)


def policy_input(wildcards) -> dict[str, str]:
    return inputs.policy_input(config, wildcards.method, wildcards.seed)


def policy_path(wildcards, input) -> str:
    """The checkpoint a job generates with: its input `model` (params are not moved into a
    dose's directory, inputs are: workflow/rules/doses.smk)."""
    return input.model


def training_problems(wildcards) -> str:
    return inputs.training_problems(config)


def training_summaries(wildcards) -> list[str]:
    return inputs.training_summaries(config)


def curve_input(wildcards) -> dict[str, str]:
    return inputs.curve_input(config)


def curve_args(input) -> str:
    """The train_policy arguments of the learning curve (none without a curve split)."""
    if CURVE_SPLIT is None:
        return ""
    settings = evaluation_settings.curve_settings(config)
    return f"--curve-problems {input.curve_problems} --curve {arg(settings)}"


def comparison_grades(wildcards) -> list[str]:
    return inputs.comparison_grades(config)


def table_grades(wildcards) -> list[str]:
    return inputs.table_grades(config, wildcards.benchmark)


def regime_inputs(wildcards) -> dict:
    return inputs.regime_inputs(config)


def curve_runs(wildcards) -> dict:
    return inputs.curve_runs(config)


def attribution_inputs(wildcards) -> dict:
    return inputs.attribution_inputs(config)


def summary_tables(wildcards) -> dict[str, str]:
    """The tables the summary reads (rredcot.workflow.targets.summary_tables), the answer-now
    rule and the rredcot_fast pick where the study rules write them."""
    return targets.summary_tables(
        config,
        lambda: rules.study_agreement.output.answer_now,
        lambda: rules.study_frontier.output.pick,
    )


def summary_args(input) -> str:
    """`--<table> <path>` for every table the summary reads (its other inputs only order it)."""
    return targets.summary_args(list(summary_tables(None)), input)


# Whether this is one dose's workflow (workflow/rules/doses.smk): a Snakemake module, whose
# modifier has a namespace (the plain workflow's has none). No public API tells a module apart:
# `workflow.modifier.namespace` is Snakemake's own.
IN_DOSE = workflow.modifier.namespace is not None
