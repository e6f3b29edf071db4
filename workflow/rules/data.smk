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
    output:
        table="results/data/benchmarks/{benchmark}.parquet",
    log:
        "results/logs/prepare_benchmark/{benchmark}.log",
    benchmark:
        "results/benchmarks/prepare_benchmark/{benchmark}.tsv"
    wildcard_constraints:
        benchmark="|".join(KNOWN_BENCHMARKS),
    conda:
        CONDA_ENV
    resources:
        mem_mb=res("prepare_benchmark", "mem_mb"),
        runtime=res("prepare_benchmark", "runtime"),
    params:
        data=arg(config["data"]),
    shell:
        "python -m rredcot.steps.prepare_benchmark --benchmark {wildcards.benchmark} "
        "--params {params.data} --out {output.table} > {log} 2>&1"
