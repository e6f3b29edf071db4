"""Rule `study_scored`: σ and Φ of every RREDCoT value variant × answer-now (conditional, joint)
× reference kind (the configured one, the oracle key on the trace's own path, the sampled-first
one), σ and V̂ of OPPO's one-pass Bayes value, and σ of the attribution baselines, on the
study's segmentation of every study trace (teacher-forced scoring only); and, for the frontier
(`--variants`), the forms only it compares, each in its own pass on the agreement traces
(`rredcot.studies.variants`)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import polars as pl

from rredcot.credit.attribution import ATTRIBUTIONS, AttributionConfig
from rredcot.credit.bayes import OPPOConfig
from rredcot.credit.rredcot import ANSWER_NOW, VALUE_VARIANTS, RREDCoTConfig
from rredcot.credit.segmentation import SegmentationConfig
from rredcot.steps.cli import log
from rredcot.steps.study_common import (
    Timer,
    agreement_rows,
    load_policy,
    main_segmentation,
    policy_parser,
    start_policy_step,
    write_estimates,
)
from rredcot.studies.estimators import (
    REFERENCE_COLUMNS,
    attribution_estimates,
    bayes_estimates,
    rredcot_configs,
    rredcot_estimates,
    rredcot_name,
)
from rredcot.studies.variants import variant_estimates


def main() -> None:
    p = policy_parser(__doc__)
    p.add_argument("--variants", required=True, type=Path, help="the frontier's own forms")
    step = start_policy_step(
        p, "rredcot", "attribution", "oppo", "segmentation", "frontier", "score_batch_traces"
    )
    args, task, traces = step.args, step.task, step.traces
    rredcot, attribution, oppo, segmentation, frontier, batch = step.settings
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
        oppo_config = OPPOConfig.from_dict(oppo)
        bayes = bayes_estimates(
            model, tokenizer, task, traces, main_seg, oppo_config, batch_traces=batch
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
        variants = variant_estimates(
            model,
            tokenizer,
            task,
            traces,
            main_seg,
            agreement_rows(traces, main_seg)["trace_index"].to_list(),
            rredcot=base,
            segmentation=SegmentationConfig.from_dict(segmentation),
            overrides=frontier["rredcot_variants"],
            num_segments=frontier["num_segments"],
            oppo=oppo_config,
            batch_traces=batch,
        )
    estimates = pl.concat([*parts, bayes, attr])
    skipped = main_seg.height - parts[0]["trace_index"].n_unique()
    if skipped:
        log.warning("%d traces have no reference solution: RREDCoT skipped them", skipped)
    write_estimates(estimates, args.out, "scored", "study_scored")
    write_estimates(variants, args.variants, "the frontier's own", "study_scored")


if __name__ == "__main__":
    main()
