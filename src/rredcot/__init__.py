"""rredcot: segment-level reward redistribution (RREDCoT) and reset baselines (RRPO/SRPO).

Library modules hold the science; `rredcot.steps` holds one thin CLI per Snakemake rule.
"""

__version__ = "0.1.0"
