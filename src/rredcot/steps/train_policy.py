"""Rule `train_policy`: RL-train one (method, seed) from a base checkpoint on the train problems.

    python -m rredcot.steps.train_policy --model results/models/sft --train train.parquet \
        --out results/training/rredcot/0 --params '{"method": "rredcot", "seed": 0, ...}'

`--params` is a `TrainingSettings` mapping (method, seed, max_steps, batch shape, credit,
segmentation, rredcot, mc, ...). Restarted after a kill, the run resumes from the newest
checkpoint in `--out`. On GPUs it runs under `accelerate launch ... -m rredcot.steps.train_policy`
(`rredcot.training.launch.accelerate_command`), one process per GPU, with `--dtype bfloat16`.
"""

from __future__ import annotations

import json
from pathlib import Path

from rredcot.data.schema import read_parquet
from rredcot.models.loading import DTYPES, load_model, load_tokenizer
from rredcot.steps.cli import log, parser, seed_everything, setup
from rredcot.training.curves import CurveSettings
from rredcot.training.run import TrainingSettings, fingerprint, train_policy


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--model", required=True, type=Path, help="base checkpoint directory or hub id")
    p.add_argument("--train", required=True, type=Path, help="normalized train parquet")
    p.add_argument("--out", required=True, type=Path, help="run directory")
    p.add_argument(
        "--dtype",
        default="float32",
        choices=sorted(DTYPES),
        help="dtype the policy is loaded in (float32 on the CPU; bfloat16 with training.bf16 on "
        "GPUs)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--curve-problems", type=Path, help="held-out problems of the learning curve")
    p.add_argument("--curve", type=json.loads, help="CurveSettings as JSON (with --curve-problems)")
    args = p.parse_args()
    setup(args.threads)
    settings = TrainingSettings.from_dict(args.params)
    seed_everything(settings.seed)
    tokenizer = load_tokenizer(args.model)
    model = load_model(args.model, dtype=args.dtype)
    table = read_parquet(args.train)
    log.info("training %s (seed %d) on %d problems", settings.method, settings.seed, table.height)
    curve = None
    inputs = {"model": fingerprint(args.model), "train": fingerprint(args.train)}
    if args.curve_problems is not None:
        curve = (read_parquet(args.curve_problems), CurveSettings.from_dict(args.curve or {}))
        inputs.update(curve_problems=fingerprint(args.curve_problems), curve=json.dumps(args.curve))
    train_policy(model, tokenizer, table, settings, args.out, curve=curve, fingerprints=inputs)


if __name__ == "__main__":
    main()
