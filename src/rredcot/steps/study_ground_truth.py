"""Rule `study_ground_truth`: MC rollouts (large N, generous budget) from every distinct state
of every study segmentation of the agreement traces, kept one row per rollout."""

from __future__ import annotations

import polars as pl

from rredcot.generation.base import derive_seed
from rredcot.steps.cli import log
from rredcot.steps.study_common import (
    Timer,
    agreement_rows,
    load_backend,
    policy_parser,
    start_policy_step,
)
from rredcot.studies.rollouts import sample_rollouts
from rredcot.studies.segmentations import distinct_states

GROUND_TRUTH_STREAM = 1  # derive_seed(seed, 1): the ground truth's rollouts, apart from MC-N's


def main() -> None:
    step = start_policy_step(policy_parser(__doc__), "backend", "studies", "mc")
    args, seed = step.args, step.seed
    _, studies, mc = step.settings  # backend: read by load_backend
    states = distinct_states(agreement_rows(step.traces, step.segmentations))
    gt = studies["ground_truth"]
    log.info(
        "ground truth: %d distinct states of %d traces x %d rollouts, budget %d",
        states.height,
        states["trace_index"].n_unique(),
        gt["n_rollouts"],
        gt["budget"],
    )
    with Timer("study_ground_truth"):
        backend = load_backend(args.params, args.policy, studies["batch_size"])
        from rredcot.models.loading import load_tokenizer

        run = sample_rollouts(
            backend,
            step.task,
            step.traces,
            states,
            n_rollouts=gt["n_rollouts"],
            budget=gt["budget"],
            seed=derive_seed(seed, GROUND_TRUTH_STREAM),
            temperature=mc["temperature"],
            top_p=mc["top_p"],
            tokenizer=load_tokenizer(args.policy),
        )
    rollouts = run.rollouts
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rollouts.write_parquet(args.out)
    log.info(
        "%d rollouts in %.1f s (%d new tokens); %.4f hit the budget; mean reward %.3f",
        rollouts.height,
        run.seconds,
        rollouts["num_tokens"].sum(),
        (rollouts["finish_reason"] == "length").mean(),
        rollouts["reward"].mean(),
    )
    if (rollouts["finish_reason"] == "length").any():
        log.warning(
            "some ground-truth rollouts hit the budget (%d); raise studies.ground_truth.budget",
            rollouts.filter(pl.col("finish_reason") == "length").height,
        )


if __name__ == "__main__":
    main()
