"""Rule `study_scored`: σ of every RREDCoT value variant and of the attribution baselines on the
configured segmentation (teacher-forced scoring only; nothing is generated)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rredcot.credit.attribution import ATTRIBUTIONS, AttributionConfig
from rredcot.credit.rredcot import VALUE_VARIANTS, RREDCoTConfig
from rredcot.steps.cli import log, parser, require, seed_everything, setup
from rredcot.steps.study_common import Timer, load_policy, main_segmentation, read_study_inputs
from rredcot.studies.estimators import attribution_estimates, rredcot_estimates
from rredcot.tasks import get_task


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--policy", required=True)
    p.add_argument("--traces", required=True, type=Path)
    p.add_argument("--segmentations", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    setup(args.threads)
    prm = args.params
    task_name, seed, rredcot, attribution, batch = require(
        prm, "task", "seed", "rredcot", "attribution", "score_batch_traces"
    )
    seed_everything(seed)
    task = get_task(task_name)
    traces, segmentations = read_study_inputs(args.traces, args.segmentations)
    main_seg = main_segmentation(segmentations)
    with Timer("study_scored"):
        model, tokenizer = load_policy(args.policy, prm.get("dtype", "float32"))
        base = RREDCoTConfig.from_dict(rredcot)
        scored = rredcot_estimates(
            model,
            tokenizer,
            task,
            traces,
            main_seg,
            list(VALUE_VARIANTS),
            base,
            batch_traces=batch,
        )
        attr = attribution_estimates(
            model,
            tokenizer,
            task,
            traces,
            main_seg,
            list(ATTRIBUTIONS),
            AttributionConfig(**attribution),
        )
    estimates = pl.concat([scored, attr])
    skipped = main_seg.height - scored["trace_index"].n_unique()
    if skipped:
        log.warning("%d traces have no reference solution: RREDCoT skipped them", skipped)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    estimates.write_parquet(args.out)
    summary = estimates.group_by("estimator", maintain_order=True).agg(
        pl.col("forward_tokens").mean(), pl.col("seconds").sum()
    )
    log.info("scored estimates (mean forward tokens, total seconds):\n%s", summary)


if __name__ == "__main__":
    main()
