# The base policy in results/models/base: the tiny Qwen3 model and its byte tokenizer warmed up
# by SFT (model.name_or_path null), or a pretrained checkpoint fetched at a pinned revision.


if uses_tiny_model():

    rule sft_base_model:
        input:
            train="results/data/world/train.parquet",
        output:
            model=directory(BASE_MODEL),
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

else:

    rule stand_in_model:
        output:
            model=directory(STAND_IN_MODEL),
        log:
            "results/logs/stand_in_model.log",
        benchmark:
            "results/benchmarks/stand_in_model.tsv"
        conda:
            CONDA_ENV
        threads: res("stand_in_model", "cpus_per_task")
        resources:
            mem_mb=res("stand_in_model", "mem_mb"),
            runtime=res("stand_in_model", "runtime"),
        params:
            settings=arg({"seed": config["seed"], "arch": config["model"]["arch"]}),
        shell:
            "python -m rredcot.steps.stand_in_model --params {params.settings} "
            "--out {output.model} > {log} 2>&1"

    rule fetch_base_model:
        input:
            unpack(base_model_input),
        output:
            model=directory(BASE_MODEL),
        log:
            "results/logs/fetch_base_model.log",
        benchmark:
            "results/benchmarks/fetch_base_model.tsv"
        localrule: True  # downloads from the Hub, which compute nodes may not reach
        conda:
            CONDA_ENV
        threads: res("fetch_base_model", "cpus_per_task")
        resources:
            mem_mb=res("fetch_base_model", "mem_mb"),
            runtime=res("fetch_base_model", "runtime"),
        params:
            settings=arg(
                {
                    "name_or_path": config["model"]["name_or_path"],
                    "revision": config["model"].get("revision"),
                    "enable_thinking": config["model"]["enable_thinking"],
                }
            ),
        shell:
            "python -m rredcot.steps.fetch_base_model --params {params.settings} "
            "--out {output.model} > {log} 2>&1"
