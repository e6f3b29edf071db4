# Tables: one CSV per benchmark with a row per method (mean over seeds, bootstrap CI), the
# paired comparisons, and results/SUMMARY.md, the run's headline from them.


rule benchmark_table:
    input:
        grades=table_grades,
        problems=benchmark_data,
    output:
        table=report(
            "results/{benchmark}_table.csv",
            caption="../report/benchmark_table.rst",
            category="Benchmarks",
        ),
    log:
        "results/logs/benchmark_table/{benchmark}.log",
    benchmark:
        "results/benchmarks/benchmark_table/{benchmark}.tsv"
    wildcard_constraints:
        benchmark="|".join([*WORLD_SPLITS, *KNOWN_BENCHMARKS]),
    conda:
        CONDA_ENV
    threads: res("benchmark_table", "cpus_per_task")
    resources:
        mem_mb=res("benchmark_table", "mem_mb"),
        runtime=res("benchmark_table", "runtime"),
    params:
        settings=lambda w: arg(
            {
                "benchmark": w.benchmark,
                "task": task_of(w.benchmark),
                "model": config["model"]["name_or_path"]
                or "tiny-qwen3 (results/models/base)",
                "seed": config["seed"],
                **eval_settings(w.benchmark, generates=False),
            }
        ),
    shell:
        "python -m rredcot.steps.benchmark_table --grades {input.grades} "
        "--problems {input.problems} --params {params.settings} --out {output.table} > {log} 2>&1"


rule main_table:
    input:
        tables=expand("results/{benchmark}_table.csv", benchmark=config["benchmarks"]),
        summaries=training_summaries,
        base=BASE_MODEL,
    output:
        table=report(
            "results/main_table.csv",
            caption="../report/main_table.rst",
            category="Benchmarks",
        ),
    log:
        "results/logs/main_table.log",
    benchmark:
        "results/benchmarks/main_table.tsv"
    conda:
        CONDA_ENV
    threads: res("main_table", "cpus_per_task")
    resources:
        mem_mb=res("main_table", "mem_mb"),
        runtime=res("main_table", "runtime"),
    shell:
        "python -m rredcot.steps.main_table --tables {input.tables} "
        "--summaries {input.summaries} --base {input.base} --out {output.table} > {log} 2>&1"


rule benchmark_comparison:
    input:
        grades=comparison_grades,
    output:
        table=report(
            "results/benchmark_comparison.csv",
            caption="../report/benchmark_comparison.rst",
            category="Benchmarks",
        ),
    log:
        "results/logs/benchmark_comparison.log",
    benchmark:
        "results/benchmarks/benchmark_comparison.tsv"
    conda:
        CONDA_ENV
    threads: res("benchmark_comparison", "cpus_per_task")
    resources:
        mem_mb=res("benchmark_comparison", "mem_mb"),
        runtime=res("benchmark_comparison", "runtime"),
    params:
        settings=arg(
            {
                "methods": TRAINING_METHODS,
                "reference": BASELINE,
                "base": BASE_METHOD,
                "bootstrap_resamples": config["evaluation"]["bootstrap_resamples"],
                "seed": config["seed"],
            }
        ),
    shell:
        "python -m rredcot.steps.benchmark_comparison --grades {input.grades} "
        "--params {params.settings} --out {output.table} > {log} 2>&1"


rule training_report:
    input:
        summaries=training_summaries,
    output:
        curves=report(
            "results/training_curves.csv",
            caption="../report/training_curves.rst",
            category="Training",
        ),
        figure=report(
            "results/figures/training_curves.png",
            caption="../report/training_curves.rst",
            category="Training",
        ),
        cost=report(
            "results/compute_cost.csv",
            caption="../report/compute_cost.rst",
            category="Training",
        ),
    log:
        "results/logs/training_report.log",
    benchmark:
        "results/benchmarks/training_report.tsv"
    conda:
        CONDA_ENV
    threads: res("training_report", "cpus_per_task")
    resources:
        mem_mb=res("training_report", "mem_mb"),
        runtime=res("training_report", "runtime"),
    params:
        baseline=BASELINE,
    shell:
        "python -m rredcot.steps.training_report --summaries {input.summaries} "
        "--baseline {params.baseline} --curves {output.curves} --figure {output.figure} "
        "--cost {output.cost} > {log} 2>&1"


