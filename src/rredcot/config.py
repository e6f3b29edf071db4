"""Config validation with messages that name the bad key and what is allowed.

The Snakefile validates `config` against `workflow/schemas/config.schema.yaml` before any rule
is built. jsonschema's raw errors are hard to read ("Failed validating 'enum' in
schema['properties']..."), so this module reports every error as
`config key 'evaluation.temperature': -1 is less than the minimum 0`.
Past the schema it checks what a static schema cannot: the values of per-method, variant,
studies.segmentation and studies.frontier overrides (without filling in defaults), benchmark
names against this config's world splits and the registry, and the rules that tie values
together (`_joint_errors`: each checked by the code the job itself runs, so a job never learns
of a bad value first).
`mirror_error` and `model_path_error` check local paths for the Snakefile. Step scripts reuse
the same check when run without Snakemake.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """The config does not match its schema; the message lists every offending key."""


def _with_defaults(cls: type) -> type:
    """A validator class that also fills in `default` values of the schema (like Snakemake)."""
    validate_props = cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema) -> Iterator[ValidationError]:
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = _copy(sub["default"])
        yield from validate_props(validator, properties, instance, schema)

    return validators.extend(cls, {"properties": set_defaults})


def _copy(value: Any) -> Any:
    return copy.deepcopy(value)


# libyaml's loader where PyYAML was built with it (the same documents, ~10x faster to parse)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.lru_cache(maxsize=8)
def _parsed(path: Path, mtime_ns: int) -> dict[str, Any]:
    """The YAML document at `path`, parsed once per version of the file (the workflow reads the
    schema several times while it parses)."""
    with open(path) as fh:
        return yaml.load(fh, Loader=_LOADER)  # noqa: S506 (a safe loader)


def load_schema(path: str | Path = SCHEMA_PATH) -> dict[str, Any]:
    """The config schema, with the parts that list training methods filled in from
    `rredcot.training.method_registry` (the one list of methods) and those that list segmentation
    strategies and keys from `rredcot.credit.segmentation`; the YAML leaves those places open."""
    from rredcot.credit.segmentation import schema_fragments as segmentation_fragments
    from rredcot.training.method_registry import schema_fragments

    path = Path(path)
    schema = copy.deepcopy(_parsed(path, path.stat().st_mtime_ns))
    fragments = schema_fragments()
    names = fragments["names"]
    segmentation = segmentation_fragments()
    try:
        training = schema["properties"]["training"]["properties"]
        training["methods"]["items"]["enum"] = list(names)
        variant = training["variants"]["items"]["properties"]
        variant["name"]["not"] = {"enum": ["base", *names]}
        variant["method"]["enum"] = list(names)
        training["per_method"]["properties"] = fragments["per_method"]
    except KeyError as err:
        raise ConfigError(f"{path}: the schema has no place for the method list ({err})") from err
    try:
        strategies = segmentation["strategies"]
        schema["properties"]["segmentation"]["properties"]["strategy"]["enum"] = strategies
        studies = schema["properties"]["studies"]["properties"]
        studies["segmentation"]["propertyNames"] = {"enum": segmentation["keys"]}
        sweep = studies["sweep"]["properties"]["strategies"]
        sweep["items"]["enum"] = list(strategies)
        sweep["default"] = list(strategies)
    except KeyError as err:
        raise ConfigError(
            f"{path}: the schema has no place for the segmentation names ({err})"
        ) from err
    return schema


def _describe(error: ValidationError, prefix: str = "") -> str:
    """One line for `error`; `prefix` is the key of the block a sub-validation started at."""
    key = ".".join([prefix] * bool(prefix) + [str(p) for p in error.absolute_path])
    key = key or "<top level>"
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if error.validator == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extra = (
            sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
        )
        where = key if key != "<top level>" else "the top level"
        return f"unknown config key(s) {extra} under {where}; allowed: {allowed}"
    choices = error.validator_value
    if error.validator == "enum" and "propertyNames" in error.schema_path:
        # a key name outside the list a block allows (e.g. training.per_method.<method>)
        return f"unknown config key(s) [{error.instance!r}] under {key}; allowed: {choices}"
    if error.validator == "enum":
        return f"config key '{key}': {error.instance!r} is not allowed; choose one of {choices}"
    if error.validator == "required":
        return f"config key '{key}': {error.message}"
    hint = f" ({schema['description']})" if "description" in schema else ""
    return f"config key '{key}': {error.message}{hint}"


def schema_defaults(*path: str, schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The block of the config at `path` (e.g. "estimator", "rredcot") as the schema's defaults
    fill it in when the config leaves it empty: what each of its keys is by default."""
    node = load_schema() if schema is None else schema
    for key in path:
        node = node["properties"][key]
    block: dict[str, Any] = {}
    for error in _with_defaults(Draft202012Validator)(node).iter_errors(block):
        raise ConfigError(f"the schema's defaults of {'.'.join(path)}: {error.message}")
    return block


