"""Paper-scale configs resolve: a Snakemake dry run of each (no job runs, no cluster contacted)
builds a DAG with one training run per (method, seed) whose every job asks for the CPUs,
memory, wall time and GPUs that the config's `resources` section gives its rule.

Each config is merged over config.yaml the way `snakemake --configfile X` merges it in the
repository root; the dry run itself runs in a scratch directory, so results already in the
checkout cannot hide jobs from the DAG.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from snakemake.utils import update_config

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted(REPO.glob("configs/paper_*.yaml")) + sorted(REPO.glob("configs/one_gpu.yaml"))
PROFILE = REPO / "workflow" / "profiles" / "slurm" / "profile.yaml"
# Every SLURM client the plugin could call; the dry runs must call none of them.
SLURM_COMMANDS = ("sbatch", "squeue", "sacct", "sacctmgr", "scontrol", "sinfo", "srun", "scancel")
CPUS = 512  # --cores for the dry run: a dry run caps `threads` at --cores (1 when not given)
# The default target and the AIME 2024 table (a paper number every config reports).
TARGETS = ["all", "results/aime24_table.csv"]


@dataclass
class Job:
    """One job of a dry run's listing."""

    rule: str
    wildcards: dict[str, str] = field(default_factory=dict)
    threads: int = 1  # Snakemake lists `threads:` only when it is not 1
    resources: dict[str, str] = field(default_factory=dict)
    runs_something: bool = True  # False for a target rule such as `all` ("Shell command: None")
    shell: str = ""


def parse_jobs(listing: str) -> list[Job]:
    """The jobs of `snakemake --dry-run --printshellcmds` output, in listing order."""

    def pairs(text: str) -> dict[str, str]:
        return dict(item.split("=", 1) for item in text.split(", ") if "=" in item)

    jobs: list[Job] = []
    for line in listing.splitlines():
        head = re.fullmatch(r"(?:local)?rule (\w+):", line)
        if head:
            jobs.append(Job(head.group(1)))
            continue
        if not jobs:
            continue
        key, _, value = line.strip().partition(": ")
        if key == "wildcards":
            jobs[-1].wildcards = pairs(value)
        elif key == "threads":
            jobs[-1].threads = int(value)
        elif key == "resources":
            jobs[-1].resources = pairs(value)
        elif line.startswith("Shell command:"):
            jobs[-1].runs_something = value != "None"
            jobs[-1].shell = value
    return jobs


def merged_config(path: Path) -> dict[str, Any]:
    """config.yaml with `path` merged over it, as Snakemake merges `--configfile`."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    update_config(config, yaml.safe_load(path.read_text()))
    return config


def expected_resources(config: dict[str, Any], rule: str) -> dict[str, int]:
    """What the config's `resources` section gives a rule: its entry, then `default`."""
    table = config["resources"]
    keys = ("mem_mb", "runtime", "cpus_per_task", "gpu")
    missing = [k for k in keys if k not in table["default"]]
    assert not missing, f"resources.default lacks {missing}"
    return {k: table.get(rule, {}).get(k, table["default"][k]) for k in keys}


@pytest.fixture
def no_slurm_clients(tmp_path: Path) -> tuple[Path, Path]:
    """A bin directory whose SLURM commands only log their call and fail, and that log."""
    return slurm_stubs(tmp_path)


@pytest.fixture(scope="module")
def full_dry_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """configs/full.yaml's dry run, once for the tests that read it."""
    tmp = tmp_path_factory.mktemp("full")
    bin_dir, calls = slurm_stubs(tmp)
    proc = dry_run(REPO / "configs" / "full.yaml", tmp, bin_dir)
    assert not cluster_calls(calls)
    return proc


def slurm_stubs(tmp_path: Path) -> tuple[Path, Path]:
    """`no_slurm_clients` in `tmp_path`."""
    bin_dir = tmp_path / "slurm_bin"
    bin_dir.mkdir()
    calls = bin_dir / "calls.log"
    for name in SLURM_COMMANDS:
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> "{calls}"\nexit 1\n')
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bin_dir, calls


def cluster_calls(calls: Path) -> list[str]:
    """The SLURM commands a dry run ran, less the plugin's read-only `scontrol show config` (it
    probes the cluster's MinJobAge for its --help text whenever it is installed)."""
    lines = calls.read_text().splitlines() if calls.exists() else []
    return [line for line in lines if line != "scontrol show config"]


