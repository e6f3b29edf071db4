"""Rule `study_mc`: σ of the MC estimators (N = 1, 2, 4, … fresh rollouts per state, seeds of
their own) on the configured segmentation, with forward tokens and seconds per trace."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rredcot.generation.base import derive_seed
from rredcot.steps.cli import log, parser, require, seed_everything, setup
from rredcot.steps.study_common import Timer, load_backend, main_segmentation, read_study_inputs
from rredcot.studies.estimators import mc_estimates
from rredcot.tasks import get_task

MC_STREAM = 2  # derive_seed(seed, 2, N): MC-N's rollouts, apart from the ground truth's


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
    main_seg = main_segmentation(segmentations)
    n_values = list(studies["mc_n"])
    with Timer("study_mc"):
        from rredcot.models.loading import load_tokenizer

        backend = load_backend(backend_name, args.policy, studies["batch_size"])
        estimates = mc_estimates(
            backend,
            task,
            traces,
            main_seg,
            n_values,
            budget=mc["budget"],
            truncation=mc["truncation"],
            temperature=mc["temperature"],
            top_p=mc["top_p"],
            seeds=[derive_seed(seed, MC_STREAM, n) for n in n_values],
            tokenizer=load_tokenizer(args.policy),
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    estimates.write_parquet(args.out)
    summary = estimates.group_by("estimator", maintain_order=True).agg(
        pl.col("forward_tokens").mean(), pl.col("seconds").sum()
    )
    log.info("MC estimates (mean forward tokens, total seconds):\n%s", summary)


if __name__ == "__main__":
    main()
