# rredcot: RREDCoT (arXiv:2606.06475) with RRPO/SRPO baselines (arXiv:2605.25507), end to end.
# Table of contents: data -> base model -> references -> estimator studies -> RL training ->
# evaluation -> tables. See results/README.md for the artifacts.


from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


# A rehearsal overlay (configs/rehearsal.yaml) names the config it rehearses: that config goes
# between config.yaml and the command line's config files, which stay on top.
if config.get("rehearses"):
    _rehearsed = Path(workflow.basedir) / config["rehearses"]
    _default = Path(workflow.basedir, "config.yaml").resolve()
    if any(Path(f).resolve() == _default for f in workflow.overwrite_configfiles):
        raise ValueError(
            "config key 'rehearses': leave config.yaml off the command line; it is read "
            "first, and given again it would override the rehearsed config"
        )
    if not _rehearsed.is_file():
        raise ValueError(
            f"config key 'rehearses': {config['rehearses']!r} is not a config file of the "
            f"repository (paths start from {workflow.basedir})"
        )

    configfile: str(_rehearsed)


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/references.smk"
include: "workflow/rules/studies.smk"
include: "workflow/rules/training.smk"
include: "workflow/rules/evaluation.smk"
include: "workflow/rules/tables.smk"


# Every benchmark file names its rule, so a snapshot's job times can price a later run.
check_benchmark_paths(benchmark_patterns())


# Before the first job (never on a dry run): the run's expected time on this machine.
onstart:
    log_expected_time()


rule all:
    default_target: True
    input:
        all_targets(),
