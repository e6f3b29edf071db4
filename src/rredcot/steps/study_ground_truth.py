"""Rule `study_ground_truth`: MC rollouts (large N, generous budget) from every distinct state
of every study segmentation, kept one row per rollout."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rredcot.generation.base import derive_seed
from rredcot.steps.cli import log, parser, require, seed_everything, setup
from rredcot.steps.study_common import Timer, load_backend, read_study_inputs
from rredcot.studies.rollouts import sample_rollouts
from rredcot.studies.segmentations import distinct_states
from rredcot.tasks import get_task

GROUND_TRUTH_STREAM = 1  # derive_seed(seed, 1): the ground truth's rollouts, apart from MC-N's


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
    task_name, seed, backend_name, studies, mc = require(
        prm, "task", "seed", "backend", "studies", "mc"
    )
    seed_everything(seed)
    task = get_task(task_name)
    traces, segmentations = read_study_inputs(args.traces, args.segmentations)
    states = distinct_states(segmentations)
    gt = studies["ground_truth"]
    log.info(
        "ground truth: %d distinct states of %d traces x %d rollouts, budget %d",
        states.height,
        states["trace_index"].n_unique(),
        gt["n_rollouts"],
        gt["budget"],
    )
    with Timer("study_ground_truth"):
        backend = load_backend(backend_name, args.policy, studies["batch_size"])
        from rredcot.models.loading import load_tokenizer

        run = sample_rollouts(
            backend,
            task,
            traces,
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
