"""The config files given on the command line, checked for a target that `--configfile` took.

`--configfile` reads every word after it as a config file, so a target written after it
(`snakemake --configfile configs/smoke.yaml results/answer_now_rule.json`) is loaded as config,
its keys merged over the workflow's, and never built. Snakemake stops by itself when such a
path is missing or holds no mapping; one that parses as a mapping (a JSON result) gets as far as
the Snakefile, which stops on the error this module names.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


def swallowed_target_error(configfiles: Iterable[str | Path], workdir: str | Path) -> str | None:
    """Why the first config file that looks like a target is one (a path under `results/`, or
    not a .yaml, .yml or .json file), with the two fixes; None when every file looks like config.
    """
    root = Path(workdir).resolve()
    results = root / "results"
    for raw in configfiles:
        resolved = (root / raw).resolve()
        under_results = resolved == results or results in resolved.parents
        if under_results or resolved.suffix.lower() not in CONFIG_SUFFIXES:
            shown = resolved.relative_to(root) if root in resolved.parents else resolved
            why = "lies under results/" if under_results else "is no .yaml, .yml or .json file"
            return (
                f"--configfile '{shown}' {why}: it looks like a target that --configfile took "
                "as a config file (it reads every word after it). Put the targets before "
                f"--configfile, or end its list with --: snakemake --configfile FILE -- {shown}"
            )
    return None
