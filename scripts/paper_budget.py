"""Write docs/paper_budget.md: GPU-hours and disk of each paper config, computed from it.

    python scripts/paper_budget.py            # rewrite the doc
    python scripts/paper_budget.py --check    # exit 1 when the doc is not what it renders

GPU-hours: Snakemake's dry run of the config (every job of the default target and the AIME24
table, as a fresh clone builds them) gives each job's rule, GPUs and wall-time limit
(`resources`); the sum of GPUs x limit is what the config asks the cluster to reserve, an upper
bound of what the jobs use (no GPU run has measured them yet). Disk: the checkpoints each
training run keeps (`training.save_total_limit`, written every `save_steps`) and its final
policy, from the model's parameter count (`rredcot.planning.vllm_memory.KNOWN_MODELS`): a full
fine-tuning checkpoint holds bf16 weights (2 bytes per parameter) and AdamW's fp32 master
weights, first and second moments (4 + 4 + 4): 14 bytes per trained parameter; a LoRA run
checkpoints its adapter only (the same 14 bytes per adapter parameter).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from rredcot.planning.vllm_memory import KNOWN_CONFIGS, KNOWN_MODELS  # noqa: E402
from rredcot.reporting.rendered_docs import write_or_check  # noqa: E402

DOC = REPO / "docs" / "paper_budget.md"
CONFIGS = ("paper_qwen3_4b", "paper_r1_distill_1p5b")
TARGETS = ("all", "results/aime24_table.csv")
CHECKPOINT_BYTES = 2 + 4 + 4 + 4  # bf16 weights, fp32 master weights, Adam m and v
GB = 1e9


def dry_run_jobs(stem: str) -> list[dict[str, Any]]:
    """Every job of the config's dry run: rule, wildcards, GPUs, wall-time limit (minutes),
    and its `--params` (training runs)."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), *TARGETS]
    cmd += ["-n", "--printshellcmds", "--cores", "512", "--configfile"]
    cmd += [str(REPO / "config.yaml"), str(REPO / "configs" / f"{stem}.yaml")]
    env = {k: v for k, v in os.environ.items() if k != "RREDCOT_MIRROR"}
    with tempfile.TemporaryDirectory() as work:
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, env=env, check=False)
    if proc.returncode:
        raise RuntimeError(f"dry run of {stem} failed:\n{proc.stderr[-3000:]}")
    jobs: list[dict[str, Any]] = []
    for line in proc.stdout.splitlines():
        head = re.fullmatch(r"(?:local)?rule (\w+):", line)
        if head:
            jobs.append({"rule": head.group(1), "resources": {}, "shell": ""})
        elif jobs and line.strip().startswith("resources: "):
            pairs = line.strip().removeprefix("resources: ").split(", ")
            jobs[-1]["resources"] = dict(p.split("=", 1) for p in pairs if "=" in p)
        elif jobs and line.startswith("Shell command:"):
            jobs[-1]["shell"] = line
    return [j for j in jobs if j["shell"] != "Shell command: None"]


def gpu_hours(jobs: list[dict[str, Any]]) -> dict[str, tuple[int, int, float, float]]:
    """rule -> (jobs, GPUs per job, wall-time limit per job in hours, GPU-hours) of the rules
    that take GPUs."""
    table: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for job in jobs:
        gpus = int(job["resources"].get("gpu", 0))
        if gpus:
            table[job["rule"]].append((gpus, int(job["resources"]["runtime"]) / 60))
    out = {}
    for rule, rows in sorted(table.items()):
        gpus, hours = rows[0]
        out[rule] = (len(rows), gpus, hours, sum(g * h for g, h in rows))
    return out


def lora_params(cfg: Mapping[str, Any], r: int) -> int:
    """Trainable parameters of LoRA rank `r` on every linear layer of a decoder block (q, k,
    v, o, gate, up, down): r x (in + out) each."""
    hidden, inter = cfg["hidden_size"], cfg["intermediate_size"]
    heads, kv = (
        cfg["num_attention_heads"],
        cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
    )
    head_dim = cfg.get("head_dim") or hidden // heads
    q, k = heads * head_dim, kv * head_dim
    pairs = [(hidden, q), (hidden, k), (hidden, k), (q, hidden)]
    pairs += [(hidden, inter), (hidden, inter), (inter, hidden)]
    return cfg["num_hidden_layers"] * r * sum(a + b for a, b in pairs)


def run_disk(values: Mapping[str, Any], name: str) -> tuple[float, float, int]:
    """(GB per checkpoint, GB the run keeps at most, trained parameters) of one training run."""
    params = KNOWN_MODELS[name].num_params
    lora = values.get("lora")
    trained = lora_params(KNOWN_CONFIGS[name], lora["r"]) if lora else params
    checkpoint = trained * CHECKPOINT_BYTES / GB
    final = params * 2 / GB + (trained * 2 / GB if lora else 0)  # merged weights (+ adapter)
    return checkpoint, values["save_total_limit"] * checkpoint + final, trained


def section(stem: str) -> list[str]:
    config = yaml.safe_load((REPO / "configs" / f"{stem}.yaml").read_text())
    name = config["model"]["name_or_path"]
    jobs = dry_run_jobs(stem)
    hours = gpu_hours(jobs)
    lines = [
        f"## `configs/{stem}.yaml` ({name})",
        "",
        "| rule | jobs | GPUs per job | wall-time limit per job (h) | GPU-hours |",
        "|---|---|---|---|---|",
    ]
    for rule, (n, gpus, limit, total) in hours.items():
        lines.append(f"| {rule} | {n} | {gpus} | {limit:g} | {total:,.0f} |")
    grand = sum(t for *_, t in hours.values())
    lines += [f"| **all** | | | | **{grand:,.0f}** |", ""]
    runs = defaultdict(list)
    for job in jobs:
        if job["rule"] == "train_policy":
            values = json.loads(re.search(r"--params '([^']*)'", job["shell"]).group(1))
            runs[values["method"]].append(values)
    lines += [
        "| method | runs | trained parameters | GB per checkpoint | GB kept per run | GB all |",
        "|---|---|---|---|---|---|",
    ]
    disk = 0.0
    for method, values in sorted(runs.items()):
        checkpoint, kept, trained = run_disk(values[0], name)
        disk += kept * len(values)
        lines.append(
            f"| {method} | {len(values)} | {trained:,} | {checkpoint:.1f} | {kept:.1f} | "
            f"{kept * len(values):.0f} |"
        )
    base = KNOWN_MODELS[name].num_params * 2 / GB
    lines += [
        f"| base model (bf16) | 1 | | | | {base:.0f} |",
        f"| **all** | | | | | **{disk + base:,.0f}** |",
        "",
    ]
    return lines


def render() -> str:
    head = __doc__.split("\n\n", 2)[2].strip()
    lines = [
        "# Paper configs: GPU-hours and disk",
        "",
        "Written by `python scripts/paper_budget.py`.",
        "",
    ]
    lines += [head, ""]
    for stem in CONFIGS:
        lines += section(stem)
    return "\n".join(lines)


def main() -> None:
    write_or_check(DOC, render, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
