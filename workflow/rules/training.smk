# RL training: one run per (method, seed) from the base policy, on the train split's problems.


rule check_lora_targets:
    input:
        model=BASE_MODEL,
    output:
        checked=LORA_CHECK,
    log:
        "results/logs/check_lora_targets.log",
    benchmark:
        "results/benchmarks/check_lora_targets.tsv"
    conda:
        CONDA_ENV
    threads: res("check_lora_targets", "cpus_per_task")
    resources:
        mem_mb=res("check_lora_targets", "mem_mb"),
        runtime=res("check_lora_targets", "runtime"),
    params:
        targets=arg(lora_targets()),
    shell:
        "python -m rredcot.steps.check_lora_targets --model {input.model} "
        "--params {params.targets} --out {output.checked} > {log} 2>&1"


rule train_policy:
    input:
        unpack(curve_input),
        unpack(lora_check_input),
        model=BASE_MODEL,
        train=training_problems,
    output:
        final=directory("results/train/{method}/seed{seed}/final"),
        summary="results/train/{method}/seed{seed}/train_summary.json",
    log:
        "results/logs/train_policy/{method}/seed{seed}.log",
    benchmark:
        "results/benchmarks/train_policy/{method}/seed{seed}.tsv"
    wildcard_constraints:
        method="|".join(TRAINING_METHODS),
    conda:
        CONDA_ENV
    threads: res("train_policy", "cpus_per_task")
    resources:
        **gpu_request("train_policy"),
        # wall-time checkpoints (a resource, so a profile sets it: the SLURM one does); 0: none
        mem_mb=res("train_policy", "mem_mb"),
        runtime=res("train_policy", "runtime"),
        save_minutes=config["training"]["save_minutes"] or 0,
    params:
        gpu_job=GPU_JOB,
        launcher=lambda w, resources: training_launcher(
            w.method, int(w.seed), resources.get("slurm_extra")
        ),
        settings=lambda w: arg(training_settings(w.method, int(w.seed))),
        dtype=config["model"]["dtype"],
        run_dir=lambda w, output: str(Path(output.summary).parent),
        curve=lambda w, input: curve_args(input),
        runtime=arg(
            {
                k: config["training"][k]
                for k in ("ddp_timeout", "report_to", "report_offline", "allow_cpu")
            }
        ),
        keep_stale=(
            "--keep-stale-checkpoints"
            if config["training"]["keep_stale_checkpoints"]
            else ""
        ),
        save_minutes=lambda w, resources: (
            f"--save-minutes {resources.save_minutes}"
            if resources.save_minutes
            else ""
        ),
    # exec: the trainer replaces the job's shell, so a SIGTERM/SIGUSR1 from SLURM reaches it with
    # no shell in between that would die first and end the job before the checkpoint is written
    shell:
        "exec {params.gpu_job} --gpus {resources.gpu} -- {params.launcher} rredcot.steps.train_policy "
        "--model {input.model} "
        "--train {input.train} --params {params.settings} --dtype {params.dtype} "
        "--threads {threads} --out {params.run_dir} {params.curve} {params.keep_stale} "
        "--runtime {params.runtime} {params.save_minutes} "
        "> {log} 2>&1"