def validate_config(
    config: dict[str, Any], schema: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Check `config` against the schema, fill defaults in place, raise ConfigError on any error."""
    schema = load_schema() if schema is None else schema
    validator = _with_defaults(Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    messages = [_describe(e) for e in errors]
    if not messages:  # the checks below rely on the schema's shape and filled-in defaults
        messages = (
            _override_errors(config, schema)
            + _problem_set_errors(config)
            + _extra_seed_errors(config["training"])
        )
    if not messages:
        messages = _joint_errors(config)
    if messages:
        lines = "\n  - ".join(messages)
        raise ConfigError(f"invalid config ({len(messages)} error(s)):\n  - {lines}")
    return config


def block_errors(
    values: Mapping[str, Any], key: str, schema: Mapping[str, Any] | None = None
) -> list[str]:
    """`values` (no defaults filled in) against the schema of config key `key` (dotted), e.g. a
    run's estimator.rredcot with its overrides merged; one line per error, naming the key."""
    block = load_schema() if schema is None else schema
    for part in key.split("."):
        block = block["properties"][part]
    found = Draft202012Validator(block).iter_errors(values)
    return [_describe(e, key) for e in sorted(found, key=lambda e: str(e.path))]


def _override_errors(config: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """Values of `training.per_method.<m>` and of each variant, checked against the schemas of
    the training keys they override.

    The schema names the keys each method may override (`propertyNames`) but cannot check an
    override's value without filling in defaults, which would override the shared settings; so
    the values are checked here, without defaults. A variant takes its method's keys.
    """
    training = schema["properties"]["training"]["properties"]
    allowed = {
        method: sub["propertyNames"]["enum"]
        for method, sub in training["per_method"]["properties"].items()
    }
    blocks = [
        (f"training.per_method.{method}", method, values)
        for method, values in config["training"]["per_method"].items()
    ]
    for i, variant in enumerate(config["training"]["variants"]):
        values = {k: v for k, v in variant.items() if k not in ("name", "method", "budget_of")}
        blocks.append((f"training.variants.{i}", variant["method"], values))
    # `rredcot` overrides keys of estimator.rredcot (the rredcot runs' estimator)
    keys = {**training, "rredcot": schema["properties"]["estimator"]["properties"]["rredcot"]}
    properties = {method: {k: keys[k] for k in names} for method, names in allowed.items()}
    # studies.segmentation overrides keys of the segmentation block for the studies
    blocks.append(("studies.segmentation", "studies", config["studies"]["segmentation"] or {}))
    properties["studies"] = schema["properties"]["segmentation"]["properties"]
    # the frontier's forms override keys of estimator.rredcot, its transforms training.credit
    frontier = config["studies"]["frontier"]
    for label, replaced in frontier["rredcot_variants"].items():
        blocks.append((f"studies.frontier.rredcot_variants.{label}", "frontier_rredcot", replaced))
    for name, replaced in frontier["transforms"].items():
        blocks.append((f"studies.frontier.transforms.{name}", "frontier_credit", replaced))
    properties["frontier_rredcot"] = keys["rredcot"]["properties"]
    properties["frontier_credit"] = training["credit"]["properties"]
    messages = []
    for key, method, values in blocks:
        sub = {"type": "object", "additionalProperties": False, "properties": properties[method]}
        found = Draft202012Validator(sub).iter_errors(values)
        messages += [_describe(e, key) for e in sorted(found, key=lambda e: str(e.path))]
    return messages


def _extra_seed_errors(training: Mapping[str, Any]) -> list[str]:
    """`training.extra_seeds` names runs that exist, each once, repeats none of training.seeds,
    and gives the baseline (`training.baseline`, every run's comparison partner in
    results/method_comparison.csv) every seed any other run has; the baseline is a method or
    variant name."""
    from rredcot.training.method_registry import METHOD_SPECS

    runs = [*training["methods"], *(v["name"] for v in training["variants"])]
    baseline = training["baseline"]
    names = [*METHOD_SPECS, *(v["name"] for v in training["variants"])]
    messages = [
        f"config key 'training.baseline': {baseline!r} is not a method or variant; choose "
        f"from {names}"
    ] * (baseline not in names)
    messages += [
        f"config key 'training.variants.{i}.budget_of': {v['budget_of']!r} is not a run; "
        f"choose from {runs}"
        for i, v in enumerate(training["variants"])
        if "budget_of" in v and v["budget_of"] not in runs
    ]
    shared, key = set(training["seeds"]), "config key 'training.extra_seeds'"
    extra: dict[str, set[int]] = {}
    for i, entry in enumerate(training["extra_seeds"]):
        name, seeds = entry["run"], set(entry["seeds"])
        if name not in runs:
            messages.append(f"{key}[{i}].run: {name!r} is not a run; choose from {runs}")
        if name in extra:
            messages.append(f"{key}[{i}].run: {name!r} is listed twice")
        if shared & seeds:
            messages.append(
                f"{key}[{i}].seeds: {sorted(shared & seeds)} are already in training.seeds"
            )
        extra[name] = extra.get(name, set()) | seeds
    if baseline in runs:
        for name, seeds in extra.items():
            missing = sorted(seeds - extra.get(baseline, set()))
            if name != baseline and missing:
                messages.append(
                    f"{key}: {name} seeds {missing} have no {baseline} run (training.baseline) "
                    f"to be compared with; add them to {baseline}'s entry"
                )
    return messages


def _problem_set_errors(config: Mapping[str, Any]) -> list[str]:
    """`benchmarks` and `evaluation.per_benchmark` name only problem sets that exist: world
    splits (from this config) and registry datasets; a typo would otherwise surface as a
    missing input, or (per_benchmark) never."""
    from rredcot.data.registry import KNOWN_BENCHMARKS, KNOWN_TRAINING_SETS

    splits = list(config["world"]["splits"])
    benchmarks = [*splits, *KNOWN_BENCHMARKS]
    problem_sets = ["train", *benchmarks, *KNOWN_TRAINING_SETS]
    messages = [
        f"config key 'benchmarks': {name!r} is not a benchmark; choose world splits "
        f"{splits} or registry benchmarks {list(KNOWN_BENCHMARKS)}"
        for name in config["benchmarks"]
        if name not in benchmarks
    ]
    messages += [
        f"config key 'evaluation.per_benchmark': {name!r} is not a problem set; choose one of "
        f"{problem_sets}"
        for name in config["evaluation"]["per_benchmark"]
        if name not in problem_sets
    ]
    return messages


def accuracy_band_error(band: Any) -> str | None:
    """Why `studies.accuracy_band` is not null or [low, high] with 0 <= low <= high <= 1."""
    if band is None:
        return None
    pair = isinstance(band, list | tuple) and len(band) == 2
    numbers = pair and all(isinstance(v, int | float) and not isinstance(v, bool) for v in band)
    if numbers and 0 <= band[0] <= band[1] <= 1:
        return None
    return f"studies.accuracy_band: need [low, high] with 0 <= low <= high <= 1, got {band!r}"


def _keyed(message: str) -> str:
    """`<key>: <what>` (a job-side check's message, which starts with the key) as a config
    error line."""
    key, _, what = message.partition(": ")
    return f"config key '{key}': {what}"


def _frontier_errors(config: Mapping[str, Any]) -> list[str]:
    """Each of the frontier's forms is an RREDCoT config and each transform a credit block that
    the jobs can build (e.g. `suffixes: 1` needs the ref_suffix_sum value)."""
    from rredcot.credit.credit_config import CreditConfig
    from rredcot.credit.rredcot_config import RREDCoTConfig

    frontier, messages = config["studies"]["frontier"], []
    builds = [
        (f"studies.frontier.rredcot_variants.{label}", RREDCoTConfig, "rredcot", keys)
        for label, keys in frontier["rredcot_variants"].items()
    ] + [
        (f"studies.frontier.transforms.{name}", CreditConfig, "credit", keys)
        for name, keys in frontier["transforms"].items()
    ]
    for key, kind, block, keys in builds:
        base = (
            config["estimator"]["rredcot"] if block == "rredcot" else config["training"]["credit"]
        )
        try:
            kind.from_dict({**base, **keys})
        except (TypeError, ValueError) as err:
            messages.append(f"config key '{key}': {err}")
    return messages


def _joint_errors(config: Mapping[str, Any]) -> list[str]:
    """Rules that tie values together, checked by the code the jobs run (their one home):
    the world generator's settings and every split's depths (`WorldConfig`), both segmentations
    (`SegmentationConfig`), the accuracy band's order, what SFT needs of the train split, and
    settings a component would ignore (a warm-up ratio under a constant schedule, `evaluation.vllm`
    keys that are no vLLM engine arguments)."""
    from rredcot.credit.segmentation import study_segmentation
    from rredcot.data.synthetic import SplitSpec, check_depths, world_config
    from rredcot.generation import vllm_block_error
    from rredcot.models.arch import arch_fields
    from rredcot.models.sft_settings import sft_block
    from rredcot.training.settings_checks import warmup_error

    messages = []
    world = config["world"]
    try:
        generator = world_config(world)
        splits = {
            "world.train": world["train"],
            **{f"world.splits.{k}": v for k, v in world["splits"].items()},
        }
        if config["studies"]["pool"] is not None:
            splits["studies.pool"] = config["studies"]["pool"]
        for key, spec in splits.items():
            try:
                split = SplitSpec(**spec)
                check_depths(split.depths, generator)
            except ValueError as err:
                field = "branches" if str(err).startswith("branches") else "depths"
                messages.append(f"config key '{key}.{field}': {err}")
                continue
            if split.branches is not None and generator.shape != "tree":
                messages.append(
                    f"config key '{key}.branches': {split.branches} needs world.shape 'tree', "
                    f"not {generator.shape!r}"
                )
    except ValueError as err:
        messages.append(f"config key 'world': {err}")
    for key, overrides in (
        ("segmentation", None),
        ("studies.segmentation", config["studies"]["segmentation"]),
    ):
        try:
            study_segmentation(config["segmentation"], overrides)
        except ValueError as err:
            messages.append(f"config key '{key}': {err}")
    band = accuracy_band_error(config["studies"]["accuracy_band"])
    messages += [_keyed(band)] if band else []
    if config["studies"]["enabled"]:  # only the studies build the frontier's forms
        messages += _frontier_errors(config)
    # Settings a component would ignore (issue 32): the run-level overrides are checked with the
    # runs (`rredcot.workflow.checks.check_training_runs`), the shared block here.
    training = config["training"]
    for error in (
        warmup_error(training["lr_scheduler"], training["warmup_ratio"]),
        vllm_block_error(config["evaluation"]["vllm"]),
    ):
        messages += [_keyed(error)] if error else []
    if config["model"]["name_or_path"] is None:  # the tiny model is built and SFT-ed here
        for check in (
            lambda: arch_fields(config["model"]["arch"]),
            lambda: sft_block(config["sft"], config["seed"], world["train"]["n"]),
        ):
            try:
                check()
            except ValueError as err:
                messages.append(_keyed(str(err)))
    return messages


def mirror_error(config_value: str | None) -> str | None:
    """Why the benchmark mirror ($RREDCOT_MIRROR, else `data.mirror`) cannot be read; None when
    none is configured (only the Hub is read) or it is a directory.

    A configured mirror that is missing would otherwise be noticed inside a job, after minutes of
    trying the Hub, or not at all where the Hub answers.
    """
    from rredcot.data.registry import MIRROR_ENV, mirror_dir

    mirror = mirror_dir(config_value)
    if mirror is None or mirror.is_dir():
        return None
    fix = "point it at the benchmark mirror (a directory of <dataset>.jsonl files)"
    if os.environ.get(MIRROR_ENV, "").strip():
        return (
            f"environment variable {MIRROR_ENV}: {os.environ[MIRROR_ENV]!r} ({mirror}) is not a "
            f"directory; {fix} or unset it (then the config key 'data.mirror' is used)"
        )
    return (
        f"config key 'data.mirror': {config_value!r} ({mirror}; a relative path starts from the "
        f"working directory) is not a directory; {fix} or set it to null to read the Hub"
    )


RESOURCES_ENV = "RREDCOT_RESOURCES"


def resource_overrides(
    env: Mapping[str, str] = os.environ, schema: Mapping[str, Any] | None = None
) -> dict[str, dict[str, Any]]:
    """Per-rule resources from $RREDCOT_RESOURCES (YAML in the shape of config `resources`),
    which override the config's (a cluster's limits without editing the config); {} when
    unset. A malformed value is a ConfigError naming the variable."""
    text = env.get(RESOURCES_ENV, "").strip()
    if not text:
        return {}
    try:
        values = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"environment variable {RESOURCES_ENV}: not YAML ({err})") from None
    schema = load_schema() if schema is None else schema
    entry = schema["definitions"]["resources"]
    found = Draft202012Validator({"type": "object", "additionalProperties": entry}).iter_errors(
        values
    )
    errors = [_describe(e, RESOURCES_ENV) for e in sorted(found, key=lambda e: str(e.path))]
    if errors:
        raise ConfigError(f"environment variable {RESOURCES_ENV}: " + "; ".join(errors))
    return values


def model_path_error(name_or_path: str | None) -> str | None:
    """Why `model.name_or_path` cannot be used when it names a local path (no checkpoint there);
    None for null (the tiny model), a Hub id, or a checkpoint directory."""
    from rredcot.models.paths import looks_like_path

    if name_or_path is None or not looks_like_path(name_or_path):
        return None
    path = Path(name_or_path).expanduser()
    if (path / "config.json").is_file():
        return None
    what = "holds no config.json" if path.is_dir() else "does not exist"
    return (
        f"config key 'model.name_or_path': local path {name_or_path!r} ({path.absolute()}) "
        f"{what}; give a checkpoint directory, a Hub id (owner/name, pinned by model.revision) "
        "or null (the tiny model)"
    )


def load_config(path: str | Path, schema_path: str | Path = SCHEMA_PATH) -> dict[str, Any]:
    """Read a YAML config file and validate it (for step scripts run by hand)."""
    with open(path) as fh:
        config = yaml.safe_load(fh) or {}
    return validate_config(config, load_schema(schema_path))
