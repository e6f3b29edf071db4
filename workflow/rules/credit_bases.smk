# The main attribution rows pooled over SFT bases (rredcot.workflow.base_inputs): when the doses
# vary the global `seed`, each dose is another SFT base of one world, and this rule pools every
# base's placebo and baseline comparisons into results/credit_bases.csv (per base, then over
# bases and seeds). A dose of any other key gets no such table (its levels are treatments).

from rredcot.workflow import base_inputs
from rredcot.workflow.base_inputs import BASES_FIGURE, BASES_TABLE

# The table and figure `rule all` asks for (none unless the doses are bases).
CREDIT_BASES_TARGETS = base_inputs.credit_bases_targets(config)

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
