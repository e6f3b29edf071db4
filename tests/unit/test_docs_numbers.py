"""Every number the README and docs state from a run equals the run's snapshot
(docs/snapshots/<machine>/values.json, written by scripts/snapshot_summary.py), so no typed
number can drift from what the run wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_summary import write_benchmark, write_tables

from rredcot.planning.timing import calibration_workload
from rredcot.reporting.snapshot import (
    machine_slug,
    mismatches,
    stated_numbers,
    take_snapshot,
)
from rredcot.reporting.summary import TABLES, JobTimes, read_tables, render_summary, summary_values

REPO = Path(__file__).resolve().parents[2]
SNAPSHOTS = REPO / "docs" / "snapshots"
MACHINE = "AMD EPYC 9B45 (family 26, model 2, stepping 0); torch 2.13.0+cpu AVX512; 1 threads"


def user_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def test_the_docs_state_the_snapshots_numbers():
    stated = stated_numbers(user_pages(), REPO)
    have = sorted(p.parent.name for p in SNAPSHOTS.glob("*/values.json"))
    if not stated and not have:
        pytest.skip(
            "no snapshot of a run is committed under docs/snapshots/ and no page quotes one: "
            "nothing to compare (scripts/snapshot_summary.py takes one from a finished run)"
        )
    assert not mismatches(stated, SNAPSHOTS)


def fake_run(root: Path) -> Path:
    """A finished run's results/: the tables, two timing files and the summary of them."""
    results = root / "results"
    results.mkdir()
    paths = write_tables(results)
    write_benchmark(results / "benchmarks" / "a.tsv", ("60", "90"))
    write_benchmark(results / "benchmarks" / "summary.tsv", ("1", "1"))
    times = JobTimes(jobs=1, wall_seconds=60.0, cpu_seconds=90.0, cpu_missing=0)
    text = render_summary(
        read_tables(paths), times, MACHINE, "abc123", ["configs/positive_control.yaml"], "grpo"
    )
    (results / "SUMMARY.md").write_text(text + "\n")
    return results


def test_a_snapshot_copies_the_summary_its_tables_and_every_value(tmp_path):
    results = fake_run(tmp_path)
    dest = take_snapshot(results, tmp_path / "snapshots", calibration=0.25)
    assert dest.name == "amd-epyc-9b45-family-26-model-2-stepping-0-avx512" == machine_slug(MACHINE)
    assert {p.name for p in dest.iterdir()} == {
        "SUMMARY.md", "values.json", "job_times.csv", "timing.json",
        *(file for file, _ in TABLES.values()),
    }  # fmt: skip
    values = json.loads((dest / "values.json").read_text())
    assert values["comparison/rredcot/auc/difference"] == "+0.004"
    assert values["jobs"] == "1" and values["commit"] == "abc123"


def test_a_snapshot_keeps_every_jobs_time_the_calibration_and_the_configs(tmp_path):
    """job_times.csv holds every job of the run, the summary's own included (it ran too)."""
    results = fake_run(tmp_path)
    dest = take_snapshot(results, tmp_path / "snapshots", calibration=0.25)
    assert (dest / "job_times.csv").read_text().splitlines() == [
        "rule,key,wall_s,cpu_s",
        "a,a,60.0000,90.00",
        "summary,summary,1.0000,1.00",
    ]
    assert json.loads((dest / "timing.json").read_text()) == {
        "calibration_s": 0.25,
        "calibration_workload": calibration_workload(),
        "configfiles": ["configs/positive_control.yaml"],
        "machine": MACHINE,
        "commit": "abc123",
    }


def test_a_snapshot_calibrates_only_on_the_machine_class_of_the_run(tmp_path):
    results = fake_run(tmp_path)
    summary = results / "SUMMARY.md"
    summary.write_text(summary.read_text().replace(MACHINE, "Imaginary CPU; torch 2.0 NEON"))
    with pytest.raises(ValueError, match="take the snapshot on the run's machine"):
        take_snapshot(results, tmp_path / "snapshots")
    assert not (tmp_path / "snapshots").exists()  # nothing half-written


def test_a_summary_older_than_its_tables_is_refused(tmp_path):
    results = fake_run(tmp_path)
    cost = results / "compute_cost.csv"
    cost.write_text(cost.read_text().replace("1.72", "1.90"))
    with pytest.raises(ValueError, match="does not state what its tables now say"):
        take_snapshot(results, tmp_path / "snapshots")


def test_a_stated_number_that_differs_from_its_snapshot_fails(tmp_path):
    results = fake_run(tmp_path)
    snapshots = tmp_path / "snapshots"
    slug = take_snapshot(results, snapshots, "m1", calibration=0.25).name
    values = summary_values(
        read_tables({n: results / f for n, (f, _) in TABLES.items()}),
        JobTimes(1, 60.0, 90.0, 0), MACHINE, "abc123", "grpo",
    )  # fmt: skip
    key = "comparison/rredcot/auc/difference"
    page = tmp_path / "page.md"
    mark = f"RREDCoT − GRPO: <!-- snapshot:{slug}/{key} -->{{}}<!-- /snapshot --> on the curve."
    page.write_text(mark.format(values[key]) + "\n")
    assert mismatches(stated_numbers([page], tmp_path), snapshots) == []
    page.write_text("\n" + mark.format("+0.040") + "\n")  # changed by hand
    assert mismatches(stated_numbers([page], tmp_path), snapshots) == [
        f"page.md:2: {key} is stated as '+0.040', the snapshot says '+0.004'"
    ]
    page.write_text(mark.replace(slug, "gone").format("+0.004"))
    assert "no snapshot 'gone'" in mismatches(stated_numbers([page], tmp_path), snapshots)[0]
    page.write_text(mark.replace(key, "comparison/x/auc").format("+0.004"))
    assert "has no key" in mismatches(stated_numbers([page], tmp_path), snapshots)[0]
