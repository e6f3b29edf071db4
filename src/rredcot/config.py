"""Config validation with messages that name the bad key and what is allowed.

The Snakefile validates `config` against `workflow/schemas/config.schema.yaml` before any rule
is built. jsonschema's raw errors are hard to read ("Failed validating 'enum' in
schema['properties']..."), so this module reports every error as
`config key 'evaluation.temperature': -1 is less than the minimum 0`.
Step scripts reuse the same check when run without Snakemake.
"""

from __future__ import annotations

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
    return yaml.safe_load(yaml.safe_dump(value))


def load_schema(path: str | Path = SCHEMA_PATH) -> dict[str, Any]:
    with open(path) as fh:
        return yaml.safe_load(fh)


def _describe(error: ValidationError) -> str:
    key = ".".join(str(p) for p in error.absolute_path) or "<top level>"
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if error.validator == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extra = (
            sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
        )
        where = key if key != "<top level>" else "the top level"
        return f"unknown config key(s) {extra} under {where}; allowed: {allowed}"
    if error.validator == "enum":
        choices = error.validator_value
        return f"config key '{key}': {error.instance!r} is not allowed; choose one of {choices}"
    if error.validator == "required":
        return f"config key '{key}': {error.message}"
    hint = f" ({schema['description']})" if "description" in schema else ""
    return f"config key '{key}': {error.message}{hint}"


def validate_config(
    config: dict[str, Any], schema: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Check `config` against the schema, fill defaults in place, raise ConfigError on any error."""
    schema = load_schema() if schema is None else schema
    validator = _with_defaults(Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = "\n  - ".join(_describe(e) for e in errors)
        raise ConfigError(f"invalid config ({len(errors)} error(s)):\n  - {lines}")
    return config


def load_config(path: str | Path, schema_path: str | Path = SCHEMA_PATH) -> dict[str, Any]:
    """Read a YAML config file and validate it (for step scripts run by hand)."""
    with open(path) as fh:
        config = yaml.safe_load(fh) or {}
    return validate_config(config, load_schema(schema_path))
