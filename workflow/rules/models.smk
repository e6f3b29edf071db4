# The base policy: the tiny Qwen3 model and its byte tokenizer, warmed up by SFT.


rule sft_base_model:
    input:
        train="results/data/world/train.parquet",
    output:
        model=directory("results/models/base"),
    log:
        "results/logs/sft_base_model.log",
    benchmark:
        "results/benchmarks/sft_base_model.tsv"
    conda:
        CONDA_ENV
    threads: res("sft_base_model", "cpus_per_task")
    resources:
        mem_mb=res("sft_base_model", "mem_mb"),
        runtime=res("sft_base_model", "runtime"),
    params:
        settings=arg(
            {
                "seed": config["seed"],
                "arch": config["model"]["arch"],
                "sft": config["sft"],
            }
        ),
    shell:
        "python -m rredcot.steps.sft_base_model --train {input.train} "
        "--params {params.settings} --threads {threads} --out {output.model} > {log} 2>&1"
