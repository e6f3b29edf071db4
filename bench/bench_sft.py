"""Cost of the SFT warm-up: wall time and training tokens/s of the tiny model on the world.

    python bench/bench_sft.py                       # DEFAULT_TINY_ARCH, BENCH_SFT
    python bench/bench_sft.py --config config.yaml  # model.arch, sft, world of a config
    python bench/bench_sft.py --config config.yaml --max-steps 50 --threads 2

Builds the tiny model, draws the world's train split, runs `run_sft` into a temporary directory
(or --out) and prints parameters, SFT seconds and tokens/s. A benchmark, not a test: it asserts
nothing. Timings depend on the machine and on what else runs on it (load average is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch
import yaml

from rredcot.data.synthetic import SplitSpec, WorldConfig, make_world
from rredcot.models.sft import SFTSettings, run_sft
from rredcot.models.tiny import DEFAULT_TINY_ARCH, build_tiny_model, count_parameters
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.tasks.synthetic import SyntheticTask

DEFAULT_WORLD = {"seed": 1234, "n_given": 2, "train": {"n": 20000, "depths": [2, 3, 4, 5]}}
BENCH_SFT = {"max_steps": 1000, "anneal_steps": None}
"""The benchmark's run: a fixed length without the held-out check (comparable across versions;
`SFTSettings`' defaults are config.yaml's annealed run, which needs held-out problems)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, help="a workflow config (model.arch, sft, world)")
    parser.add_argument("--arch", type=json.loads, help="JSON model.arch (overrides --config)")
    parser.add_argument("--sft", type=json.loads, default={}, help="JSON sft overrides")
    parser.add_argument("--max-steps", type=int, help="override sft.max_steps")
    parser.add_argument("--train-n", type=int, help="override world.train.n")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="keep the checkpoint here (default: temporary)")
    args = parser.parse_args()

    config = yaml.safe_load(args.config.read_text()) if args.config else {}
    arch = args.arch or config.get("model", {}).get("arch") or DEFAULT_TINY_ARCH
    sft = {**config.get("sft", {}), **args.sft}
    if args.max_steps is not None:
        sft["max_steps"] = args.max_steps
    world = {**DEFAULT_WORLD, **config.get("world", {})}
    train = SplitSpec(**{**world["train"], **({"n": args.train_n} if args.train_n else {})})
    settings = SFTSettings(**{"seed": config.get("seed", args.seed), **BENCH_SFT, **sft})

    torch.set_num_threads(args.threads)
    world_config = WorldConfig(
        modulus=world.get("modulus", 10),
        n_given=world["n_given"],
        ops=tuple(world.get("ops", ("+", "-", "*"))),
        chain="any",
        shape="chain",
        avoid_misconception=None,
    )
    rows = make_world(train, {}, seed=world["seed"], config=world_config)["train"]
    task = SyntheticTask()
    tokenizer = build_byte_tokenizer()
    examples = [
        {
            "prompt": task.build_prompt(r["problem"], tokenizer),
            "completion": task.reference_completion(r),
        }
        for r in rows.iter_rows(named=True)
    ]
    model = build_tiny_model(arch, tokenizer, seed=settings.seed)
    print(f"arch {json.dumps(arch)}")
    print(f"sft {json.dumps(asdict(settings))}")
    print(f"parameters {count_parameters(model)}; train n={train.n} depths={train.depths}")
    print(f"threads {args.threads}; load average before {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        start_cpu = time.process_time()
        metrics = run_sft(model, tokenizer, examples, settings, args.out or Path(tmp))
        cpu = time.process_time() - start_cpu
    print(f"load average after {os.getloadavg()}")
    print(
        f"SFT {metrics['train/steps']} steps: {metrics['time/sft_seconds']:.1f} s wall, "
        f"{cpu:.1f} s CPU, {metrics['time/tokens_per_second']:.0f} tokens/s "
        f"({metrics['train/tokens']} tokens), loss {metrics['loss/first']:.3f} -> "
        f"{metrics['loss/final']:.3f}"
    )


if __name__ == "__main__":
    main()
