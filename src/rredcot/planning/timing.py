"""How long a run will take here: measured job times of a finished run, scaled to this machine.

A finished run's `benchmark:` files give each job's wall and CPU seconds (`benchmark_jobs`); a
snapshot of the run (`rredcot.reporting.snapshot`) keeps them as `job_times.csv`, with the
`calibrate()` seconds of the machine it ran on. At the start of a run, `expected_time` picks the
snapshot of the same config files (`pick_reference`), calibrates this machine, and `estimate`
prices each job that will run by the reference's job of the same key (else its rule's mean),
scaled by the ratio of the two calibrations.

The wall time is an approximation: the CPU seconds spread evenly over the cores, but never less
than the longest chain of jobs that wait for one another (given the DAG's dependencies; else the
longest single job). Between those two bounds it assumes the scheduler packs the cores fully; it
ignores threads that a job holds but does not use, and the other machine's core count.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The calibration's workload: forward + backward of config.yaml's tiny Qwen3 (`model.arch`,
# tests/unit/test_timing.py holds them equal) on a fixed batch, one thread. Its id goes into
# every snapshot: calibrations of two different workloads are never compared.
CALIBRATION_ARCH: dict[str, Any] = dict(
    hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, head_dim=32, max_position_embeddings=4096, tie_word_embeddings=False,
)  # fmt: skip
CALIBRATION_BATCH = (4, 128)  # rows x tokens: a few training completions
CALIBRATION_REPEATS = 5  # after one warm-up; the median is kept
BENCHMARKS = "results/benchmarks"
# Rules whose benchmark file lies in a directory of their stage rather than one of their own.
STAGE_DIRECTORIES = ("studies",)


def calibration_workload() -> str:
    """A short id of the calibration's workload (architecture, batch, repeats)."""
    spec = json.dumps([CALIBRATION_ARCH, CALIBRATION_BATCH, CALIBRATION_REPEATS], sort_keys=True)
    return "qwen3-fb-" + hashlib.sha256(spec.encode()).hexdigest()[:10]


def calibrate() -> float:
    """Seconds of one forward + backward of the tiny Qwen3 on a fixed batch, one torch thread,
    median of `CALIBRATION_REPEATS` after a warm-up (about 1-3 s in all on a CPU core): the
    training and generation jobs are this kind of work, so two machines' ratio scales them."""
    import torch

    from rredcot.models.tiny import build_tiny_model
    from rredcot.models.tokenizer import build_byte_tokenizer

    tokenizer = build_byte_tokenizer()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = build_tiny_model(CALIBRATION_ARCH, tokenizer, seed=0).train()
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(0, len(tokenizer), CALIBRATION_BATCH, generator=generator)
        seconds = []
        for _ in range(CALIBRATION_REPEATS + 1):
            start = time.perf_counter()
            model.zero_grad(set_to_none=True)
            model(input_ids=ids, labels=ids).loss.backward()
            seconds.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return statistics.median(seconds[1:])


def calibrate_in_subprocess(src: str | Path, timeout: float = 300.0) -> float:
    """`calibrate()` in a fresh Python (the workflow's own process never imports torch); raises
    RuntimeError with the child's last line when it fails."""
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "rredcot.planning.timing"],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the calibration failed ({last})")
    return float(proc.stdout.strip())


@dataclass(frozen=True)
class JobTime:
    """One finished job, from its `benchmark:` file."""

    rule: str
    key: str  # the file's path under results/benchmarks/ without .tsv
    wall_s: float
    cpu_s: float | None  # None where Snakemake wrote NA (it could not measure)

    @property
    def cost_s(self) -> float:
        """CPU seconds, or the wall seconds where the CPU time is missing."""
        return self.wall_s if self.cpu_s is None else self.cpu_s


def benchmark_key(path: str | Path, root: str | Path = BENCHMARKS) -> str:
    """A job's key: its benchmark file's path under `root` without the suffix
    (`results/benchmarks/train_policy/grpo/seed1.tsv` -> `train_policy/grpo/seed1`)."""
    relative = Path(path).relative_to(root)
    return relative.with_suffix("").as_posix()


