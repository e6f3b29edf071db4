# Estimator studies on the base policy (METHOD.md §5): traces, MC ground truth, estimators, and
# the six artifacts (agreement, correlation, sweep, truncation, localization, the cost-agreement
# frontier) with figures.

STUDIES = config["studies"]
MC = config["estimator"]["mc"]
STUDY_SETTINGS = {
    "task": task_of(STUDY_SET),
    "seed": config["seed"],
    "backend": config["evaluation"]["backend"],
    "dtype": config["model"]["dtype"],
}
# Steps that sample also get the backend's options; rollouts and scoring share model.dtype.
STUDY_GENERATION = {**generation_backend(), **STUDY_SETTINGS}
STUDY_TRACES = "results/studies/traces.parquet"
STUDY_SEGMENTATIONS = "results/studies/segmentations.parquet"
STUDY_GROUND_TRUTH = "results/studies/ground_truth_rollouts.parquet"
STUDY_ESTIMATES = [
    "results/studies/estimates_mc.parquet",
    "results/studies/estimates_scored.parquet",
]
# the forms only the frontier compares, each in its own pass (rredcot.studies.variants)
STUDY_VARIANTS = "results/studies/estimates_variants.parquet"
FRONTIER = STUDIES["frontier"]
# Each rule gets only the settings it reads, so changing one reruns only what depends on it.
STUDY_KEYS = {
    "study_traces": [
        "split",
        "pool",
        "accuracy_band",
        "agreement_traces",
        "segmentation",
        "max_traces",
        "temperature",
        "top_p",
        "max_new_tokens",
        "sweep",
        "batch_size",
        "paths",
    ],
    "study_ground_truth": ["ground_truth", "batch_size"],
    "study_mc": ["mc_n", "batch_size"],
}
STUDY_ANALYSIS = {
    "seed": config["seed"],
    "bootstrap_resamples": STUDIES["bootstrap_resamples"],
    # names the reference estimator (the default)
    "rredcot": config["estimator"]["rredcot"],
}


rule study_pool:
    input:
        world=expand("results/data/world/{split}.parquet", split=WORLD_TABLES),
    output:
        pool=f"results/data/world/{STUDY_POOL}.parquet",
    log:
        "results/logs/studies/study_pool.log",
    benchmark:
        "results/benchmarks/studies/study_pool.tsv"
    conda:
        CONDA_ENV
    threads: res("study_pool", "cpus_per_task")
    resources:
        mem_mb=res("study_pool", "mem_mb"),
        runtime=res("study_pool", "runtime"),
    params:
        settings=arg({"world": config["world"], "pool": STUDIES["pool"]}),
    shell:
        "python -m rredcot.steps.study_pool --world {input.world} --params {params.settings} "
        "--out {output.pool} > {log} 2>&1"


rule study_traces:
    input:
        model=BASE_MODEL,
        # any problem set, with the configured reference kind and the sampled-first one
        problems=f"results/references/{config['references']['source']}/{STUDY_SET}.parquet",
        sampled=f"results/references/sampled/{STUDY_SET}.parquet",
    output:
        traces=STUDY_TRACES,
        segmentations=STUDY_SEGMENTATIONS,
        study_set=report(
            "results/study_set.csv",
            caption="../report/study_set.rst",
            category="Estimator studies",
        ),
    log:
        "results/logs/studies/study_traces.log",
    benchmark:
        "results/benchmarks/studies/study_traces.tsv"
    conda:
        CONDA_ENV
    threads: res("study_traces", "cpus_per_task")
    resources:
        **gpu_request("study_traces"),
        mem_mb=res("study_traces", "mem_mb"),
        runtime=res("study_traces", "runtime"),
    params:
        gpu_job=GPU_JOB,
        policy=lambda w, input: input.model,
        settings=arg(
            {
                **STUDY_GENERATION,
                "studies": {k: STUDIES[k] for k in STUDY_KEYS["study_traces"]},
                "segmentation": config["segmentation"],
            }
        ),
    shell:
        "{params.gpu_job} --gpus {resources.gpu} -- python -m rredcot.steps.study_traces --policy {params.policy} "
        "--problems {input.problems} --sampled {input.sampled} --params {params.settings} "
        "--threads {threads} --out {output.traces} --segmentations {output.segmentations} "
        "--study-set {output.study_set} > {log} 2>&1"


