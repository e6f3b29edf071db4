"""Does the base model depend on the machine? Two SFT runs that differ only in thread count.

    python dev/sft_thread_stability.py --out /tmp/sft_threads [--config config.yaml]

Builds the default's world, runs the `sft_base_model` step twice with the config's SFT
settings, once with 1 and once with 2 torch threads (summation order, hence float rounding,
differs), at the same time, then evaluates both bases on the held-out split with its
evaluation protocol (k samples at the RL temperature, the same sampling seed) and prints
pass@1 of each, their paired difference with a bootstrap 95% CI over problems, the step at
which each found its transition, and the held-out checks. The issue's acceptance: the two
in-distribution pass@1 within 0.03.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rredcot.evaluation.paired import paired_bootstrap  # noqa: E402
from rredcot.models.loading import load_model, load_tokenizer  # noqa: E402
from rredcot.tasks import get_task  # noqa: E402
from rredcot.training.curves import CurveSettings, evaluate_policy  # noqa: E402


def step(module: str, args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", f"rredcot.steps.{module}", *args]
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    p.add_argument("--split", default="synth_id")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = p.parse_args()
    torch.set_num_threads(1)  # the evaluations; the SFT runs set their own
    config = yaml.safe_load(args.config.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    world = args.out / "world"
    if not (world / "train.parquet").is_file():
        proc = step(
            "synthetic_world",
            ["--params", json.dumps(config["world"]), "--out-dir", str(world)],
            args.out / "world.log",
        )
        if proc.wait():
            raise SystemExit(f"synthetic_world failed: see {args.out / 'world.log'}")
    settings = {"seed": config["seed"], "arch": config["model"]["arch"], "sft": config["sft"]}
    runs = {}
    for threads in args.threads:
        out = args.out / f"base_threads{threads}"
        if not (out / "sft_metrics.json").is_file():
            runs[threads] = step(
                "sft_base_model",
                ["--train", str(world / "train.parquet"), "--params", json.dumps(settings),
                 "--threads", str(threads), "--out", str(out)],
                args.out / f"sft_threads{threads}.log",
            )  # fmt: skip
    for threads, proc in runs.items():
        if proc.wait():
            raise SystemExit(f"SFT with {threads} thread(s) failed: see its log in {args.out}")
    curve = CurveSettings.from_evaluation(config["evaluation"], args.split, 1, config["seed"])
    problems = pl.read_parquet(world / f"{args.split}.parquet")
    per_problem = {}
    for threads in args.threads:
        base = args.out / f"base_threads{threads}"
        metrics = json.loads((base / "sft_metrics.json").read_text())
        rewards = evaluate_policy(
            load_model(base), load_tokenizer(base), get_task("synthetic"), problems, curve
        )
        scores = rewards.group_by("problem_id").agg(pl.col("reward").mean()).sort("problem_id")
        per_problem[threads] = scores["reward"].to_numpy()
        print(
            f"threads={threads}: {args.split} pass@1 {scores['reward'].mean():.3f} "
            f"(k={curve.samples_per_problem}, T={curve.temperature}); transition at step "
            f"{metrics.get('train/transition_step')}, {metrics['train/steps']} steps, "
            f"{metrics['time/sft_seconds']:.0f} s; held-out p_reference "
            f"{metrics.get('heldout/p_reference', float('nan')):.3f}"
        )
        for check in metrics.get("heldout_history", []):
            print("   ", json.dumps({k: round(v, 4) for k, v in check.items()}))
    if len(args.threads) < 2:
        return
    a, b = (per_problem[t] for t in args.threads[:2])
    diff = paired_bootstrap(np.atleast_2d(a), np.atleast_2d(b))
    print(
        f"pass@1 difference threads {args.threads[0]} - {args.threads[1]}: {diff.mean:+.3f} "
        f"(95% CI {diff.ci_low:+.3f} … {diff.ci_high:+.3f}); |difference| <= 0.03: "
        f"{abs(diff.mean) <= 0.03}"
    )


if __name__ == "__main__":
    main()