def rule_of_key(key: str) -> str:
    """The rule that writes a benchmark key: its first directory, or the second under a stage
    directory (`studies/study_mc`); the Snakefile checks every rule's benchmark path against
    this at load time (`check_benchmark_paths`)."""
    parts = key.split("/")
    return parts[1] if parts[0] in STAGE_DIRECTORIES and len(parts) > 1 else parts[0]


def check_benchmark_paths(patterns: Mapping[str, str]) -> None:
    """Raise ValueError naming the rule whose benchmark path (rule -> pattern) is not under
    results/benchmarks/ or does not name the rule as `rule_of_key` reads it."""
    for rule, pattern in patterns.items():
        if not pattern.startswith(BENCHMARKS + "/"):
            raise ValueError(f"rule {rule}: benchmark {pattern!r} is not under {BENCHMARKS}/")
        if rule_of_key(benchmark_key(pattern)) != rule:
            raise ValueError(
                f"rule {rule}: benchmark {pattern!r} must start with {BENCHMARKS}/{rule} (or a "
                f"stage directory {STAGE_DIRECTORIES} then {rule}), so a snapshot's job times "
                "name their rule"
            )


def benchmark_jobs(benchmarks: Path, exclude: Path | None = None) -> list[JobTime]:
    """Every `*.tsv` benchmark file under `benchmarks` but `exclude`, one JobTime each (repeat
    rows summed; Snakemake's format: a header, columns `s` and `cpu_time`, `NA` where it could
    not measure: then the job's CPU time is None)."""
    from rredcot.data.schema import read_table

    files = sorted(benchmarks.rglob("*.tsv")) if benchmarks.is_dir() else []
    if exclude is not None:
        files = [f for f in files if f.resolve() != exclude.resolve()]
    jobs = []
    for path in files:
        table = read_table(path, separator="\t", null_values=["NA", "-"], infer_schema=False)
        for column in ("s", "cpu_time"):
            if column not in table.columns:
                raise ValueError(f"{path}: no column {column!r}; not a Snakemake benchmark file")
        cpus = table["cpu_time"]
        cpu = None if cpus.null_count() else sum(float(v) for v in cpus)
        key = benchmark_key(path, benchmarks)
        wall = sum(float(v) for v in table["s"].drop_nulls())
        jobs.append(JobTime(rule_of_key(key), key, wall, cpu))
    return jobs


@dataclass(frozen=True)
class Estimate:
    """The expected cost of the jobs a run will do (module docstring: the wall approximation)."""

    cpu_seconds: float
    wall_seconds: float
    longest_chain_s: float  # wall seconds of the longest chain of dependent jobs (or one job)
    jobs: int  # jobs priced
    by_rule_mean: int  # of those, priced by their rule's mean (no reference job of their key)
    unmeasured: int  # jobs of a rule the reference never ran: not priced
    ratio: float  # calibration here / there: > 1 where this machine is slower


