"""Configs for the tests of rredcot.workflow, built as the Snakefile gets them: config.yaml with
configs/<name>.yaml files and then `over` merged over it the way `--configfile` merges, then
validated with the schema's defaults filled in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from snakemake.utils import update_config

from rredcot.config import load_schema, validate_config

REPO = Path(__file__).resolve().parents[2]
SCHEMA = load_schema(REPO / "workflow" / "schemas" / "config.schema.yaml")


def workflow_config(*names: str, over: dict[str, Any] | None = None) -> dict[str, Any]:
    """config.yaml, then configs/<name>.yaml for each name, then `over`; validated."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    for name in names:
        update_config(config, yaml.safe_load((REPO / "configs" / f"{name}.yaml").read_text()))
    update_config(config, over or {})
    validate_config(config, SCHEMA)
    return config
