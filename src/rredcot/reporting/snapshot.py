"""Snapshots of a finished run's summary, and the check that the docs state its numbers.

A number the docs quote from a run is written inside a marker naming the snapshot (a machine
slug) and the key of `rredcot.reporting.summary.summary_values`:

    <!-- snapshot:SLUG/comparison/rredcot/auc/difference -->+0.004<!-- /snapshot -->

`take_snapshot` copies the run's SUMMARY.md and the tables it read into
`docs/snapshots/<machine-slug>/` with `values.json` (every key and value), `job_times.csv` (each
job's wall and CPU seconds) and `timing.json` (the machine's calibration and the run's config
files), which price later runs of the same config (`rredcot.planning.timing`); `mismatches` lists
every marked number that differs from its snapshot, or names a snapshot that does not exist.

A dose's tables across its levels (a treatment's `results/credit_contrasts.csv`, or the bases'
`results/credit_bases.csv`, with `results/credit_regimes.csv` beside either) belong to no
level's summary; `take_dose_snapshot` copies them with `values.json` (`dose_values`,
`bases_values`, `regime_values`, the runs' machine, the job times of every level).
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from rredcot.data.schema import read_json, read_table
from rredcot.planning import timing
from rredcot.planning.machine import machines_of
from rredcot.reporting.credit_bases import POOLED
from rredcot.reporting.numbers import duration, interval, plain
from rredcot.reporting.summary import (
    TABLES,
    comparison_values,
    git_commit,
    job_times,
    read_tables,
    summary_values,
)
from rredcot.workflow.dose_response import level_label

MARK = re.compile(
    r"<!-- snapshot:(?P<slug>[a-z0-9-]+)/(?P<key>\S+) -->(?P<value>.*?)<!-- /snapshot -->"
)
VALUES = "values.json"


@dataclass(frozen=True)
class Stated:
    """One number a page states from a snapshot."""

    where: str  # page:line
    slug: str
    key: str
    value: str


def machine_slug(machine: str) -> str:
    """A directory name for a machine label (`rredcot.planning.machine.machine_label`): its CPU
    model and torch's CPU capability, lower-case, runs of other characters as one hyphen."""
    parts = [p.strip() for p in machine.split(";")]
    capability = parts[1].split()[-1] if len(parts) > 1 and parts[1].startswith("torch") else ""
    return re.sub(r"[^a-z0-9]+", "-", f"{parts[0]} {capability}".lower()).strip("-") or "unknown"


def _summary_field(text: str, field: str, path: Path) -> str:
    match = re.search(rf"^- {re.escape(field)}: (.+)$", text, re.MULTILINE)
    if match is None:
        raise ValueError(f"{path}: no line '- {field}: ...'; not a summary the rule wrote")
    return match.group(1).strip()


def summary_configfiles(text: str, path: Path) -> list[str]:
    """The config files a summary says its run read over config.yaml (`- Config:` line)."""
    names = re.findall(r"`([^`]+)`", _summary_field(text, "Config", path))
    return names[1:] if names[:1] == ["config.yaml"] else names


def calibrate_on(machine: str) -> float:
    """`timing.calibrate()` here, refused unless this is the machine class the summary names (a
    calibration of another machine would misprice every later run)."""
    from rredcot.planning.machine import machine_info, machine_label

    here = machine_label(machine_info())
    if machine_slug(here) != machine_slug(machine):
        raise ValueError(
            f"the run ran on {machine!r}, this is {here!r}: take the snapshot on the run's "
            "machine, or give its calibration (`python -m rredcot.planning.timing` there)"
        )
    return timing.calibrate()


