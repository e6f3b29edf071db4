"""Cost per training step (`rredcot.reporting.training.compute_cost`), by hand."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from rredcot.reporting.training import GPU_COST_MODEL, compute_cost, training_curves


def _run(root: Path, method: str, seen: list[float], credit: list[float], summary: bool) -> Path:
    """A run's metrics.csv (two steps of 4 responses, 10 completion tokens each) and, optionally,
    its train_summary.json."""
    path = root / method / "metrics.csv"
    path.parent.mkdir(parents=True)
    pl.DataFrame(
        {
            "step": [1, 2],
            "tokens/seen": seen,
            "tokens/completion_mean": [10.0, 10.0],
            "credit/forward_tokens": credit,
            "credit/seconds": [0.5, 0.5],
            "time/step_seconds": [2.0, 4.0],
        }
    ).write_csv(path)
    if summary:
        settings = {"prompts_per_step": 2, "num_generations": 2}
        path.with_name("train_summary.json").write_text(json.dumps({"settings": settings}))
    return path


def test_forward_tokens_and_the_gpu_projection_by_hand(tmp_path: Path) -> None:
    """grpo: 100 policy tokens per step (40 of them generated), no credit; rredcot: the same and
    300 scored tokens. Units: grpo 3·100 + 10·40 = 700; rredcot 700 + 300 = 1000."""
    runs = [
        ("grpo", 6, _run(tmp_path, "grpo", [100.0, 200.0], [0.0, 0.0], True)),
        ("rredcot", 6, _run(tmp_path, "rredcot", [100.0, 200.0], [300.0, 300.0], True)),
    ]
    curves = training_curves(runs)
    assert curves["responses_per_step"].to_list() == [4] * 4
    cost = {r["method"]: r for r in compute_cost(curves, "grpo").iter_rows(named=True)}
    assert cost["rredcot"]["forward_tokens_per_step"] == pytest.approx(400.0)
    assert cost["rredcot"]["tokens_ratio_to_grpo"] == pytest.approx(4.0)
    assert cost["grpo"]["completion_tokens_per_step"] == pytest.approx(40.0)
    model = GPU_COST_MODEL
    grpo_units = model["trained"] * 100 + model["generated"] * 40
    assert cost["grpo"]["gpu_units_per_step"] == pytest.approx(grpo_units)
    assert cost["rredcot"]["gpu_units_ratio_to_grpo"] == pytest.approx(
        (grpo_units + model["scored"] * 300) / grpo_units
    )
    assert cost["rredcot"]["seconds_ratio_to_grpo"] == pytest.approx(1.0)


def test_without_the_batch_shape_there_is_no_projection(tmp_path: Path) -> None:
    runs = [("grpo", 6, _run(tmp_path, "grpo", [100.0, 200.0], [0.0, 0.0], False))]
    cost = compute_cost(training_curves(runs), "grpo")
    assert cost["gpu_units_per_step"].is_null().all()
    assert cost["gpu_units_ratio_to_grpo"].is_null().all()
    assert cost["forward_tokens_per_step"].to_list() == [100.0]
