"""Throughput of the HF generation backend (new tokens per second) for a few batch sizes.

    python bench/bench_generation.py                       # random tiny model, default arch
    python bench/bench_generation.py results/models/sft    # a saved checkpoint directory

Prints one line per batch size; asserts nothing. EOS ends samples early, so the token count
is what was actually generated, not prompts x n x max_new_tokens.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from rredcot.generation import SamplingParams
from rredcot.generation.hf import HFBackend

PROMPTS = [
    "Start with 7. Add 5. Multiply by 3. What is the result?",
    "Compute 12 * 4 - 9.",
    "x = 3; y = x + 4; z = y * y. Find z.",
    "What is 100 divided by 4, plus 6?",
]


def tiny_checkpoint(directory: Path) -> Path:
    """Save a randomly initialised tiny model of the embedded default's shape to `directory`."""
    from rredcot.models.tiny import DEFAULT_TINY_ARCH, build_tiny_model
    from rredcot.models.tokenizer import build_byte_tokenizer

    tokenizer = build_byte_tokenizer()
    build_tiny_model(DEFAULT_TINY_ARCH, tokenizer, seed=0).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", nargs="?", help="model directory (default: random tiny)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--prompts", type=int, default=16, help="number of prompts")
    parser.add_argument("--n", type=int, default=4, help="samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(args.prompts)]
    params = SamplingParams(n=args.n, temperature=1.0, max_new_tokens=args.max_new_tokens)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.checkpoint or str(tiny_checkpoint(Path(tmp)))
        for batch_size in args.batch_sizes:
            backend = HFBackend.from_pretrained(path, batch_size=batch_size, show_progress=False)
            backend.generate(prompts[:1], SamplingParams(max_new_tokens=4))  # warm-up
            start = time.perf_counter()
            completions = backend.generate(prompts, params)
            seconds = time.perf_counter() - start
            tokens = sum(c.num_tokens for c in completions)
            print(
                f"batch_size={batch_size:4d}  sequences={len(completions):4d}  "
                f"new_tokens={tokens:7d}  seconds={seconds:8.2f}  "
                f"tokens_per_s={tokens / seconds:9.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
