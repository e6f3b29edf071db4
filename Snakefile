# rredcot: RREDCoT (arXiv:2606.06475) with RRPO/SRPO baselines (arXiv:2605.25507), end to end.
# Table of contents: data -> base model -> references -> estimator studies -> RL training ->
# evaluation -> tables. See results/README.md for the artifacts.


from pathlib import Path

from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


# An overlay names the config it goes over: `rehearses` (a CPU rehearsal of a paper config,
# configs/rehearsal.yaml) or `extends` (a config built on another, configs/credit_regimes.yaml).
# That config goes between config.yaml and the command line's config files, which stay on top.
_over = [key for key in ("rehearses", "extends") if config.get(key)]
if len(_over) > 1:
    raise ValueError(
        "config keys 'rehearses' and 'extends': set one; each names the config the overlay "
        "goes over"
    )
if _over:
    _key = _over[0]
    _under = Path(workflow.basedir) / config[_key]
    _default = Path(workflow.basedir, "config.yaml").resolve()
    if any(Path(f).resolve() == _default for f in workflow.overwrite_configfiles):
        raise ValueError(
            f"config key '{_key}': leave config.yaml off the command line; it is read "
            "first, and given again it would override the config named here"
        )
    if not _under.is_file():
        raise ValueError(
            f"config key '{_key}': {config[_key]!r} is not a config file of the "
            f"repository (paths start from {workflow.basedir})"
        )

    configfile: str(_under)


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"


# `doses`: the whole workflow once per dose, each in a directory of its own, then the
# dose-response table (workflow/rules/doses.smk) and, when the doses are SFT bases (a dose of the
# global seed), the table pooled over them, or when they are treatments with placebo arms, the
# contrasts between them (workflow/rules/dose_attribution.smk); else the workflow.
if config["doses"]:

    include: "workflow/rules/dose_inputs.smk"
    include: "workflow/rules/doses.smk"
    include: "workflow/rules/dose_attribution.smk"

    rule all:
        default_target: True
        input:
            dose_targets(),
            CREDIT_BASES_TARGETS,
            CREDIT_CONTRASTS_TARGETS,

else:

    include: "workflow/rules/data.smk"
    include: "workflow/rules/models.smk"
    include: "workflow/rules/references.smk"
    include: "workflow/rules/studies.smk"
    include: "workflow/rules/training.smk"
    include: "workflow/rules/evaluation.smk"
    include: "workflow/rules/tables.smk"
    include: "workflow/rules/timing.smk"

    # A dose of a dose-response runs these rules under its own names and directory: the
    # plain workflow checks their benchmark paths and prices a run.
    if not IN_DOSE:
        # Every benchmark file names its rule, so a snapshot's job times can price a later run.
        check_benchmark_paths(benchmark_patterns())

        # Before the first job (never on a dry run): the run's expected time on this machine.
        onstart:
            log_expected_time()

    rule all:
        default_target: True
        input:
            all_targets(),
