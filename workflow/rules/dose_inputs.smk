# The doses of a dose-response (config key `doses`; rredcot.workflow.dose_response) and the input
# functions and targets of its table (rredcot.workflow.dose_inputs), for workflow/rules/doses.smk,
# which loads the workflow once per dose.

from rredcot.workflow.dose_response import DOSE_FIGURE, DOSE_TABLE, dose_configs
from rredcot.workflow import dose_inputs

DOSES = dose_configs(config, CONFIG_SCHEMA)


def builds_regime_table() -> bool:
    """Whether every dose's workflow builds its regime table (REGIME_TABLE among its module's
    targets), which the dose-response then reads. A module's namespace has no public API:
    `workflow.globals[<module name>]` is Snakemake's own."""
    return all(REGIME_TABLE in workflow.globals[d.module].all_targets() for d in DOSES)


def shared_world_tables() -> list[str]:
    return dose_inputs.shared_world_tables(config, DOSES)


def credit_regime_inputs(wildcards) -> dict[str, list[str]]:
    return dose_inputs.credit_regime_inputs(config, DOSES, builds_regime_table())


def dose_targets() -> list[str]:
    return dose_inputs.dose_targets(DOSES)
