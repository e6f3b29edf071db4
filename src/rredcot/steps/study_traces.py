"""Rule `study_traces`: one sampled trace per study problem; the study set (depths where the
base's accuracy is in the band; the agreement subset); token statistics; other-path references;
every segmentation the studies use (the study's own, a state at every line by default, and the
sweep's strategy × K)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rredcot.data.schema import read_parquet
from rredcot.segmentation import study_segmentation
from rredcot.steps.cli import log, parser, require, seed_everything, setup
from rredcot.steps.study_common import Timer, load_backend, load_policy
from rredcot.studies.segmentations import MAIN, segmentation_table, sweep_configs
from rredcot.studies.traces import (
    sample_traces,
    select_study_set,
    token_statistics,
    with_other_path_references,
)
from rredcot.tasks import get_task


def with_reference(problems: pl.DataFrame, split: str | None) -> pl.DataFrame:
    """The problems that have a reference solution (every estimator needs U*); none is an
    error naming the split, before any trace is sampled."""
    kept = problems.filter(pl.col("reference").is_not_null())
    if kept.height == 0:
        raise ValueError(
            f"studies.split: none of the {problems.height} problems of {split!r} has a "
            "reference solution (results/references/<split>_summary.json says why; e.g. a "
            "mirror copy without dataset solutions and a base that never answers right)"
        )
    if kept.height < problems.height:
        log.info("%d of %d problems have a reference", kept.height, problems.height)
    return kept


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--policy", required=True)
    p.add_argument("--problems", required=True, type=Path, help="split with references")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--segmentations", required=True, type=Path)
    p.add_argument("--study-set", required=True, type=Path, help="CSV: accuracy per depth")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    setup(args.threads)
    prm = args.params
    task_name, seed, _, studies, seg = require(
        prm, "task", "seed", "backend", "studies", "segmentation"
    )
    seed_everything(seed)
    task = get_task(task_name)
    problems = with_reference(read_parquet(args.problems), studies["split"])
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
        if "depth" in problems.columns:
            traces = traces.with_columns(depth=problems["depth"].gather(traces["trace_index"]))
        pooled = traces.height
        traces, study_set = select_study_set(
            traces, studies["accuracy_band"], studies["agreement_traces"]
        )
        programs = (
            problems["program"].gather(traces["trace_index"]).to_list()
            if "program" in problems.columns
            else [None] * traces.height
        )
        traces = with_other_path_references(traces, programs)
        traces = token_statistics(model, traces)
        base = study_segmentation(seg, studies["segmentation"])
        sweep = studies["sweep"]
        grid = sweep_configs(base, sweep["strategies"], sweep["num_segments"])
        agreement = traces.filter(pl.col("agreement"))["trace_index"].to_list()
        sweep_traces = agreement[: sweep["max_traces"] or None]
        segmentations = segmentation_table(
            traces,
            tokenizer,
            {MAIN: base, **grid},
            {label: sweep_traces for label in grid},
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    traces.write_parquet(args.out)
    segmentations.write_parquet(args.segmentations)
    args.study_set.parent.mkdir(parents=True, exist_ok=True)
    study_set.write_csv(args.study_set)
    log.info(
        "study set: %d of %d sampled traces kept (accuracy band %s), %d in the agreement set; "
        "base accuracy per depth:\n%s",
        traces.height,
        pooled,
        studies["accuracy_band"],
        len(agreement),
        study_set,
    )
    if "own_path_canonical" in traces.columns and traces["own_path_canonical"].null_count() == 0:
        log.info(
            "%d traces write every step as the world's solution does (its path is theirs); "
            "%d have a different valid path for the localization study",
            int(traces["own_path_canonical"].sum()),
            traces["reference_other_path"].drop_nulls().len(),
        )
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
