"""Step time of the training methods on the tiny model: rredcot / grpo and mc / rredcot.

    python bench/bench_training.py                      # quick SFT base, then every method
    python bench/bench_training.py --model results/models/base --steps 8
    python bench/bench_training.py --methods grpo rredcot rredcot:2 rredcot:1 --repeats 3

Each method trains from the same base with the same settings and seed (same batch shape:
prompts × generations × max completion length) for `--warmup` + `--steps` optimizer steps; the
warm-up steps are not timed. `rredcot:m` is RREDCoT with `suffixes: m` (m of the J reference
suffixes importance-sampled per state) instead of all of them; `rredcot:noprune` scores every
suffix in full (no pruning rounds, `estimator.rredcot.prune_nats: null`). With `--repeats R`
every method runs R times, the methods interleaved, so a change in machine load hits them alike.

A step's time is TRL's `step_time` (wall seconds: generation, rewards, credit, forward and
backward), read from the run's metrics.csv, and the process's CPU seconds over the same step
(less sensitive to other processes on a shared machine; with one thread CPU ≈ wall on an idle
one). Reported: medians over all timed steps. The project's target is a RREDCoT step at most
1.3x a GRPO step (`rredcot/grpo`; the paper reports 1.5–2x); MC sampling should cost far more.
Runs of different methods sample different completions after the first step (their policies
move apart), so `rredcot/grpo` also carries that drift; the last lines therefore also give, per
method, step / (step − credit seconds) on its own batches: the credit's share, drift-free.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from rredcot.data.synthetic import SplitSpec, WorldConfig, make_world
from rredcot.models.loading import load_model, load_tokenizer
from rredcot.models.sft import SFTSettings, run_sft
from rredcot.models.tiny import DEFAULT_TINY_ARCH, build_tiny_model
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.tasks import get_task
from rredcot.training import TrainingSettings, train_policy
from rredcot.training.method_registry import RESET_METHODS


def quick_base(out: Path, train_table, sft_steps: int) -> Path:
    """A briefly SFT-ed tiny policy (the default arch) that writes the synthetic format."""
    task = get_task("synthetic")
    tokenizer = build_byte_tokenizer()
    model = build_tiny_model(DEFAULT_TINY_ARCH, tokenizer, seed=0)
    examples = [
        {"prompt": task.build_prompt(r["problem"]), "completion": task.reference_completion(r)}
        for r in train_table.iter_rows(named=True)
    ]
    settings = SFTSettings(
        max_steps=sft_steps, batch_size=32, max_length=160, logging_steps=100, anneal_steps=None
    )
    run_sft(model, tokenizer, examples, settings, out)
    return out


def step_times(out: Path) -> list[dict[str, float]]:
    with (out / "metrics.csv").open() as fh:
        return [{k: float(v) for k, v in row.items() if v != ""} for row in csv.DictReader(fh)]


class CPUTime(TrainerCallback):
    """CPU seconds of this process per optimizer step (on_step_begin → on_step_end)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201 (HF's signature)
        self._start = time.process_time()

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201 (HF's signature)
        self.seconds.append(time.process_time() - self._start)


def method_settings(spec: str) -> tuple[str, dict]:
    """`rredcot:m` -> ("rredcot", {"rredcot": {"suffixes": m}}), `rredcot:noprune` -> every
    suffix scored in full (prune_nats None); any other name as is."""
    name, _, m = spec.partition(":")
    if not m:
        return name, {}
    if name != "rredcot" or not (m.isdigit() or m == "noprune"):
        raise ValueError(f"--methods: only rredcot takes ':m' or ':noprune', got {spec!r}")
    if m == "noprune":
        return name, {"rredcot": {"prune_nats": None}}
    return name, {"rredcot": {"suffixes": int(m)}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", type=Path, help="base checkpoint (default: a quick SFT)")
    p.add_argument("--sft-steps", type=int, default=150)
    p.add_argument(
        "--methods",
        nargs="+",
        default=["grpo", "rredcot", "mc"],
        help="method names; rredcot:m = rredcot with suffixes m; rredcot:noprune = no pruning",
    )
    p.add_argument("--repeats", type=int, default=1, help="runs per method, interleaved")
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

    world = make_world(
        SplitSpec(n=512, depths=[2, 3, 4, 5]),
        {},
        seed=1234,
        config=WorldConfig(chain="any", shape="chain", avoid_misconception=None),
    )
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
    wall: dict[str, list[float]] = {m: [] for m in args.methods}
    cpu: dict[str, list[float]] = {m: [] for m in args.methods}
    credit: dict[str, list[float]] = {m: [] for m in args.methods}
    tokens: dict[str, list[float]] = {m: [] for m in args.methods}
    for repeat in range(args.repeats):
        for spec in args.methods:
            name, extra = method_settings(spec)
            out = work / f"{spec.replace(':', '_')}-{repeat}"
            if name in RESET_METHODS:  # their official loss: on-policy per-sequence mean
                extra = {"loss_type": "grpo", "kl_beta": 0.0, **extra}
                # the embedded default's localization budget (config.yaml training.resets)
                extra.setdefault("resets", {"localization_max_new_tokens": 32})
            settings = TrainingSettings.from_dict({**common, **extra, "method": name})
            timer = CPUTime()
            train_policy(
                load_model(args.model),
                load_tokenizer(args.model),
                table,
                settings,
                out,
                callbacks=[timer],
            )
            timed = step_times(out)[args.warmup :]
            wall[spec] += [r["time/step_seconds"] for r in timed]
            cpu[spec] += timer.seconds[args.warmup :]
            credit[spec] += [r.get("credit/seconds", 0.0) for r in timed]
            tokens[spec] += [r.get("credit/forward_tokens", 0.0) for r in timed]
            print(
                f"{spec:>10} run {repeat}: wall {statistics.median(wall[spec][-len(timed) :]):.3f} "
                f"s/step, cpu {statistics.median(cpu[spec][-len(timed) :]):.3f} s/step",
                flush=True,
            )
    print(f"{'method':>10} {'wall s/step':>12} {'cpu s/step':>11} {'credit s':>9} {'tokens':>8}")
    med = {m: (statistics.median(wall[m]), statistics.median(cpu[m])) for m in args.methods}
    for m in args.methods:
        print(
            f"{m:>10} {med[m][0]:>12.3f} {med[m][1]:>11.3f} {statistics.median(credit[m]):>9.3f} "
            f"{statistics.median(tokens[m]):>8,.0f}"
        )
    for m in args.methods:
        if m.startswith("rredcot") and "grpo" in med:
            print(
                f"{m} / grpo step time: wall {med[m][0] / med['grpo'][0]:.2f}, cpu "
                f"{med[m][1] / med['grpo'][1]:.2f} (target <= 1.3)"
            )
    for m in args.methods:
        if m != "grpo" and statistics.median(credit[m]) > 0:
            # The same batches without the credit: what GRPO's step would have cost on them.
            same = statistics.median(w / (w - c) for w, c in zip(wall[m], credit[m], strict=True))
            print(f"{m} step / its own step without the credit (same batches): {same:.2f}")
    if "rredcot" in med and "mc" in med:
        print(
            f"mc / rredcot step time: wall {med['mc'][0] / med['rredcot'][0]:.2f}, cpu "
            f"{med['mc'][1] / med['rredcot'][1]:.2f}"
        )


if __name__ == "__main__":
    main()
