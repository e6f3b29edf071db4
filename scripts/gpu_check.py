"""One GPU check in one call: the kernels, the memory and the training path a paper run needs.

Each part is a row of one table (docs/cluster_and_gpu/gpu_check.md says what each row
checks); a part that cannot run here is a row marked `skipped` or `cannot` with the
reason, never a crash:

- **packages**, **device**: the versions this run uses (the lent GPU machine's own, older
  transformers included: `rredcot.training.trl_support.checkpointing_argument` picks the keyword its
  TrainingArguments has) and the device's real memory (what vLLM's share is a share of);
- **sdpa ...**: PyTorch's memory-efficient attention kernel at the paper's mask shapes (the
  padded training micro-batch, 2 rows of P + T = 512 + 25,000 tokens with its (rows, 1, L, L)
  mask, forward and backward; the credit's encoding step and continuation row), forced alone
  and by the default dispatch; the memory planner assumes this kernel (a math-kernel fallback
  holds the (rows, heads, L, L) attention weights: tens of GB a pass). CUDA only;
- **paper credit / paper train**: `scripts/gpu_paper_shape.py` at T = 25,000 (Qwen3-4B's shape,
  the paper config's credit budget, 2 training rows) against the planner's estimate;
- **train <method>**: every method of the paper config, its settings as the workflow builds
  them (`rredcot.workflow.run_params.run_settings`, LoRA for RRPO/SRPO) at a small size: the policy
  loaded as the train_policy step loads it (float32 masters unless LoRA; bf16 autocast on
  CUDA), gradient checkpointing, a real-size vocabulary (Qwen's 151,936 rows on a small SFT-ed
  model, so the trainer takes the branches real models take), two optimizer steps with a
  SIGTERM in the first (a scheduler's time limit: checkpoint-1 saved, `TrainingInterrupted`)
  and a rerun that resumes there and writes final/.

    python scripts/gpu_check.py                      # CUDA (bash scripts/gpu_check.sh)
    python scripts/gpu_check.py --device cpu --tiny  # the same code on the CPU, GPU parts skipped

Exits 1 when a row FAILED; stops starting parts once `--budget-s` has passed (they are
`skipped`), so the table is always printed.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
# gpu_paper_shape and memory_plan beside this file; bench_training's quick_base in bench/.
sys.path[:0] = [str(REPO / "scripts"), str(REPO / "bench")]
PAPER_CONFIG = REPO / "configs" / "paper_qwen3_4b.yaml"
PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "polars")
OPTIONAL = ("deepspeed", "vllm")
NEEDED = ("trl", "peft", "datasets", "polars")
"""Packages the training and paper-shape rows import; without one they are `cannot`."""
PAPER_LENGTH, PAPER_PROMPT = 25_000, 512  # T and the planner's PROMPT_TOKENS
HEADS, HEAD_DIM = 32, 128  # Qwen3-4B's query heads (K/V repeated to them under a mask)
REAL_VOCAB = 151_936  # Qwen2.5/Qwen3
RATIO_BAND = (0.75, 1.25)
"""Measured / planned peaks inside this band agree (the planner's CPU check uses ±25%)."""


@dataclass(frozen=True)
class Sizes:
    """How much work the training rows do."""

    sft_steps: int
    train_problems: int
    prompts_per_step: int
    num_generations: int
    per_device_batch_size: int
    max_completion_length: int
    num_segments: int
    mc_rollouts: int
    mc_budget: int
    localization_max_new_tokens: int


GPU_SIZES = Sizes(100, 1024, 8, 8, 16, 128, 4, 4, 128, 32)
TINY_SIZES = Sizes(2, 64, 1, 2, 2, 16, 2, 1, 8, 4)


@dataclass(frozen=True)
class Row:
    """One line of the table: what was checked, its status and what was seen."""

    check: str
    status: str  # ok | FAILED | DIFFERS | skipped | cannot
    detail: str


def missing_packages() -> list[str]:
    """The `NEEDED` packages this Python lacks."""
    out = []
    for name in NEEDED:
        try:
            version(name)
        except PackageNotFoundError:
            out.append(name)
    return out


def package_rows(device: str) -> list[Row]:
    """Versions, the checkpointing keyword this transformers takes, and the device."""
    from rredcot.training.trl_support import checkpointing_argument

    found = []
    for name in (*PACKAGES, *OPTIONAL):
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            found.append(f"{name} -")
    keyword = next(iter(checkpointing_argument(True)))
    missing = missing_packages()
    status = "cannot" if missing else "ok"
    detail = f"{', '.join(found)}; checkpointing keyword {keyword}"
    if missing:
        detail += f"; missing {missing}: carry them as wheels (scripts/gpu_check.sh)"
    rows = [Row("packages", status, detail)]
    if device != "cuda":
        return [*rows, Row("device", "skipped", f"CPU run (torch {torch.__version__})")]
    props = torch.cuda.get_device_properties(0)
    total = props.total_memory
    rows.append(
        Row(
            "device",
            "ok",
            f"{props.name}, {total / 2**30:.1f} GiB = {total / 1e9:.1f} GB (vLLM's share is of "
            f"this), CUDA build {torch.version.cuda}, PYTORCH_CUDA_ALLOC_CONF="
            f"{os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')!r}",
        )
    )
    return rows


# --------------------------------------------------------------------------- SDPA kernel


def _peak_of(fn: Callable[[], None]) -> int:
    """CUDA bytes `fn` allocated at its peak above what was held before."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - start


def sdpa_row(name: str, rows: int, queries: int, keys: int, backward: bool, device: str) -> Row:
    """The memory-efficient kernel on a (rows, 1, queries, keys) boolean causal mask in bf16,
    forced alone, then the default dispatch's peak against what the math kernel would hold
    (the (rows, heads, queries, keys) weights in bf16)."""
    shape = f"mask ({rows}, 1, {queries:,}, {keys:,})"
    if device != "cuda":
        return Row(name, "skipped", f"{shape}: GPU only (CUDA's memory-efficient kernel)")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    def tensor(length: int) -> torch.Tensor:
        x = torch.randn(rows, HEADS, length, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        return x.requires_grad_(backward)

    q, k, v = tensor(queries), tensor(keys), tensor(keys)
    mask = torch.ones(queries, keys, dtype=torch.bool, device="cuda").tril(keys - queries)
    mask = mask.expand(rows, 1, queries, keys).contiguous()
    math_bytes = rows * HEADS * queries * keys * 2

    def attend() -> None:
        with torch.set_grad_enabled(backward):
            out = scaled_dot_product_attention(q, k, v, attn_mask=mask)
            if backward:
                out.sum().backward()
        for x in (q, k, v):
            x.grad = None

    try:
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
            forced = _peak_of(attend)
    except RuntimeError as err:  # no kernel for this shape, or out of memory
        return Row(name, "FAILED", f"{shape}: the efficient kernel alone: {_last_line(err)}")
    try:
        default = _peak_of(attend)
    except torch.OutOfMemoryError:
        return Row(name, "FAILED", f"{shape}: the default dispatch ran out of memory (math kernel)")
    status = "ok" if default < math_bytes / 2 else "FAILED"
    kernel = "efficient" if status == "ok" else "math (fallback)"
    return Row(
        name,
        status,
        f"{shape}, bf16, {HEADS} heads{', backward' if backward else ''}: efficient kernel "
        f"{forced / 1e9:.2f} GB; default dispatch {default / 1e9:.2f} GB ({kernel}; the math "
        f"kernel's weights would be {math_bytes / 1e9:.1f} GB)",
    )


def sdpa_rows(device: str) -> list[Row]:
    """The paper's three mask shapes (module docstring): training, credit encoding, continuation."""
    from rredcot.planning.memory_plan import ENCODE_CHUNK, SHARED_ROW_MAX

    slots = PAPER_PROMPT + PAPER_LENGTH
    resident = 131_072 // slots  # the paper config's estimator.rredcot.max_resident_tokens
    return [
        sdpa_row("sdpa train", 2, slots, slots, True, device),
        sdpa_row("sdpa credit encode", resident, ENCODE_CHUNK, slots, False, device),
        sdpa_row("sdpa credit row", 1, SHARED_ROW_MAX, slots + SHARED_ROW_MAX, False, device),
    ]


# --------------------------------------------------------------------------- paper shape


def paper_shape_rows(device: str, tiny: bool) -> list[Row]:
    """`gpu_paper_shape.main` at T = 25,000 (tiny: its own shapes at T = 192) on one step's
    worth of the credit's resident chunks (8 traces: more than the budget's 5 at 25k) and the
    shipped 2 training rows; measured against the planner's estimate."""
    import gpu_paper_shape

    if tiny:
        argv = ["--device", device, "--tiny", "--lengths", "192"]
    else:
        argv = ["--device", device, "--lengths", str(PAPER_LENGTH), "--prompts", "1"]
        argv += ["--max-resident-tokens", "131072"]
    out = []
    try:
        rows = gpu_paper_shape.main([*argv, "--train-rows", "2"])
    finally:
        if device == "cuda":  # gpu_paper_shape capped this process at the paper's share
            torch.cuda.set_per_process_memory_fraction(1.0)
            torch.cuda.empty_cache()
    for r in rows:
        ratio = r["ratio"]
        inside = RATIO_BAND[0] <= ratio <= RATIO_BAND[1]
        if r["status"] != "ok" or r["fits"] is False:
            status = "FAILED"
        elif tiny:
            status = "ok"  # the shapes test the machinery; tests/unit/test_memory.py the band
        else:
            status = "ok" if inside else "DIFFERS"
        fits = "" if tiny else f", {'fits' if r['fits'] else 'DOES NOT FIT'}"
        out.append(
            Row(
                f"paper {r['case']}",
                status,
                f"T={r['T']:,}, {r['rows']} rows: peak {r['peak_bytes'] / 1e9:.3f} GB of the "
                f"cap {r['cap_bytes'] / 1e9:.3f}{fits} ({r['status']}); planner "
                f"{r['estimate_bytes'] / 1e9:.3f} GB, measured/planned {ratio}",
            )
        )
    return out


# --------------------------------------------------------------------------- training path


def paper_config() -> dict[str, Any]:
    """config.yaml with the paper config over it (as Snakemake merges `--configfile`)."""
    from memory_plan import merged

    config = yaml.safe_load((REPO / "config.yaml").read_text())
    return merged(config, yaml.safe_load(PAPER_CONFIG.read_text()))


def method_values(config: dict[str, Any], method: str, sizes: Sizes, device: str) -> dict:
    """The paper run's settings of `method` (`run_settings`), at `sizes`, on the synthetic
    world (its references are the `solution` column), without vLLM (not on the lent machine),
    saving every step."""
    from rredcot.workflow.run_params import run_settings

    values = run_settings(config, method, 0, task="synthetic", reference_column="solution")
    for key in ("vllm_max_model_length", "vllm_mode", "vllm_gpu_memory_utilization"):
        values.pop(key, None)
    rows = sizes.prompts_per_step * sizes.num_generations
    values.update(
        max_steps=2,
        save_steps=1,
        prompts_per_step=sizes.prompts_per_step,
        num_generations=sizes.num_generations,
        per_device_batch_size=sizes.per_device_batch_size,
        gradient_accumulation_steps=rows // sizes.per_device_batch_size,
        max_completion_length=sizes.max_completion_length,
        use_vllm=False,
        device="auto" if device == "cuda" else "cpu",
        bf16=device == "cuda",
        gradient_checkpointing=True,
        segmentation={**values["segmentation"], "num_segments": sizes.num_segments},
        mc={**values["mc"], "n_rollouts": sizes.mc_rollouts, "budget": sizes.mc_budget},
        resets={
            **values["resets"],
            "localization_max_new_tokens": sizes.localization_max_new_tokens,
        },
    )
    return values


def widen_vocabulary(path: Path, vocab: int) -> None:
    """Give the SFT-ed base at `path` a vocabulary of `vocab` rows (token ids stay bytes). The
    new rows copy the pad token's, which the SFT never made a target (its logit was pushed
    down at every step), so the policy still writes the synthetic format."""
    from rredcot.models.loading import load_model, load_tokenizer

    model = load_model(path)
    pad = load_tokenizer(path).pad_token_id
    old = model.get_input_embeddings().weight.shape[0]
    model.resize_token_embeddings(vocab, mean_resizing=False)
    with torch.no_grad():
        for table in {model.get_input_embeddings().weight, model.get_output_embeddings().weight}:
            table[old:] = table[pad]
    model.save_pretrained(path)


def _training_callbacks() -> tuple[Any, Any]:
    """(a callback that sends SIGTERM during the first optimizer step, one that records the
    path: trainable dtypes, autocast, checkpointing)."""
    from transformers import TrainerCallback

    class TimeLimit(TrainerCallback):
        """A scheduler's time limit in the first step: the run saves checkpoint-1 and stops."""

        def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201 (HF's)
            if state.global_step == 0:
                os.kill(os.getpid(), signal.SIGTERM)

    class PathProbe(TrainerCallback):
        """What the trainer trained with, read at the end of each step."""

        def __init__(self) -> None:
            self.seen: dict[str, Any] = {}

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201 (HF's)
            model = kwargs["model"]
            dtypes = {str(p.dtype).removeprefix("torch.") for p in model.parameters()}
            trained = {
                str(p.dtype).removeprefix("torch.") for p in model.parameters() if p.requires_grad
            }
            self.seen = {
                "trained": "/".join(sorted(trained)),
                "weights": "/".join(sorted(dtypes)),
                "autocast": "bf16" if args.bf16 else "none",
                "checkpointing": bool(getattr(model, "is_gradient_checkpointing", False)),
            }

    return TimeLimit(), PathProbe()


def method_row(
    method: str,
    values: dict[str, Any],
    base: Path,
    world: Any,
    device: str,
    model_dtype: str,
    work: Path,
) -> Row:
    """Two steps of `method` through `train_policy`: SIGTERM in the first (checkpoint-1 and
    `TrainingInterrupted`), then a fresh load that resumes and finishes (final/)."""
    from rredcot.models.loading import load_model, load_tokenizer
    from rredcot.training import TrainingSettings, train_policy
    from rredcot.training.precision import policy_dtype, uses_deepspeed
    from rredcot.training.stopping import TrainingInterrupted
    from rredcot.training.trainer import GENERATION_CACHE_MAX_LOGITS

    settings = TrainingSettings.from_dict(values)
    dtype = policy_dtype(model_dtype, settings, uses_deepspeed())
    out = work / f"train_{method}"
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    stop, probe = _training_callbacks()
    try:
        train_policy(load_model(base, dtype), load_tokenizer(base), world, settings, out, [stop])
        return Row(f"train {method}", "FAILED", "SIGTERM in step 1 did not stop the run")
    except TrainingInterrupted:
        pass
    if not (out / "checkpoint-1").is_dir() or (out / "final").exists():
        return Row(f"train {method}", "FAILED", "no checkpoint-1 after the SIGTERM")
    model = load_model(base, dtype)
    summary = train_policy(model, load_tokenizer(base), world, settings, out, [probe])
    seconds = time.perf_counter() - start
    if summary.get("resumed_from_step") != 1 or not (out / "final").is_dir():
        return Row(f"train {method}", "FAILED", f"did not resume from checkpoint-1: {summary}")
    if model.device.type != device:
        return Row(f"train {method}", "FAILED", f"the policy trained on {model.device}")
    seen = probe.seen
    if not seen.get("checkpointing"):
        return Row(f"train {method}", "FAILED", f"gradient checkpointing was off: {seen}")
    rows = values["per_device_batch_size"]
    vocab = model.get_output_embeddings().weight.shape[0]
    kept = rows * values["max_completion_length"] * vocab <= GENERATION_CACHE_MAX_LOGITS
    peak = f"{torch.cuda.max_memory_allocated() / 1e9:.2f} GB" if device == "cuda" else "-"
    lora = "LoRA, " if values.get("lora") else ""
    return Row(
        f"train {method}",
        "ok",
        f"{lora}loaded {dtype}, trained {seen['trained']} (weights {seen['weights']}), autocast "
        f"{seen['autocast']}, checkpointing on, vocab {vocab:,} (generation "
        f"{'kept' if kept else 're-encoded'}); SIGTERM in step 1 -> checkpoint-1, resumed -> "
        f"step 2, final/; {seconds:.0f} s, peak {peak}",
    )


def method_rows(device: str, tiny: bool, work: Path, deadline: float) -> list[Row]:
    """A small SFT-ed base with a real-size vocabulary, then `method_row` for every method of
    the paper config (on the CPU: model.dtype float32, as the CPU configs)."""
    from bench_training import quick_base

    from rredcot.data.synthetic import SplitSpec, WorldConfig, make_world

    sizes = TINY_SIZES if tiny else GPU_SIZES
    world = make_world(
        SplitSpec(n=sizes.train_problems, depths=[2, 3, 4, 5]),
        {},
        seed=1234,
        config=WorldConfig(chain="any", shape="chain", avoid_misconception=None),
    )["train"]
    base = quick_base(work / "base", world, sizes.sft_steps)
    widen_vocabulary(base, REAL_VOCAB)
    config = paper_config()
    model_dtype = config["model"]["dtype"] if device == "cuda" else "float32"
    rows = []
    for method in config["training"]["methods"]:
        name = f"train {method}"
        if time.perf_counter() > deadline:
            rows.append(Row(name, "skipped", "over the time budget (--budget-s)"))
            continue
        values = method_values(config, method, sizes, device)

        def train(m: str = method, v: dict = values) -> list[Row]:
            return [method_row(m, v, base, world, device, model_dtype, work)]

        rows += guarded(name, train)
    return rows


# --------------------------------------------------------------------------- table


def _last_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[-1][:300]


def guarded(name: str, part: Callable[[], list[Row]]) -> list[Row]:
    """Run one part; an exception is a FAILED row naming it (the traceback goes to stderr)."""
    try:
        return part()
    except Exception as err:  # noqa: BLE001 (every failure is a row of the table)
        traceback.print_exc()
        return [Row(name, "FAILED", f"{type(err).__name__}: {_last_line(err)}")]


def table(rows: list[Row]) -> str:
    """The rows as a markdown table."""
    lines = ["| check | status | detail |", "|---|---|---|"]
    lines += [f"| {r.check} | {r.status} | {r.detail} |" for r in rows]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--tiny", action="store_true", help="minimal sizes (the CPU check)")
    p.add_argument("--budget-s", type=float, default=450.0, help="start no part after this")
    p.add_argument("--table", type=Path, help="also write the table (markdown) here")
    p.add_argument("--parts", nargs="+", default=["packages", "sdpa", "train", "paper"])
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no CUDA device; use --device cpu --tiny")
    return args


def main(argv: list[str] | None = None) -> list[Row]:
    args = parse_args(argv)
    start = time.perf_counter()
    deadline = start + args.budget_s
    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    missing = missing_packages()
    parts: dict[str, Callable[[], list[Row]]] = {
        "packages": lambda: package_rows(args.device),
        "sdpa": lambda: sdpa_rows(args.device),
        "train": lambda: method_rows(args.device, args.tiny, work, deadline),
        "paper": lambda: paper_shape_rows(args.device, args.tiny),
    }
    rows: list[Row] = []
    for name in args.parts:
        if name in ("train", "paper") and missing:
            rows.append(Row(name, "cannot", f"needs {missing} (scripts/gpu_check.sh)"))
        elif time.perf_counter() > deadline:
            rows.append(Row(name, "skipped", "over the time budget (--budget-s)"))
        else:
            rows += guarded(name, parts[name])
        print(f"gpu_check: {name} done at {time.perf_counter() - start:.0f} s", flush=True)
    text = table(rows)
    print(text, flush=True)
    if args.table is not None:
        args.table.write_text(text + "\n")
    print(f"gpu_check: {time.perf_counter() - start:.0f} s (outputs in {work})")
    return rows


if __name__ == "__main__":
    sys.exit(1 if any(r.status == "FAILED" for r in main()) else 0)
