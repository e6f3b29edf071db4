# The attribution rows across the doses (rredcot.workflow.base_inputs). When the doses vary the
# global `seed`, each dose is another SFT base of one world, and `credit_bases` pools every base's
# placebo and baseline comparisons into results/credit_bases.csv (per base, then over bases and
# seeds). When they vary any other key (a treatment) and every level trains placebo arms,
# `credit_contrasts` sets each level's comparisons side by side per stratum and contrasts each
# later level with the first, paired over seeds: results/credit_contrasts.csv.

from rredcot.workflow import base_inputs
from rredcot.workflow.base_inputs import (
    BASES_FIGURE,
    BASES_TABLE,
    CONTRASTS_FIGURE,
    CONTRASTS_TABLE,
)

# The tables and figures `rule all` asks for (none unless the doses are bases or treatments with
# placebo arms).
CREDIT_BASES_TARGETS = base_inputs.credit_bases_targets(config)
CREDIT_CONTRASTS_TARGETS = base_inputs.credit_contrasts_targets(config, DOSES)

if CREDIT_BASES_TARGETS:
    base_inputs.check_bases(DOSES)

    rule credit_bases:
        input:
            unpack(lambda wildcards: base_inputs.credit_bases_inputs(DOSES)),
        output:
            table=report(
                BASES_TABLE,
                caption="../report/credit_bases.rst",
                category="Dose-response",
            ),
            figure=report(
                BASES_FIGURE,
                caption="../report/credit_bases.rst",
                category="Dose-response",
            ),
        log:
            "results/logs/credit_bases.log",
        benchmark:
            "results/benchmarks/credit_bases.tsv"
        conda:
            CONDA_ENV
        threads: res("credit_bases", "cpus_per_task")
        resources:
            mem_mb=res("credit_bases", "mem_mb"),
            runtime=res("credit_bases", "runtime"),
        params:
            settings=arg(base_inputs.credit_bases_settings(config, DOSES)),
            files=lambda wildcards, input: base_inputs.credit_bases_args(input, DOSES),
        shell:
            "python -m rredcot.steps.credit_bases {params.files} --params {params.settings} "
            "--table {output.table} --figure {output.figure} > {log} 2>&1"


if CREDIT_CONTRASTS_TARGETS:
    base_inputs.check_bases(DOSES)

    rule credit_contrasts:
        input:
            unpack(lambda wildcards: base_inputs.credit_bases_inputs(DOSES)),
        output:
            table=report(
                CONTRASTS_TABLE,
                caption="../report/credit_contrasts.rst",
                category="Dose-response",
            ),
            figure=report(
                CONTRASTS_FIGURE,
                caption="../report/credit_contrasts.rst",
                category="Dose-response",
            ),
        log:
            "results/logs/credit_contrasts.log",
        benchmark:
            "results/benchmarks/credit_contrasts.tsv"
        conda:
            CONDA_ENV
        threads: res("credit_contrasts", "cpus_per_task")
        resources:
            mem_mb=res("credit_contrasts", "mem_mb"),
            runtime=res("credit_contrasts", "runtime"),
        params:
            settings=arg(base_inputs.credit_contrasts_settings(config, DOSES)),
            files=lambda wildcards, input: base_inputs.credit_bases_args(input, DOSES),
        shell:
            "python -m rredcot.steps.credit_contrasts {params.files} --params {params.settings} "
            "--table {output.table} --figure {output.figure} > {log} 2>&1"
