# Config validation, input functions and wildcard constraints shared by every rule.

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

SRC = str(Path(workflow.basedir) / "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)
# Step scripts run as `python -m rredcot.steps.<name>`, also inside --use-conda environments
# where the package is not installed.
shell.prefix(f'export PYTHONPATH="{SRC}${{{{PYTHONPATH:+:$PYTHONPATH}}}}"; ')

from rredcot.config import (  # noqa: E402
    ConfigError,
    load_schema,
    mirror_error,
    model_path_error,
    resource_overrides,
    validate_config,
)
from rredcot.data.registry import (  # noqa: E402
    KNOWN_BENCHMARKS,
    KNOWN_TRAINING_SETS,
    REGISTRY,
    mirror_dir,
    registry_entry,
)
from rredcot.configfiles import swallowed_target_error  # noqa: E402
from rredcot.reporting.captions import CAPTIONS  # noqa: E402
from rredcot.doses import (
    DOSE_FIGURE,
    DOSE_TABLE,
    dose_configs,
    share_world,
)  # noqa: E402
from rredcot.timing import check_benchmark_paths  # noqa: E402
from rredcot.training_rules import (  # noqa: E402
    budget_pairs,
    placebo_pairs,
    run_settings,
    tracker_error,
)
from snakemake.settings.types import DeploymentMethod  # noqa: E402

# A target written after --configfile is read as a config file: stop before its keys are
# merged into the config, naming the fix.
_swallowed = swallowed_target_error(workflow.overwrite_configfiles, Path.cwd())
if _swallowed is not None:
    raise ValueError(_swallowed)

# The config against workflow/schemas/config.schema.yaml, defaults filled in, once: our check
# names the offending key and what is allowed (snakemake.utils.validate would repeat it).
CONFIG_SCHEMA = load_schema(
    Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml"
)
validate_config(config, CONFIG_SCHEMA)

# Every job's conda environment under `--use-conda`: the CPU one, or envs/rredcot-gpu.yaml
# (CUDA torch, vLLM, DeepSpeed) on GPU nodes. Relative to this file, as `conda:` wants it.
if not (Path(workflow.basedir) / config["conda_env"]).is_file():
    _envs = sorted(
        f"envs/{p.name}" for p in Path(workflow.basedir, "envs").glob("*.yaml")
    )
    raise ValueError(
        f"config key 'conda_env': {config['conda_env']!r} is not a file of the repository; "
        f"choose one of {_envs}"
    )
CONDA_ENV = f"../../{config['conda_env']}"
# The trackers of training.report_to, before any job queues: importable here, or pinned in the
# jobs' env file under --use-conda (rredcot.training_rules.tracker_error; the job checks again).
_tracker_error = tracker_error(
    config["training"]["report_to"],
    (
        Path(workflow.basedir) / config["conda_env"]
        if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
        else None
    ),
)
if _tracker_error is not None:
    raise ConfigError(_tracker_error)
WORLD_SPLITS = list(config["world"]["splits"])
WORLD_TABLES = ["train", *WORLD_SPLITS]
# The estimator studies draw their problems from a pool of their own (`studies.pool`), disjoint
# from every world table and generated apart from them, or else read `studies.split`.
STUDY_POOL = "study_pool"
STUDY_SET = STUDY_POOL if config["studies"]["pool"] else config["studies"]["split"]
BASE_METHOD = "base"
BASELINE = config["training"]["baseline"]  # the run every other is compared with
# Every policy is evaluated with the same sampling seed (common random numbers): the same
# problem and sample index draw the same noise for the base and every run, so paired
# differences between policies carry no more sampling noise than they must.
EVAL_SEED = config["seed"]
# Variants: extra runs of a method under other settings, named and reported like a method
# (e.g. the side setting of credit.center): [{name, method, <training overrides>}].
VARIANTS = {v["name"]: v for v in config["training"]["variants"]}
if len(VARIANTS) != len(config["training"]["variants"]):
    raise ValueError("config key 'training.variants': two variants share a name")
TRAINING_METHODS = [*config["training"]["methods"], *VARIANTS]


def base_method(name: str) -> str:
    """The training method a run name stands for (itself, or a variant's method)."""
    return VARIANTS[name]["method"] if name in VARIANTS else name


# The base policy all jobs start from: the tiny model SFT-ed here, or `model.name_or_path`
# fetched (at `model.revision`) into the same directory, so no rule downstream tells them apart
# and compute nodes never need the Hub.
BASE_MODEL = "results/models/base"
# The problems RL trains on: a world table or a registry training set (numina_cot, open_rs).
TRAIN_DATA = config["data"].get("train", "train")


wildcard_constraints:
    seed=r"\d+",
    method=r"[a-z0-9_]+",
    benchmark=r"[a-z0-9_]+",
    split="|".join([*WORLD_TABLES, STUDY_POOL, *KNOWN_BENCHMARKS, *KNOWN_TRAINING_SETS]),
    prefer="dataset|sampled",


def arg(value) -> str:
    """A config value as one shell-quoted JSON argument for a step script."""
    return shlex.quote(json.dumps(value, sort_keys=True))


# $RREDCOT_RESOURCES (YAML, the shape of config `resources`) overrides the config's values,
# e.g. a partition's shorter time limit or smaller nodes:
#   export RREDCOT_RESOURCES='{train_policy: {runtime: 1440, mem_mb: 240000}}'
RESOURCE_OVERRIDES = resource_overrides()


def res(rule: str, key: str):
    """A resource of `rule`: $RREDCOT_RESOURCES, then config `resources` (rule entry, then
    `default`)."""
    defaults = {"mem_mb": 4000, "runtime": 60, "cpus_per_task": 1, "gpu": 0}
    for table in (RESOURCE_OVERRIDES, config.get("resources", {})):
        for entry in (rule, "default"):
            if key in table.get(entry, {}):
                return table[entry][key]
    return defaults[key]


def gpu_request(rule: str) -> dict:
    """The GPU resources of `rule`'s jobs: `gpu` N (local: --resources gating and
    rredcot.devices; SLURM: --gpus=N); with $RREDCOT_SLURM_GRES (e.g. `gpu`, `gpu:a100`) a
    GRES request `gres=<it>:N` instead (gpu 0, so --gpus is not added too); with
    $RREDCOT_SLURM_GPU_MODEL the model (--gpus=<model>:N). Jobs without GPUs get neither.
    """
    n = res(rule, "gpu")
    gres = os.environ.get("RREDCOT_SLURM_GRES", "").strip()
    model = os.environ.get("RREDCOT_SLURM_GPU_MODEL", "").strip()
    if n and gres:
        return {"gpu": 0, "gres": f"{gres}:{n}"}
    return {"gpu": n, "gpu_model": model} if n and model else {"gpu": n}


# Every GPU rule's command runs through the slot allocator (rredcot.devices): a local job with
# resources gpu > 0 gets devices of its own in CUDA_VISIBLE_DEVICES, the machine's or, inside a
# SLURM allocation, the allocation's; a job SLURM placed keeps its own; gpu 0 runs unchanged.
GPU_JOB = "python -m rredcot.devices" + (
    f" --count {config['devices']['count']}"
    if config["devices"]["count"] is not None
    else ""
)


def problem_table(name: str) -> str:
    """The normalized parquet of a problem set: a world table, a registry benchmark, or a
    registry training set."""
    if name in (*WORLD_TABLES, STUDY_POOL):
        return f"results/data/world/{name}.parquet"
    if name in KNOWN_BENCHMARKS:
        return f"results/data/benchmarks/{name}.parquet"
    if name in KNOWN_TRAINING_SETS:
        return f"results/data/train/{name}.parquet"
    raise ValueError(
        f"unknown problem set '{name}': not a world table {WORLD_TABLES}, a registry benchmark "
        f"{list(KNOWN_BENCHMARKS)} or a registry training set {list(KNOWN_TRAINING_SETS)}"
    )


def benchmark_data(wildcards):
    """The normalized parquet of the benchmark being evaluated (any problem set)."""
    return problem_table(wildcards.benchmark)


for _key, _name in (
    ("data.train", TRAIN_DATA),
    ("studies.split", STUDY_SET),
):
    try:
        problem_table(_name)
    except ValueError as err:
        raise ValueError(f"config key '{_key}': {err}") from None


# Local paths stop the run here, before any job: the model directory, and the benchmark mirror
# when the config's own targets read a registry dataset (a registry table asked for on the
# command line is checked by `mirror_input`, still before any job runs).
_registry_used = [
    n
    for n in (
        *config["benchmarks"],
        TRAIN_DATA,
        *[config["studies"]["split"]] * config["studies"]["enabled"],
    )
    if n in REGISTRY
]
# The CPU rehearsal's stand-ins (`stand_in`): a tiny chat model built by a rule in place of
# the Hub model, and the registry training set written from a mirrored benchmark.
STAND_IN_MODEL = "results/stand_in/model"
STAND_IN_MIRROR = "results/stand_in/mirror"
STAND_IN_SOURCE = "gsm8k"
if config["stand_in"]["model"] and config["model"]["name_or_path"] != STAND_IN_MODEL:
    raise ConfigError(
        f"config key 'model.name_or_path': {config['model']['name_or_path']!r}; with "
        f"stand_in.model true it must be {STAND_IN_MODEL!r} (where the stand-in is built)"
    )
if config["stand_in"]["training_rows"] and TRAIN_DATA not in KNOWN_TRAINING_SETS:
    raise ConfigError(
        f"config key 'stand_in.training_rows': data.train {TRAIN_DATA!r} is not a registry "
        f"training set {list(KNOWN_TRAINING_SETS)}; set it to null"
    )
for _error in (
    (
        None
        if config["stand_in"]["model"]
        else model_path_error(config["model"]["name_or_path"])
    ),
    mirror_error(config["data"]["mirror"]) if _registry_used else None,
):
    if _error is not None:
        raise ConfigError(_error)


def mirror_input(name: str) -> dict[str, str]:
    """`<mirror>/<name>.jsonl` as the input `mirror` when the mirror holds it (without it the Hub
    is read): editing the file, or pointing RREDCOT_MIRROR or data.mirror at another mirror,
    reruns the rule and everything built from its table."""
    error = mirror_error(config["data"]["mirror"])
    if error is not None:
        raise ConfigError(error)
    mirror = mirror_dir(config["data"]["mirror"])
    path = None if mirror is None else mirror / f"{name}.jsonl"
    return {"mirror": str(path)} if path is not None and path.is_file() else {}


def training_set_input(wildcards) -> dict[str, str]:
    """The mirror file a registry training set is read from: the rehearsal's stand-in, or the
    mirror's own copy (none: the Hub)."""
    if config["stand_in"]["training_rows"]:
        return {"mirror": f"{STAND_IN_MIRROR}/{wildcards.dataset}.jsonl"}
    return mirror_input(wildcards.dataset)


def stand_in_source(wildcards) -> dict[str, str]:
    """The mirrored benchmark the stand-in training set is written from."""
    found = mirror_input(STAND_IN_SOURCE)
    if not found:
        raise ConfigError(
            f"config key 'stand_in.training_rows': the stand-in training set is written from "
            f"the mirror's {STAND_IN_SOURCE}.jsonl, which {mirror_dir(config['data']['mirror'])} "
            "lacks"
        )
    return found


def base_model_input(wildcards) -> dict[str, str]:
    """What fetch_base_model copies from the workflow itself: the rehearsal's stand-in model."""
    return {"model": STAND_IN_MODEL} if config["stand_in"]["model"] else {}


def lora_targets() -> dict:
    """The runs' LoRA `target_modules` lists by the config key that sets them ("all-linear"
    fits any model and needs no check)."""
    targets = {}
    for name in TRAINING_METHODS:
        lora = training_settings(name, config["training"]["seeds"][0]).get("lora")
        modules = (lora or {}).get("target_modules", "all-linear")
        if isinstance(modules, str):
            continue
        if "lora" in VARIANTS.get(name, {}):
            key = f"training.variants.{list(VARIANTS).index(name)}.lora"
        elif "lora" in config["training"]["per_method"].get(base_method(name), {}):
            key = f"training.per_method.{base_method(name)}.lora"
        else:
            key = "training.lora"
        targets[f"{key}.target_modules"] = modules
    return targets


LORA_CHECK = "results/models/lora_targets.json"


def lora_check_input(wildcards) -> dict[str, str]:
    """The LoRA target check a training run waits for (none when no run names modules)."""
    return {"lora_check": LORA_CHECK} if lora_targets() else {}


def task_of(name: str) -> str:
    """The task format (prompt, grading) of a problem set."""
    return (
        "synthetic"
        if name in (*WORLD_TABLES, STUDY_POOL)
        else registry_entry(name).task
    )


def uses_tiny_model() -> bool:
    return config["model"]["name_or_path"] is None


def policy_input(wildcards):
    """The checkpoint a (method, seed) is evaluated with."""
    if wildcards.method == BASE_METHOD:
        return {"model": BASE_MODEL}
    if wildcards.method in TRAINING_METHODS:
        return {"model": f"results/train/{wildcards.method}/seed{wildcards.seed}/final"}
    raise ValueError(
        f"unknown method '{wildcards.method}'; known: {[BASE_METHOD, *TRAINING_METHODS]}"
    )


def policy_path(wildcards, input) -> str:
    """The checkpoint a job generates with: its input `model` (params are not moved into a
    dose's directory, inputs are: workflow/rules/doses.smk)."""
    return input.model


def uses_vllm_block(generates: bool) -> bool:
    """Whether a job reads `evaluation.vllm`. Only one that generates, under backend vllm, does;
    the block stays out of every other job's params, so editing it reruns nothing else.
    """
    return generates and config["evaluation"]["backend"] == "vllm"


def eval_settings(benchmark: str, generates: bool = True) -> dict:
    """Evaluation settings of one benchmark: the defaults with its per-benchmark overrides
    (`evaluation.vllm` only for a rule that generates with vLLM)."""
    # max_prompt_tokens only sizes the vLLM context (generation_backend), at load time
    skip = ("per_benchmark", "max_prompt_tokens")
    ev = {k: v for k, v in config["evaluation"].items() if k not in skip}
    ev.update(config["evaluation"]["per_benchmark"].get(benchmark, {}))
    ev["dtype"] = ev.get("dtype") or config["model"]["dtype"]
    if uses_vllm_block(generates):
        ev["vllm"] = generation_backend()["vllm"]
    else:
        ev.pop("vllm", None)
    return ev


def greedy_settings(benchmark: str, generates: bool = True) -> dict:
    """A benchmark's evaluation settings decoded greedily: one sample at temperature 0 (the
    regime table's greedy pass@1; the hf backend then takes the argmax, vLLM too)."""
    return {
        **eval_settings(benchmark, generates),
        "temperature": 0.0,
        "top_p": 1.0,
        "samples_per_problem": 1,
    }


def generation_backend() -> dict:
    """The settings a generating step needs to build its backend (`evaluation` block; its
    `vllm` block under backend vllm only, max_model_len from the config's lengths when null:
    rredcot.vllm_memory)."""
    from rredcot.vllm_memory import generation_engine

    ev = config["evaluation"]
    return {
        "backend": ev["backend"],
        **({"vllm": generation_engine(config)} if uses_vllm_block(True) else {}),
        "device": ev["device"],
        "dtype": ev["dtype"] or config["model"]["dtype"],
    }


def seeds_of(name: str) -> list[int]:
    """The training seeds of a run name: training.seeds, then its training.extra_seeds."""
    extra = [e["seeds"] for e in config["training"]["extra_seeds"] if e["run"] == name]
    return [*config["training"]["seeds"], *(s for seeds in extra for s in seeds)]


def training_runs() -> list[tuple[str, int]]:
    """Every RL run (run name, seed)."""
    return [(m, s) for m in TRAINING_METHODS for s in seeds_of(m)]


def methods_and_seeds() -> list[tuple[str, int]]:
    """Every (method, seed) that gets a row in the benchmark tables: the base, then RL runs."""
    return [(BASE_METHOD, config["seed"]), *training_runs()]


def training_settings(method: str, seed: int) -> dict:
    """The `--params` of one RL run (`rredcot.training_rules.run_settings`): config `training`
    with the method's and the variant's overrides, plus the shared segmentation and estimator
    blocks (so studies and training use one definition).
    """
    return run_settings(
        config,
        base_method(method),
        seed,
        task=task_of(TRAIN_DATA),
        variant=VARIANTS.get(method),
    )


def check_training_runs() -> None:
    """Every run's settings taken together (`rredcot.training_rules`, the rules the job applies)
    with the launch's processes, before any job: e.g. an odd num_generations for rrpo, or a
    batch that gradient_accumulation_steps does not divide, or an override that leaves the
    run's estimator sampling suffixes for another value than ref_suffix_sum. (Whether a process
    holds whole groups is left to the job: it needs the method classes.)"""
    from rredcot.config import block_errors
    from rredcot.training_rules import process_layout, settings_error

    for name in TRAINING_METHODS:
        values = training_settings(name, config["training"]["seeds"][0])
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
    from rredcot.vllm_memory import config_errors

    # A vLLM context must hold its jobs' prompts and budgets, and one full-length sequence must
    # fit its memory share (the model's shape from
    # results/models/base/config.json once fetched, else rredcot.vllm_memory.KNOWN_MODELS).
    runs = {
        n: training_settings(n, config["training"]["seeds"][0])
        for n in TRAINING_METHODS
    }
    memory = config_errors(config, runs, BASE_MODEL)
    if memory:
        raise ConfigError("\n  - ".join(["vLLM context and memory:", *memory]))
    from rredcot import memory_plan

    # Each GPU run's train_policy job must fit one GPU of devices.memory_gb by the memory
    # planner (scripts/memory_plan.py prints its phases; docs/memory.md).
    memory = memory_plan.config_errors(config, runs, BASE_MODEL)
    if memory:
        raise ConfigError("\n  - ".join(["GPU memory (rredcot.memory_plan):", *memory]))


check_training_runs()


def training_launcher(method: str, seed: int, slurm_extra: str | None = None) -> str:
    """`python -m`, or `accelerate launch --config_file ... -m` with `training.accelerate` and
    `training.num_processes`; each run gets its own rendezvous port, so runs can share a node,
    and the ranks as long to save on a signal as the job's `--signal` lead in `slurm_extra`
    (the SLURM profile's; rredcot.training.launch.shutdown_timeout).
    """
    from rredcot.training.launch import accelerate_command, shutdown_timeout

    tr = config["training"]
    # a method may launch otherwise (e.g. RRPO/SRPO, refused under ZeRO-3, on zero2)
    own = tr["per_method"].get(base_method(method), {})
    launcher = own.get("accelerate", tr["accelerate"])
    argv = accelerate_command(  # port and precision matter only under accelerate launch
        launcher,
        tr["num_processes"],
        29500 + methods_and_seeds().index((method, seed)),
        mixed_precision="bf16" if tr["bf16"] else "no",
        shutdown_s=shutdown_timeout(slurm_extra),
    )
    return " ".join(shlex.quote(a) for a in argv)


CURVE_SPLIT = config["training"]["curve"]["split"]
if CURVE_SPLIT is not None and CURVE_SPLIT not in WORLD_SPLITS:
    raise ValueError(
        f"config key 'training.curve.split': {CURVE_SPLIT!r} is not a world split; "
        f"choose one of {WORLD_SPLITS} or null"
    )


# The regime table (greedy and T = 1 pass@1, luck, systematic-error share of every policy) is
# built on the curve split, a world split whose protocol is the RL temperature (T = 1, no
# nucleus), whenever there are runs to compare with the base.
REGIME_TABLE = "results/regime_table.csv"
BUILDS_REGIME_TABLE = CURVE_SPLIT is not None and bool(TRAINING_METHODS)
if BUILDS_REGIME_TABLE:
    _t1 = eval_settings(CURVE_SPLIT, generates=False)
    if (_t1["temperature"], _t1["top_p"]) != (1.0, 1.0):
        raise ConfigError(
            f"config key 'evaluation.per_benchmark.{CURVE_SPLIT}': the curve split is scored at "
            f"temperature {_t1['temperature']}, top_p {_t1['top_p']}; the regime table's T = 1 "
            "columns read it, so set {temperature: 1.0, top_p: 1.0} (or training.curve.split "
            "null, or score another protocol on a split of its own)"
        )


def regime_inputs(wildcards) -> dict:
    """What the regime table reads: every policy's generations and grades on the curve split,
    sampled (the split's protocol) and greedy, in `methods_and_seeds` order, and the split.
    """
    paths = {
        f"{protocol}_{kind}": [
            f"results/eval/{m}/seed{s}/{CURVE_SPLIT}/{sub}{kind}.parquet"
            for m, s in methods_and_seeds()
        ]
        for protocol, sub in (("t1", ""), ("greedy", "greedy/"))
        for kind in ("generations", "grades")
    }
    return {**paths, "problems": problem_table(CURVE_SPLIT)}


def curve_settings() -> dict:
    """`CurveSettings` of the runs: `training.curve.every` + the split's evaluation protocol."""
    from dataclasses import asdict

    from rredcot.training.curve_settings import CurveSettings

    curve = CurveSettings.from_evaluation(
        config["evaluation"],
        CURVE_SPLIT,
        config["training"]["curve"]["every"],
        EVAL_SEED,
    )
    return asdict(curve)


def curve_input(wildcards) -> dict:
    return {} if CURVE_SPLIT is None else {"curve_problems": problem_table(CURVE_SPLIT)}


def curve_args(input) -> str:
    """The train_policy arguments of the learning curve (none without a curve split)."""
    if CURVE_SPLIT is None:
        return ""
    return f"--curve-problems {input.curve_problems} --curve {arg(curve_settings())}"


ATTRIBUTION_TABLE = "results/credit_attribution.csv"
# (method, placebo) of every variant with credit.placebo (docs/attribution.md)
ATTRIBUTION_PAIRS = placebo_pairs(config["training"]["variants"])
# (run, baseline given its budget) of every variant with budget_of
BUDGET_PAIRS = budget_pairs(config["training"]["variants"])


def attribution_inputs(wildcards) -> dict:
    """What the placebo table reads: every run's summary, its final grades and generations on
    the curve split (sampled and greedy), the base's grades and the split (every run is also
    set against GRPO per first-error kind)."""
    runs = training_runs()
    files = {
        "summaries": [f"results/train/{m}/seed{s}/train_summary.json" for m, s in runs],
        **{
            f"{protocol}{kind}": [
                f"results/eval/{m}/seed{s}/{CURVE_SPLIT}/{sub}{kind}.parquet"
                for m, s in runs
            ]
            for protocol, sub in (("t1_", ""), ("greedy_", "greedy/"))
            for kind in ("generations", "grades")
        },
    }
    return {
        **files,
        "base": curve_runs(wildcards)["base"],
        "problems": problem_table(CURVE_SPLIT),
    }


def curve_runs(wildcards) -> dict:
    """What the learning curves read: every run's summary and its final grades on the split."""
    return {
        "summaries": training_summaries(wildcards),
        "grades": [
            f"results/eval/{m}/seed{s}/{CURVE_SPLIT}/grades.parquet"
            for m, s in training_runs()
        ],
        "base": f"results/eval/{BASE_METHOD}/seed{config['seed']}/{CURVE_SPLIT}/grades.parquet",
    }


def training_problems(wildcards) -> str:
    """Train problems with their verified reference solution (column `reference`)."""
    return f"results/references/{config['references']['source']}/{TRAIN_DATA}.parquet"


def training_summaries(wildcards) -> list[str]:
    return [f"results/train/{m}/seed{s}/train_summary.json" for m, s in training_runs()]


def comparison_grades(wildcards) -> list[str]:
    """Every policy's grades on every configured benchmark (the paired comparison's input)."""
    return [
        f"results/eval/{m}/seed{s}/{b}/grades.parquet"
        for b in config["benchmarks"]
        for m, s in methods_and_seeds()
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
    "estimator_frontier",
)


def study_artifacts() -> list[str]:
    """The study artifacts this config asks for: none when `studies.enabled` is false; error
    localization only on a world split (only its step checker knows the first wrong step).
    """
    if not config["studies"]["enabled"]:
        return []
    world = STUDY_SET in (*WORLD_TABLES, STUDY_POOL)
    return [a for a in STUDY_ARTIFACTS if world or a != "error_localization"]


def run_targets() -> list[str]:
    """Everything `rule all` asks for but the summary, which reads these."""
    training = ["results/main_table.csv"]
    if TRAINING_METHODS:
        training += [
            "results/benchmark_comparison.csv",
            "results/training_curves.csv",
            "results/figures/training_curves.png",
            "results/compute_cost.csv",
        ]
        if CURVE_SPLIT is not None:
            training += [
                "results/learning_curves.csv",
                "results/figures/learning_curves.png",
                "results/method_comparison.csv",
            ]
        if BUILDS_REGIME_TABLE:
            training.append(REGIME_TABLE)
        if ATTRIBUTION_PAIRS and BUILDS_REGIME_TABLE:
            training += [ATTRIBUTION_TABLE, "results/figures/credit_attribution.png"]
    return (
        [f"results/{b}_table.csv" for b in config["benchmarks"]]
        + training
        + [
            f"results/references/{config['references']['source']}/{TRAIN_DATA}.parquet",
            *[f"results/{a}.csv" for a in study_artifacts()],
            *[f"results/figures/{a}.png" for a in study_artifacts()],
        ]
    )


SUMMARY = "results/SUMMARY.md"
# The report captions that state their numbers include these fragments, which the summary writes.
CAPTION_FRAGMENTS = list(CAPTIONS)
# The summary sums every job's timing file but its own (from an earlier run of it).
SUMMARY_BENCHMARK = "results/benchmarks/summary.tsv"


def all_targets() -> list[str]:
    """What `rule all` asks for, every artifact of the config and then the summary of them."""
    return [*run_targets(), SUMMARY]


def summary_tables(wildcards) -> dict[str, str]:
    """The tables `results/SUMMARY.md` reads that this config builds, by name
    (`rredcot.reporting.summary.TABLES`; the answer-now rule comes with the agreement table, the
    rredcot_fast pick with the frontier).
    """
    from rredcot.reporting.summary import TABLES

    built = set(run_targets())
    tables = {name: f"results/{file}" for name, (file, _) in TABLES.items()}
    tables = {name: path for name, path in tables.items() if path in built}
    if "estimator_agreement" in tables:
        tables["answer_now_rule"] = rules.study_agreement.output.answer_now
    if "estimator_frontier" in tables:
        tables["estimator_pick"] = rules.study_frontier.output.pick
    return tables


def summary_args(input) -> str:
    """`--<table> <path>` for every table the summary reads (its other inputs only order it)."""
    return " ".join(
        f"--{name.replace('_', '-')} {shlex.quote(str(input[name]))}"
        for name in summary_tables(None)
    )


def configfiles_given() -> list[str]:
    """The config files over config.yaml, as the command line named them (relative to the
    workflow where they lie in it)."""
    base = Path(workflow.basedir).resolve()
    out = []
    for f in workflow.overwrite_configfiles:
        path = Path(f).resolve()
        out.append(str(path.relative_to(base)) if base in path.parents else str(path))
    return out


# The dose-response (config key `doses`, workflow/rules/doses.smk): the workflow once per dose,
# each a module of the Snakefile in a directory of its own; none without the key.
DOSES = dose_configs(config, CONFIG_SCHEMA) if config["doses"] else []
# Whether this is one dose's workflow: a Snakemake module, whose modifier has a namespace (the
# plain workflow's has none).
IN_DOSE = workflow.modifier.namespace is not None


def builds_regime_table() -> bool:
    """Whether every dose's workflow builds its regime table (REGIME_TABLE among its module's
    targets), which the dose-response then reads."""
    return all(REGIME_TABLE in workflow.globals[d.module].all_targets() for d in DOSES)


def shared_world_tables() -> list[str]:
    """The world tables every dose's copy of the world must hold alike: all of them when the
    doses share the world's settings, none when the dose varies the world itself."""
    return WORLD_TABLES if share_world(DOSES) else []


def credit_regime_inputs(wildcards) -> dict[str, list[str]]:
    """Every dose's comparison (and regime table), and its world when the doses share one."""
    inputs = {
        "comparisons": [d.path("results/method_comparison.csv") for d in DOSES],
        "worlds": [
            d.path(f"results/data/world/{t}.parquet")
            for d in DOSES
            for t in shared_world_tables()
        ],
    }
    if builds_regime_table():
        inputs["regimes"] = [d.path(REGIME_TABLE) for d in DOSES]
    return inputs


def dose_targets() -> list[str]:
    """The targets of a dose-response (config key `doses`), the table and figure and each
    dose's summary, which its workflow writes last."""
    return [DOSE_TABLE, DOSE_FIGURE, *(d.path(SUMMARY) for d in DOSES)]


# The expected time of a run (rredcot.timing): the measured job times of a snapshot of a run of
# the same config files (docs/snapshots/, or $RREDCOT_SNAPSHOTS: one's own snapshots), scaled
# to this machine by a short calibration.
SNAPSHOTS = Path(
    os.environ.get("RREDCOT_SNAPSHOTS", "").strip()
    or Path(workflow.basedir) / "docs" / "snapshots"
)


def benchmark_patterns() -> dict[str, str]:
    """Every rule's benchmark path pattern, by rule name (rules without one left out)."""
    from snakemake.io import strip_wildcard_constraints

    return {
        r.name: strip_wildcard_constraints(str(r.benchmark))
        for r in workflow.rules
        if r.benchmark is not None
    }


def log_expected_time() -> None:
    """Log `expected_time_line()` through Snakemake's logger (console and its log file)."""
    from snakemake.logging import logger

    logger.info(expected_time_line())


def expected_time_line() -> str:
    """The line a run logs before its first job: the expected CPU seconds and wall time of the
    jobs that will run, or why there is none. Jobs and what each waits for come from the DAG
    Snakemake built (`needrun_jobs()`, the call its own job stats use, and
    `job_dependencies()`), so a resumed run prices only what is left. Under a cluster executor jobs run on other machines than this one, which
    a calibration here would measure: no estimate."""
    from snakemake.exceptions import WorkflowError

    from rredcot import timing

    if not workflow.local_exec:
        return (
            "expected time: not estimated under a cluster executor (jobs run on other machines "
            "than this one); measured job times per snapshot: docs/snapshots/*/job_times.csv"
        )
    try:
        dag = workflow.dag
        keys = {
            job: timing.benchmark_key(job.benchmark)
            for job in dag.needrun_jobs()
            if job.benchmark is not None
        }
        after = {
            key: [keys[d] for d in dag.job_dependencies(job) if d in keys]
            for job, key in keys.items()
        }
        return timing.expected_time(
            [(job.rule.name, key) for job, key in keys.items()],
            SNAPSHOTS,
            configfiles_given(),
            workflow.cores,
            lambda: timing.calibrate_in_subprocess(SRC),
            after,
        )
    except (
        AttributeError,  # Snakemake's DAG without needrun_jobs (pinned: 9.27.1)
        RuntimeError,
        ValueError,
        OSError,
        subprocess.TimeoutExpired,
        WorkflowError,
    ) as err:
        return f"expected time: not estimated ({err})"
