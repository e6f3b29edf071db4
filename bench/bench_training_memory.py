"""Peak memory of one training micro-batch vs its length: TRL's padded batch against
`training.padding_free` (issue #29), with the memory planner's estimate of each.

A tiny Qwen3 (float32, random weights, byte vocabulary; `--layers`, `--hidden`, head_dim 32,
one KV head per two heads) carries TRL 1.16's fused LM head and gradient checkpointing, as the
trainer's policy does. Per completion length L (`--lengths`), `--rows` rows of a TRL-shaped
micro-batch (prompts of `--prompt` tokens less 8 per row, left-padded; completions L less
L/16 per row, right-padded: every row but the first has padding) are scored, a loss of their
log-probs and entropies taken and backpropagated:

- **padded**: TRL's `_get_per_token_logps_and_entropies` for text (one padded forward with the
  attention mask: SDPA gets a dense (rows, 1, P + L, P + L) mask);
- **padding_free**: `rredcot.training.padding_free.unpadded_token_logps`, one unpadded row at a
  time (SDPA's causal kernel, no mask).

The peak resident memory above the start of the step (VmHWM, bench/bench_credit_scaling.py's
meter) is set against `rredcot.planning.memory_plan.training_phases` (which takes every row full
length: the rows' padding is left in the estimate). Writes a markdown table (`--markdown`) and a CSV
(`--csv`); prints the largest difference between the two paths' losses and the peak's growth
per doubling of L.

    OMP_NUM_THREADS=1 python bench/bench_training_memory.py --markdown /tmp/train.md  # ~3 min
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from contextlib import nullcontext
from functools import partial
from pathlib import Path

import torch
from trl.trainer.utils import add_fused_lm_head

from rredcot.models.tiny import build_tiny_model
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.planning.memory_plan import ModelShape, training_phases
from rredcot.training.padding_free import unpadded_token_logps

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_credit_scaling import _mmap_large_blocks, timed  # noqa: E402

HEAD_DIM = 32
PATHS = ("padded", "padding_free")
COLUMNS = ["L", "rows", "path", "mask_MiB", "estimate_MiB", "measured_MiB", "ratio", "seconds"]


def micro_batch(
    rows: int, prompt: int, length: int, vocab: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) of TRL's layout: left-padded prompts, right-padded
    completions of `length` columns; row i has 8·i prompt and L/16·i completion pads."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (rows, prompt + length), generator=generator)
    mask = torch.ones_like(ids)
    for i in range(rows):
        mask[i, : 8 * i] = 0
        mask[i, prompt + length - (length // 16) * i :] = 0
    return ids.masked_fill(mask == 0, 0), mask


def step(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, length: int, path: str):
    """One micro-batch's forward and backward; its loss."""
    if path == "padded":  # TRL 1.16's _get_per_token_logps_and_entropies for text
        labels = ids.masked_fill(mask == 0, -100)
        labels[:, :-length] = -100
        out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        logps, entropy = out.log_probs[:, -length:], out.entropy[:, -length:]
    else:
        logps, entropy = unpadded_token_logps(
            model, ids, mask, length, compute_entropy=True, packed=False, autocast=nullcontext
        )
    completion = mask[:, -length:].float()
    loss = -((logps + 0.01 * entropy) * completion).sum() / completion.sum()
    loss.backward()
    model.zero_grad(set_to_none=True)
    return loss.detach()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--csv", type=Path)
    args = parser.parse_args()
    _mmap_large_blocks()
    tokenizer = build_byte_tokenizer()
    heads = args.hidden // HEAD_DIM
    arch = {
        "hidden_size": args.hidden,
        "intermediate_size": 2 * args.hidden,
        "num_hidden_layers": args.layers,
        "num_attention_heads": heads,
        "num_key_value_heads": max(1, heads // 2),
        "head_dim": HEAD_DIM,
        "max_position_embeddings": 2 * (max(args.lengths) + args.prompt),
    }
    model = build_tiny_model(arch, tokenizer, seed=0)
    model.set_attn_implementation("sdpa")
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    model.gradient_checkpointing_enable({"use_reentrant": False})
    model.train()
    shape = ModelShape(
        args.layers, args.hidden, 2 * args.hidden, heads, max(1, heads // 2), HEAD_DIM,
        len(tokenizer), True, 4,
    )  # fmt: skip
    vocab = len(tokenizer)
    step(model, *micro_batch(2, 16, 32, vocab), 32, "padded")  # first-call allocations
    step(model, *micro_batch(2, 16, 32, vocab), 32, "padding_free")
    rows_out, gap = [], 0.0
    mib = 2**20
    for length in args.lengths:
        ids, mask = micro_batch(args.rows, args.prompt, length, vocab)
        losses = []
        for path in args.paths:
            call = partial(step, model, ids, mask, length, path)
            seconds, peak, loss = timed(call, 1, time.perf_counter)
            losses.append(loss)
            plan = training_phases(
                shape,
                args.rows,
                args.prompt + length,
                length,
                padding_free=path == "padding_free",
            )
            estimate = sum(plan.values())
            rows_out.append(
                {
                    "L": length,
                    "rows": args.rows,
                    "path": path,
                    "mask_MiB": round(plan["mask"] / mib, 1),
                    "estimate_MiB": round(estimate / mib, 1),
                    "measured_MiB": round(peak / mib, 1),
                    "ratio": round(peak / estimate, 3),
                    "seconds": round(seconds, 1),
                }
            )
            print(rows_out[-1], flush=True)
        gap = max(gap, abs(float(losses[0] - losses[-1])))
    print(f"largest |loss(padded) - loss(padding_free)|: {gap:.2e}")
    for path in args.paths:
        peaks = [r["measured_MiB"] for r in rows_out if r["path"] == path]
        growth = ", ".join(f"{b / a:.2f}x" for a, b in zip(peaks, peaks[1:], strict=False))
        print(f"{path}: peak per doubling of L: {growth}")
    if args.csv:
        with args.csv.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, COLUMNS)
            writer.writeheader()
            writer.writerows(rows_out)
    if args.markdown:
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows_out]
        args.markdown.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
