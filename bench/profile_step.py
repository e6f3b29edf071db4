"""Where the time of a training step and of an evaluation goes, on the embedded default.

    python bench/profile_step.py results/models/base                  # grpo, 4 steps
    python bench/profile_step.py results/models/base --method rredcot --steps 4
    python bench/profile_step.py results/models/base --evaluation     # synth_id evaluation
    python bench/profile_step.py results/models/base --method rredcot \
        --override '{"rredcot": {"layout": "packed"}}'                  # a setting changed

A step: one run of `--method` with the default's settings (`config.yaml` through
`rredcot.workflow.run_params.run_settings`, the workflow's builder) on the world's `rl` split, its
`--warmup` first steps untimed, under cProfile (`--override`: a JSON block merged into the
run's settings, as a `training.variants` entry is); printed: seconds per step in generation (the
policy's `generate`), rewards, the method's credit, the loss forward, the backward, the
optimizer and the rest (TRL's and the Trainer's bookkeeping), each with its share.
An evaluation: the held-out split's protocol (`evaluation` with its `per_benchmark` entry, as
the `generate` rule and the learning curves sample it) on the base, with `--batch-sizes`; for
each, the wall seconds and the share of the model's forward (and within it the key/value cache
update, the attention and the linear layers), the stop-string check and the sampler.
Not a test: it asserts nothing; cProfile adds some overhead to Python-heavy parts.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import tempfile
import time
from pathlib import Path

import polars as pl
import torch
import yaml
from transformers import TrainerCallback

from rredcot.generation.base import SamplingParams
from rredcot.generation.hf import HFBackend
from rredcot.models.loading import load_model, load_tokenizer
from rredcot.tasks import get_task
from rredcot.training import TrainingSettings, train_policy
from rredcot.training.curves import CurveSettings
from rredcot.workflow.run_params import merged, run_settings

STEP_PHASES: dict[str, tuple[str, str]] = {
    # phase: (part of the file's path, function name) whose cumulative time is the phase's
    "generation": ("transformers/generation/utils.py", "generate"),
    "rewards": ("rredcot/training/trainer.py", "_calculate_rewards"),
    "credit": ("rredcot/training/methods/", "advantages"),
    "loss forward": ("trl/trainer/grpo_trainer.py", "compute_loss"),
    "backward": ("torch/_tensor.py", "backward"),
    "optimizer": ("torch/optim/optimizer.py", "wrapper"),
}
EVAL_PHASES: dict[str, tuple[str, str]] = {
    "model forward": ("models/qwen3/modeling_qwen3.py", "forward"),
    "  cache update": ("transformers/cache_utils.py", "update"),
    "  attention": ("~", "<built-in method torch._C._nn.scaled_dot_product_attention>"),
    "  linear layers": ("~", "<built-in method torch._C._nn.linear>"),
    "stop-string check": ("rredcot/generation/hf.py", "__call__"),
    "sampler": ("transformers/generation/logits_process.py", "__call__"),
}


def cumulative(stats: pstats.Stats, path_part: str, name: str) -> float:
    """Largest cumulative seconds among the functions `name` in files whose path holds
    `path_part` (the outermost call when a name recurses or nests, e.g. the model's forward)."""
    found = [
        ct
        for (file, _, func), (_, _, _, ct, _) in stats.stats.items()  # type: ignore[attr-defined]
        if func == name and path_part in file
    ]
    return max(found, default=0.0)


class StepTimer(TrainerCallback):
    """Wall seconds of the steps after the warm-up (on_step_begin → on_step_end)."""

    def __init__(self, warmup: int, profiler: cProfile.Profile) -> None:
        self.warmup, self.profiler = warmup, profiler
        self.seconds: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201 (HF's signature)
        if state.global_step >= self.warmup:
            self.profiler.enable()
            self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201 (HF's signature)
        if state.global_step > self.warmup:
            self.seconds.append(time.perf_counter() - self._start)
            self.profiler.disable()


def report(title: str, seconds: float, phases: dict[str, float]) -> None:
    print(f"{title}: {seconds:.3f} s")
    for phase, value in phases.items():
        print(f"  {phase:<20} {value:8.3f} s  {value / seconds:6.1%}")


def profile_step(args: argparse.Namespace, config: dict) -> None:
    table = pl.read_parquet(args.world / "rl.parquet")
    settings = run_settings(
        config, args.method, seed=1, task="synthetic", reference_column="solution"
    )
    settings = merged(settings, json.loads(args.override))
    settings.update(max_steps=args.warmup + args.steps, save_steps=10_000)
    settings.pop("curve", None)
    profiler = cProfile.Profile()
    timer = StepTimer(args.warmup, profiler)
    with tempfile.TemporaryDirectory(prefix="profile_step_") as out:
        train_policy(
            load_model(args.model),
            load_tokenizer(args.model),
            table,
            TrainingSettings.from_dict(settings),
            out,
            callbacks=[timer],
        )
    stats = pstats.Stats(profiler)
    steps = len(timer.seconds)
    per_step = {p: cumulative(stats, *where) / steps for p, where in STEP_PHASES.items()}
    per_step["rest"] = sum(timer.seconds) / steps - sum(per_step.values())
    report(f"{args.method} step (mean of {steps})", sum(timer.seconds) / steps, per_step)


def profile_evaluation(args: argparse.Namespace, config: dict) -> None:
    # the split's protocol, built as the learning curves build it (`every` is unused here)
    ev = CurveSettings.from_evaluation(
        config["evaluation"], args.split, every=1, seed=config["seed"]
    )
    task = get_task("synthetic")
    problems = pl.read_parquet(args.world / f"{args.split}.parquet")
    params = SamplingParams(
        n=ev.samples_per_problem,
        temperature=ev.temperature,
        top_p=ev.top_p,
        max_new_tokens=ev.max_new_tokens,
        seed=ev.seed,  # the workflow's EVAL_SEED
        stop_strings=tuple(task.stop_strings),
    )
    model, tokenizer = load_model(args.model), load_tokenizer(args.model)
    prompts = [task.build_prompt(q, tokenizer) for q in problems["problem"].to_list()]
    for batch_size in args.batch_sizes:
        backend = HFBackend(model, tokenizer, batch_size=batch_size, show_progress=False)
        backend.generate(prompts[:1], SamplingParams(max_new_tokens=4))  # warm-up
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.enable()
        completions = backend.generate(prompts, params)
        profiler.disable()
        seconds = time.perf_counter() - start
        stats = pstats.Stats(profiler)
        phases = {p: cumulative(stats, *where) for p, where in EVAL_PHASES.items()}
        tokens = sum(c.num_tokens for c in completions)
        report(
            f"{args.split} evaluation, batch {batch_size} ({len(completions)} samples, "
            f"{tokens} new tokens)",
            seconds,
            phases,
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("model", type=Path, help="base checkpoint, e.g. results/models/base")
    p.add_argument("--world", type=Path, default=Path("results/data/world"))
    p.add_argument("--config", type=Path, default=Path("config.yaml"))
    p.add_argument("--method", default="grpo")
    p.add_argument("--steps", type=int, default=4, help="profiled steps")
    p.add_argument("--warmup", type=int, default=1, help="unprofiled first steps")
    p.add_argument("--override", default="{}", help="JSON merged into the run's settings")
    p.add_argument("--evaluation", action="store_true", help="profile an evaluation instead")
    p.add_argument("--split", default="synth_id", help="--evaluation: the held-out split")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[64])
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    config = yaml.safe_load(args.config.read_text())
    if args.evaluation:
        profile_evaluation(args, config)
    else:
        profile_step(args, config)


if __name__ == "__main__":
    main()