def dry_run(
    config: Path,
    workdir: Path,
    bin_dir: Path,
    profile: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    # Targets first: --configfile takes every word after it up to the next option.
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile")]
    cmd += [*TARGETS, "--dry-run", "--printshellcmds"]
    cmd += ["--cores", str(CPUS), "--configfile", str(REPO / "config.yaml"), str(config)]
    if profile is not None:
        cmd += ["--profile", str(profile)]
    # A configured mirror must exist at load time; the dry run reads no benchmark, so an empty
    # one does (data.mirror's relative default does not resolve from the scratch directory).
    mirror = workdir / "empty_mirror"
    mirror.mkdir(exist_ok=True)
    full_env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HF_HUB_OFFLINE": "1",
        "RREDCOT_MIRROR": str(mirror),
        **(env or {}),
    }
    return subprocess.run(
        cmd, cwd=workdir, capture_output=True, text=True, env=full_env, timeout=300
    )


def check_dag(config_path: Path, proc: subprocess.CompletedProcess[str]) -> list[Job]:
    """rc 0, one train_policy job per (method, seed), every job's resources as configured."""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "This was a dry-run" in proc.stdout
    config = merged_config(config_path)
    jobs = parse_jobs(proc.stdout)
    runs = [j for j in jobs if j.runs_something]
    assert runs, proc.stdout[-3000:]
    trained = sorted(
        (j.wildcards["method"], int(j.wildcards["seed"])) for j in runs if j.rule == "train_policy"
    )
    want = sorted(
        (m, s) for m in config["training"]["methods"] for s in config["training"]["seeds"]
    )
    assert trained == want
    wrong = []
    for job in runs:
        exp = expected_resources(config, job.rule)
        got = {
            "mem_mb": int(job.resources.get("mem_mb", -1)),
            "runtime": int(job.resources.get("runtime", -1)),
            "cpus_per_task": job.threads,
            "gpu": int(job.resources.get("gpu", 0)),  # a rule without `gpu` requests none
        }
        if got != exp:
            wrong.append(f"{job.rule}: asks for {got}, the config says {exp}")
    assert not wrong, "jobs whose request differs from the config:\n" + "\n".join(
        sorted(set(wrong))
    )
    return runs


def test_paper_configs_are_present() -> None:
    names = [p.name for p in CONFIGS]
    assert any(n.startswith("paper_") for n in names), f"no configs/paper_*.yaml in {REPO}"
    assert "one_gpu.yaml" in names, f"configs/one_gpu.yaml is missing (found {names})"


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_dry_run_requests_what_the_config_says(
    config: Path, tmp_path: Path, no_slurm_clients: tuple[Path, Path]
) -> None:
    bin_dir, calls = no_slurm_clients
    runs = check_dag(config, dry_run(config, tmp_path, bin_dir))
    gpu_rules = {j.rule for j in runs if int(j.resources.get("gpu", 0)) > 0}
    assert "train_policy" in gpu_rules  # a paper-scale config trains on GPUs
    for job in runs:  # each GPU job takes devices of its own (rredcot.devices)
        gpus = int(job.resources.get("gpu", 0))
        wrapper = f"python -m rredcot.devices --gpus {gpus} -- "
        # train_policy exec's it, so a scheduler's SIGTERM reaches the trainer
        assert not gpus or job.shell.removeprefix("exec ").startswith(wrapper)
    assert not cluster_calls(calls)
    # real benchmarks and no world curve split: no regime table, no greedy evaluation
    assert not {j.rule for j in runs} & {"regime_table", "generate_greedy", "grade_greedy"}
    if config.name.startswith("paper_"):
        check_official_baselines(runs)
    check_every_method_trains_the_configured_steps(config, runs)


def check_every_method_trains_the_configured_steps(config: Path, runs: list[Job]) -> None:
    """config.yaml's 30-step `mc` override (the embedded default's) must not leak into a paper
    config's runs: every method trains the config's own max_steps; and the studies read the
    config's problem set, not the embedded default's world pool."""
    import yaml

    steps = yaml.safe_load(config.read_text())["training"]["max_steps"]
    trains = [j for j in runs if j.rule == "train_policy"]
    assert trains
    for job in trains:
        params = json.loads(re.search(r"--params '([^']*)'", job.shell).group(1))
        assert params["max_steps"] == steps, job.wildcards
    assert not [j for j in runs if j.rule == "study_pool"]


OFFICIAL_LORA = {"r": 64, "alpha": 64, "target_modules": "all-linear", "dropout": 0.0}


