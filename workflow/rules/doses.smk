# A dose-response (config key `doses`): the workflow once per level of one config key, each a
# Snakemake module of this Snakefile whose paths use its own directory
# (results/credit_regimes/<name><level>/) in place of results/, then the dose-response table.
# Rules of a dose are named after it (rate0p6_train_policy, ...). Each dose generates its own
# copy of the world (seconds); when the doses share the world's settings, the table's rule
# checks that the copies are identical files. The doses and the table's inputs:
# workflow/rules/dose_inputs.smk.

for _dose in DOSES:
    dose_module = _dose.module
    dose_ = f"{_dose.module}_"

    module:
        name: dose_module
        snakefile:
            workflow.main_snakefile
        config:
            _dose.config
        replace_prefix:
            {"results/": _dose.root}

    use rule * from dose_module as dose_*


rule credit_regimes:
    input:
        unpack(credit_regime_inputs),
    output:
        table=report(
            DOSE_TABLE,
            caption="../report/credit_regimes.rst",
            category="Dose-response",
        ),
        figure=report(
            DOSE_FIGURE,
            caption="../report/credit_regimes.rst",
            category="Dose-response",
        ),
    log:
        "results/logs/credit_regimes.log",
    benchmark:
        "results/benchmarks/credit_regimes.tsv"
    conda:
        CONDA_ENV
    threads: res("credit_regimes", "cpus_per_task")
    resources:
        mem_mb=res("credit_regimes", "mem_mb"),
        runtime=res("credit_regimes", "runtime"),
    params:
        settings=arg(
            {
                "key": config["doses"]["key"],
                "levels": [d.level for d in DOSES],
                "regime": builds_regime_table(),
                "world_tables": shared_world_tables(),
                "mde_target": config["doses"]["mde_target"],
                "reference": BASELINE,
            }
        ),
        roots=" ".join(shlex.quote(d.root) for d in DOSES),
    shell:
        "python -m rredcot.steps.credit_regimes --roots {params.roots} "
        "--params {params.settings} --table {output.table} --figure {output.figure} > {log} 2>&1"
