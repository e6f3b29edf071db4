# Tables: one CSV per benchmark with a row per method (mean over seeds, bootstrap CI).


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
    conda:
        CONDA_ENV
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
                **eval_settings(w.benchmark),
            }
        ),
    shell:
        "python -m rredcot.steps.benchmark_table --grades {input.grades} "
        "--problems {input.problems} --params {params.settings} --out {output.table} > {log} 2>&1"