def check_official_baselines(runs: list[Job]) -> None:
    """METHOD.md §6: RRPO/SRPO train LoRA r = 64, α = 64 on all linear layers at lr 5e-5, on a
    launcher other than ZeRO-3 (which refuses them); the other methods fine-tune all weights."""
    for job in (j for j in runs if j.rule == "train_policy"):
        params = json.loads(re.search(r"--params '([^']*)'", job.shell).group(1))
        if job.wildcards["method"] in ("rrpo", "srpo"):
            assert params["lora"] == OFFICIAL_LORA, job.wildcards
            assert params["learning_rate"] == 5e-5 and params["weight_decay"] == 0.01
            assert "zero3.yaml" not in job.shell, job.shell[:300]
        else:
            assert params.get("lora") is None, job.wildcards


def slurm_profile_without_conda(tmp_path: Path) -> Path:
    """The SLURM profile less `use-conda: true` (a dry run with it needs a conda installation,
    which the test machines lack); everything else as shipped."""
    text = PROFILE.read_text()
    line = re.compile(r"^use-conda: true\b.*\n", re.MULTILINE)
    assert len(line.findall(text)) == 1, "the profile should turn on --use-conda once"
    profile = tmp_path / "slurm_profile"
    profile.mkdir()
    (profile / "profile.yaml").write_text(line.sub("", text))
    return profile


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_slurm_profile_dry_run(
    config: Path, tmp_path: Path, no_slurm_clients: tuple[Path, Path]
) -> None:
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        pytest.skip('snakemake-executor-plugin-slurm is not installed (pip install -e ".[slurm]")')
    bin_dir, calls = no_slurm_clients
    env = {"RREDCOT_SLURM_ACCOUNT": "proj-42", "RREDCOT_SLURM_PARTITION": "gpu"}
    proc = dry_run(config, tmp_path, bin_dir, slurm_profile_without_conda(tmp_path), env)
    runs = check_dag(config, proc)
    for job in runs:  # account and partition from the environment, one node per job
        assert job.resources["slurm_account"] == "proj-42", job
        assert job.resources["slurm_partition"] == "gpu", job
        assert job.resources["nodes"] == "1", job
    for job in (j for j in runs if j.rule == "train_policy"):  # issue 32: survive the limit
        assert "--signal=TERM@900" in job.resources["slurm_extra"], job
        assert job.shell.startswith("exec ") and "--save-minutes 30" in job.shell, job.shell
        if "accelerate launch" in job.shell:  # issue 46: the agent waits the signal lead out
            assert "env TORCH_ELASTIC_SHUTDOWN_TIMEOUT=900 accelerate launch" in job.shell
    assert not cluster_calls(calls)


def test_the_full_study_s_variants_change_only_their_own_runs(
    full_dry_run: subprocess.CompletedProcess[str],
) -> None:
    """configs/full.yaml's variants: rredcot_conditional scores the conditional answer-now (the
    default is the pre-registered joint), rredcot_center_group centers its credit,
    rredcot_own_path reads the oracle reference; every other run keeps the shared estimator and
    credit blocks."""
    proc = full_dry_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    params = {}
    for job in parse_jobs(proc.stdout):
        if job.rule == "train_policy" and job.wildcards["seed"] == "6":
            shell = re.search(r"--params '([^']*)'", job.shell).group(1)
            params[job.wildcards["method"]] = json.loads(shell)
    variants = {"rredcot_conditional", "rredcot_center_group", "rredcot_own_path"}
    assert {"rredcot", "grpo", *variants} <= set(params)
    assert params["rredcot_conditional"]["rredcot"]["answer_now"] == "conditional"
    assert params["rredcot_conditional"]["method"] == "rredcot"
    for name in ("rredcot", "rredcot_center_group", "rredcot_own_path", "grpo"):
        assert params[name]["rredcot"]["answer_now"] == "joint", name
    assert params["rredcot_center_group"]["credit"]["center"] == "group"
    assert params["rredcot_own_path"]["reference"] == "own_path"
    assert all(params[n]["reference"] == "configured" for n in params if n != "rredcot_own_path")
    assert params["rredcot_conditional"]["credit"] == params["rredcot"]["credit"]
    joint = dict(params["rredcot_conditional"]["rredcot"], answer_now="joint")
    assert joint == params["rredcot"]["rredcot"]  # nothing else of the estimator changed