rule study_ground_truth:
    input:
        model=BASE_MODEL,
        traces=rules.study_traces.output.traces,
        segmentations=rules.study_traces.output.segmentations,
    output:
        rollouts=STUDY_GROUND_TRUTH,
    log:
        "results/logs/studies/study_ground_truth.log",
    benchmark:
        "results/benchmarks/studies/study_ground_truth.tsv"
    # The longest job of the studies: start it before the estimators that run beside it.
    priority: 10
    conda:
        CONDA_ENV
    threads: res("study_ground_truth", "cpus_per_task")
    resources:
        **gpu_request("study_ground_truth"),
        mem_mb=res("study_ground_truth", "mem_mb"),
        runtime=res("study_ground_truth", "runtime"),
    params:
        gpu_job=GPU_JOB,
        policy=lambda w, input: input.model,
        settings=arg(
            {
                **STUDY_GENERATION,
                "studies": {k: STUDIES[k] for k in STUDY_KEYS["study_ground_truth"]},
                "mc": {k: MC[k] for k in ("temperature", "top_p")},
            }
        ),
    shell:
        "{params.gpu_job} --gpus {resources.gpu} -- python -m rredcot.steps.study_ground_truth --policy {params.policy} "
        "--traces {input.traces} --segmentations {input.segmentations} "
        "--params {params.settings} --threads {threads} --out {output.rollouts} > {log} 2>&1"


rule study_mc:
    input:
        model=BASE_MODEL,
        traces=rules.study_traces.output.traces,
        segmentations=rules.study_traces.output.segmentations,
    output:
        estimates=STUDY_ESTIMATES[0],
    log:
        "results/logs/studies/study_mc.log",
    benchmark:
        "results/benchmarks/studies/study_mc.tsv"
    conda:
        CONDA_ENV
    threads: res("study_mc", "cpus_per_task")
    resources:
        **gpu_request("study_mc"),
        mem_mb=res("study_mc", "mem_mb"),
        runtime=res("study_mc", "runtime"),
    params:
        gpu_job=GPU_JOB,
        policy=lambda w, input: input.model,
        settings=arg(
            {
                **STUDY_GENERATION,
                "studies": {k: STUDIES[k] for k in STUDY_KEYS["study_mc"]},
                "mc": {
                    k: MC[k] for k in ("budget", "truncation", "temperature", "top_p")
                },
            }
        ),
    shell:
        "{params.gpu_job} --gpus {resources.gpu} -- python -m rredcot.steps.study_mc --policy {params.policy} "
        "--traces {input.traces} --segmentations {input.segmentations} "
        "--params {params.settings} --threads {threads} --out {output.estimates} > {log} 2>&1"


rule study_scored:
    input:
        model=BASE_MODEL,
        traces=rules.study_traces.output.traces,
        segmentations=rules.study_traces.output.segmentations,
    output:
        estimates=STUDY_ESTIMATES[1],
        variants=STUDY_VARIANTS,
    log:
        "results/logs/studies/study_scored.log",
    benchmark:
        "results/benchmarks/studies/study_scored.tsv"
    conda:
        CONDA_ENV
    threads: res("study_scored", "cpus_per_task")
    resources:
        **gpu_request("study_scored"),
        mem_mb=res("study_scored", "mem_mb"),
        runtime=res("study_scored", "runtime"),
    params:
        gpu_job=GPU_JOB,
        policy=lambda w, input: input.model,
        settings=arg(
            {
                **STUDY_SETTINGS,
                "rredcot": config["estimator"]["rredcot"],
                "attribution": config["estimator"]["attribution"],
                "oppo": config["training"]["oppo"],
                # the frontier's forms at K segments replace the training segmentation's K
                "segmentation": config["segmentation"],
                "frontier": {
                    k: FRONTIER[k] for k in ("rredcot_variants", "num_segments")
                },
                "score_batch_traces": STUDIES["score_batch_traces"],
            }
        ),
    shell:
        "{params.gpu_job} --gpus {resources.gpu} -- python -m rredcot.steps.study_scored --policy {params.policy} "
        "--traces {input.traces} --segmentations {input.segmentations} "
        "--params {params.settings} --threads {threads} --out {output.estimates} "
        "--variants {output.variants} > {log} 2>&1"


