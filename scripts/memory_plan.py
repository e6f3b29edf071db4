"""Print the memory planner's per-phase estimate for one GPU of each training rule of a config.

The config is read as Snakemake reads it (config.yaml, then each `--configfile` on top); for
every method of `training.methods` the `train_policy` rule's phases (`rredcot.planning.memory_plan.
rule_phases`) are printed in GB against `--gpu-memory-gb`, with the key to change where the
peak does not fit, under the planner's SDPA-kernel assumption (printed). Exits 1 when a rule
does not fit.

    python scripts/memory_plan.py --configfile configs/paper_qwen3_4b.yaml --gpu-memory-gb 80
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from rredcot.planning.memory_plan import SDPA_ASSUMPTION, advice, device_bytes, rule_phases

REPO = Path(__file__).resolve().parents[1]
PHASES = ("weights", "gradients", "optimizer", "vllm", "training", "gathered", "credit", "peak")


def merged(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """`top` over `base`, mappings merged key by key (Snakemake's config-file update)."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(dict(out[key]), value)
        else:
            out[key] = value
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configfile", type=Path, nargs="*", default=[])
    parser.add_argument("--gpu-memory-gb", type=float, default=80.0)
    args = parser.parse_args()
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    for path in args.configfile:
        config = merged(config, yaml.safe_load(path.read_text()) or {})
    gpu = int(args.gpu_memory_gb * 1e9)
    print(
        f"train_policy, one GPU of {args.gpu_memory_gb:g} GB (vLLM's share of its "
        f"{device_bytes(gpu) / 1e9:.1f} GB real memory); GB per phase"
    )
    print(f"assumed: {SDPA_ASSUMPTION}")
    print(f"{'method':>10} " + " ".join(f"{p:>9}" for p in PHASES) + "  fits")
    failed = False
    for method in config["training"]["methods"]:
        phases = rule_phases(config, method, gpu)
        if phases is None:
            print(f"{method:>10} model {config['model'].get('name_or_path')!r}: shape unknown")
            continue
        hint = advice(phases, gpu)
        failed |= hint is not None
        row = " ".join(f"{phases[p] / 1e9:>9.2f}" for p in PHASES)
        print(f"{method:>10} {row}  {'yes' if hint is None else 'NO: change ' + hint}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
