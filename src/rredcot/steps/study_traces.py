"""Rule `study_traces`: one sampled trace per study problem, its token statistics and every
segmentation the studies use (the configured one and the sweep's strategy × K)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rredcot.data.schema import read_parquet
from rredcot.segmentation import SegmentationConfig
from rredcot.steps.cli import log, parser, require, seed_everything, setup
from rredcot.steps.study_common import Timer, load_backend, load_policy
from rredcot.studies.segmentations import MAIN, segmentation_table, sweep_configs
from rredcot.studies.traces import sample_traces, token_statistics
from rredcot.tasks import get_task


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--policy", required=True)
    p.add_argument("--problems", required=True, type=Path, help="split with references")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--segmentations", required=True, type=Path)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    setup(args.threads)
    prm = args.params
    task_name, seed, _, studies, seg = require(
        prm, "task", "seed", "backend", "studies", "segmentation"
    )
    seed_everything(seed)
    task = get_task(task_name)
    problems = read_parquet(args.problems)
    if studies["max_traces"]:
        problems = problems.head(studies["max_traces"])
    with Timer("study_traces"):
        model, tokenizer = load_policy(args.policy, prm.get("dtype", "float32"))
        backend = load_backend(prm, args.policy, studies["batch_size"])
        traces = sample_traces(
            backend,
            task,
            problems,
            tokenizer,
            temperature=studies["temperature"],
            top_p=studies["top_p"],
            max_new_tokens=studies["max_new_tokens"],
            seed=seed,
        )
        traces = token_statistics(model, traces)
        base = SegmentationConfig.from_dict(seg)
        sweep = studies["sweep"]
        grid = sweep_configs(base, sweep["strategies"], sweep["num_segments"])
        sweep_traces = traces["trace_index"].to_list()[: sweep["max_traces"] or None]
        segmentations = segmentation_table(
            traces,
            tokenizer,
            {MAIN: base, **grid},
            {label: sweep_traces for label in grid},
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    traces.write_parquet(args.out)
    segmentations.write_parquet(args.segmentations)
    incorrect = traces.filter(pl.col("reward") == 0)
    log.info(
        "%d traces: mean reward %.3f, %d incorrect, %d empty, %d hit max_new_tokens, "
        "%d correct answers after a wrong step; mean %.1f tokens",
        traces.height,
        traces["reward"].mean(),
        incorrect.height,
        (traces["num_tokens"] == 0).sum(),
        (traces["finish_reason"] == "length").sum(),
        traces.filter((pl.col("reward") == 1) & pl.col("first_error").is_not_null()).height,
        traces["num_tokens"].mean(),
    )
    log.info(
        "segmentations: %s",
        dict(segmentations.group_by("segmentation").len().sort("segmentation").rows()),
    )


if __name__ == "__main__":
    main()
