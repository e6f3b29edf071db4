"""RL training: TRL's GRPOTrainer subclassed once (`CreditGRPOTrainer`), methods as strategies.

    from rredcot.training import TrainingSettings, train_policy
    settings = TrainingSettings.from_dict({"method": "rredcot", "seed": 0, "max_steps": 50})
    train_policy(model, tokenizer, train_table, settings, "results/training/rredcot/0")

`rredcot.training.methods` holds one short file per method (grpo, rredcot, mc);
`rredcot.credit.advantages` the pure credit → advantage functions they share.

The names below load on first use (PEP 562, `rredcot.lazy_exports`): the Snakefile imports
the light submodules (`launch`, `curve_settings`) while it builds the DAG, and importing torch,
transformers and TRL with them would cost every `snakemake` invocation, a dry run included,
about 6 CPU seconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rredcot.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from rredcot.training.methods import (
        METHODS,
        Method,
        MethodOutput,
        RolloutBatch,
        build_method,
    )
    from rredcot.training.metrics_csv import CSV_COLUMNS
    from rredcot.training.run import build_trainer, train_policy, training_rows
    from rredcot.training.run_dir import resume_point
    from rredcot.training.settings import TrainingSettings
    from rredcot.training.trainer import (
        CreditGRPOTrainer,
        NonFiniteLossError,
        correctness_reward,
    )
    from rredcot.training.trl_config import grpo_config

_HOME = {
    "METHODS": "methods",
    "Method": "methods",
    "MethodOutput": "methods",
    "RolloutBatch": "methods",
    "build_method": "methods",
    "CSV_COLUMNS": "metrics_csv",
    "TrainingSettings": "settings",
    "build_trainer": "run",
    "grpo_config": "trl_config",
    "resume_point": "run_dir",
    "train_policy": "run",
    "training_rows": "run",
    "CreditGRPOTrainer": "trainer",
    "NonFiniteLossError": "trainer",
    "correctness_reward": "trainer",
}
"""Each exported name and the submodule that defines it."""

__all__ = [
    "CSV_COLUMNS",
    "METHODS",
    "CreditGRPOTrainer",
    "Method",
    "MethodOutput",
    "NonFiniteLossError",
    "RolloutBatch",
    "TrainingSettings",
    "build_method",
    "build_trainer",
    "correctness_reward",
    "grpo_config",
    "resume_point",
    "train_policy",
    "training_rows",
]

__getattr__, __dir__ = lazy_exports(globals(), _HOME)
