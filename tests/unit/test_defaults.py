"""One default per setting: the settings classes' defaults are config.yaml's values (the frozen,
documented choice) and the schema's `default:`s."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rredcot.config import load_schema
from rredcot.credit.attribution import AttributionConfig
from rredcot.credit.bayes import OPPOConfig
from rredcot.credit.credit_config import CreditConfig
from rredcot.credit.mc import MCConfig
from rredcot.credit.rredcot_config import RREDCoTConfig
from rredcot.data.misconceptions import Misconception
from rredcot.data.world import WorldConfig
from rredcot.models.sft_settings import SFTSettings
from rredcot.segmentation import SegmentationConfig
from rredcot.training.lora import LoraSettings
from rredcot.training.methods.base import MethodSettings
from rredcot.training.methods.resets import ResetConfig
from rredcot.training.settings import TrainingSettings

REPO = Path(__file__).resolve().parents[2]

BLOCKS: list[tuple[str, type]] = [
    ("training", TrainingSettings),
    ("training", MethodSettings),
    ("training.credit", CreditConfig),
    ("training.resets", ResetConfig),
    ("training.oppo", OPPOConfig),
    ("training.lora", LoraSettings),
    ("segmentation", SegmentationConfig),
    ("estimator.rredcot", RREDCoTConfig),
    ("estimator.mc", MCConfig),
    ("estimator.attribution", AttributionConfig),
    ("sft", SFTSettings),
    ("sft.misconception", Misconception),
    ("world", WorldConfig),
]
"""Every config block a settings class reads (`training.mc` is not one: it overrides
estimator.mc for the mc runs)."""


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=list))


def _at(tree: dict[str, Any] | None, key: str) -> Any:
    for part in key.split("."):
        tree = (tree or {}).get(part)
    return tree


def _defaults(cls: type) -> Iterator[tuple[str, Any]]:
    """(field, default) of the fields of `cls` with a default that is no nested block."""
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            continue
        if not dataclasses.is_dataclass(value):
            yield f.name, value


@pytest.mark.parametrize(("key", "cls"), BLOCKS, ids=lambda v: getattr(v, "__name__", v))
def test_the_class_defaults_are_config_yamls_values_and_the_schemas(key: str, cls: type) -> None:
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    block = _at(config, key) or {}  # training.lora is null in config.yaml: the class alone
    schema: dict[str, Any] = load_schema()
    for part in key.split("."):
        schema = schema["properties"][part]
    properties = schema["properties"]
    drifted = []
    for name, default in _defaults(cls):
        want = block.get(name, default)
        if isinstance(want, dict):
            continue  # a nested block (MethodSettings.resets: None), checked as its own
        if _json(default) != _json(want):
            drifted.append(f"{key}.{name}: {cls.__name__} {default!r}, config.yaml {want!r}")
        stated = properties.get(name, {}).get("default", want)
        if _json(stated) != _json(want):
            drifted.append(f"{key}.{name}: schema default {stated!r}, config.yaml {want!r}")
    assert not drifted, "\n".join(drifted)