def test_the_full_study_builds_the_estimator_frontier(
    full_dry_run: subprocess.CompletedProcess[str],
) -> None:
    """configs/full.yaml asks for results/estimator_frontier.csv and its figure (issue 47 item
    2): study_scored scores the frontier's own forms into a file of their own, and
    study_frontier reads it beside every study's estimates, with the workflow's transform and
    immediate, in groups of training.num_generations."""
    proc = full_dry_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs = parse_jobs(proc.stdout)

    def params(job: Job) -> dict[str, Any]:
        return json.loads(re.search(r"--params '([^']*)'", job.shell).group(1))

    (frontier,) = [j for j in jobs if j.rule == "study_frontier"]
    out = "--out results/estimator_frontier.csv --figure results/figures/estimator_frontier.png"
    assert out in frontier.shell
    variants = "results/studies/estimates_variants.parquet"
    assert f"--variants {variants}" in frontier.shell
    assert "results/studies/estimates_scored.parquet" in frontier.shell
    got = params(frontier)
    assert got["transforms"] == {"workflow": {}, "immediate": {"mode": "immediate"}}
    assert got["group_size"] == 8 and got["credit"]["mode"] == "mixed"
    (scored,) = [j for j in jobs if j.rule == "study_scored"]
    assert f"--variants {variants}" in scored.shell
    forms = params(scored)["frontier"]
    assert forms["num_segments"] == [2, 4, 8]
    assert forms["rredcot_variants"]["answer_now_only"] == {"w_v": 0.0}
    assert params(scored)["segmentation"]["strategy"] == "hybrid"
    assert params(scored)["oppo"]["prior"] == "group_mean"