def estimate(
    jobs: Iterable[tuple[str, str]],
    reference_job_times: Sequence[JobTime],
    calibration_here: float,
    calibration_there: float,
    cores: int,
    after: Mapping[str, Sequence[str]] | None = None,
) -> Estimate:
    """The CPU seconds and wall time of `jobs` ((rule, key) pairs): each job is its reference
    job of the same key, else the mean of the reference's jobs of its rule, scaled by
    calibration_here / calibration_there; wall = max(CPU seconds / cores, the longest chain),
    a chain following `after` (key -> the keys of the jobs it waits for; none: every job
    alone). A job the reference cannot price costs nothing, in a chain too."""
    if calibration_here <= 0 or calibration_there <= 0:
        raise ValueError(
            f"calibrations must be positive seconds (here {calibration_here}, there "
            f"{calibration_there})"
        )
    if cores < 1:
        raise ValueError(f"cores: {cores}; at least 1")
    ratio = calibration_here / calibration_there
    by_key = {j.key: j for j in reference_job_times}
    by_rule: dict[str, list[JobTime]] = {}
    for j in reference_job_times:
        by_rule.setdefault(j.rule, []).append(j)
    cpu = 0.0
    walls: dict[str, float] = {}
    by_mean = unmeasured = 0
    for rule, key in jobs:
        if key in by_key:
            cost, wall = by_key[key].cost_s, by_key[key].wall_s
        elif rule in by_rule:
            same = by_rule[rule]
            cost = statistics.fmean(j.cost_s for j in same)
            wall = statistics.fmean(j.wall_s for j in same)
            by_mean += 1
        else:
            unmeasured += 1
            continue
        cpu += cost * ratio
        walls[key] = wall * ratio
    chain = longest_chain(walls, after or {})
    return Estimate(cpu, max(cpu / cores, chain), chain, len(walls), by_mean, unmeasured, ratio)


def longest_chain(walls: Mapping[str, float], after: Mapping[str, Sequence[str]]) -> float:
    """The most wall seconds along any path of `after` (key -> the keys it waits for), each
    job's own `walls` seconds (0 for a key without) summed; the DAG has no cycles."""
    finish: dict[str, float] = {}

    def done(key: str) -> float:  # when the job ends if each started as soon as it could
        if key not in finish:
            finish[key] = walls.get(key, 0.0) + max(map(done, after.get(key, ())), default=0.0)
        return finish[key]

    return max(map(done, [*walls, *after]), default=0.0)


@dataclass(frozen=True)
class RuleTime:
    """What one rule's jobs took, summed."""

    rule: str
    jobs: int
    cpu_s: float  # CPU seconds (a job without them counts its wall seconds)
    wall_s: float


def per_rule(jobs: Sequence[JobTime]) -> list[RuleTime]:
    """The jobs' times summed per rule, most CPU seconds first."""
    grouped: dict[str, list[JobTime]] = {}
    for j in jobs:
        grouped.setdefault(j.rule, []).append(j)
    rows = [
        RuleTime(rule, len(js), sum(j.cost_s for j in js), sum(j.wall_s for j in js))
        for rule, js in grouped.items()
    ]
    return sorted(rows, key=lambda r: (-r.cpu_s, r.rule))


TIMING = "timing.json"  # a snapshot's calibration, its workload id and the run's config files
JOB_TIMES = "job_times.csv"


@dataclass(frozen=True)
class Reference:
    """A snapshot whose job times can price a run."""

    name: str  # the snapshot's directory name
    calibration: float
    jobs: list[JobTime]


SNAPSHOT_TIMING_KEYS = ("calibration_s", "calibration_workload", "configfiles")


def read_reference(snapshot: Path) -> tuple[dict[str, Any], list[JobTime]] | None:
    """A snapshot's timing.json and job_times.csv, or None when it has not both; ValueError
    naming the file when one is not what `take_snapshot` writes."""
    spec_path, table = snapshot / TIMING, snapshot / JOB_TIMES
    if not (spec_path.is_file() and table.is_file()):
        return None
    spec = json.loads(spec_path.read_text())  # a JSONDecodeError is a ValueError naming it
    missing = [k for k in SNAPSHOT_TIMING_KEYS if k not in spec]
    if missing:
        raise ValueError(f"{spec_path}: no {missing}; not a snapshot's timing")
    with table.open(newline="") as f:
        rows = list(csv.DictReader(f))
    try:
        jobs = [_job_time(r) for r in rows]
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{table}: not a snapshot's job times ({err!r})") from err
    return spec, jobs


def _job_time(row: Mapping[str, str]) -> JobTime:
    cpu = float(row["cpu_s"]) if row["cpu_s"] else None
    return JobTime(row["rule"], row["key"], float(row["wall_s"]), cpu)


