"""GPU smoke check: every training method for a few steps, then an evaluation, on one CUDA GPU.

vLLM is not installed on the lent GPU machine, so only the HF backend is exercised: rollouts
inside TRL's trainer with `model.generate`, and the `hf` evaluation backend. The vLLM paths
(`training.use_vllm`, `evaluation.backend: vllm`) are not run here.

    python scripts/gpu_smoke.py                      # CUDA: quick SFT base, 5 methods, evaluation
    python scripts/gpu_smoke.py --device cpu --tiny  # the same code on the CPU, in seconds

Steps: a synthetic world; a briefly SFT-ed tiny policy (`bench_training.quick_base`; the SFT
warm-up always trains on the CPU); one short run per method with `TrainingSettings(device=
"auto")` (accelerate's device: the GPU); each method's policy and the base evaluated on
`synth_id` through `backend_from_settings`, the `generate` step's own backend. Prints per method
the median step seconds and tokens/s after the warm-up step, the credit seconds and the peak GPU
memory, and per policy pass@1 avg@k with the generation throughput. Checks that the trained
model and the evaluation model really sat on the requested device. Exits 2 without CUDA.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_training import quick_base, step_times  # noqa: E402 (scripts/ is not a package)

from rredcot.data.synthetic import SplitSpec, WorldConfig, make_world  # noqa: E402
from rredcot.generation import SamplingParams, backend_from_settings  # noqa: E402
from rredcot.models.loading import load_model, load_tokenizer  # noqa: E402
from rredcot.tasks import get_task  # noqa: E402
from rredcot.training import METHODS, TrainingSettings, train_policy  # noqa: E402


@dataclass(frozen=True)
class Sizes:
    """How much work each stage does."""

    sft_steps: int
    train_problems: int
    eval_problems: int
    samples_per_problem: int
    eval_max_new_tokens: int
    eval_batch_size: int
    steps: int  # optimizer steps per method; the first is a warm-up, untimed unless alone
    prompts_per_step: int
    num_generations: int
    max_completion_length: int
    num_segments: int
    mc_rollouts: int
    mc_budget: int
    localization_max_new_tokens: int


# One H200: ~4 minutes all told (most of it the CPU SFT, MC rollouts and Python start-up).
GPU_SIZES = Sizes(
    sft_steps=150,
    train_problems=2048,
    eval_problems=200,
    samples_per_problem=4,
    eval_max_new_tokens=128,
    eval_batch_size=256,
    steps=4,
    prompts_per_step=8,
    num_generations=8,
    max_completion_length=128,
    num_segments=4,
    mc_rollouts=4,
    mc_budget=128,
    localization_max_new_tokens=32,
)
# --tiny: the same code path in seconds on a CPU (numbers mean nothing at this size).
TINY_SIZES = Sizes(
    sft_steps=2,
    train_problems=64,
    eval_problems=4,
    samples_per_problem=1,
    eval_max_new_tokens=16,
    eval_batch_size=8,
    steps=1,
    prompts_per_step=1,
    num_generations=2,
    max_completion_length=16,
    num_segments=2,
    mc_rollouts=1,
    mc_budget=8,
    localization_max_new_tokens=4,
)


def check_device(device: str) -> None:
    """Exit with a clear message when CUDA was asked for and torch cannot see a GPU."""
    print(f"torch {torch.__version__} (CUDA build {torch.version.cuda}); device {device}")
    if device != "cuda":
        return
    if not torch.cuda.is_available():
        print(
            "gpu_smoke: torch.cuda.is_available() is False: no usable CUDA GPU (a CPU-only torch "
            "build, no driver, or CUDA_VISIBLE_DEVICES empty). Run with --device cpu --tiny to "
            "check the code path on the CPU.",
            file=sys.stderr,
        )
        sys.exit(2)
    props = torch.cuda.get_device_properties(0)
    print(f"GPU 0: {props.name}, {props.total_memory / 2**30:.0f} GiB")


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def method_settings(method: str, sizes: Sizes, device: str, bf16: bool) -> TrainingSettings:
    """The short run's settings; rrpo/srpo take their official loss (as the workflow does)."""
    values = {
        "method": method,
        "seed": 0,
        "max_steps": sizes.steps,
        "prompts_per_step": sizes.prompts_per_step,
        "num_generations": sizes.num_generations,
        "max_completion_length": sizes.max_completion_length,
        "save_steps": 10_000,
        "device": "auto" if device == "cuda" else "cpu",
        "bf16": bf16,
        "segmentation": {"num_segments": sizes.num_segments},
        "mc": {"n_rollouts": sizes.mc_rollouts, "budget": sizes.mc_budget},
        "resets": {"localization_max_new_tokens": sizes.localization_max_new_tokens},
    }
    if method in ("rrpo", "srpo"):
        values.update(loss_type="grpo", kl_beta=0.0)
    return TrainingSettings.from_dict(values)


