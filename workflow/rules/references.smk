# Reference solutions: a verified U* for every problem of a problem set (the training problems,
# and the study split), from the dataset or sampled from the base policy; {prefer} says which
# comes first (training reads references.source; the studies measure both).


rule reference_solutions:
    input:
        model=BASE_MODEL,
        problems=lambda w: problem_table(w.split),
    output:
        references="results/references/{prefer}/{split}.parquet",
        missing="results/references/{prefer}/{split}_missing.csv",
        summary="results/references/{prefer}/{split}_summary.json",
    log:
        "results/logs/reference_solutions/{prefer}/{split}.log",
    benchmark:
        "results/benchmarks/reference_solutions/{prefer}/{split}.tsv"
    conda:
        CONDA_ENV
    threads: res("reference_solutions", "cpus_per_task")
    resources:
        **gpu_request("reference_solutions"),
        mem_mb=res("reference_solutions", "mem_mb"),
        runtime=res("reference_solutions", "runtime"),
    params:
        gpu_job=GPU_JOB,
        policy=lambda w, input: input.model,
        settings=lambda w: arg(
            {
                "task": task_of(w.split),
                "seed": config["seed"],
                **generation_backend(),
                "references": config["references"],
                "prefer": w.prefer,
            }
        ),
    shell:
        "{params.gpu_job} --gpus {resources.gpu} -- python -m rredcot.steps.reference_solutions --problems {input.problems} "
        "--policy {params.policy} --params {params.settings} --threads {threads} "
        "--out {output.references} --missing {output.missing} --summary {output.summary} "
        "> {log} 2>&1"
