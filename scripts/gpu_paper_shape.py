"""Paper-shape memory check (issue #29): the credit and one training micro-batch at 8k-25k tokens.

A Qwen3-4B-shaped model (36 layers, hidden 2560, 32 heads, 8 KV heads of 128, vocab 151,936,
tied embeddings) with random weights (no download) runs, per trace length T (8192, 16384,
25000 by default):

- **credit**: `rredcot_credit_batch` on one step's share of one GPU, 4 prompts × 8 responses of
  T tokens (K = 8 segments, a reference of about T/2 tokens; the synthetic batch of
  bench/bench_credit_scaling.py), under the paper config's `estimator.rredcot` block
  (configs/paper_qwen3_4b.yaml) with `max_resident_tokens` set so the chunk's cache fits
  (`--max-resident-tokens`, default: a quarter of the free memory over the bytes of one slot;
  the CPU sweep measured the credit's peak at about 3x its chunk's cache);
- **train**: one TRL-shaped micro-batch, `--train-rows` (8) rows of P + T tokens (left-padded
  prompts, right-padded completions, attention mask as TRL builds it), gradient checkpointing
  on, log π and entropies of the completion tokens through TRL 1.16's fused LM head (no
  (rows, T, V) logits) → a loss → backward (TRL's `_get_per_token_logps_and_entropies` then the
  GRPO loss, without the optimizer step); with `--padding-free`, the rows unpadded
  (`training.padding_free`: `rredcot.training.padding_free`, no (rows, 1, L, L) mask).

Memory caps stand in for one 80 GB GPU of the paper layout (`--gpu-memory-gb` 80, vLLM colocated
at `--vllm-share` 0.3, ZeRO-3 over `--processes` 8): the process may use
    cap = gpu_memory − vllm_share·gpu_memory − 16·N/processes bytes
(N parameters: the bf16 weights' and gradients' shards and AdamW's fp32 master and moments, 2 +
2 + 12 bytes each, split over the processes; the script's own full copy of the weights stands in
for the layers ZeRO-3 gathers, and counts against the cap). On CUDA the cap is enforced
(`torch.cuda.set_per_process_memory_fraction`; an out-of-memory error is a row with status
`oom`); on the CPU it is compared with the measured peak (resident memory above the start, plus
the weights). Each row carries the planner's estimate of the same case (`planner_estimate`:
`rredcot.planning.memory_plan`'s credit or training phase, plus the weights, and the gradients for
training) and the ratio measured / estimate. One CSV row per case (`COLUMNS`), printed and
written with `--csv`.

`--tiny` scales everything down to a minute on a CPU, for CI: a 2-layer model with a 16k
vocabulary, 2 prompts × 4 responses, T = 64, 128, 192, and a cap under which as many of the
longest traces' caches fit as under the paper shape's cap at T = 25000 (weights + the paper's
free memory × the tiny model's slot bytes × its longest T over the paper's). The tiny rows test
the script's machinery; whether the paper shape fits is read off a GPU run:

    python scripts/gpu_paper_shape.py --device cpu --tiny --csv /tmp/shape.csv
    python scripts/gpu_paper_shape.py --device cuda --csv paper_shape.csv   # ≤ 10 min, one GPU
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers import Qwen3ForCausalLM
from trl.trainer.utils import add_fused_lm_head

from rredcot.credit.rredcot import RREDCoTConfig, Trace, rredcot_credit_batch
from rredcot.models.tiny import tiny_config
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.planning.memory_plan import ModelShape, credit_phases, shape_from_hf, training_phases
from rredcot.planning.vllm_memory import QWEN3_4B_SHAPE
from rredcot.tasks.synthetic import SyntheticTask
from rredcot.training.padding_free import packs_rows, unpadded_token_logps

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_credit_scaling import _mmap_large_blocks, _status_kib, _trim, make_batch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PAPER_CONFIG = REPO / "configs" / "paper_qwen3_4b.yaml"

QWEN3_4B = {
    **{k: v for k, v in QWEN3_4B_SHAPE.items() if k != "vocab_size"},  # the byte tokenizer's
    "max_position_embeddings": 32768,
    "rope_theta": 5_000_000.0,
}
"""Qwen3-4B-Instruct-2507's shape (its config.json; RoPE's length limit only needs to cover T)."""
TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}
VOCAB = QWEN3_4B_SHAPE["vocab_size"]
"""Qwen3's vocabulary: the logits' size. Token ids stay bytes (the byte tokenizer's < 259)."""
TINY_VOCAB = 16_384
PAPER_LENGTH = 25_000

FITS = {True: "fits", False: "DOES NOT FIT", "": "(tiny: not judged)"}
COLUMNS = [
    "case",
    "T",
    "rows",
    "device",
    "dtype",
    "max_resident_tokens",
    "cap_bytes",
    "peak_bytes",
    "estimate_bytes",
    "ratio",
    "fits",
    "status",
    "seconds",
    "tokens",
]


def paper_parameters() -> int:
    """Parameters of the Qwen3-4B shape (tied embeddings once), counted on the meta device."""
    return sum(p.numel() for p in build_model(QWEN3_4B, "meta", torch.bfloat16).parameters())


def build_model(
    arch: dict[str, Any], device: str, dtype: torch.dtype, vocab: int = VOCAB
) -> Qwen3ForCausalLM:
    """A Qwen3 model of `arch` with `vocab` tokens, random weights built on `device`."""
    config = tiny_config(arch, build_byte_tokenizer())
    config.vocab_size = vocab
    with torch.device(device), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen3ForCausalLM._from_config(config, dtype=dtype)
    if device != "meta":
        model.set_attn_implementation("sdpa")
        # TRL 1.16's GRPOTrainer patches its policy so: the loss's log-probs without logits
        add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    return model.eval()


def memory_cap(args: argparse.Namespace, model: torch.nn.Module) -> int:
    """Bytes this process may hold (module docstring; `--tiny`: scaled as it says)."""
    paper = paper_parameters()
    gpu = args.gpu_memory_gb * 1e9
    cap = gpu * (1 - args.vllm_share) - 16 * paper / args.processes
    if not args.tiny:
        return int(cap)
    paper_slot = 2 * QWEN3_4B["num_hidden_layers"] * QWEN3_4B["num_key_value_heads"] * 128 * 2
    free = (cap - 2 * paper) * slot_bytes(model) * max(args.lengths) / (paper_slot * PAPER_LENGTH)
    return int(weight_bytes(model) + free)


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def slot_bytes(model: torch.nn.Module) -> int:
    """Bytes of one trace-cache slot: keys and values of every layer."""
    c = model.config
    size = next(model.parameters()).element_size()
    return 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * size


class Peak:
    """Peak memory of a block: CUDA's allocator peak, or on the CPU the resident memory's peak
    above its start (/proc/self/status VmHWM, reset through /proc/self/clear_refs)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.bytes = 0

    def __enter__(self) -> Peak:
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            self.start = torch.cuda.memory_allocated()
        else:
            _trim()
            self.start = _status_kib("VmRSS") * 1024
            Path("/proc/self/clear_refs").write_text("5")
        return self

    def __exit__(self, *_: object) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()
            self.bytes = torch.cuda.max_memory_allocated() - self.start
        else:
            self.bytes = _status_kib("VmHWM") * 1024 - self.start


def planner_estimate(
    case: str,
    shape: ModelShape,
    traces: list[Trace],
    config: RREDCoTConfig,
    weights: int,
    padding_free: bool = False,
) -> int:
    """The planner's bytes for a case as `run_case` measures it (peak above the start plus the
    weights): the credit's peak phase (pruning's kept keys are a bound, left out), or the
    training micro-batch's activations plus its gradients (one per weight, in their dtype)."""
    prompts = [len(t.prompt_ids) for t in traces]
    responses = [len(t.response_ids) for t in traces]
    if case == "credit":
        credit = credit_phases(
            shape,
            prompts,
            responses,
            states=len(traces[0].boundaries),
            max_resident_tokens=config.max_resident_tokens,
            max_tokens_per_pass=config.max_tokens_per_pass,
        )
        return weights + credit["peak"]
    length, completion = max(prompts) + max(responses), max(responses)
    train = training_phases(
        shape, len(traces), length, completion, padding_free=padding_free, head_trained=True
    )
    return 2 * weights + sum(train.values())


