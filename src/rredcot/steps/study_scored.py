"""Rule `study_scored`: σ of every RREDCoT value variant and of the attribution baselines on the
configured segmentation (teacher-forced scoring only; nothing is generated)."""

from __future__ import annotations

import polars as pl

from rredcot.credit.attribution import ATTRIBUTIONS, AttributionConfig
from rredcot.credit.rredcot import VALUE_VARIANTS, RREDCoTConfig
from rredcot.steps.cli import log
from rredcot.steps.study_common import (
    Timer,
    load_policy,
    main_segmentation,
    policy_parser,
    start_policy_step,
    write_estimates,
)
from rredcot.studies.estimators import attribution_estimates, rredcot_estimates


def main() -> None:
    step = start_policy_step(policy_parser(__doc__), "rredcot", "attribution", "score_batch_traces")
    args, task, traces = step.args, step.task, step.traces
    rredcot, attribution, batch = step.settings
    main_seg = main_segmentation(step.segmentations)
    with Timer("study_scored"):
        model, tokenizer = load_policy(args.policy, args.params.get("dtype", "float32"))
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
    write_estimates(estimates, args.out, "scored")


if __name__ == "__main__":
    main()
