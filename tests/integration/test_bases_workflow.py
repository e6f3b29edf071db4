"""configs/attribution_bases.yaml is one DAG: the placebo study's stage-2 arms on three SFT bases
of the frozen regime (a dose of the global seed), each base the whole workflow of
configs/attribution_stage2.yaml in its own directory with its own SFT, then the dose-response
table and the table pooled over the bases. Dry runs only (the runs take hours)."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from functools import partial

import pytest
from test_dose_response_workflow import REPO, dry_run, job_counts, jobs

BASES = {"seed0": 0, "seed1": 1, "seed2": 2}


@pytest.fixture(scope="module")
def dry(tmp_path_factory) -> Callable[..., str]:
    """`dry_run(*args)` in a fresh directory that holds config.yaml, as the repository root
    does, with an empty mirror (no registry benchmark is read)."""
    work = tmp_path_factory.mktemp("bases")
    shutil.copy(REPO / "config.yaml", work / "config.yaml")
    return partial(dry_run, work, tmp_path_factory.mktemp("empty_mirror"))


@pytest.fixture(scope="module")
def listing(dry) -> str:
    return dry("--configfile", str(REPO / "configs/attribution_bases.yaml"))


def test_each_base_is_stage_2_s_dag_with_its_own_sft(listing, dry):
    """Base 0: the jobs of configs/attribution.yaml + attribution_stage2.yaml alone (50 runs:
    three methods and two placebos on ten seeds); bases 1 and 2: those of the interim stage (the
    same arms on five seeds, 25 runs); each its SFT at its own seed; then one dose-response
    table, one pooled table and `all`."""
    stages = {
        "seed0": ("configs/attribution.yaml", "configs/attribution_stage2.yaml"),
        "seed1": ("configs/attribution.yaml", "configs/attribution_interim.yaml"),
    }
    plain = {}
    for label, files in stages.items():
        plain[label] = job_counts(dry("--configfile", *(str(REPO / c) for c in files)))
        plain[label].pop("all")
    assert plain["seed0"]["train_policy"] == 50 and plain["seed1"]["train_policy"] == 25
    assert plain["seed0"]["sft_base_model"] == plain["seed1"]["sft_base_model"] == 1
    plain["seed2"] = plain["seed1"]
    counts = job_counts(listing)
    for label in BASES:
        mine = {r.removeprefix(f"{label}_"): n for r, n in counts.items() if r.startswith(label)}
        assert mine == plain[label], label
    assert {r: n for r, n in counts.items() if not r.startswith("seed")} == {
        "credit_bases": 1, "credit_regimes": 1, "all": 1,
    }  # fmt: skip
    assert sum(counts.values()) == sum(sum(p.values()) for p in plain.values()) + 3
    for rule, block in jobs(listing):
        if rule.endswith("_sft_base_model"):
            settings = json.loads(re.search(r"--params '([^']*)'", block).group(1))
            assert settings["seed"] == BASES[rule.split("_")[0]], rule


def test_the_pooled_table_reads_every_base_s_runs_and_placebo_table(listing):
    (block,) = [b for rule, b in jobs(listing) if rule == "credit_bases"]
    for label, seed in BASES.items():
        root = f"results/credit_regimes/{label}"
        assert f"{root}/credit_attribution.csv" in block
        last = 15 if seed == 0 else 10  # base 0 on seeds 6-15, the new bases on 6-10
        assert f"{root}/train/oracle_rule_perm/seed{last}/train_summary.json" in block
        assert f"{root}/train/oracle_rule_perm/seed{last + 1}/" not in block
        assert f"{root}/eval/rredcot_perm/seed6/synth_id/grades.parquet" in block
        assert f"{root}/eval/base/seed{seed}/synth_id/grades.parquet" in block
    assert block.count("--summaries ") == 3 and block.count("--attribution ") == 1
    settings = json.loads(re.search(r"--params '([^']*)'", block).group(1))
    assert settings["bases"] == [0, 1, 2] and settings["seed"] == 0
    assert ["rredcot", "rredcot_perm", "placebo"] in settings["pairs"]
    assert "--table results/credit_bases.csv" in block
    assert "--figure results/figures/credit_bases.png" in block
    assert "log: results/logs/credit_bases.log" in block


def test_the_documented_targets_skip_the_split_no_table_reads(dry):
    """The tables as targets (the config's command): every run and SFT as without targets, no
    synth_ood evaluation."""
    config = str(REPO / "configs/attribution_bases.yaml")
    listing = dry("results/credit_bases.csv", "results/credit_regimes.csv", "--configfile", config)
    counts = job_counts(listing)
    assert sum(n for r, n in counts.items() if r.endswith("_train_policy")) == 50 + 2 * 25
    assert sum(n for r, n in counts.items() if r.endswith("_sft_base_model")) == 3
    assert "/synth_ood/generations" not in listing and counts["credit_bases"] == 1
    assert "/synth_id/generations" in listing