def test_the_default_dag_decodes_every_policy_greedily_for_the_regime_table(
    tmp_path: Path, no_slurm_clients: tuple[Path, Path]
) -> None:
    """config.yaml: one greedy generation (temperature 0, one sample) and its grading per
    (method, seed) on the curve split, beside the sampled ones, and one regime table reading
    them all."""
    bin_dir, _ = no_slurm_clients
    proc = dry_run(REPO / "config.yaml", tmp_path, bin_dir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs = parse_jobs(proc.stdout)
    policies = {
        (j.wildcards["method"], j.wildcards["seed"]) for j in jobs if j.rule == "train_policy"
    }
    policies.add(("base", "0"))
    for rule in ("generate_greedy", "grade_greedy"):
        mine = [j for j in jobs if j.rule == rule]
        assert {j.wildcards["benchmark"] for j in mine} == {"synth_id"}, rule
        assert sorted((j.wildcards["method"], j.wildcards["seed"]) for j in mine) == sorted(
            policies
        ), rule
    split = [j for j in jobs if j.wildcards.get("benchmark") == "synth_id"]
    for job in (j for j in split if j.rule in ("generate_greedy", "generate")):
        params = json.loads(re.search(r"--params '([^']*)'", job.shell).group(1))
        got = (params["temperature"], params["top_p"], params["samples_per_problem"])
        assert got == ((0.0, 1.0, 1) if job.rule == "generate_greedy" else (1.0, 1.0, 4)), job
        assert ("/greedy/" in job.shell) == (job.rule == "generate_greedy"), job.shell
    (table,) = [j for j in jobs if j.rule == "regime_table"]
    for method, seed in policies:
        assert f"results/eval/{method}/seed{seed}/synth_id/greedy/grades.parquet" in table.shell
    summary = next(j for j in jobs if j.rule == "summary")
    assert "--regime-table results/regime_table.csv" in summary.shell


def test_a_curve_split_sampled_at_another_temperature_stops_the_regime_table(
    tmp_path: Path, no_slurm_clients: tuple[Path, Path]
) -> None:
    """The regime table's T = 1 columns read the curve split's protocol: another temperature
    stops the run at load time, naming the key."""
    bin_dir, _ = no_slurm_clients
    overlay = tmp_path / "t06.yaml"
    overlay.write_text("evaluation: {per_benchmark: {synth_id: {temperature: 0.6}}}\n")
    proc = dry_run(overlay, tmp_path, bin_dir)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Building DAG of jobs" not in out, out[-2000:]
    assert "config key 'evaluation.per_benchmark.synth_id'" in out, out[-2000:]


def test_a_context_too_long_for_the_vllm_share_stops_at_load_time(
    tmp_path: Path, no_slurm_clients: tuple[Path, Path]
) -> None:
    """Qwen3-4B's whole 262,144-token context in a 0.3 x 80 GB colocated share: refused before
    any job, naming the key (rredcot.planning.vllm_memory; tests/unit/test_vllm_memory.py has the
    arithmetic)."""
    bin_dir, _ = no_slurm_clients
    overlay = tmp_path / "long.yaml"
    base = yaml.safe_load((REPO / "configs" / "paper_qwen3_4b.yaml").read_text())
    update_config(base, {"training": {"vllm_max_model_length": 262144}})
    overlay.write_text(yaml.safe_dump(base))
    proc = dry_run(overlay, tmp_path, bin_dir)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Building DAG of jobs" not in out, out[-2000:]
    assert "run grpo: config key 'training.vllm_max_model_length'" in out, out[-2000:]


EIGHT_ROWS = {"per_device_batch_size": 8, "gradient_accumulation_steps": 4}


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed")
def test_a_tracker_that_is_not_installed_stops_at_load_time(
    tmp_path: Path, no_slurm_clients: tuple[Path, Path]
) -> None:
    """report_to a tracker neither installed nor (without --use-conda) in the jobs' env: refused
    before any job queues, not in the training job after the queue."""
    bin_dir, _ = no_slurm_clients
    overlay = tmp_path / "wandb.yaml"
    base = yaml.safe_load((REPO / "configs" / "paper_qwen3_4b.yaml").read_text())
    update_config(base, {"training": {"report_to": ["wandb"]}})
    overlay.write_text(yaml.safe_dump(base))
    proc = dry_run(overlay, tmp_path, bin_dir)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Building DAG of jobs" not in out, out[-2000:]
    assert "training.report_to: ['wandb'] not installed here" in out, out[-2000:]


def test_a_micro_batch_too_large_for_one_gpu_stops_at_load_time(
    tmp_path: Path, no_slurm_clients: tuple[Path, Path]
) -> None:
    """8 rows of 25k tokens a micro-batch of Qwen3-4B (~109 GB by the memory planner) on an
    80 GB GPU: refused before any job, naming the key (rredcot.planning.memory_plan;
    tests/unit/test_memory_plan.py has the arithmetic)."""
    bin_dir, _ = no_slurm_clients
    overlay = tmp_path / "large.yaml"
    base = yaml.safe_load((REPO / "configs" / "paper_qwen3_4b.yaml").read_text())
    update_config(base, {"training": EIGHT_ROWS})
    overlay.write_text(yaml.safe_dump(base))
    proc = dry_run(overlay, tmp_path, bin_dir)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Building DAG of jobs" not in out, out[-2000:]
    assert "run grpo: config key 'training.per_device_batch_size'" in out, out[-2000:]
    assert "80 GB of one GPU" in out, out[-2000:]


@pytest.mark.parametrize(
    ("env", "want"),
    [
        pytest.param(
            {"RREDCOT_SLURM_GPU_MODEL": "h100"},
            {"train_policy": {"gpu": "8", "gpu_model": "h100"}, "grade": {"gpu": "0"}},
            id="gpu_model",
        ),
        pytest.param(
            {"RREDCOT_SLURM_GRES": "gpu:a100"},
            {
                "train_policy": {"gpu": "0", "gres": "gpu:a100:8"},
                "generate": {"gres": "gpu:a100:1"},
            },
            id="gres",
        ),
        pytest.param(
            {"RREDCOT_RESOURCES": "{train_policy: {runtime: 1440, mem_mb: 240000}}"},
            {
                "train_policy": {"runtime": "1440", "mem_mb": "240000"},
                "generate": {"runtime": "720"},
            },
            id="limits",
        ),
    ],
)
def test_slurm_requests_from_the_environment(
    env: dict[str, str], want: dict[str, dict[str, str]], tmp_path: Path, no_slurm_clients
) -> None:
    """A cluster's GPU model, GRES name and limits come from the environment, the config's
    values staying the defaults; only GPU jobs ask for a model or GRES."""
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        pytest.skip('snakemake-executor-plugin-slurm is not installed (pip install -e ".[slurm]")')
    bin_dir, calls = no_slurm_clients
    config = REPO / "configs" / "paper_qwen3_4b.yaml"
    proc = dry_run(config, tmp_path, bin_dir, slurm_profile_without_conda(tmp_path), env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs = {j.rule: j for j in parse_jobs(proc.stdout) if j.runs_something}
    for rule, resources in want.items():
        got = {k: jobs[rule].resources.get(k, "0" if k == "gpu" else None) for k in resources}
        assert got == resources, (rule, jobs[rule].resources)
    cpu_jobs = [
        j for j in jobs.values() if j.resources.get("gpu", "0") == "0" and "gres" not in j.resources
    ]
    assert all("gpu_model" not in j.resources for j in cpu_jobs)
    assert not cluster_calls(calls)
