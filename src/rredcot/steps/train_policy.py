"""Rule `train_policy`: RL-train one (method, seed) from a base checkpoint on the train problems.

    python -m rredcot.steps.train_policy --model results/models/sft --train train.parquet \
        --out results/training/rredcot/0 --params '{"method": "rredcot", "seed": 0, ...}'

`--params` is a `TrainingSettings` mapping (method, seed, max_steps, batch shape, credit,
segmentation, rredcot, mc, ...). Restarted after a kill, the run resumes from the newest
checkpoint in `--out`. On SIGTERM or SIGUSR1 it finishes the optimizer step under way, saves a
checkpoint at it and exits with status 75 (`RETRY_EXIT_CODE`; Snakemake's retry resumes it); a
second trainer on a run directory in use exits at once with status 1, naming the holder.
On GPUs it runs under `accelerate launch ... -m rredcot.steps.train_policy`
(`rredcot.training.launch.accelerate_command`), one process per GPU, with `--dtype bfloat16`;
the weights the optimizer writes stay float32 unless DeepSpeed or LoRA keeps a float32 master
copy (`rredcot.training.precision`).

The run record (`rredcot.training.run_dir.run_record`) holds every argument but those in
`NOT_IDENTITY`, the inputs by content: a run resumes only what it would itself have written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from rredcot.data.schema import read_parquet
from rredcot.models.loading import DTYPES, load_model, load_tokenizer
from rredcot.steps.cli import log, parser, seed_everything, setup
from rredcot.training.curves import CurveSettings
from rredcot.training.precision import policy_dtype, uses_deepspeed
from rredcot.training.run import train_policy
from rredcot.training.run_dir import job_record
from rredcot.training.settings import RunOptions, TrainingSettings
from rredcot.training.stopping import RETRY_EXIT_CODE, TrainingInterrupted
from rredcot.training.trl_config import check_device

CUDA_ALLOC_CONF = "expandable_segments:True"
"""PyTorch's allocator setting for GPU training: segments grow in place instead of new blocks
being cut, so the variable-length micro-batches and credit chunks of a long run do not strand
reserved-but-unallocated memory (PyTorch's own advice on such an out-of-memory error). Not for
vLLM's sleep mode (`vllm_enable_sleep_mode`, off here), whose memory pool refuses it."""

INPUTS: tuple[str, ...] = ("model", "train", "curve_problems")
"""Path arguments the run record holds by content (`fingerprint`)."""
NOT_IDENTITY: dict[str, str] = {
    "params": "in the record's settings block, with the defaults filled in",
    "threads": "torch's thread count changes float rounding, not the run; a run may resume on "
    "a node with other cores (it is in the record's machine block)",
    "out": "the run directory itself",
    "keep_stale_checkpoints": "what happens to other runs' directories",
    "runtime": "how long ranks wait and where the run reports (RunOptions), not what it computes",
    "save_minutes": "when checkpoints are written, not what the run computes (a resume is exact)",
}
"""Arguments left out of the run record, with the reason; every other one is compared."""


def build_parser() -> argparse.ArgumentParser:
    """The step's arguments (all of them go into the run record, `NOT_IDENTITY` apart)."""
    p = parser(__doc__)
    p.add_argument("--model", required=True, type=Path, help="base checkpoint directory or hub id")
    p.add_argument("--train", required=True, type=Path, help="normalized train parquet")
    p.add_argument("--out", required=True, type=Path, help="run directory")
    p.add_argument(
        "--dtype",
        default="float32",
        choices=sorted(DTYPES),
        help="model.dtype: the policy's dtype where DeepSpeed or LoRA keeps float32 master "
        "weights; otherwise the policy is trained in float32 (under bf16 autocast with "
        "training.bf16)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--curve-problems", type=Path, help="held-out problems of the learning curve")
    p.add_argument("--curve", type=json.loads, help="CurveSettings as JSON (with --curve-problems)")
    p.add_argument(
        "--runtime",
        type=json.loads,
        default={},
        help="RunOptions as JSON (training.ddp_timeout, training.report_to, "
        "training.report_offline, training.allow_cpu)",
    )
    p.add_argument(
        "--keep-stale-checkpoints",
        action="store_true",
        help="keep the checkpoints of run directories moved aside (config key "
        "training.keep_stale_checkpoints)",
    )
    p.add_argument(
        "--save-minutes",
        type=float,
        help="also write a checkpoint every this many minutes of wall time (config key "
        "training.save_minutes; default: by steps only)",
    )
    return p


def set_cuda_allocator(settings: TrainingSettings, environ: MutableMapping[str, str]) -> None:
    """Set `PYTORCH_CUDA_ALLOC_CONF` to `CUDA_ALLOC_CONF` for a GPU run (training.device not
    cpu) unless the job's environment sets it; before CUDA starts (the allocator reads it then)."""
    if settings.device != "cpu":
        environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", CUDA_ALLOC_CONF)


def record_blocks(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str | None]]:
    """The (arguments, inputs) blocks of this job's run record."""
    return job_record(vars(args), INPUTS, NOT_IDENTITY)


def main() -> None:
    args = build_parser().parse_args()
    setup(args.threads)
    settings = TrainingSettings.from_dict(args.params)
    set_cuda_allocator(settings, os.environ)
    options = RunOptions(**args.runtime)
    check_device(settings, options.allow_cpu)  # before a model of minutes to load
    options.environment()  # offline trackers: before they start
    seed_everything(settings.seed)
    tokenizer = load_tokenizer(args.model)
    # float32 masters unless DeepSpeed or LoRA keeps them (rredcot.training.precision)
    model = load_model(args.model, dtype=policy_dtype(args.dtype, settings, uses_deepspeed()))
    table = read_parquet(args.train)
    log.info("training %s (seed %d) on %d problems", settings.method, settings.seed, table.height)
    curve = None
    if args.curve_problems is not None:
        curve = (read_parquet(args.curve_problems), CurveSettings.from_dict(args.curve or {}))
    arguments, inputs = record_blocks(args)
    try:
        train_policy(
            model,
            tokenizer,
            table,
            settings,
            args.out,
            curve=curve,
            fingerprints=inputs,
            arguments=arguments,
            keep_stale_checkpoints=args.keep_stale_checkpoints,
            save_minutes=args.save_minutes,
            options=options,
        )
    except TrainingInterrupted as stop:
        log.warning("%s (exit status %d: retry)", stop, RETRY_EXIT_CODE)
        sys.exit(RETRY_EXIT_CODE)


if __name__ == "__main__":
    main()
