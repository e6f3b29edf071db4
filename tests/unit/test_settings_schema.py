"""The settings classes and the config schema say the same thing about every field they share:
its default, the names it may take and its numeric range (issue: settings declared twice had
drifted). A new field must be declared in both, or be listed here as one side's own."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest

from rredcot.config import load_schema
from rredcot.credit.advantages import CreditConfig
from rredcot.credit.bayes import OPPOConfig
from rredcot.credit.mc import MCConfig
from rredcot.credit.rredcot import RREDCoTConfig
from rredcot.credit.segmentation import SegmentationConfig
from rredcot.data.misconceptions import Misconception
from rredcot.models.sft_settings import SFTSettings
from rredcot.training.lora import LoraSettings
from rredcot.training.reset_config import ResetConfig
from rredcot.training.settings import TrainingSettings
from rredcot.workflow.run_params import NOT_RUN_SETTINGS

# config block -> (settings class, keys only the schema has, fields only the class has)
PAIRS: dict[str, tuple[type, set[str], set[str]]] = {
    "training": (
        TrainingSettings,
        set(NOT_RUN_SETTINGS) - {"mc"},  # what a run does not read (`run_settings` drops them)
        # per run; misconception: sft.misconception, for the methods that read it
        {"method", "seed", "task", "reference_column", "segmentation", "rredcot", "misconception"},
    ),
    "segmentation": (SegmentationConfig, set(), set()),
    "training.credit": (CreditConfig, set(), set()),
    "estimator.rredcot": (RREDCoTConfig, set(), set()),
    "estimator.mc": (MCConfig, set(), set()),
    "training.resets": (ResetConfig, set(), set()),
    "training.oppo": (OPPOConfig, set(), set()),
    "training.lora": (LoraSettings, set(), set()),
    # the demonstrations' errors and the held-out split are the SFT step's, not the trainer's;
    # the seed is the config's global one
    "sft": (SFTSettings, {"slip_rate", "misconception", "heldout_problems"}, {"seed"}),
    "sft.misconception": (Misconception, set(), set()),
}


def _block(schema: dict[str, Any], key: str) -> dict[str, Any]:
    block: dict[str, Any] = schema
    for part in key.split("."):
        block = block["properties"][part]
    return block


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=list))


REQUIRED: dict[type, dict[str, Any]] = {
    LoraSettings: {"r": 8, "alpha": 16.0},
    # the anneal (400 steps by default) must be shorter than the run: none, so max_steps may be 1
    SFTSettings: {"anneal_steps": None},
    # a warm-up needs a schedule that has one; rule_share needs the world's misconception
    TrainingSettings: {
        "lr_scheduler": "linear",
        "misconception": {"rule": "smaller_from_larger", "rate": 0.8},
    },
}
"""Values for a class's fields without a default (or that a cross-field rule needs), so that
one field at a time can be tried."""


def _builds(cls: type, name: str, value: Any) -> bool:
    try:
        cls(**{**REQUIRED.get(cls, {}), name: value})
    except ValueError:
        return False
    return True


@pytest.fixture(scope="module")
def schema(repo):
    return load_schema(repo / "workflow" / "schemas" / "config.schema.yaml")


@pytest.mark.parametrize("key", list(PAIRS))
def test_the_class_and_the_schema_have_the_same_fields(schema, key):
    cls, schema_only, class_only = PAIRS[key]
    props = set(_block(schema, key)["properties"])
    fields = {f.name for f in dataclasses.fields(cls)}
    assert props - fields == schema_only, "schema keys no settings class reads"
    assert fields - props == class_only, "settings no config key sets"


@pytest.mark.parametrize("key", list(PAIRS))
def test_the_class_and_the_schema_have_the_same_defaults(schema, key):
    cls, _, _ = PAIRS[key]
    props = _block(schema, key)["properties"]
    for f in dataclasses.fields(cls):
        value = _default(f)
        if f.name not in props or value is dataclasses.MISSING or dataclasses.is_dataclass(value):
            continue  # a required field, or a nested block (its own pair)
        assert "default" in props[f.name], f"{key}.{f.name}: the schema has no default"
        assert _json(value) == _json(props[f.name]["default"]), f"{key}.{f.name}"


@pytest.mark.parametrize("key", list(PAIRS))
def test_the_class_takes_exactly_the_schemas_choices(schema, key):
    """Every name the schema allows builds the class; a name outside the list is refused."""
    cls, _, _ = PAIRS[key]
    props = _block(schema, key)["properties"]
    fields = {f.name for f in dataclasses.fields(cls)}
    for name in sorted(fields & set(props)):
        choices = props[name].get("enum")
        if not choices:
            continue
        for value in choices:
            assert _builds(cls, name, value), f"{key}.{name}: the class refuses {value!r}"
        assert not _builds(cls, name, "no_such_choice"), f"{key}.{name}: accepts any name"


@pytest.mark.parametrize("key", list(PAIRS))
def test_the_class_and_the_schema_have_the_same_numeric_bounds(schema, key):
    """At each bound the schema states, the class accepts the values the schema accepts."""
    cls, _, _ = PAIRS[key]
    props = _block(schema, key)["properties"]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in sorted(set(fields) & set(props)):
        p = props[name]
        types = p.get("type") if isinstance(p.get("type"), list) else [p.get("type")]
        step = 1 if "integer" in types else 1e-9
        for bound, inside in (("minimum", True), ("exclusiveMinimum", False)):
            if bound in p:
                v = p[bound]
                assert _builds(cls, name, v) is inside, f"{key}.{name} = {v} ({bound})"
                assert not _builds(cls, name, v - step), f"{key}.{name} = {v - step}"
        for bound, inside in (("maximum", True), ("exclusiveMaximum", False)):
            if bound in p and math.isfinite(p[bound]):
                v = p[bound]
                assert _builds(cls, name, v) is inside, f"{key}.{name} = {v} ({bound})"
                assert not _builds(cls, name, v + step), f"{key}.{name} = {v + step}"
