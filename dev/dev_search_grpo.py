"""The development-seed search that froze the default's RL settings, on GRPO alone.

    python dev/dev_search_grpo.py --model results/models/base --world results/data/world \
        --out /tmp/grpo_search --every 25 --candidates p8_lr1e-4_warm p8_lr3e-4_warm p4_lr1e-4
    python dev/dev_search_grpo.py ... --method rredcot --candidates center_group center_none

Every candidate is a set of overrides of config.yaml's `training` block; each runs GRPO from
the base model with the development seed (training seed 0, which the workflow never reports)
on the world's RL split, and is scored on the held-out split (`synth_id`) with its evaluation
protocol (k samples at the RL temperature): base, every `--every` steps, and the final policy.
It prints, per candidate, the share of zero-variance groups over the first 20 steps, the
training reward at the start and the end, and held-out pass@1 along the run, so that a
setting is chosen by whether GRPO learns, never by how another method fares.
docs/archive/testbed_choices.md ("How the default's world, base and RL settings were chosen")
quotes its output.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rredcot.models.loading import load_model, load_tokenizer  # noqa: E402
from rredcot.tasks import get_task  # noqa: E402
from rredcot.training.curves import CurveSettings, evaluate_policy  # noqa: E402
from rredcot.workflow.run_params import run_settings  # noqa: E402

DEV_SEED = 0  # never in config.yaml's training.seeds
# Named candidates: overrides of config.yaml's `training` block.
# Every search candidate names all the settings it varies (100 steps, curve every 25), so
# the search reproduces whatever config.yaml froze afterwards.
# The `_warm` candidates were written with warmup_ratio 0.1, which the constant schedule
# ignored: they ran without warm-up, as they do here (a warm-up ratio with `constant` is now
# refused at load); the names stay those docs/archive/testbed_choices.md quotes.
_SEARCH = {"max_steps": 100, "warmup_ratio": 0.0}
CANDIDATES: dict[str, dict] = {
    "p4_lr3e-5": {**_SEARCH, "prompts_per_step": 4, "learning_rate": 3e-5},
    "p4_lr1e-4": {**_SEARCH, "prompts_per_step": 4, "learning_rate": 1e-4},
    "p8_lr1e-4_warm": {
        **_SEARCH,
        "prompts_per_step": 8,
        "learning_rate": 1e-4,
    },
    "p8_lr3e-4_warm": {
        **_SEARCH,
        "prompts_per_step": 8,
        "learning_rate": 3e-4,
    },
    "p8_lr1e-3_warm": {
        **_SEARCH,
        "prompts_per_step": 8,
        "learning_rate": 1e-3,
    },
    "frozen": {},  # config.yaml as it is (the confirmation run of the frozen settings)
    # After the GRPO settings were frozen in config.yaml: METHOD.md §4's credit.center, decided
    # on the development seed for the credit methods (--method rredcot / mc), as the issue asks.
    "center_group": {"credit": {"center": "group"}},
    "center_none": {"credit": {"center": "none"}},
}


def held_out(policy: Path, problems: pl.DataFrame, curve: CurveSettings) -> float:
    rewards = evaluate_policy(
        load_model(policy), load_tokenizer(policy), get_task("synthetic"), problems, curve
    )
    return float(rewards["reward"].mean())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--world", type=Path, required=True, help="directory of the world's parquets")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    p.add_argument("--candidates", nargs="+", default=list(CANDIDATES))
    p.add_argument("--set", type=json.loads, default={}, help="overrides for every candidate")
    p.add_argument("--split", default="synth_id")
    p.add_argument("--every", type=int, default=None, help="default: training.curve.every")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--method", default="grpo", help="grpo for the search; rredcot/mc: credit.center"
    )
    args = p.parse_args()
    torch.set_num_threads(args.threads)  # as many as the runs: more would oversubscribe
    config = yaml.safe_load(args.config.read_text())
    train_split = config["data"]["train"]
    every = args.every or config["training"]["curve"]["every"]
    curve = CurveSettings.from_evaluation(config["evaluation"], args.split, every, config["seed"])
    problems = pl.read_parquet(args.world / f"{args.split}.parquet")
    base_file = args.out / "base_heldout.json"  # the base is evaluated once per output dir
    if base_file.is_file():
        base = json.loads(base_file.read_text())["pass_at_1"]
    else:
        base = held_out(args.model, problems, curve)
        args.out.mkdir(parents=True, exist_ok=True)
        base_file.write_text(json.dumps({"pass_at_1": base}))
    print(f"base: held-out pass@1 {base:.3f} on {args.split} ({problems.height} problems)")
    rows = []
    for name in args.candidates:
        overrides = {**CANDIDATES.get(name, {}), **args.set}
        settings = run_settings(
            config,
            args.method,
            DEV_SEED,
            task="synthetic",
            variant=overrides,
            reference_column="solution",
        )
        run = args.out / name
        start = time.perf_counter()
        cmd = [
            sys.executable, "-m", "rredcot.steps.train_policy", "--model", str(args.model),
            "--train", str(args.world / f"{train_split}.parquet"), "--out", str(run),
            "--threads", str(args.threads), "--params", json.dumps(settings),
            "--curve-problems", str(args.world / f"{args.split}.parquet"),
            "--curve", json.dumps(curve.__dict__),
        ]  # fmt: skip
        run.mkdir(parents=True, exist_ok=True)
        with (args.out / f"{name}.log").open("w") as log:
            env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
            subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT, env=env)
        seconds = time.perf_counter() - start
        metrics = pl.read_csv(run / "metrics.csv")
        points = (
            pl.read_csv(run / "curve.csv")
            .group_by("step")
            .agg(pl.col("reward").mean())
            .sort("step")
        )
        final = held_out(run / "final", problems, curve)
        row = {
            "candidate": name,
            "method": args.method,
            "overrides": json.dumps(overrides),
            "zero_std_first20": float(metrics.head(20)["reward/frac_zero_std"].mean()),
            "train_reward_first10": float(metrics.head(10)["reward/mean"].mean()),
            "train_reward_last10": float(metrics.tail(10)["reward/mean"].mean()),
            "heldout_base": base,
            **{f"heldout_step{s}": r for s, r in points.iter_rows()},
            "heldout_final": final,
            "gain": final - base,
            "seconds": seconds,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    table = pl.DataFrame(rows, strict=False)
    args.out.mkdir(parents=True, exist_ok=True)
    table.write_csv(args.out / f"search_{args.method}.csv")
    with pl.Config(tbl_cols=-1, tbl_width_chars=200, float_precision=3):
        print(table.drop("overrides"))


if __name__ == "__main__":
    main()
