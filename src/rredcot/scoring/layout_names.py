"""The scoring layouts' names, without torch: `RREDCoTConfig.layout` (built by the workflow's
config check) takes one of them, and `rredcot.scoring.layout` runs them."""

from __future__ import annotations

LAYOUTS: tuple[str, ...] = ("shared", "packed", "split")
