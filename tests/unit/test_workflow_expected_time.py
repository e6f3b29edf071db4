"""rredcot.workflow.expected_time: the jobs a run prices, and the line it logs when it cannot
price them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from rredcot.workflow import expected_time


@dataclass(eq=False)  # hashed by identity, as Snakemake's jobs are keys of dicts
class Job:
    rule: SimpleNamespace
    benchmark: str | None


def job(rule: str, benchmark: str | None) -> Job:
    return Job(SimpleNamespace(name=rule), benchmark)


def line(**over) -> str:
    kwargs = {
        "local": True,
        "jobs": lambda: [],
        "dependencies": lambda j: [],
        "snapshots": Path("/nonexistent"),
        "configfiles": ["configs/smoke.yaml"],
        "cores": 2,
        "src": "src",
        **over,
    }
    return expected_time.expected_time_line(**kwargs)


def test_jobs_with_a_benchmark_are_priced_with_what_they_wait_for():
    world = job("synthetic_world", "results/benchmarks/synthetic_world.tsv")
    train = job("train_policy", "results/benchmarks/train_policy/grpo_seed0.tsv")
    target = job("all", None)
    waits = {train: [world, target], world: [], target: [train, world]}
    priced, after = expected_time.priced_jobs([world, train, target], waits.__getitem__)
    assert [rule for rule, _ in priced] == ["synthetic_world", "train_policy"]
    keys = dict(priced)
    assert after[keys["train_policy"]] == [keys["synthetic_world"]]  # `all` has no benchmark
    assert after[keys["synthetic_world"]] == []


def test_a_cluster_run_is_not_priced():
    def never():
        raise AssertionError("the DAG is not read under a cluster executor")

    assert line(local=False, jobs=never) == expected_time.CLUSTER_LINE


def test_a_dag_that_cannot_be_read_gives_the_reason():
    def broken():
        raise AttributeError("'DAG' object has no attribute 'needrun_jobs'")

    assert line(jobs=broken) == (
        "expected time: not estimated ('DAG' object has no attribute 'needrun_jobs')"
    )


def test_without_a_snapshot_of_the_config_no_calibration_runs(tmp_path: Path):
    text = line(snapshots=tmp_path, src="/nonexistent/src")  # a calibration would fail
    assert text.startswith("expected time:")
    assert "smoke" in text


def test_config_files_are_named_from_the_workflow_when_they_lie_in_it(tmp_path: Path):
    inside = tmp_path / "configs" / "smoke.yaml"
    outside = tmp_path.parent / "mine.yaml"
    assert expected_time.configfiles_given(tmp_path, [inside, outside]) == [
        "configs/smoke.yaml",
        str(outside.resolve()),
    ]


def test_snapshots_come_from_the_environment_else_the_docs(tmp_path: Path):
    assert expected_time.snapshots_dir(tmp_path, {}) == tmp_path / "docs" / "snapshots"
    assert expected_time.snapshots_dir(tmp_path, {"RREDCOT_SNAPSHOTS": " "}) == (
        tmp_path / "docs" / "snapshots"
    )
    assert expected_time.snapshots_dir(tmp_path, {"RREDCOT_SNAPSHOTS": "/mine"}) == Path("/mine")