def take_snapshot(
    results: Path, snapshots: Path, slug: str | None = None, calibration: float | None = None
) -> Path:
    """Copy `results/SUMMARY.md` and the tables it read into `snapshots/<slug>/` (the slug of
    the machine the summary names, unless given), with `values.json`, the run's job times and
    this machine's `calibration` seconds (measured now unless given: take the snapshot on the
    machine that ran the run). Refuses a summary that no longer states what its tables and
    timing files say (a table rebuilt after it)."""
    summary = results / "SUMMARY.md"
    if not summary.is_file():
        raise FileNotFoundError(f"{summary}: no summary; run the workflow to the end first")
    text = summary.read_text()
    machine = _summary_field(text, "Machine (this job)", summary)
    commit = _summary_field(text, "Commit", summary)
    reference = _summary_field(text, "Baseline", summary).split()[0]
    paths = {n: results / f for n, (f, _) in TABLES.items() if (results / f).is_file()}
    bench = results / "benchmarks"
    values = summary_values(
        read_tables(paths),
        job_times(bench, exclude=bench / "summary.tsv"),
        machine,
        commit,
        reference,
    )
    stale = sorted(k for k, v in values.items() if v not in text)
    if stale:
        raise ValueError(
            f"{summary} does not state what its tables now say ({stale[:5]}); rerun it"
        )
    if calibration is None:
        calibration = calibrate_on(machine)
    measured = {
        "calibration_s": calibration,
        "calibration_workload": timing.calibration_workload(),
        "configfiles": summary_configfiles(text, summary),
        "machine": machine,
        "commit": commit,
    }
    dest = snapshots / (slug or machine_slug(machine))
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(summary, dest / "SUMMARY.md")
    for path in paths.values():
        shutil.copy2(path, dest / path.name)
    (dest / VALUES).write_text(json.dumps(values, indent=1, ensure_ascii=False) + "\n")
    timing.write_job_times(timing.benchmark_jobs(bench), dest / timing.JOB_TIMES)
    (dest / timing.TIMING).write_text(json.dumps(measured, indent=1) + "\n")
    return dest


def stated_numbers(pages: list[Path], root: Path) -> list[Stated]:
    """Every marked number of `pages` (paths shown relative to `root`)."""
    found = []
    for page in pages:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            for m in MARK.finditer(line):
                where = f"{page.relative_to(root)}:{number}"
                found.append(Stated(where, m["slug"], m["key"], m["value"].strip()))
    return found


def mismatches(stated: list[Stated], snapshots: Path) -> list[str]:
    """Each stated number that is not its snapshot's value, or whose snapshot or key is missing."""
    out = []
    loaded: dict[str, dict[str, str] | None] = {}
    for s in stated:
        if s.slug not in loaded:
            path = snapshots / s.slug / VALUES
            loaded[s.slug] = json.loads(path.read_text()) if path.is_file() else None
        values = loaded[s.slug]
        if values is None:
            out.append(f"{s.where}: no snapshot {s.slug!r} under {snapshots}")
        elif s.key not in values:
            out.append(f"{s.where}: snapshot {s.slug!r} has no key {s.key!r}")
        elif values[s.key] != s.value:
            out.append(f"{s.where}: {s.key} is stated as {s.value!r}, the snapshot says "
                       f"{values[s.key]!r}")  # fmt: skip
    return out


CONTRASTS = "credit_contrasts.csv"
BASES = "credit_bases.csv"
REGIMES = "credit_regimes.csv"
DOSE_TABLES = (CONTRASTS, BASES, REGIMES)
"""A dose's tables across its levels, under the dose run's results/ (a contrasts or a bases
table is required)."""
BASE_COLUMNS = (
    "base_greedy_pass1", "base_t1_pass1", "base_greedy_systematic_share",
    "base_t1_systematic_share",
)  # fmt: skip
"""The regime table's description of each level's base policy."""


def _level(value: str | float) -> str:
    """A level as the contrasts table wrote it (read back as a number when the column is)."""
    return value if isinstance(value, str) else level_label(value)


def dose_values(contrasts: pl.DataFrame) -> dict[str, str]:
    """Every row of a contrasts table under `contrasts/<method>/<against>/<stratum>/<dose>`
    (`<dose>-<versus_dose>` for a contrast row): difference, both intervals, verdict, seeds,
    MDE, formatted as the summaries print them (a level read back as a number named as written:
    0, 0.5, 1)."""
    values = {}
    for r in contrasts.iter_rows(named=True):
        level, versus = _level(r["dose"]), _level(r["versus_dose"])
        dose = level if r["kind"] == "at_dose" else f"{level}-{versus}"
        values |= comparison_values(
            f"contrasts/{r['method']}/{r['against']}/{r['stratum']}/{dose}", r
        )
    return values


