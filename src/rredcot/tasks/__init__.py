"""Task formats by name: `synthetic` (the arithmetic world) and `math` (real benchmarks)."""

from __future__ import annotations

from rredcot.tasks.base import Grade, Task

TASK_NAMES: tuple[str, ...] = ("synthetic", "math")


def get_task(name: str) -> Task:
    """The task format called `name` (imported lazily: math pulls in math-verify)."""
    if name == "synthetic":
        from rredcot.tasks.synthetic import SyntheticTask

        return SyntheticTask()
    if name == "math":
        from rredcot.tasks.math import MathTask

        return MathTask()
    raise ValueError(f"unknown task '{name}'; known tasks: {list(TASK_NAMES)}")


__all__ = ["Grade", "Task", "TASK_NAMES", "get_task"]
