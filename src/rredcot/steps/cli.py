"""What every step script shares: argument parsing of JSON params, logging, seeding, threads."""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("rredcot")


def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the `--params JSON` option every step takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--params", type=json.loads, default={}, help="step settings as one JSON object")
    return p


def rank_threads(threads: int, environ: Mapping[str, str] = os.environ) -> int:
    """This process's share of the job's `threads`: the job's CPUs are split among the ranks
    `accelerate launch` (torchrun) started on this node (`LOCAL_WORLD_SIZE`), so 8 ranks of a
    64-CPU job take 8 threads each instead of 64 each (512 threads fighting over 64 cores)."""
    ranks = int(environ.get("LOCAL_WORLD_SIZE") or 1)
    return max(1, threads // max(1, ranks))


def setup(threads: int | None = None) -> None:
    """Log to stderr (the rule's log file) with timestamps; cap torch's threads at this
    process's share of the job's (`rank_threads`)."""
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    if threads is not None:
        import torch

        threads = rank_threads(threads)
        torch.set_num_threads(threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    log.info("command: %s", " ".join(sys.argv))


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch so a rule gives the same output on the same machine."""
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def require(params: dict[str, Any], *keys: str) -> list[Any]:
    """The values of `keys` in `params`; a missing key is an error naming it."""
    missing = [k for k in keys if k not in params]
    if missing:
        raise ValueError(f"--params lacks key(s) {missing}; got {sorted(params)}")
    return [params[k] for k in keys]


def add_per_run_files(p: argparse.ArgumentParser, names: Sequence[str], what: str) -> None:
    """One `--<name>` option per name, each taking one file per `what` (run, policy), in order."""
    for name in names:
        flag = f"--{name.replace('_', '-')}"
        p.add_argument(flag, required=True, nargs="+", type=Path, help=f"one per {what}, in order")


def per_run_files(args: argparse.Namespace, names: Sequence[str], what: str) -> list[list[Path]]:
    """The files of each `add_per_run_files` option; an error unless each has one per `what`."""
    files = [getattr(args, name) for name in names]
    if len({len(f) for f in files}) != 1:
        counts = [len(f) for f in files]
        raise ValueError(f"one file per {what} for each of {tuple(names)}; got {counts}")
    return files
