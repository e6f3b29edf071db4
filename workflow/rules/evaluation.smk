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


# Greedy decoding of every policy on the curve split (one sample at temperature 0): the regime
# table sets its pass@1 beside the split's sampled protocol, so a gain that vanishes greedily
# reads as sharpening. The jobs take the resources of `generate` and `grade`.
use rule generate as generate_greedy with:
    output:
        generations="results/eval/{method}/seed{seed}/{benchmark}/greedy/generations.parquet",
    log:
        "results/logs/generate_greedy/{method}/seed{seed}/{benchmark}.log",
    benchmark:
        "results/benchmarks/generate_greedy/{method}/seed{seed}/{benchmark}.tsv"
    params:
        gpu_job=GPU_JOB,
        policy=policy_path,
        settings=lambda w: arg(
            {
                **greedy_settings(w.benchmark),
                "task": task_of(w.benchmark),
                "seed": EVAL_SEED,
                "run_seed": int(w.seed),
            }
        ),


use rule grade as grade_greedy with:
    input:
        generations=rules.generate_greedy.output.generations,
        problems=benchmark_data,
    output:
        grades="results/eval/{method}/seed{seed}/{benchmark}/greedy/grades.parquet",
    log:
        "results/logs/grade_greedy/{method}/seed{seed}/{benchmark}.log",
    benchmark:
        "results/benchmarks/grade_greedy/{method}/seed{seed}/{benchmark}.tsv"
    params:
        settings=lambda w: arg(
            {
                "task": task_of(w.benchmark),
                **greedy_settings(w.benchmark, generates=False),
            }
        ),
