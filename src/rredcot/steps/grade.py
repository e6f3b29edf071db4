"""Rule `grade`: grade kept generations (math-verify or exact match), one row per sample."""

from __future__ import annotations

from pathlib import Path

from rredcot.data.schema import read_parquet, read_table
from rredcot.evaluation.grading import grade_generations
from rredcot.steps.cli import log, parser, require, setup
from rredcot.tasks import get_task


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--generations", required=True, type=Path)
    p.add_argument("--problems", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    setup()
    (task_name,) = require(args.params, "task")
    task = get_task(task_name)
    if hasattr(task, "timeout_s"):
        task.timeout_s = float(args.params.get("grading_timeout_s", task.timeout_s))
    grades = grade_generations(read_table(args.generations), read_parquet(args.problems), task)
    counts = dict(grades.group_by("status").len().rows())
    log.info(
        "graded %d samples: mean reward %.4f; statuses %s",
        grades.height,
        grades["reward"].mean(),
        counts,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    grades.write_parquet(args.out)


if __name__ == "__main__":
    main()
