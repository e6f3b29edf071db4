"""Grade kept generations against the benchmark's gold answers (re-runnable without generating)."""

from __future__ import annotations

import polars as pl
from tqdm.auto import tqdm

from rredcot.tasks.base import Task


def grade_generations(
    generations: pl.DataFrame, problems: pl.DataFrame, task: Task, show_progress: bool = True
) -> pl.DataFrame:
    """One row per generation: reward r(y) in {0, 1}, extracted answer, grader status.

    For the synthetic world the per-step checker also records `first_error` (1-based index of the
    first erroneous step, null for a fully correct response), used later for error localization.
    Every generation must belong to a problem of the table and have a text; an unknown id or a
    null text is an error, not a drop or a 0.
    """
    gold = dict(zip(problems["id"].to_list(), problems["answer"].to_list(), strict=True))
    unknown = sorted(set(generations["problem_id"].to_list()) - set(gold))
    if unknown:
        raise ValueError(f"generations for problem ids not in the benchmark: {unknown[:20]}")
    missing = generations.filter(pl.col("text").is_null())
    if missing.height:
        shown = missing.select("problem_id", "sample_index").head(20).rows()
        raise ValueError(
            f"{missing.height} generation(s) have no text (null), e.g. (problem_id, "
            f"sample_index) {shown}: the generations table is broken; regenerate it"
        )
    programs = None
    if task.name == "synthetic":
        from rredcot.data.synthetic import check_response

        programs = dict(zip(problems["id"].to_list(), problems["program"].to_list(), strict=True))
    rewards, extracted, status, first_error = [], [], [], []
    rows = generations.select("problem_id", "text").iter_rows()
    for pid, text in tqdm(rows, total=generations.height, disable=not show_progress, desc="grade"):
        g = task.grade(text, gold[pid])
        rewards.append(g.reward)
        extracted.append(g.extracted)
        status.append(g.status)
        first_error.append(check_response(programs[pid], text).first_error if programs else None)
    return generations.select(
        "problem_id", "sample_index", "method", "seed", "num_tokens", "finish_reason"
    ).with_columns(
        pl.Series("reward", rewards, dtype=pl.Float64),
        pl.Series("extracted", extracted, dtype=pl.String),
        pl.Series("status", status, dtype=pl.String),
        pl.Series("first_error", first_error, dtype=pl.Int64),
    )
