"""Values as shell words for the rules' commands."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import Any


def arg(value: Any) -> str:
    """A config value as one shell-quoted JSON argument for a step script (keys sorted, so the
    same settings always make the same command and Snakemake reruns nothing)."""
    return shlex.quote(json.dumps(value, sort_keys=True))


def command(argv: Sequence[str]) -> str:
    """An argument vector as one shell command line."""
    return " ".join(shlex.quote(a) for a in argv)