rule study_agreement:
    input:
        traces=rules.study_traces.output.traces,
        segmentations=rules.study_traces.output.segmentations,
        ground_truth=rules.study_ground_truth.output.rollouts,
        estimates=STUDY_ESTIMATES,
    output:
        table=report(
            "results/estimator_agreement.csv",
            caption="../report/estimator_agreement.rst",
            category="Estimator studies",
        ),
        figure=report(
            "results/figures/estimator_agreement.png",
            caption="../report/estimator_agreement.rst",
            category="Estimator studies",
        ),
        cost_match=report(
            "results/estimator_cost_match.csv",
            caption="../report/estimator_agreement.rst",
            category="Estimator studies",
        ),
        # the pre-registered answer-now rule applied to this table (config.yaml, docs/archive/testbed_choices.md)
        answer_now="results/answer_now_rule.json",
    log:
        "results/logs/studies/study_agreement.log",
    benchmark:
        "results/benchmarks/studies/study_agreement.tsv"
    conda:
        CONDA_ENV
    threads: res("study_agreement", "cpus_per_task")
    resources:
        mem_mb=res("study_agreement", "mem_mb"),
        runtime=res("study_agreement", "runtime"),
    params:
        settings=arg(STUDY_ANALYSIS),
    shell:
        "python -m rredcot.steps.study_agreement --traces {input.traces} "
        "--segmentations {input.segmentations} --ground-truth {input.ground_truth} "
        "--estimates {input.estimates} --params {params.settings} "
        "--out {output.table} --figure {output.figure} --cost-match {output.cost_match} "
        "--answer-now {output.answer_now} > {log} 2>&1"


rule study_frontier:
    input:
        traces=rules.study_traces.output.traces,
        segmentations=rules.study_traces.output.segmentations,
        ground_truth=rules.study_ground_truth.output.rollouts,
        estimates=STUDY_ESTIMATES,
        variants=rules.study_scored.output.variants,
    output:
        table=report(
            "results/estimator_frontier.csv",
            caption="../report/estimator_frontier.rst",
            category="Estimator studies",
        ),
        figure=report(
            "results/figures/estimator_frontier.png",
            caption="../report/estimator_frontier.rst",
            category="Estimator studies",
        ),
        # the pre-registered pick of rredcot_fast read off the table (docs/frontier.md)
        pick="results/estimator_pick.json",
    log:
        "results/logs/studies/study_frontier.log",
    benchmark:
        "results/benchmarks/studies/study_frontier.tsv"
    conda:
        CONDA_ENV
    threads: res("study_frontier", "cpus_per_task")
    resources:
        mem_mb=res("study_frontier", "mem_mb"),
        runtime=res("study_frontier", "runtime"),
    params:
        settings=arg(
            {
                **STUDY_ANALYSIS,
                "credit": config["training"]["credit"],
                "transforms": FRONTIER["transforms"],
                "group_size": FRONTIER["group_size"]
                or config["training"]["num_generations"],
            }
        ),
    shell:
        "python -m rredcot.steps.study_frontier --traces {input.traces} "
        "--segmentations {input.segmentations} --ground-truth {input.ground_truth} "
        "--estimates {input.estimates} --variants {input.variants} "
        "--params {params.settings} --out {output.table} --figure {output.figure} "
        "--pick {output.pick} > {log} 2>&1"


rule study_correlation:
    input:
        traces=rules.study_traces.output.traces,
        segmentations=rules.study_traces.output.segmentations,
        ground_truth=rules.study_ground_truth.output.rollouts,
        estimates=STUDY_ESTIMATES,
    output:
        table=report(
            "results/attribution_correlation.csv",
            caption="../report/attribution_correlation.rst",
            category="Estimator studies",
        ),
        figure=report(
            "results/figures/attribution_correlation.png",
            caption="../report/attribution_correlation.rst",
            category="Estimator studies",
        ),
    log:
        "results/logs/studies/study_correlation.log",
    benchmark:
        "results/benchmarks/studies/study_correlation.tsv"
    conda:
        CONDA_ENV
    threads: res("study_correlation", "cpus_per_task")
    resources:
        mem_mb=res("study_correlation", "mem_mb"),
        runtime=res("study_correlation", "runtime"),
    params:
        settings=arg(STUDY_ANALYSIS),
    shell:
        "python -m rredcot.steps.study_correlation --traces {input.traces} "
        "--segmentations {input.segmentations} --ground-truth {input.ground_truth} "
        "--estimates {input.estimates} --params {params.settings} "
        "--out {output.table} --figure {output.figure} > {log} 2>&1"