rule learning_curves:
    input:
        unpack(curve_runs),
    output:
        curves=report(
            "results/learning_curves.csv",
            caption="../report/learning_curves.rst",
            category="Training",
        ),
        runs="results/learning_curves_runs.csv",
        figure=report(
            "results/figures/learning_curves.png",
            caption="../report/learning_curves.rst",
            category="Training",
        ),
        comparison=report(
            "results/method_comparison.csv",
            caption="../report/method_comparison.rst",
            category="Training",
        ),
    log:
        "results/logs/learning_curves.log",
    benchmark:
        "results/benchmarks/learning_curves.tsv"
    conda:
        CONDA_ENV
    threads: res("learning_curves", "cpus_per_task")
    resources:
        mem_mb=res("learning_curves", "mem_mb"),
        runtime=res("learning_curves", "runtime"),
    params:
        settings=arg(
            {
                "bootstrap_resamples": config["evaluation"]["bootstrap_resamples"],
                "seed": config["seed"],
                "reference": BASELINE,
            }
        ),
    shell:
        "python -m rredcot.steps.learning_curves --summaries {input.summaries} "
        "--grades {input.grades} --base {input.base} --params {params.settings} "
        "--curves {output.curves} --runs {output.runs} --figure {output.figure} "
        "--comparison {output.comparison} > {log} 2>&1"


rule regime_table:
    input:
        unpack(regime_inputs),
    output:
        table=report(
            REGIME_TABLE,
            caption="../report/regime_table.rst",
            category="Training",
        ),
    log:
        "results/logs/regime_table.log",
    benchmark:
        "results/benchmarks/regime_table.tsv"
    conda:
        CONDA_ENV
    threads: res("regime_table", "cpus_per_task")
    resources:
        mem_mb=res("regime_table", "mem_mb"),
        runtime=res("regime_table", "runtime"),
    params:
        settings=arg(
            {
                "split": CURVE_SPLIT,
                # the tiny base's demonstrations hold it; a fetched model's were not ours
                "misconception": (
                    config["sft"]["misconception"] if uses_tiny_model() else None
                ),
                "bootstrap_resamples": config["evaluation"]["bootstrap_resamples"],
                "seed": config["seed"],
            }
        ),
    shell:
        "python -m rredcot.steps.regime_table --t1-grades {input.t1_grades} "
        "--t1-generations {input.t1_generations} --greedy-grades {input.greedy_grades} "
        "--greedy-generations {input.greedy_generations} --problems {input.problems} "
        "--params {params.settings} --out {output.table} > {log} 2>&1"


rule credit_attribution:
    input:
        unpack(attribution_inputs),
    output:
        table=report(
            ATTRIBUTION_TABLE,
            caption="../report/credit_attribution.rst",
            category="Training",
        ),
        figure=report(
            "results/figures/credit_attribution.png",
            caption="../report/credit_attribution.rst",
            category="Training",
        ),
    log:
        "results/logs/credit_attribution.log",
    benchmark:
        "results/benchmarks/credit_attribution.tsv"
    conda:
        CONDA_ENV
    threads: res("credit_attribution", "cpus_per_task")
    resources:
        mem_mb=res("credit_attribution", "mem_mb"),
        runtime=res("credit_attribution", "runtime"),
    params:
        settings=arg(
            {
                "pairs": ATTRIBUTION_PAIRS,
                "budget_pairs": BUDGET_PAIRS,
                "reference": BASELINE,
                "misconception": (
                    config["sft"]["misconception"] if uses_tiny_model() else None
                ),
                "bootstrap_resamples": config["evaluation"]["bootstrap_resamples"],
                "seed": config["seed"],
            }
        ),
    shell:
        "python -m rredcot.steps.credit_attribution --summaries {input.summaries} "
        "--grades {input.t1_grades} --t1-generations {input.t1_generations} "
        "--greedy-grades {input.greedy_grades} --greedy-generations {input.greedy_generations} "
        "--base {input.base} --problems {input.problems} --params {params.settings} "
        "--out {output.table} --figure {output.figure} > {log} 2>&1"


rule summary:
    input:
        unpack(summary_tables),
        others=run_targets(),
    output:
        summary=report(
            SUMMARY,
            caption="../report/summary.rst",
            category="Summary",
        ),
        # the numbers the report's captions include (rredcot.reporting.captions)
        captions=expand("results/report/{name}.rst", name=CAPTION_FRAGMENTS),
    log:
        "results/logs/summary.log",
    benchmark:
        SUMMARY_BENCHMARK
    conda:
        CONDA_ENV
    threads: res("summary", "cpus_per_task")
    resources:
        mem_mb=res("summary", "mem_mb"),
        runtime=res("summary", "runtime"),
    params:
        settings=arg({"configfiles": configfiles_given(), "reference": BASELINE}),
        tables=lambda wildcards, input: summary_args(input),
        repo=shlex.quote(workflow.basedir),
        # the timing files of this workflow's directory (results/, or a dose's in its place)
        benchmarks=lambda w, output: str(Path(output.summary).parent / "benchmarks"),
        captions=lambda w, output: str(Path(output.captions[0]).parent),
        own_benchmark=lambda w, output: str(
            Path(output.summary).parent
            / Path(SUMMARY_BENCHMARK).relative_to("results")
        ),
    shell:
        "python -m rredcot.steps.summary {params.tables} --benchmarks {params.benchmarks} "
        "--own-benchmark {params.own_benchmark} --repo {params.repo} --params {params.settings} --out {output.summary} "
        "--captions {params.captions} > {log} 2>&1"
