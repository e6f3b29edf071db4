"""Step time of the training methods on the tiny model: rredcot / grpo and mc / rredcot.

    python scripts/bench_training.py                      # quick SFT base, then every method
    python scripts/bench_training.py --model results/models/sft --steps 8

Each method trains from the same base with the same settings and seed (same batch shape:
prompts × generations × max completion length) for `--warmup` + `--steps` optimizer steps; the
warm-up steps are not timed. A step's time is TRL's `step_time` (generation, rewards, credit,
forward and backward), read from the run's metrics.csv. The target of the paper is a RREDCoT
step at most 1.3x a GRPO step (our `rredcot/grpo`); MC sampling should cost far more.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
import time
from pathlib import Path

import torch

from rredcot.data.synthetic import SplitSpec, WorldConfig, make_world
from rredcot.models.loading import load_model, load_tokenizer
from rredcot.models.sft import SFTSettings, run_sft
from rredcot.models.tiny import DEFAULT_TINY_ARCH, build_tiny_model
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.tasks import get_task
from rredcot.training import TrainingSettings, train_policy


def quick_base(out: Path, train_table, sft_steps: int) -> Path:
    """A briefly SFT-ed tiny policy (the default arch) that writes the synthetic format."""
    task = get_task("synthetic")
    tokenizer = build_byte_tokenizer()
    model = build_tiny_model(DEFAULT_TINY_ARCH, tokenizer, seed=0)
    examples = [
        {"prompt": task.build_prompt(r["problem"]), "completion": task.reference_completion(r)}
        for r in train_table.iter_rows(named=True)
    ]
    settings = SFTSettings(max_steps=sft_steps, batch_size=32, max_length=160, logging_steps=100)
    run_sft(model, tokenizer, examples, settings, out)
    return out


def step_times(out: Path) -> list[dict[str, float]]:
    with (out / "metrics.csv").open() as fh:
        return [{k: float(v) for k, v in row.items() if v != ""} for row in csv.DictReader(fh)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", type=Path, help="base checkpoint (default: a quick SFT)")
    p.add_argument("--sft-steps", type=int, default=150)
    p.add_argument("--methods", nargs="+", default=["grpo", "rredcot", "mc"])
    p.add_argument("--steps", type=int, default=4, help="timed steps per method")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps per method")
    p.add_argument("--prompts", type=int, default=4, help="problems per step")
    p.add_argument("--generations", type=int, default=8, help="responses per problem")
    p.add_argument("--max-completion-length", type=int, default=128)
    p.add_argument("--num-segments", type=int, default=4)
    p.add_argument("--mc-rollouts", type=int, default=8, help="N per state")
    p.add_argument("--mc-budget", type=int, default=128, help="L new tokens per rollout")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    world = make_world(SplitSpec(n=512, depths=[2, 3, 4, 5]), {}, seed=1234, config=WorldConfig())
    table = world["train"]
    work = Path(tempfile.mkdtemp(prefix="bench_training_"))
    if args.model is None:
        start = time.perf_counter()
        args.model = quick_base(work / "base", table, args.sft_steps)
        print(f"base: {args.sft_steps} SFT steps in {time.perf_counter() - start:.1f} s")
    common = {
        "seed": 0,
        "max_steps": args.warmup + args.steps,
        "prompts_per_step": args.prompts,
        "num_generations": args.generations,
        "max_completion_length": args.max_completion_length,
        "save_steps": 10_000,
        "segmentation": {"num_segments": args.num_segments},
        "mc": {"n_rollouts": args.mc_rollouts, "budget": args.mc_budget},
    }
    print(
        f"batch: {args.prompts} problems x {args.generations} responses, <= "
        f"{args.max_completion_length} new tokens; K = {args.num_segments}; MC N = "
        f"{args.mc_rollouts}, L = {args.mc_budget}; {args.steps} timed steps after "
        f"{args.warmup} warm-up; {args.threads} thread(s)"
    )
    mean: dict[str, float] = {}
    for method in args.methods:
        out = work / method
        settings = TrainingSettings.from_dict({**common, "method": method})
        train_policy(load_model(args.model), load_tokenizer(args.model), table, settings, out)
        timed = step_times(out)[args.warmup :]
        seconds = [r["time/step_seconds"] for r in timed]
        mean[method] = statistics.mean(seconds)
        credit = statistics.mean(r["credit/seconds"] for r in timed)
        tokens = statistics.mean(r["credit/forward_tokens"] for r in timed)
        length = statistics.mean(r["tokens/completion_mean"] for r in timed)
        print(
            f"{method:>8}: {mean[method]:.3f} s/step (sd {statistics.pstdev(seconds):.3f}); "
            f"credit {credit:.3f} s, {tokens:,.0f} forward tokens; mean completion "
            f"{length:.1f} tokens"
        )
    if "grpo" in mean and "rredcot" in mean:
        print(f"rredcot / grpo step time: {mean['rredcot'] / mean['grpo']:.2f} (target <= 1.3)")
    if "rredcot" in mean and "mc" in mean:
        print(f"mc / rredcot step time: {mean['mc'] / mean['rredcot']:.2f}")


if __name__ == "__main__":
    main()