def credit_batch(length: int, args: argparse.Namespace, rng: random.Random) -> list[Trace]:
    """`--prompts` prompts × `--responses` responses of T = `length` tokens, K = 8."""
    one = argparse.Namespace(
        traces=args.responses,
        prompt_tokens=args.prompt_tokens,
        line_tokens=64,
        ref_ratio=0.5,
    )
    return [t for _ in range(args.prompts) for t in make_batch(rng, length, 8, one)[0]]


def train_micro_batch(
    model: torch.nn.Module, traces: list[Trace], device: str, padding_free: bool = False
) -> int:
    """One TRL-shaped micro-batch (module docstring): forward with checkpointing, log π and
    entropies of the completion tokens through the fused head (padded, or the rows unpadded),
    loss, backward. Returns tokens."""
    p = max(len(t.prompt_ids) for t in traces)
    t_max = max(len(t.response_ids) for t in traces)
    ids = torch.zeros(len(traces), p + t_max, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, tr in enumerate(traces):
        x, y = list(tr.prompt_ids), list(tr.response_ids)
        ids[i, p - len(x) : p + len(y)] = torch.tensor(x + y)
        mask[i, p - len(x) : p + len(y)] = 1
    ids, mask = ids.to(device), mask.to(device)
    model.train()
    model.gradient_checkpointing_enable()
    try:
        if padding_free:
            logps, entropy = unpadded_token_logps(
                model,
                ids,
                mask,
                t_max,
                compute_entropy=True,
                packed=packs_rows(model),
                autocast=nullcontext,
            )
        else:  # TRL 1.16's _get_per_token_logps_and_entropies for text
            labels = ids.masked_fill(mask == 0, -100)
            labels[:, :p] = -100
            out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
            logps, entropy = out.log_probs[:, -t_max:], out.entropy[:, -t_max:]
        completion = mask[:, p:].to(logps.dtype)
        loss = -((logps + 0.01 * entropy) * completion).sum() / completion.sum()
        loss.backward()
    finally:
        model.zero_grad(set_to_none=True)
        model.gradient_checkpointing_disable()
        model.eval()
    return int(mask.sum())


def run_case(
    case: str, length: int, fn: Any, device: str, cap: int, weights: int, tiny: bool
) -> tuple[dict[str, Any], Any]:
    """Run `fn` under the peak meter; an out-of-memory error is a row with status oom. `fits`
    is left empty for `--tiny` (fixed costs of the allocator dominate such small shapes)."""
    start, status, out = time.perf_counter(), "ok", None
    with Peak(device) as peak:
        try:
            out = fn()
        except torch.OutOfMemoryError:
            status = "oom"
    total = peak.bytes + weights
    row = {
        "case": case,
        "T": length,
        "cap_bytes": cap,
        "peak_bytes": total,
        "fits": "" if tiny else status == "ok" and total <= cap,
        "status": status,
        "seconds": round(time.perf_counter() - start, 2),
    }
    if device == "cuda":
        torch.cuda.empty_cache()
    return row, out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--tiny", action="store_true", help="scaled-down shapes (CI, CPU)")
    parser.add_argument("--lengths", type=int, nargs="+", default=None, help="T values")
    parser.add_argument("--prompts", type=int, default=None, help="prompts (4; tiny 2)")
    parser.add_argument("--responses", type=int, default=None, help="per prompt (8; tiny 4)")
    parser.add_argument("--train-rows", type=int, default=8, help="rows of the micro-batch")
    parser.add_argument(
        "--padding-free", action="store_true", help="train rows unpadded (training.padding_free)"
    )
    parser.add_argument("--prompt-tokens", type=int, default=None, help="P (default 256; tiny 32)")
    parser.add_argument("--gpu-memory-gb", type=float, default=80.0)
    parser.add_argument("--vllm-share", type=float, default=0.3)
    parser.add_argument("--processes", type=int, default=8, help="ZeRO-3 processes (shards)")
    parser.add_argument("--max-resident-tokens", type=int, default=None)
    parser.add_argument("--csv", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.lengths is None:
        args.lengths = [64, 128, 192] if args.tiny else [8192, 16384, PAPER_LENGTH]
    if args.prompts is None:
        args.prompts = 2 if args.tiny else 4
    if args.responses is None:
        args.responses = 4 if args.tiny else 8
    if args.prompt_tokens is None:
        args.prompt_tokens = 32 if args.tiny else 256
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here; use --device cpu (with --tiny)")
    return args


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    device = args.device
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    if device == "cpu":
        _mmap_large_blocks()
    arch = {**(TINY if args.tiny else QWEN3_4B)}
    arch["max_position_embeddings"] = max(
        arch["max_position_embeddings"], 2 * (max(args.lengths) + args.prompt_tokens)
    )
    model = build_model(arch, device, dtype, TINY_VOCAB if args.tiny else VOCAB)
    parameters = sum(p.numel() for p in model.parameters())
    weights = weight_bytes(model)
    cap = memory_cap(args, model)
    if device == "cuda":
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total))
    budget = args.max_resident_tokens or max(1, (cap - weights) // (4 * slot_bytes(model)))
    block = yaml.safe_load(PAPER_CONFIG.read_text())["estimator"]["rredcot"]
    config = replace(RREDCoTConfig.from_dict(block), max_resident_tokens=budget)
    tokenizer, task = build_byte_tokenizer(), SyntheticTask()
    print(
        f"model: {arch['num_hidden_layers']} layers, hidden {arch['hidden_size']}, vocab "
        f"{model.config.vocab_size}, "
        f"{parameters:,} parameters ({dtype}, {device}); cap {cap / 1e9:.3f} GB; "
        f"max_resident_tokens {budget:,} ({slot_bytes(model):,} bytes a slot)"
    )
    shape = shape_from_hf(model.config.to_dict(), next(model.parameters()).element_size())
    warm = credit_batch(32, argparse.Namespace(**{**vars(args), "responses": 1}), random.Random(1))
    rredcot_credit_batch(model, tokenizer, task, warm, config)  # first-call allocations
    train_micro_batch(model, warm[:2], device, args.padding_free)
    rows: list[dict[str, Any]] = []
    rng = random.Random(0)
    for length in args.lengths:
        traces = credit_batch(length, args, rng)
        row, results = run_case(
            "credit",
            length,
            lambda t=traces: rredcot_credit_batch(model, tokenizer, task, t, config),
            device,
            cap,
            weights,
            args.tiny,
        )
        tokens = sum(r.forward_tokens for r in results) if results else 0
        estimate = planner_estimate("credit", shape, traces, config, weights)
        rows.append(
            {
                **row,
                "rows": len(traces),
                "max_resident_tokens": budget,
                "tokens": tokens,
                "estimate_bytes": estimate,
            }
        )
        micro = traces[: args.train_rows]
        row, tokens = run_case(
            "train",
            length,
            lambda m=micro: train_micro_batch(model, m, device, args.padding_free),
            device,
            cap,
            weights,
            args.tiny,
        )
        estimate = planner_estimate("train", shape, micro, config, weights, args.padding_free)
        rows.append(
            {
                **row,
                "rows": len(micro),
                "max_resident_tokens": "",
                "tokens": tokens or 0,
                "estimate_bytes": estimate,
            }
        )
        for r in rows[-2:]:
            r.update(device=device, dtype=str(dtype).removeprefix("torch."))
            r["ratio"] = round(r["peak_bytes"] / r["estimate_bytes"], 3)
            print(
                f"{r['case']:>6} T={r['T']:>6} rows={r['rows']:>3} peak "
                f"{r['peak_bytes'] / 1e9:8.3f} GB of {r['cap_bytes'] / 1e9:8.3f} "
                f"{FITS[r['fits']]} ({r['status']}, {r['seconds']} s); planner "
                f"{r['estimate_bytes'] / 1e9:.3f} GB (measured/planned {r['ratio']})",
                flush=True,
            )
        if args.csv is not None:
            with args.csv.open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=COLUMNS)
                writer.writeheader()
                writer.writerows(rows)
    return rows


if __name__ == "__main__":
    main()