rule study_localization:
    input:
        traces=rules.study_traces.output.traces,
        # the world's programs: the oracles' step checker and the first errors' kinds
        problems=rules.study_traces.input.problems,
        segmentations=rules.study_traces.output.segmentations,
        ground_truth=rules.study_ground_truth.output.rollouts,
        estimates=STUDY_ESTIMATES,
    output:
        table=report(
            "results/error_localization.csv",
            caption="../report/error_localization.rst",
            category="Estimator studies",
        ),
        figure=report(
            "results/figures/error_localization.png",
            caption="../report/error_localization.rst",
            category="Estimator studies",
        ),
    log:
        "results/logs/studies/study_localization.log",
    benchmark:
        "results/benchmarks/studies/study_localization.tsv"
    conda:
        CONDA_ENV
    threads: res("study_localization", "cpus_per_task")
    resources:
        mem_mb=res("study_localization", "mem_mb"),
        runtime=res("study_localization", "runtime"),
    params:
        settings=arg(
            {
                **STUDY_ANALYSIS,
                "misconception": (
                    config["sft"]["misconception"] if uses_tiny_model() else None
                ),
            }
        ),
    shell:
        "python -m rredcot.steps.study_localization --traces {input.traces} "
        "--problems {input.problems} "
        "--segmentations {input.segmentations} --ground-truth {input.ground_truth} "
        "--estimates {input.estimates} --params {params.settings} "
        "--out {output.table} --figure {output.figure} > {log} 2>&1"


rule study_truncation:
    input:
        segmentations=rules.study_traces.output.segmentations,
        ground_truth=rules.study_ground_truth.output.rollouts,
    output:
        table=report(
            "results/mc_truncation.csv",
            caption="../report/mc_truncation.rst",
            category="Estimator studies",
        ),
        figure=report(
            "results/figures/mc_truncation.png",
            caption="../report/mc_truncation.rst",
            category="Estimator studies",
        ),
    log:
        "results/logs/studies/study_truncation.log",
    benchmark:
        "results/benchmarks/studies/study_truncation.tsv"
    conda:
        CONDA_ENV
    threads: res("study_truncation", "cpus_per_task")
    resources:
        mem_mb=res("study_truncation", "mem_mb"),
        runtime=res("study_truncation", "runtime"),
    params:
        settings=arg(
            {**STUDY_ANALYSIS, "truncation_budgets": STUDIES["truncation_budgets"]}
        ),
    shell:
        "python -m rredcot.steps.study_truncation --segmentations {input.segmentations} "
        "--ground-truth {input.ground_truth} --params {params.settings} "
        "--out {output.table} --figure {output.figure} > {log} 2>&1"


rule study_sweep:
    input:
        model=BASE_MODEL,
        traces=rules.study_traces.output.traces,
        segmentations=rules.study_traces.output.segmentations,
        ground_truth=rules.study_ground_truth.output.rollouts,
    output:
        table=report(
            "results/segmentation_sweep.csv",
            caption="../report/segmentation_sweep.rst",
            category="Estimator studies",
        ),
        figure=report(
            "results/figures/segmentation_sweep.png",
            caption="../report/segmentation_sweep.rst",
            category="Estimator studies",
        ),
    log:
        "results/logs/studies/study_sweep.log",
    benchmark:
        "results/benchmarks/studies/study_sweep.tsv"
    conda:
        CONDA_ENV
    threads: res("study_sweep", "cpus_per_task")
    resources:
        **gpu_request("study_sweep"),
        mem_mb=res("study_sweep", "mem_mb"),
        runtime=res("study_sweep", "runtime"),
    params:
        gpu_job=GPU_JOB,
        policy=lambda w, input: input.model,
        settings=arg(
            {
                **STUDY_SETTINGS,
                **STUDY_ANALYSIS,
                "rredcot": config["estimator"]["rredcot"],
                "score_batch_traces": STUDIES["score_batch_traces"],
            }
        ),
    shell:
        "{params.gpu_job} --gpus {resources.gpu} -- python -m rredcot.steps.study_sweep --policy {params.policy} "
        "--traces {input.traces} --segmentations {input.segmentations} "
        "--ground-truth {input.ground_truth} --params {params.settings} --threads {threads} "
        "--out {output.table} --figure {output.figure} > {log} 2>&1"
