"""rredcot: segment-level reward redistribution (RREDCoT) and reset baselines (RRPO/SRPO).

The subpackages are layers: data, tasks, models, generation, scoring, credit (segmentation and
references included), training, studies, evaluation and reporting hold the science; `planning`
what a run needs of the machine (memory, vLLM context, expected time); `workflow` the Snakefile's
Python; `steps` one thin CLI per Snakemake rule. The root holds only the public TRL API (`trl`),
the config check (`config`), the GPU slot allocator every GPU job runs through (`devices`) and
two helpers of the lowest layer (`lazy_exports`, `block_checks`); tests/unit/test_import_graph.py
holds that, and that no modules import each other in a cycle.

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