def throughput(rows: list[dict[str, float]]) -> tuple[float, float, float]:
    """Median (step seconds, tokens/s, credit seconds) over the steps after the warm-up (over
    the only step when there is one); tokens are those TRL counts as seen (prompt + completion)."""
    seen = [0.0, *(r["tokens/seen"] for r in rows)]
    steps = [(r, r["tokens/seen"] - before) for r, before in zip(rows, seen, strict=False)]
    timed = steps[1:] or steps
    return (
        statistics.median(r["time/step_seconds"] for r, _ in timed),
        statistics.median(tokens / r["time/step_seconds"] for r, tokens in timed),
        statistics.median(r.get("credit/seconds", 0.0) for r, _ in timed),
    )


def train_all(
    base: Path,
    world: dict[str, pl.DataFrame],
    methods: list[str],
    sizes: Sizes,
    device: str,
    bf16: bool,
    work: Path,
) -> dict[str, Path]:
    """One short run per method; prints its throughput and returns each final policy."""
    finals = {}
    header = ("method", "step s", "tokens/s", "credit s", "peak GiB", "wall s")
    print("{:>8} {:>8} {:>10} {:>9} {:>9} {:>7}".format(*header))
    for method in methods:
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        model = load_model(base)
        out = work / f"train_{method}"
        start = time.perf_counter()
        settings = method_settings(method, sizes, device, bf16)
        train_policy(model, load_tokenizer(base), world["train"], settings, out)
        wall = time.perf_counter() - start
        if model.device.type != device:
            raise RuntimeError(f"{method}: the policy trained on {model.device}, not on {device}")
        step_s, tok_s, credit = throughput(step_times(out))
        peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
        print(
            f"{method:>8} {step_s:>8.2f} {tok_s:>10,.0f} {credit:>9.2f} {peak:>9.2f} {wall:>7.1f}",
            flush=True,
        )
        finals[method] = out / "final"
    return finals


def evaluate(policies: dict[str, Path], problems: pl.DataFrame, sizes: Sizes, device: str) -> None:
    """pass@1 avg@k of each policy on `problems` and its generation throughput."""
    task = get_task("synthetic")
    sampling = SamplingParams(
        n=sizes.samples_per_problem,
        temperature=0.6,
        top_p=0.95,
        max_new_tokens=sizes.eval_max_new_tokens,
        seed=0,
        stop_strings=tuple(task.stop_strings),
    )
    settings = {"backend": "hf", "device": device, "dtype": "float32"}
    gold = problems["answer"].to_list()
    print(f"{'policy':>8} {'pass@1':>7} {'new tokens':>11} {'gen s':>7} {'tokens/s':>10}")
    for name, path in policies.items():
        backend = backend_from_settings(
            settings, str(path), batch_size=sizes.eval_batch_size, show_progress=False
        )
        if backend.model.device.type != device:
            raise RuntimeError(f"{name}: evaluation model on {backend.model.device}, not {device}")
        tokenizer = load_tokenizer(path)
        prompts = [task.build_prompt(q, tokenizer) for q in problems["problem"].to_list()]
        sync(device)
        start = time.perf_counter()
        completions = backend.generate(prompts, sampling)
        sync(device)
        seconds = time.perf_counter() - start
        tokens = sum(c.num_tokens for c in completions)
        rewards = [task.grade(c.text, gold[c.prompt_index]).reward for c in completions]
        print(
            f"{name:>8} {statistics.fmean(rewards):>7.3f} {tokens:>11,} {seconds:>7.2f} "
            f"{tokens / seconds:>10,.0f}",
            flush=True,
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--tiny", action="store_true", help="minimal sizes (a CPU check in seconds)")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--bf16", action="store_true", help="bf16 mixed-precision training (GPU)")
    args = p.parse_args()
    if args.bf16 and args.device != "cuda":
        p.error("--bf16 needs --device cuda")
    check_device(args.device)
    sizes = TINY_SIZES if args.tiny else GPU_SIZES
    total = time.perf_counter()
    world = make_world(
        SplitSpec(n=sizes.train_problems, depths=[2, 3, 4, 5]),
        {"synth_id": SplitSpec(n=sizes.eval_problems, depths=[3, 4, 5])},
        seed=1234,
        config=WorldConfig(),
    )
    work = Path(tempfile.mkdtemp(prefix="gpu_smoke_"))
    start = time.perf_counter()
    base = quick_base(work / "base", world["train"], sizes.sft_steps)
    print(f"base: {sizes.sft_steps} SFT steps (CPU) in {time.perf_counter() - start:.1f} s")
    timing = "the first untimed" if sizes.steps > 1 else "timed with its warm-up"
    print(
        f"training: {sizes.steps} step(s) per method ({timing}), {sizes.prompts_per_step} "
        f"problem(s) x {sizes.num_generations} responses, <= {sizes.max_completion_length} new "
        f"tokens; bf16 {args.bf16}"
    )
    finals = train_all(base, world, args.methods, sizes, args.device, args.bf16, work)
    print(
        f"evaluation: synth_id, {sizes.eval_problems} problems x {sizes.samples_per_problem} "
        f"samples, <= {sizes.eval_max_new_tokens} new tokens, hf backend"
    )
    evaluate({"base": base, **finals}, world["synth_id"], sizes, args.device)
    print(f"gpu_smoke: OK in {time.perf_counter() - total:.0f} s (outputs in {work})")


if __name__ == "__main__":
    main()
