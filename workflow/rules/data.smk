# Data: the synthetic world and real benchmarks (mirror first, then the Hub), normalized.


rule synthetic_world:
    output:
        splits=expand(
            "results/data/world/{split}.parquet", split=["train", *WORLD_SPLITS]
        ),
    log:
        "results/logs/synthetic_world.log",
    benchmark:
        "results/benchmarks/synthetic_world.tsv"
    conda:
        CONDA_ENV
    threads: res("synthetic_world", "cpus_per_task")
    resources:
        mem_mb=res("synthetic_world", "mem_mb"),
        runtime=res("synthetic_world", "runtime"),
    params:
        world=arg(config["world"]),
        outdir=lambda w, output: str(Path(output.splits[0]).parent),
    shell:
        "python -m rredcot.steps.synthetic_world --params {params.world} "
        "--out-dir {params.outdir} > {log} 2>&1"


rule prepare_benchmark:
    input:
        unpack(lambda w: mirror_input(w.benchmark)),
    output:
        table="results/data/benchmarks/{benchmark}.parquet",
    log:
        "results/logs/prepare_benchmark/{benchmark}.log",
    benchmark:
        "results/benchmarks/prepare_benchmark/{benchmark}.tsv"
    wildcard_constraints:
        benchmark="|".join(KNOWN_BENCHMARKS),
    localrule: True  # small downloads; compute nodes of a cluster may not reach the Hub
    conda:
        CONDA_ENV
    threads: res("prepare_benchmark", "cpus_per_task")
    resources:
        mem_mb=res("prepare_benchmark", "mem_mb"),
        runtime=res("prepare_benchmark", "runtime"),
    params:
        data=arg({k: config["data"][k] for k in ("mirror", "max_malformed_fraction")}),
    shell:
        "python -m rredcot.steps.prepare_benchmark --dataset {wildcards.benchmark} "
        "--params {params.data} --out {output.table} > {log} 2>&1"


rule stand_in_training_set:
    input:
        unpack(stand_in_source),
    output:
        rows=f"{STAND_IN_MIRROR}/{{dataset}}.jsonl",
    log:
        "results/logs/stand_in_training_set/{dataset}.log",
    benchmark:
        "results/benchmarks/stand_in_training_set/{dataset}.tsv"
    wildcard_constraints:
        dataset="|".join(KNOWN_TRAINING_SETS),
    conda:
        CONDA_ENV
    threads: res("stand_in_training_set", "cpus_per_task")
    resources:
        mem_mb=res("stand_in_training_set", "mem_mb"),
        runtime=res("stand_in_training_set", "runtime"),
    params:
        settings=arg({"rows": config["stand_in"]["training_rows"]}),
    shell:
        "python -m rredcot.steps.stand_in_training_set --source {input.mirror} "
        "--params {params.settings} --out {output.rows} > {log} 2>&1"


rule prepare_training_set:
    input:
        unpack(training_set_input),
    output:
        table="results/data/train/{dataset}.parquet",
    log:
        "results/logs/prepare_training_set/{dataset}.log",
    benchmark:
        "results/benchmarks/prepare_training_set/{dataset}.tsv"
    wildcard_constraints:
        dataset="|".join(KNOWN_TRAINING_SETS),
    localrule: True  # reads the Hub (or the mirror); compute nodes may not reach the Hub
    conda:
        CONDA_ENV
    threads: res("prepare_training_set", "cpus_per_task")
    resources:
        mem_mb=res("prepare_training_set", "mem_mb"),
        runtime=res("prepare_training_set", "runtime"),
    params:
        data=arg(
            {
                "mirror": config["data"]["mirror"],
                "max_malformed_fraction": config["data"]["max_malformed_fraction"],
                "max_problems": config["data"].get("train_max_problems"),
                "seed": config["seed"],
                "mirror_dir": (
                    STAND_IN_MIRROR if config["stand_in"]["training_rows"] else None
                ),
            }
        ),
    shell:
        "python -m rredcot.steps.prepare_benchmark --dataset {wildcards.dataset} "
        "--params {params.data} --out {output.table} > {log} 2>&1"
