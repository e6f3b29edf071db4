"""configs/credit_regimes.yaml is one DAG: the quick default (config.yaml, the positive-control
regime) once per misconception rate, each in its own directory with its own SFT base, then one
aggregation; the default config's DAG holds no dose. Dry runs only (the dose-response itself takes
hours)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOSES = {"rate0": 0.0, "rate0.6": 0.6, "rate0.8": 0.8}
MODULES = {"rate0": "rate0", "rate0.6": "rate0p6", "rate0.8": "rate0p8"}

# The default config's jobs (config.yaml, `snakemake -n` in a fresh directory): three methods
# on five seeds, three benchmarks, no study: a change to config.yaml's methods, seeds or
# benchmarks changes them.
DEFAULT_JOBS = {
    "synthetic_world": 1, "sft_base_model": 1, "generate": 48, "generate_greedy": 16,
    "reference_solutions": 1, "grade": 48, "grade_greedy": 16, "train_policy": 15,
    "training_report": 1, "benchmark_comparison": 1, "benchmark_table": 3, "learning_curves": 1,
    "regime_table": 1, "main_table": 1, "summary": 1, "all": 1,
}  # fmt: skip


def snakemake_n(work: Path, mirror: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`snakemake -n -p` on the repository's Snakefile in `work` (which holds config.yaml, as
    the repository root does)."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-n", "-p", *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RREDCOT_MIRROR": str(mirror)}
    return subprocess.run(cmd, cwd=work, capture_output=True, text=True, env=env, timeout=600)


def dry_run(work: Path, mirror: Path, *args: str) -> str:
    """The listing of a dry run that must succeed."""
    proc = snakemake_n(work, mirror, *args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def job_counts(listing: str) -> dict[str, int]:
    """The dry run's "Job stats" table: rule -> jobs."""
    lines = listing.splitlines()
    start = lines.index("Job stats:") + 3  # the title, the header and its rule
    counts = {}
    for line in lines[start:]:
        name, count = line.split()
        if name == "total":
            return counts
        counts[name] = int(count)
    raise AssertionError("no total in the job stats")


def jobs(listing: str) -> list[tuple[str, str]]:
    """(rule, its block of the listing) for every job."""
    blocks = re.split(r"\n(?=(?:local)?rule \w+:\n)", listing)
    out = []
    for block in blocks:
        head = re.match(r"(?:local)?rule (\w+):\n", block)
        if head:
            out.append((head.group(1), block))
    return out


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("doses")
    shutil.copy(REPO / "config.yaml", work / "config.yaml")
    return work


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("empty_mirror")  # no registry benchmark is read


@pytest.fixture(scope="module")
def listing(work, mirror) -> str:
    return dry_run(work, mirror, "--configfile", str(REPO / "configs/credit_regimes.yaml"))


def test_one_command_runs_every_dose_and_one_aggregation(listing):
    counts = job_counts(listing)
    for label, module in MODULES.items():
        assert counts[f"{module}_sft_base_model"] == 1, label
        assert counts[f"{module}_summary"] == 1, label
        assert counts[f"{module}_learning_curves"] == 1, label
    trained = Counter(
        re.search(r"results/credit_regimes/([^/]+)/train/([a-z_]+)/seed\d+/final", block).groups()
        for rule, block in jobs(listing)
        if rule.endswith("_train_policy")
    )
    five = {"grpo": 5, "oracle_step": 5, "rredcot": 5}
    assert {(d, m): n for (d, m), n in trained.items() if d == "rate0"} == {
        ("rate0", m): n for m, n in five.items()
    }
    assert sum(n for (d, _), n in trained.items() if d == "rate0.6") == 15
    assert {m: n for (d, m), n in trained.items() if d == "rate0.8"} == {**five, "mc": 3}
    assert counts["credit_regimes"] == 1 and counts["all"] == 1
    assert "credit_bases" not in counts  # rates are treatments, not bases to pool
    assert "credit_contrasts" not in counts  # and train no placebo arms to contrast
    assert "synthetic_world" not in counts and "train_policy" not in counts  # no plain results/