def bases_values(bases: pl.DataFrame) -> dict[str, str]:
    """Every row of a bases table under `bases/<method>/<against>/<stratum>/<base_seed>`
    (`all` for the pooled row), as `comparison_values`; a pooled row has the t interval over
    bases in place of the one over seeds, its bases and the three SDs (seed, base, between-base)."""
    values = {}
    for r in bases.iter_rows(named=True):
        key = f"bases/{r['method']}/{r['against']}/{r['stratum']}/{r['base_seed']}"
        values |= comparison_values(key, r)
        if str(r["base_seed"]) == POOLED:
            del values[f"{key}/seed_t_ci"]
            values |= {
                f"{key}/base_t_ci": interval(r["base_t_ci95_low"], r["base_t_ci95_high"]),
                f"{key}/bases": str(r["bases"]),
            } | {f"{key}/{sd}": plain(r[sd]) for sd in ("seed_sd", "base_sd", "between_base_sd")}
    return values


def regime_values(regimes: pl.DataFrame) -> dict[str, str]:
    """Each level's base policy as the regime table describes it, under
    `regimes/<level>/<column>` (`BASE_COLUMNS`); refused if a level's rows disagree."""
    values = {}
    for (level,), part in regimes.group_by("dose", maintain_order=True):
        for column in BASE_COLUMNS:
            found = part[column].unique()
            if len(found) != 1:
                raise ValueError(
                    f"{REGIMES}: level {level} has several {column}: {found.to_list()}"
                )
            values[f"regimes/{_level(level)}/{column}"] = plain(found[0])
    return values


def take_dose_snapshot(results: Path, snapshots: Path, slug: str) -> Path:
    """Copy a dose's tables (`DOSE_TABLES`, under `results/`) into `snapshots/<slug>/` with
    `values.json` (`dose_values`, `bases_values`, `regime_values` of the tables there; the
    machine every run's summary names, the commit of the checkout `results/` is in, the job count
    and seconds of every level) and `job_times.csv` (a record: without `timing.json` it prices no
    later run, whose planner reads one config's jobs). Raises when neither a contrasts nor a bases
    table is there or the runs name more than one machine."""
    found = {name: results / name for name in DOSE_TABLES if (results / name).is_file()}
    if CONTRASTS not in found and BASES not in found:
        raise FileNotFoundError(f"{results}: no contrasts table ({CONTRASTS}) or bases table "
                                f"({BASES}); build one first")  # fmt: skip
    levels = results / "credit_regimes"
    summaries = sorted(levels.glob("*/train/*/seed*/train_summary.json"))
    if not summaries:
        raise FileNotFoundError(f"{levels}: no run of any level")
    machine = machines_of([read_json(p) for p in summaries])
    if " | " in machine:
        raise ValueError(f"{levels}: the runs name several machines ({machine})")
    times = job_times(levels)
    values = {
        "machine": machine,
        "commit": git_commit(results.resolve().parent),
        "jobs": str(times.jobs),
        "wall_seconds": duration(times.wall_seconds),
        "cpu_seconds": duration(times.cpu_seconds),
    }
    for name, read in ((CONTRASTS, dose_values), (BASES, bases_values), (REGIMES, regime_values)):
        if name in found:
            values |= read(read_table(found[name]))
    dest = snapshots / slug
    dest.mkdir(parents=True, exist_ok=True)
    for name, path in found.items():
        shutil.copy2(path, dest / name)
    (dest / VALUES).write_text(json.dumps(values, indent=1, ensure_ascii=False) + "\n")
    timing.write_job_times(timing.benchmark_jobs(levels), dest / timing.JOB_TIMES)
    return dest
