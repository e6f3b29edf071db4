"""GRPO and the checker oracle on the development seed, per misconception regime: the second
half of choosing the positive-control regime (the first is `probe_misconception.py`, which
SFT-s one base per misconception rate and reports the base alone).

    python dev/probe_misconception.py --rates 0.6 --out /tmp/probe/r0.6
    python dev/dev_regimes.py --probe /tmp/probe/r0.6 --rate 0.6 --out /tmp/dev/r0.6

Per regime it builds the development world of the probe (world generator seeded with the
probe's development seed: its `synth_id` and an `rl` split, less every problem the probe's SFT
split holds), then trains `grpo` and `oracle_step` from the probe's base with the development
training seed 0 and config.yaml's frozen `training` block (`dev_search_grpo.py`, candidate
`frozen`), one process each, side by side. It prints and writes, per method: held-out pass@1
along the run at T = 1 (the RL temperature, the world's protocol), and the final policy's
greedy and T = 1 pass@1, luck and systematic-error share (`probe_misconception.evaluate`), so
a gain that vanishes under greedy decoding (sharpening) is told apart from a fixed rule.

The regime is chosen by GRPO learning (final ≥ base + 0.10) and the oracle beating GRPO, never
by RREDCoT's or MC's results, which this script does not run.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "dev"))

from probe_misconception import evaluate  # noqa: E402

from rredcot.data.misconceptions import Misconception  # noqa: E402
from rredcot.data.synthetic import SplitSpec, make_world, world_config  # noqa: E402


def dev_world(config: dict, seed: int, out: Path) -> Path:
    """`synth_id` and `rl` of the development world, `rl` less the probe's SFT problems."""
    w = config["world"]
    train = SplitSpec(w["train"]["n"], tuple(w["train"]["depths"]))
    spec = {k: SplitSpec(v["n"], tuple(v["depths"])) for k, v in w["splits"].items()}
    wc = world_config(w)
    probe_train = make_world(train, {"synth_id": spec["synth_id"]}, seed, wc)["train"]
    world = make_world(train, {"synth_id": spec["synth_id"], "rl": spec["rl"]}, seed, wc)
    seen = set(probe_train["problem"].to_list())
    rl = world["rl"].filter(~pl.col("problem").is_in(list(seen)))
    out.mkdir(parents=True, exist_ok=True)
    world["synth_id"].write_parquet(out / "synth_id.parquet")
    rl.write_parquet(out / "rl.parquet")
    print(
        f"dev world: synth_id {world['synth_id'].height}, rl {rl.height} "
        f"({world['rl'].height - rl.height} dropped: in the probe's SFT split)",
        flush=True,
    )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--probe", type=Path, required=True, help="probe_misconception.py --out dir")
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--rule", default="smaller_from_larger")
    p.add_argument("--seed", type=int, default=99, help="the probe's development seed")
    p.add_argument("--methods", nargs="+", default=["grpo", "oracle_step"])
    p.add_argument("--set", default="{}", help="JSON overrides of the training block (all methods)")
    p.add_argument("--samples", type=int, default=4, help="k of the final T = 1 pass@1")
    p.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    config = yaml.safe_load(args.config.read_text())
    base = args.probe / f"base_rate{args.rate:g}"
    if not (base / "config.json").is_file():
        raise SystemExit(f"--probe: no base model at {base} (run probe_misconception.py first)")
    world = dev_world(config, args.seed, args.out / "world")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    procs = {
        m: subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "dev" / "dev_search_grpo.py"),
                "--model",
                str(base),
                "--world",
                str(world),
                "--out",
                str(args.out / m),
                "--candidates",
                "frozen",
                "--method",
                m,
                "--set",
                args.set,
                "--config",
                str(args.config),
            ],
            stdout=(args.out / f"{m}.log").open("w"),
            stderr=subprocess.STDOUT,
            env=env,
        )
        for m in args.methods
    }
    for m, proc in procs.items():
        if proc.wait():
            raise SystemExit(f"{m}: dev_search_grpo.py failed (see {args.out / f'{m}.log'})")
    misconception = Misconception(args.rule, args.rate)
    rows_eval = list(pl.read_parquet(world / "synth_id.parquet").iter_rows(named=True))
    rows = []
    for m in args.methods:
        search = pl.read_csv(args.out / m / f"search_{m}.csv").row(0, named=True)
        final = evaluate(args.out / m / "frozen" / "final", rows_eval, misconception, args.samples)
        row = {
            "rate": args.rate,
            "method": m,
            **{k: v for k, v in search.items() if k.startswith("heldout")},
            **{f"final_{k}": v for k, v in final.items()},
            "seconds": search["seconds"],
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    with (args.out / "dev_regime.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.out / 'dev_regime.csv'}")


if __name__ == "__main__":
    main()
