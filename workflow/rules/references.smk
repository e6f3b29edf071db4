# Reference solutions: a verified U* for every problem of a world split (the training problems,
# and the study split), from the dataset or sampled from the base policy.

# The base policy: a checkpoint the workflow builds (tiny model) or a Hub id / directory.
BASE_POLICY = config["model"]["name_or_path"] or "results/models/base"
BASE_POLICY_INPUT = {"model": "results/models/base"} if uses_tiny_model() else {}


rule reference_solutions:
    input:
        **BASE_POLICY_INPUT,
        problems="results/data/world/{split}.parquet",
    output:
        references="results/references/{split}.parquet",
        missing="results/references/{split}_missing.csv",
        summary="results/references/{split}_summary.json",
    log:
        "results/logs/reference_solutions/{split}.log",
    benchmark:
        "results/benchmarks/reference_solutions/{split}.tsv"
    conda:
        CONDA_ENV
    threads: res("reference_solutions", "cpus_per_task")
    resources:
        mem_mb=res("reference_solutions", "mem_mb"),
        runtime=res("reference_solutions", "runtime"),
        gpu=res("reference_solutions", "gpu"),
    params:
        policy=lambda w: BASE_POLICY,
        settings=arg(
            {
                "task": "synthetic",
                "seed": config["seed"],
                "backend": config["evaluation"]["backend"],
                "references": config["references"],
            }
        ),
    shell:
        "python -m rredcot.steps.reference_solutions --problems {input.problems} "
        "--policy {params.policy} --params {params.settings} --threads {threads} "
        "--out {output.references} --missing {output.missing} --summary {output.summary} "
        "> {log} 2>&1"
