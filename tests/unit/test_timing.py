"""The expected time of a run: job times read from benchmark files, priced against a snapshot of
the same config and scaled by the two machines' calibrations (hand-computed expectations)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_summary import write_benchmark

from rredcot.planning import timing
from rredcot.planning.timing import JobTime, estimate

REPO = Path(__file__).resolve().parents[2]

REFERENCE = [
    JobTime("train_policy", "train_policy/grpo/seed1", wall_s=100.0, cpu_s=150.0),
    JobTime("train_policy", "train_policy/grpo/seed2", wall_s=300.0, cpu_s=250.0),
    JobTime("generate", "generate/base/seed1/synth_id", wall_s=10.0, cpu_s=None),  # NA
]
JOBS = [
    ("train_policy", "train_policy/grpo/seed1"),  # its own key: 150 CPU s, 100 s wall
    ("train_policy", "train_policy/rredcot/seed1"),  # the rule's mean: 200 CPU s, 200 s wall
    ("generate", "generate/base/seed1/synth_id"),  # CPU not measured: its wall, 10 s
    ("study_mc", "studies/study_mc"),  # a rule the reference never ran
]


def test_the_calibration_runs_config_yamls_tiny_model():
    arch = yaml.safe_load((REPO / "config.yaml").read_text())["model"]["arch"]
    assert arch == timing.CALIBRATION_ARCH


def test_calibration_returns_positive_seconds():
    seconds = timing.calibrate()
    assert isinstance(seconds, float) and math.isfinite(seconds) and seconds > 0


def test_another_calibration_workload_has_another_id(monkeypatch):
    before = timing.calibration_workload()
    assert timing.calibration_workload() == before  # deterministic
    monkeypatch.setattr(timing, "CALIBRATION_BATCH", (8, 256))
    assert timing.calibration_workload() != before


def test_estimate_prices_by_key_then_rule_mean_and_scales_by_the_calibrations():
    result = estimate(JOBS, REFERENCE, calibration_here=2.0, calibration_there=1.0, cores=2)
    assert result.ratio == 2.0
    assert result.cpu_seconds == pytest.approx((150 + 200 + 10) * 2)  # 720
    assert result.longest_chain_s == pytest.approx(200 * 2)  # no dependencies: one job
    # 720 CPU s over 2 cores is 360 s, less than the longest job (400 s): the job bounds it
    assert result.wall_seconds == pytest.approx(400)
    assert (result.jobs, result.by_rule_mean, result.unmeasured) == (3, 1, 1)
    one_core = estimate(JOBS, REFERENCE, calibration_here=0.5, calibration_there=1.0, cores=1)
    assert one_core.cpu_seconds == pytest.approx(180) and one_core.wall_seconds == 180


def test_the_wall_time_is_never_below_the_longest_chain_of_dependent_jobs():
    # generation waits for grpo seed 1 (100 s) and the rredcot run (200 s); the study waits for
    # generation but the reference never ran it (costs nothing); x2 calibration
    after = {
        "generate/base/seed1/synth_id": ["train_policy/grpo/seed1", "train_policy/rredcot/seed1"],
        "studies/study_mc": ["generate/base/seed1/synth_id"],
    }
    result = estimate(JOBS, REFERENCE, 2.0, 1.0, cores=2, after=after)
    assert result.longest_chain_s == pytest.approx((200 + 10) * 2)
    assert result.wall_seconds == pytest.approx(420)  # above 720 CPU s / 2 cores = 360
    assert estimate(JOBS, REFERENCE, 2.0, 1.0, cores=1, after=after).wall_seconds == 720
    assert timing.longest_chain({"a": 1.0, "b": 2.0, "c": 4.0}, {"c": ["a", "b"]}) == 6.0
    assert timing.longest_chain({}, {}) == 0.0


def test_estimate_refuses_nonsense():
    with pytest.raises(ValueError, match="positive seconds"):
        estimate(JOBS, REFERENCE, 0.0, 1.0, cores=2)
    with pytest.raises(ValueError, match="cores: 0"):
        estimate(JOBS, REFERENCE, 1.0, 1.0, cores=0)


def test_the_start_line_states_the_estimate_and_its_gaps():
    result = estimate(JOBS, REFERENCE, 2.0, 1.0, cores=2)
    assert timing.describe(result, "zen3", 2) == (
        "expected: ~720 CPU s, ~7 min wall on 2 cores (reference: zen3, calibration ratio 2.00; "
        "1 of 3 jobs priced by their rule's mean; 1 jobs of rules the reference never ran not "
        "counted)"
    )
    assert timing.hours_minutes(3 * 3600 + 5 * 60) == "3 h 05 min"
    assert timing.hours_minutes(20) == "under 1 min"


def snapshot(root: Path, name: str, calibration: float, configfiles: list[str], **extra) -> None:
    path = root / name
    path.mkdir(parents=True)
    timing.write_job_times(REFERENCE, path / timing.JOB_TIMES)
    spec = {
        "calibration_s": calibration,
        "calibration_workload": timing.calibration_workload(),
        "configfiles": configfiles,
        **extra,
    }
    (path / timing.TIMING).write_text(json.dumps(spec))


def test_the_reference_is_a_snapshot_of_the_same_configs_nearest_in_calibration(tmp_path):
    pc = ["configs/positive_control.yaml"]
    snapshot(tmp_path, "fast", 1.0, pc)
    snapshot(tmp_path, "slow", 3.0, pc)
    snapshot(tmp_path, "default", 2.2, [])  # another config: never used for this one
    snapshot(tmp_path, "old", 2.4, pc, calibration_workload="qwen3-fb-other")
    snapshot(tmp_path, "unfrozen", 2.5, pc, superseded_by="slow")  # same names, older settings
    (tmp_path / "values_only").mkdir()  # a snapshot without job times
    assert timing.pick_reference(tmp_path, pc, 2.5).name == "slow"
    assert timing.pick_reference(tmp_path, pc, 1.2).name == "fast"
    picked = timing.pick_reference(tmp_path, pc, 1.2)
    assert picked.calibration == 1.0 and picked.jobs == REFERENCE  # read back as written
    assert timing.pick_reference(tmp_path, [], 1.0).name == "default"
    none = timing.pick_reference(tmp_path, ["configs/smoke.yaml"], 1.0)
    assert none.startswith(
        "expected time: no measured reference for this config (config.yaml + configs/smoke.yaml)"
    )


def test_without_a_reference_nothing_is_calibrated(tmp_path):
    def calibration() -> float:
        raise AssertionError("calibrated without a reference")

    line = timing.expected_time(JOBS, tmp_path / "none", [], 2, calibration)
    assert "no measured reference for this config (config.yaml)" in line
    snapshot(tmp_path, "m", 1.0, [])
    line = timing.expected_time(JOBS, tmp_path, [], 2, lambda: 2.0)
    assert line.startswith("expected: ~720 CPU s, ~7 min wall on 2 cores (reference: m,")


def test_a_benchmark_key_names_its_rule():
    key = timing.benchmark_key("results/benchmarks/train_policy/grpo/seed1.tsv")
    assert key == "train_policy/grpo/seed1" and timing.rule_of_key(key) == "train_policy"
    assert timing.rule_of_key("studies/study_mc") == "study_mc"
    assert timing.rule_of_key("summary") == "summary"
    timing.check_benchmark_paths(
        {"grade": "results/benchmarks/grade/{method}/seed{seed}/{benchmark}.tsv"}
    )
    with pytest.raises(ValueError, match="rule grade: .* must start with results/benchmarks/grade"):
        timing.check_benchmark_paths({"grade": "results/benchmarks/scores/{method}.tsv"})
    with pytest.raises(ValueError, match="is not under results/benchmarks/"):
        timing.check_benchmark_paths({"grade": "logs/grade.tsv"})


def test_benchmark_files_become_one_job_time_each(tmp_path):
    bench = tmp_path / "benchmarks"
    write_benchmark(bench / "train_policy/grpo/seed1.tsv", ("100", "150.5"))
    write_benchmark(bench / "studies/study_mc.tsv", ("2", "NA"))
    write_benchmark(bench / "summary.tsv", ("1", "1"))
    assert timing.benchmark_jobs(bench, exclude=bench / "summary.tsv") == [
        JobTime("study_mc", "studies/study_mc", 2.0, None),
        JobTime("train_policy", "train_policy/grpo/seed1", 100.0, 150.5),
    ]
    timing.write_job_times(timing.benchmark_jobs(bench), tmp_path / "job_times.csv")
    assert (tmp_path / "job_times.csv").read_text().splitlines() == [
        "rule,key,wall_s,cpu_s",
        "study_mc,studies/study_mc,2.0000,",
        "summary,summary,1.0000,1.00",
        "train_policy,train_policy/grpo/seed1,100.0000,150.50",
    ]


def test_per_rule_sums_each_rules_jobs_most_cpu_first():
    assert timing.per_rule(REFERENCE) == [
        timing.RuleTime("train_policy", jobs=2, cpu_s=400.0, wall_s=400.0),
        timing.RuleTime("generate", jobs=1, cpu_s=10.0, wall_s=10.0),  # CPU not measured: wall
    ]


def run_times(*sources: Path) -> subprocess.CompletedProcess[str]:
    script = REPO / "scripts" / "run_times.py"
    return subprocess.run(
        [sys.executable, str(script), *map(str, sources)], capture_output=True, text=True
    )


def test_run_times_prints_snapshots_side_by_side_per_rule_and_in_total(tmp_path):
    snapshot(tmp_path, "zen3", 0.5, ["configs/positive_control.yaml"], machine="CPU Z", commit="c1")
    bench = tmp_path / "run" / "benchmarks"  # a run in place: its benchmark files
    write_benchmark(bench / "train_policy/grpo/seed1.tsv", ("50", "60"))
    write_benchmark(bench / "studies/study_mc.tsv", ("2", "NA"))
    proc = run_times(tmp_path / "zen3", bench)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "- zen3: config.yaml + configs/positive_control.yaml on CPU Z (commit c1; calibration "
        "0.5000 s)",
        f"- benchmarks: the benchmark files under {bench}",
        "",
        "| rule | zen3: jobs | zen3: CPU s | zen3: wall s (summed) | benchmarks: jobs "
        "| benchmarks: CPU s | benchmarks: wall s (summed) |",
        "|---|---|---|---|---|---|---|",
        "| train_policy | 2 | 400 | 400 | 1 | 60 | 50 |",
        "| generate | 1 | 10 | 10 | — | — | — |",
        "| study_mc | — | — | — | 1 | 2 | 2 |",
        "| **total** | 3 | 410 s (0 h 07 min) | 410 s (0 h 07 min) | 2 | 62 s (0 h 01 min) "
        "| 52 s (0 h 01 min) |",
    ]
    (tmp_path / "zen3" / "timing.json").unlink()
    proc = run_times(tmp_path / "zen3")
    assert proc.returncode != 0 and "needs both job_times.csv and timing.json" in proc.stderr


def test_a_malformed_snapshot_is_named(tmp_path):
    snapshot(tmp_path, "m", 1.0, [])
    (tmp_path / "m" / "timing.json").write_text('{"calibration_s": 1.0}')
    with pytest.raises(ValueError, match=r"m/timing.json: no \['calibration_workload'"):
        timing.pick_reference(tmp_path, [], 1.0)
    snapshot(tmp_path, "n", 1.0, [])
    (tmp_path / "n" / "job_times.csv").write_text("rule,key,wall_s,cpu_s\nx,x,soon,1\n")
    (tmp_path / "m" / "timing.json").unlink()
    with pytest.raises(ValueError, match="n/job_times.csv: not a snapshot's job times"):
        timing.pick_reference(tmp_path, [], 1.0)
