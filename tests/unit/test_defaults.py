"""One default per setting: the settings classes' defaults are config.yaml's values (the frozen,
documented choice) and the schema's `default:`s, and no config under configs/ restates a value
of the config it goes over without a comment saying why (a restatement would hide a later change
of the default from that config's runs)."""

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
from rredcot.credit.segmentation import SegmentationConfig
from rredcot.data.misconceptions import Misconception
from rredcot.data.world import WorldConfig
from rredcot.models.sft_settings import SFTSettings
from rredcot.training.lora import LoraSettings
from rredcot.training.reset_config import ResetConfig
from rredcot.training.settings import TrainingSettings

REPO = Path(__file__).resolve().parents[2]

BLOCKS: list[tuple[str, type]] = [
    ("training", TrainingSettings),
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
            continue  # a nested block, checked as its own
        if _json(default) != _json(want):
            drifted.append(f"{key}.{name}: {cls.__name__} {default!r}, config.yaml {want!r}")
        stated = properties.get(name, {}).get("default", want)
        if _json(stated) != _json(want):
            drifted.append(f"{key}.{name}: schema default {stated!r}, config.yaml {want!r}")
    assert not drifted, "\n".join(drifted)


def _leaves(
    node: yaml.MappingNode, path: tuple[str, ...] = (), lines: tuple[int, ...] = ()
) -> Iterator[tuple[tuple[str, ...], tuple[int, ...]]]:
    """(key path, lines) of every leaf of a composed YAML mapping (a list is a leaf): the key's
    line and the first line of each flow mapping (`{...}`) it sits in."""
    if node.flow_style:
        lines = (*lines, node.start_mark.line)
    for key, value in node.value:
        here = (*path, key.value)
        if isinstance(value, yaml.MappingNode) and value.value:
            yield from _leaves(value, here, lines)
        else:
            yield here, (key.start_mark.line, *lines)


def _commented(text: list[str], lines: tuple[int, ...]) -> bool:
    """A comment says why: on the key's line or its flow mapping's first line, or in the
    comment lines right above one of them."""
    for line in lines:
        if "#" in text[line] or (line and text[line - 1].lstrip().startswith("#")):
            return True
    return False


def _base(overlay: dict[str, Any]) -> dict[str, Any]:
    """config.yaml, with the config an overlay names (`rehearses`, `extends`) merged over it."""
    from snakemake.utils import update_config

    base = yaml.safe_load((REPO / "config.yaml").read_text())
    for key in ("rehearses", "extends"):
        if overlay.get(key):
            update_config(base, yaml.safe_load((REPO / overlay[key]).read_text()))
    return base


CONFIGS = sorted((REPO / "configs").glob("*.yaml"))
DOCUMENTED = {"paper_qwen3_4b", "paper_r1_distill_1p5b"}
"""Paper configs state their whole protocol: docs/paper_settings.md gives every value its source
and why (tests/unit/test_paper_settings.py), which says why a value equal to config.yaml's is
pinned there."""


STANDALONE = {"smoke"}
"""Read on its own: the integration tests run it from scratch directories, where the Snakefile's
`configfile: "config.yaml"` (resolved against the working directory) finds no config.yaml, so it
states every value its DAG depends on."""


@pytest.mark.parametrize(
    "path", [p for p in CONFIGS if p.stem not in DOCUMENTED | STANDALONE], ids=lambda p: p.stem
)
def test_a_config_pins_only_what_differs_from_the_config_it_goes_over(path: Path) -> None:
    text = path.read_text()
    overlay, text_lines = yaml.safe_load(text), text.splitlines()
    base = _base(overlay)
    missing = object()
    restated = []
    for keys, lines in _leaves(yaml.compose(text)):
        value, under = overlay, base
        for k in keys:
            value = value[k]
            under = under.get(k, missing) if isinstance(under, dict) else missing
        if (
            under is not missing
            and _json(under) == _json(value)
            and not _commented(text_lines, lines)
        ):
            restated.append(f"{'.'.join(keys)}: {value!r} (line {lines[0] + 1})")
    assert not restated, f"{path.name} restates without a comment:\n" + "\n".join(restated)


def test_method_settings_are_the_training_settings_fields() -> None:
    """`MethodSettings` is generated from `TrainingSettings`: each of its fields has the run's
    type and default, so the two cannot drift."""
    from rredcot.training.method_settings import METHOD_FIELDS, MethodSettings

    run, method = TrainingSettings(), MethodSettings()
    assert [f.name for f in dataclasses.fields(MethodSettings)] == list(METHOD_FIELDS)
    declared = {f.name: f.type for f in dataclasses.fields(TrainingSettings)}
    for f in dataclasses.fields(MethodSettings):
        assert f.type == declared[f.name], f.name
        assert getattr(method, f.name) == getattr(run, f.name), f.name
    with pytest.raises(dataclasses.FrozenInstanceError):
        method.reference = "own_path"  # type: ignore[misc]