def test_each_dose_is_the_quick_default_at_its_rate(listing, work, mirror, tmp_path):
    """Per dose, the same jobs as config.yaml alone (at 0.8 with that level's `doses.at` config
    over it: MC's runs), its SFT at its own rate, every path of its jobs under its own
    directory."""
    at = yaml.safe_load((REPO / "configs/credit_regimes.yaml").read_text())["doses"]["at"]
    assert [a["level"] for a in at] == [0.8]
    (tmp_path / "at.yaml").write_text(yaml.safe_dump(at[0]["config"]))
    plain = job_counts(dry_run(work, mirror))
    with_mc = job_counts(dry_run(work, mirror, "--configfile", str(tmp_path / "at.yaml")))
    assert with_mc["train_policy"] == plain["train_policy"] + 3
    counts = job_counts(listing)
    for label, module in MODULES.items():
        mine = {
            r.removeprefix(f"{module}_"): n for r, n in counts.items() if r.startswith(module + "_")
        }
        want = with_mc if label == "rate0.8" else plain
        assert mine == {r: n for r, n in want.items() if r != "all"}, label
    for rule, block in jobs(listing):
        module = rule.split("_", 1)[0]
        if rule in ("all", "credit_regimes"):
            continue
        label = {m: lbl for lbl, m in MODULES.items()}[module]
        # every path but labels inside the JSON settings (a benchmark table names its model)
        paths = re.findall(r"results/[\w./-]+", re.sub(r"--params '[^']*'", "", block))
        assert paths and all(p.startswith(f"results/credit_regimes/{label}/") for p in paths), (
            rule, [p for p in paths if not p.startswith(f"results/credit_regimes/{label}/")][:3]
        )  # fmt: skip
        if rule.endswith("_sft_base_model"):
            settings = json.loads(re.search(r"--params '([^']*)'", block).group(1))
            assert settings["sft"]["misconception"]["rate"] == DOSES[label]


def test_mc_runs_at_one_dose_with_eight_rollouts_and_its_own_steps(listing):
    for rule, block in jobs(listing):
        if rule.endswith("_train_policy") and "/train/mc/" in block:
            assert rule == "rate0p8_train_policy"
            settings = json.loads(re.search(r"--params '([^']*)'", block).group(1))
            assert settings["mc"]["n_rollouts"] == 8
            assert settings["max_steps"] == 30  # the level's training.per_method.mc


def test_the_aggregation_reads_every_dose(listing):
    block = next(b for rule, b in jobs(listing) if rule == "credit_regimes")
    for label in DOSES:
        assert f"results/credit_regimes/{label}/method_comparison.csv" in block
        assert f"results/credit_regimes/{label}/data/world/train.parquet" in block
        assert f"results/credit_regimes/{label}/regime_table.csv" in block  # each dose builds one
    assert '"regime": true' in block
    assert "--table results/credit_regimes.csv" in block
    assert "--figure results/figures/credit_regimes.png" in block
    assert "log: results/logs/credit_regimes.log" in block


def test_the_default_dag_is_unchanged(work, mirror):
    assert job_counts(dry_run(work, mirror)) == DEFAULT_JOBS


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (
            "extends: configs/full.yaml\nrehearses: configs/one_gpu.yaml\n",
            "config keys 'rehearses' and 'extends': set one",
        ),
        ("extends: configs/nope.yaml\n", "config key 'extends': 'configs/nope.yaml' is not"),
        (
            "doses: {key: sft.misconception.rate, levels: [0, 0.6],\n"
            "        at: [{level: 0.8, config: {}}]}\n",
            "config key 'doses.at.0.level': 0.8 is not one of doses.levels",
        ),
    ],
)
def test_a_bad_overlay_or_dose_stops_the_load_naming_the_key(work, mirror, tmp_path, text, named):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    proc = snakemake_n(work, mirror, "--configfile", str(bad))
    assert proc.returncode != 0 and named in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert "Building DAG of jobs" not in proc.stdout + proc.stderr
