"""Rule `study_traces`: one sampled trace per study problem; the study set (depths where the
base's accuracy is in the band; the agreement subset; how many solution paths the base writes
per depth); token statistics; every kind of reference (configured, sampled, own path) with the
trace's path overlap; every segmentation the studies use (the study's own, a state at every
line by default, and the sweep's strategy × K)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from rredcot.credit.segmentation import study_segmentation
from rredcot.data.schema import read_parquet
from rredcot.generation.base import SamplingParams, derive_seed
from rredcot.steps.cli import log, parser, require, seed_everything, setup
from rredcot.steps.study_common import Timer, load_backend, load_policy
from rredcot.studies.segmentations import MAIN, segmentation_table, sweep_configs
from rredcot.studies.traces import (
    path_statistics,
    sample_traces,
    select_study_set,
    token_statistics,
    with_reference_kinds,
)
from rredcot.tasks import get_task


def base_paths(
    backend: Any,
    task: Any,
    problems: pl.DataFrame,
    tokenizer: Any,
    studies: dict[str, Any],
    seed: int,
) -> pl.DataFrame:
    """Per depth: how many solution paths the base writes (`studies.paths.samples` samples of
    each of the first `studies.paths.problems` problems of that depth), and the overlaps."""
    cfg = studies["paths"]
    chosen = problems.with_row_index("row").filter(
        pl.int_range(pl.len()).over("depth") < cfg["problems"]
    )
    params = SamplingParams(
        n=cfg["samples"],
        temperature=studies["temperature"],
        top_p=studies["top_p"],
        max_new_tokens=studies["max_new_tokens"],
        seed=derive_seed(seed, 7),  # a stream of its own, not the traces'
        stop_strings=tuple(task.stop_strings),
    )
    prompts = [task.build_prompt(p, tokenizer) for p in chosen["problem"]]
    samples: list[list[str]] = [[] for _ in prompts]
    for c in backend.generate(prompts, params):
        samples[c.prompt_index].append(c.text)
    rows = []
    for (depth,), part in chosen.with_columns(pl.Series("samples", samples)).group_by(
        "depth", maintain_order=True
    ):
        stats = path_statistics(
            part["program"].to_list(),
            part["samples"].to_list(),
            part["reference"].to_list(),
            derive_seed(seed, 8, depth),
        )
        rows.append({"depth": depth, **stats})
    return pl.DataFrame(rows).sort("depth")


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
    p.add_argument("--sampled", required=True, type=Path, help="the same, sampled-first")
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
        sampled = dict(read_parquet(args.sampled).select("id", "reference").iter_rows())
        traces = with_reference_kinds(
            traces, programs, [sampled.get(pid) for pid in traces["problem_id"]]
        )
        if "program" in problems.columns and "depth" in problems.columns:
            paths = base_paths(backend, task, problems, tokenizer, studies, seed)
            study_set = study_set.join(paths, on="depth", how="left")
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
    log.info(
        "path overlap of the traces with their references (mean): configured %.3f, own path "
        "%.3f, sampled %.3f; on the configured reference's path (overlap 1): %d of %d",
        *(
            float("nan") if (mean := traces[c].mean()) is None else mean
            for c in ("overlap", "overlap_own_path", "overlap_sampled")
        ),
        (traces["overlap"] == 1.0).sum(),
        traces.height,
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
