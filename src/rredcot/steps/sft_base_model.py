"""Rule `sft_base_model`: build the tiny Qwen3 model, warm it up by SFT on reference solutions."""

from __future__ import annotations

import json
from pathlib import Path

from rredcot.data.schema import read_parquet
from rredcot.data.synthetic import check_response
from rredcot.models.sft import demonstrations, heldout_demonstrations, run_sft
from rredcot.models.sft_settings import sft_block
from rredcot.models.tiny import build_tiny_model, count_parameters
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.planning.machine import machine_info
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
    settings, errors, n_heldout = sft_block(sft, seed, train.height)
    fit_rows, heldout_rows = train.head(train.height - n_heldout), train.tail(n_heldout)
    examples = demonstrations(
        fit_rows, task, tokenizer, errors.slip_rate, seed, errors.misconception
    )
    heldout = (
        heldout_demonstrations(heldout_rows, task, tokenizer, seed, errors.misconception)
        if n_heldout
        else []
    )
    # a slip or a misconception, not another valid path (the checker accepts every path)
    slipped = sum(
        not check_response(row["program"], ex["completion"]).correct
        for ex, row in zip(examples, fit_rows.iter_rows(named=True), strict=True)
    )
    log.info(
        "SFT on %d demonstrations (%d with an error: slip_rate %.3f per step, misconception "
        "%s); %d held out",
        len(examples),
        slipped,
        errors.slip_rate,
        errors.misconception,
        len(heldout),
    )
    metrics = run_sft(model, tokenizer, examples, settings, args.out, heldout=heldout)
    metrics["train/slipped_demonstrations"] = slipped
    metrics["machine"] = machine_info()
    log.info("SFT metrics: %s", json.dumps(metrics, default=str))
    (args.out / "sft_metrics.json").write_text(json.dumps(metrics, indent=2, default=str))


if __name__ == "__main__":
    main()
