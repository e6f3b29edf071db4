"""The checks every config block's settings class runs on the mapping it is built from
(`from_dict`): unknown keys and names outside a field's choices, each refused naming the config
key. The lowest layer of the package (no rredcot imports), so that the settings classes and the
config check (`rredcot.config`), which imports them, share it without an import cycle."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any


def check_choices(block: str, settings: object, choices: Mapping[str, Collection[Any]]) -> None:
    """Refuse a field of `settings` whose value is not among its allowed names, naming the
    config key (`block`.field) and the names it may take."""
    for name, allowed in choices.items():
        value = getattr(settings, name)
        if value not in allowed:
            raise ValueError(
                f"{block}.{name}: {value!r} is not allowed; choose one of {list(allowed)}"
            )


def check_known_keys(block: str, cls: type, mapping: Mapping[str, Any]) -> None:
    """Refuse keys of `mapping` that are not fields of the dataclass `cls`, naming the config
    block and every field it allows (the one check of every settings class's `from_dict`)."""
    allowed = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(mapping) - set(allowed))
    if unknown:
        raise ValueError(f"unknown {block} key(s) {unknown}; allowed: {allowed}")
