"""Rule `sft_base_model`: build the tiny Qwen3 model, warm it up by SFT on reference solutions."""

from __future__ import annotations

import json
from pathlib import Path

from rredcot.data.schema import read_parquet
from rredcot.models.sft import SFTSettings, run_sft
from rredcot.models.tiny import build_tiny_model, count_parameters
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.steps.cli import log, parser, require, seed_everything, setup
from rredcot.tasks import get_task


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--train", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    setup(args.threads)
    seed, arch, sft = require(args.params, "seed", "arch", "sft")
    seed_everything(seed)
    task = get_task("synthetic")
    tokenizer = build_byte_tokenizer()
    model = build_tiny_model(arch, tokenizer, seed=seed)
    log.info("tiny Qwen3: %d parameters", count_parameters(model))
    train = read_parquet(args.train)
    examples = [
        {
            "prompt": task.build_prompt(row["problem"], tokenizer),
            "completion": task.reference_completion(row),
        }
        for row in train.iter_rows(named=True)
    ]
    log.info("SFT on %d reference solutions", len(examples))
    metrics = run_sft(model, tokenizer, examples, SFTSettings(seed=seed, **sft), args.out)
    log.info("SFT metrics: %s", json.dumps(metrics, default=str))
    (args.out / "sft_metrics.json").write_text(json.dumps(metrics, indent=2, default=str))


if __name__ == "__main__":
    main()
