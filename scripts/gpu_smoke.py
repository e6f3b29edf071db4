"""GPU smoke check: every training method for a few steps, then an evaluation, on one CUDA GPU.

vLLM is not installed on the lent GPU machine, so this is the vLLM-less path: rollouts inside
TRL's trainer with `model.generate` (`use_vllm` false: MC's rollouts on the HF backend too),
and the `hf` evaluation backend. The vLLM paths (`training.use_vllm`, `evaluation.backend:
vllm`) are not run here. LoRA (`training.lora`) is: by default RREDCoT and SRPO train once more
with adapters (`--lora-methods`), and their merged final/ is evaluated like any policy.

    python scripts/gpu_smoke.py                      # CUDA: quick SFT base, 5 methods, evaluation
    python scripts/gpu_smoke.py --device cpu --tiny  # the same code on the CPU, in seconds

Steps: a synthetic world; a briefly SFT-ed tiny policy (`bench_training.quick_base`; the SFT
warm-up always trains on the CPU); one short run per method with `TrainingSettings(device=
"auto")` (accelerate's device: the GPU), then the LoRA runs; each policy and the base evaluated on
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_training import quick_base, step_times  # noqa: E402 (bench/ is not a package)

from rredcot.data.synthetic import SplitSpec, WorldConfig, make_world  # noqa: E402
from rredcot.generation import SamplingParams, backend_from_settings  # noqa: E402
from rredcot.models.loading import load_model, load_tokenizer  # noqa: E402
from rredcot.tasks import get_task  # noqa: E402
from rredcot.training import METHODS, TrainingSettings, train_policy  # noqa: E402
from rredcot.training.method_registry import RESET_METHODS  # noqa: E402


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
    lora_rank: int


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
    lora_rank=16,
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
    lora_rank=2,
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


def method_settings(
    method: str, sizes: Sizes, device: str, bf16: bool, lora: bool = False
) -> TrainingSettings:
    """The short run's settings; rrpo/srpo take their official loss (as the workflow does);
    `lora`: adapters of rank `sizes.lora_rank` on all linear layers (α = r, as §6's 64/64)."""
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
    if method in RESET_METHODS:
        values.update(loss_type="grpo", kl_beta=0.0)
    if lora:
        values.update(lora={"r": sizes.lora_rank, "alpha": sizes.lora_rank}, learning_rate=5e-4)
    settings = TrainingSettings.from_dict(values)
    if settings.use_vllm:
        raise RuntimeError("gpu_smoke runs the vLLM-less path")
    return settings


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


def check_lora_final(final: Path, base: Path, name: str) -> None:
    """A LoRA run's final/: the merged policy plus final/adapter/; no weight but the adapted
    linear layers moved away from the base (none move when every advantage was 0)."""
    from rredcot.training.lora import ADAPTER_DIR

    if not (final / ADAPTER_DIR / "adapter_config.json").is_file():
        raise RuntimeError(f"{name}: no adapter in {final / ADAPTER_DIR}")
    before = load_model(base).state_dict()
    moved = [k for k, v in load_model(final).state_dict().items() if not torch.equal(v, before[k])]
    if not all(k.endswith("proj.weight") for k in moved):
        raise RuntimeError(f"{name}: merged weights moved outside the adapted layers: {moved[:5]}")
    print(f"{name}: final/ merged, {len(moved)} adapted weight matrices moved (none elsewhere)")


def train_all(
    base: Path,
    world: dict[str, pl.DataFrame],
    runs: list[tuple[str, bool]],
    sizes: Sizes,
    device: str,
    bf16: bool,
    work: Path,
) -> dict[str, Path]:
    """One short run per (method, lora); prints its throughput and returns each final policy."""
    finals = {}
    header = ("method", "step s", "tokens/s", "credit s", "peak GiB", "wall s")
    print("{:>12} {:>8} {:>10} {:>9} {:>9} {:>7}".format(*header))
    for method, lora in runs:
        name = f"{method}+lora" if lora else method
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        model = load_model(base)
        out = work / f"train_{name}"
        start = time.perf_counter()
        settings = method_settings(method, sizes, device, bf16, lora)
        train_policy(model, load_tokenizer(base), world["train"], settings, out)
        wall = time.perf_counter() - start
        if model.device.type != device:
            raise RuntimeError(f"{name}: the policy trained on {model.device}, not on {device}")
        step_s, tok_s, credit = throughput(step_times(out))
        peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
        print(
            f"{name:>12} {step_s:>8.2f} {tok_s:>10,.0f} {credit:>9.2f} {peak:>9.2f} {wall:>7.1f}",
            flush=True,
        )
        if lora:
            check_lora_final(out / "final", base, name)
        finals[name] = out / "final"
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
    print(f"{'policy':>12} {'pass@1':>7} {'new tokens':>11} {'gen s':>7} {'tokens/s':>10}")
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
            f"{name:>12} {statistics.fmean(rewards):>7.3f} {tokens:>11,} {seconds:>7.2f} "
            f"{tokens / seconds:>10,.0f}",
            flush=True,
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--tiny", action="store_true", help="minimal sizes (a CPU check in seconds)")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument(
        "--lora-methods",
        nargs="*",
        default=["rredcot", "srpo"],
        choices=list(METHODS),
        help="methods run once more with LoRA adapters (none: no LoRA run)",
    )
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
        config=WorldConfig(chain="any", shape="chain", avoid_misconception=None),
    )
    work = Path(tempfile.mkdtemp(prefix="gpu_smoke_"))
    start = time.perf_counter()
    base = quick_base(work / "base", world["train"], sizes.sft_steps)
    print(f"base: {sizes.sft_steps} SFT steps (CPU) in {time.perf_counter() - start:.1f} s")
    timing = "the first untimed" if sizes.steps > 1 else "timed with its warm-up"
    print(
        f"training: {sizes.steps} step(s) per method ({timing}), {sizes.prompts_per_step} "
        f"problem(s) x {sizes.num_generations} responses, <= {sizes.max_completion_length} new "
        f"tokens; bf16 {args.bf16}; rollouts with HF generate (use_vllm false); LoRA runs: "
        f"{args.lora_methods or 'none'}"
    )
    runs = [(m, False) for m in args.methods] + [(m, True) for m in args.lora_methods]
    finals = train_all(base, world, runs, sizes, args.device, args.bf16, work)
    print(
        f"evaluation: synth_id, {sizes.eval_problems} problems x {sizes.samples_per_problem} "
        f"samples, <= {sizes.eval_max_new_tokens} new tokens, hf backend"
    )
    evaluate({"base": base, **finals}, world["synth_id"], sizes, args.device)
    print(f"gpu_smoke: OK in {time.perf_counter() - total:.0f} s (outputs in {work})")


if __name__ == "__main__":
    main()