def write_job_times(jobs: Sequence[JobTime], path: Path) -> None:
    """`job_times.csv`: rule, key, wall_s, cpu_s (empty where not measured), one row per job."""
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["rule", "key", "wall_s", "cpu_s"])
        for j in jobs:
            cpu = "" if j.cpu_s is None else f"{j.cpu_s:.2f}"
            out.writerow([j.rule, j.key, f"{j.wall_s:.4f}", cpu])


def config_label(configfiles: Sequence[str]) -> str:
    return " + ".join(["config.yaml", *configfiles])


def candidates(
    snapshots: Path, configfiles: Sequence[str]
) -> dict[str, tuple[float, list[JobTime]]]:
    """The snapshots of a run with exactly these config files (over config.yaml, in order) and
    today's calibration workload: name -> (calibration seconds, job times). A snapshot whose
    timing.json names a `superseded_by` (its config files changed after the run: other steps,
    seeds or settings under the same names) is a record, never a reference."""
    found = {}
    for directory in sorted(p for p in snapshots.glob("*") if p.is_dir()):
        read = read_reference(directory)
        if read is None:
            continue
        spec, jobs = read
        if (
            spec["configfiles"] == list(configfiles)
            and spec["calibration_workload"] == calibration_workload()
            and not spec.get("superseded_by")
        ):
            found[directory.name] = (float(spec["calibration_s"]), jobs)
    return found


def pick_reference(
    snapshots: Path, configfiles: Sequence[str], calibration_here: float
) -> Reference | str:
    """The snapshot of a run of the same config files whose machine's calibration is nearest
    this one's (by ratio), or a sentence saying there is none. A snapshot of another config is
    never used: its jobs are other jobs (steps, seeds, sizes)."""
    found = candidates(snapshots, configfiles)
    if not found:
        return no_reference(snapshots, configfiles)
    name = min(found, key=lambda n: abs(math.log(found[n][0] / calibration_here)))
    return Reference(name, *found[name])


def no_reference(snapshots: Path, configfiles: Sequence[str]) -> str:
    return (
        f"expected time: no measured reference for this config ({config_label(configfiles)}): no "
        f"snapshot under {snapshots} ran it and calibrated with this version's workload "
        "(scripts/snapshot_summary.py takes one from a finished run)"
    )


def hours_minutes(seconds: float) -> str:
    """`2 h 05 min`, `7 min`, `under 1 min`."""
    minutes = round(seconds / 60)
    if minutes == 0:
        return "under 1 min"
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def describe(result: Estimate, reference: str, cores: int) -> str:
    """The line a run logs at its start."""
    notes = []
    if result.by_rule_mean:
        notes.append(f"{result.by_rule_mean} of {result.jobs} jobs priced by their rule's mean")
    if result.unmeasured:
        notes.append(f"{result.unmeasured} jobs of rules the reference never ran not counted")
    return (
        f"expected: ~{result.cpu_seconds:,.0f} CPU s, ~{hours_minutes(result.wall_seconds)} wall "
        f"on {cores} core{'s' * (cores != 1)} (reference: {reference}, calibration ratio "
        f"{result.ratio:.2f}" + "".join(f"; {n}" for n in notes) + ")"
    )


def expected_time(
    jobs: Sequence[tuple[str, str]],
    snapshots: Path,
    configfiles: Sequence[str],
    cores: int,
    calibration: Callable[[], float],
    after: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """The start line for `jobs` ((rule, key) pairs; `after` as `estimate` reads it): the
    estimate against the nearest snapshot of the same config, or why there is none.
    `calibration()` (seconds here) is called only when a snapshot of this config exists, so a
    run without one spends nothing on it."""
    if not candidates(snapshots, configfiles):
        return no_reference(snapshots, configfiles)
    here = calibration()
    reference = pick_reference(snapshots, configfiles, here)
    if isinstance(reference, str):
        return reference
    result = estimate(jobs, reference.jobs, here, reference.calibration, cores, after)
    return describe(result, reference.name, cores)


if __name__ == "__main__":
    print(f"{calibrate():.6f}")
