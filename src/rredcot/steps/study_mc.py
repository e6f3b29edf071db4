"""Rule `study_mc`: σ and V̂ of the MC estimators (N = 1, 2, 4, … rollouts per state, the
first N of one nested set with a seed of its own) on the study's segmentation of the
agreement traces, with forward tokens and seconds per
trace."""

from __future__ import annotations

from rredcot.generation.base import derive_seed
from rredcot.steps.study_common import (
    Timer,
    agreement_rows,
    load_backend,
    main_segmentation,
    policy_parser,
    start_policy_step,
    write_estimates,
)
from rredcot.studies.estimators import mc_estimates

MC_STREAM = 2  # derive_seed(seed, 2): MC-N's rollouts, apart from the ground truth's


def main() -> None:
    step = start_policy_step(policy_parser(__doc__), "backend", "studies", "mc")
    args, seed = step.args, step.seed
    _, studies, mc = step.settings  # backend: read by load_backend
    main_seg = main_segmentation(agreement_rows(step.traces, step.segmentations))
    n_values = list(studies["mc_n"])
    with Timer("study_mc"):
        from rredcot.models.loading import load_tokenizer

        backend = load_backend(args.params, args.policy, studies["batch_size"])
        estimates = mc_estimates(
            backend,
            step.task,
            step.traces,
            main_seg,
            n_values,
            budget=mc["budget"],
            truncation=mc["truncation"],
            temperature=mc["temperature"],
            top_p=mc["top_p"],
            seed=derive_seed(seed, MC_STREAM),
            tokenizer=load_tokenizer(args.policy),
        )
    write_estimates(estimates, args.out, "MC", "study_mc")


if __name__ == "__main__":
    main()
