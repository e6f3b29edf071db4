"""The workflow's Python: what the Snakefile's rules compute from the config (targets, run lists,
each run's settings, input paths, parse-time checks), as functions of the config so that they
are tested apart from Snakemake.

Every function takes the config explicitly: the validated dict with its defaults filled in
(`rredcot.config.validate_config`). workflow/rules/common.smk binds them to the workflow's
`config`; only what needs Snakemake's own objects (`rules`, `workflow`) stays in the .smk files,
as thin wrappers over these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Config = Mapping[str, Any]
"""A validated config, defaults filled in."""
