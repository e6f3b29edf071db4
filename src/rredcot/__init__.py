"""rredcot: segment-level reward redistribution (RREDCoT) and reset baselines (RRPO/SRPO).

Library modules hold the science; `rredcot.steps` holds one thin CLI per Snakemake rule.
For a TRL script: `from rredcot import RREDCoTConfig, RREDCoTTrainer` (`rredcot.trl`,
docs/trl.md). Those names load on first use (PEP 562), so importing the package stays light
(no torch, no TRL) for the Snakefile and the torch-free modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rredcot.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from rredcot.trl import RREDCoTConfig as RREDCoTConfig
    from rredcot.trl import RREDCoTTrainer as RREDCoTTrainer
    from rredcot.trl import TaskSpec as TaskSpec

__version__ = "0.1.0"

_PUBLIC = ("RREDCoTConfig", "RREDCoTTrainer", "TaskSpec")
"""Names of `rredcot.trl` exported here, imported when first read."""

__all__ = [*_PUBLIC, "__version__"]

__getattr__, __dir__ = lazy_exports(globals(), dict.fromkeys(_PUBLIC, "trl"))
