"""Rule `study_scored`: σ and Φ of every RREDCoT value variant × answer-now (conditional, joint)
× reference kind (the configured one, the oracle key on the trace's own path, the sampled-first
one), and σ of the attribution baselines, on the study's segmentation of every study trace
(teacher-forced scoring only)."""

from __future__ import annotations

from functools import partial

import polars as pl

from rredcot.credit.attribution import ATTRIBUTIONS, AttributionConfig
from rredcot.credit.rredcot import ANSWER_NOW, VALUE_VARIANTS, RREDCoTConfig
from rredcot.steps.cli import log
from rredcot.steps.study_common import (
    Timer,
    load_policy,
    main_segmentation,
    policy_parser,
    start_policy_step,
    write_estimates,
)
from rredcot.studies.estimators import (
    REFERENCE_COLUMNS,
    attribution_estimates,
    rredcot_configs,
    rredcot_estimates,
    rredcot_name,
)


def main() -> None:
    step = start_policy_step(policy_parser(__doc__), "rredcot", "attribution", "score_batch_traces")
    args, task, traces = step.args, step.task, step.traces
    rredcot, attribution, batch = step.settings
    main_seg = main_segmentation(step.segmentations)
    with Timer("study_scored"):
        model, tokenizer = load_policy(args.policy, args.params.get("dtype", "float32"))
        base = RREDCoTConfig.from_dict(rredcot)
        default = rredcot_name(base.value, base.answer_now)
        own = rredcot_configs(base, list(VALUE_VARIANTS), ANSWER_NOW)
        score = partial(
            rredcot_estimates, model, tokenizer, task, traces, main_seg, batch_traces=batch
        )
        # the default alone (its own cost), then every other variant from one shared pass
        others = {n: c for n, c in own.items() if n != default}
        parts = [score({default: base}), score(others, shared_pass=True)]
        for kind, column in REFERENCE_COLUMNS.items():  # the other kinds of reference
            if kind != "configured" and column in traces.columns:
                configs = rredcot_configs(base, list(VALUE_VARIANTS), ANSWER_NOW, kind)
                parts.append(score(configs, reference_column=column, shared_pass=True))
        attr = attribution_estimates(
            model,
            tokenizer,
            task,
            traces,
            main_seg,
            list(ATTRIBUTIONS),
            AttributionConfig(**attribution),
        )
    estimates = pl.concat([*parts, attr])
    skipped = main_seg.height - parts[0]["trace_index"].n_unique()
    if skipped:
        log.warning("%d traces have no reference solution: RREDCoT skipped them", skipped)
    write_estimates(estimates, args.out, "scored")


if __name__ == "__main__":
    main()
