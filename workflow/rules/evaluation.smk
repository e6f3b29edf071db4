# Evaluation: k samples per problem from each policy, then grading (kept apart so grading can
# be re-run without generating again).


rule generate:
    input:
        unpack(policy_input),
        problems=benchmark_data,
    output:
        generations="results/eval/{method}/seed{seed}/{benchmark}/generations.parquet",
    log:
        "results/logs/generate/{method}/seed{seed}/{benchmark}.log",
    benchmark:
        "results/benchmarks/generate/{method}/seed{seed}/{benchmark}.tsv"
    conda:
        CONDA_ENV
    threads: res("generate", "cpus_per_task")
    resources:
        **gpu_request("generate"),
        mem_mb=res("generate", "mem_mb"),
        runtime=res("generate", "runtime"),
    params:
        gpu_job=GPU_JOB,
        policy=policy_path,
        settings=lambda w: arg(
            {
                **eval_settings(w.benchmark),
                "task": task_of(w.benchmark),
                "seed": EVAL_SEED,
                "run_seed": int(w.seed),
            }
        ),
    shell:
        "{params.gpu_job} --gpus {resources.gpu} -- python -m rredcot.steps.generate --policy {params.policy} --method {wildcards.method} "
        "--problems {input.problems} "
        "--params {params.settings} --threads {threads} --out {output.generations} > {log} 2>&1"


rule grade:
    input:
        generations=rules.generate.output.generations,
        problems=benchmark_data,
    output:
        grades="results/eval/{method}/seed{seed}/{benchmark}/grades.parquet",
    log:
        "results/logs/grade/{method}/seed{seed}/{benchmark}.log",
    benchmark:
        "results/benchmarks/grade/{method}/seed{seed}/{benchmark}.tsv"
    conda:
        CONDA_ENV
    threads: res("grade", "cpus_per_task")
    resources:
        mem_mb=res("grade", "mem_mb"),
        runtime=res("grade", "runtime"),
    params:
        settings=lambda w: arg(
            {
                "task": task_of(w.benchmark),
                **eval_settings(w.benchmark, generates=False),
            }
        ),
    shell:
        "python -m rredcot.steps.grade --generations {input.generations} "
        "--problems {input.problems} --params {params.settings} --out {output.grades} > {log} 2>&1"
