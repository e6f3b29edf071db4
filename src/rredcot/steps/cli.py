"""What every step script shares: argument parsing of JSON params, logging, seeding, threads."""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
from typing import Any

import numpy as np

log = logging.getLogger("rredcot")


def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the `--params JSON` option every step takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--params", type=json.loads, default={}, help="step settings as one JSON object")
    return p


def setup(threads: int | None = None) -> None:
    """Log to stderr (the rule's log file) with timestamps; cap torch's threads."""
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    if threads is not None:
        import torch

        torch.set_num_threads(max(1, threads))
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
