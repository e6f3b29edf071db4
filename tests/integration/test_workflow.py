"""The whole DAG on the smoke config, run by Snakemake as a user would, in a scratch directory."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from snakemake.utils import update_config

pytestmark = pytest.mark.slow

METHODS = ["grpo", "oracle_step", "rredcot", "mc", "rrpo", "srpo"]  # configs/smoke.yaml
PROTOCOL = {
    "model",
    "method",
    "seeds",
    "benchmark",
    "dataset_id",
    "dataset_revision",
    "n_problems",
    "k",
    "temperature",
    "top_p",
    "max_new_tokens",
    "grader",
    "versions",
    "pass_at_1",
    "ci95_low",
    "ci95_high",
}


def test_default_target_writes_a_table_per_benchmark(smoke_run):
    workdir, proc = smoke_run
    table = pl.read_csv(workdir / "results" / "synth_id_table.csv")
    assert set(table.columns) >= PROTOCOL
    assert table["method"].to_list() == ["base", *METHODS]
    for row in table.iter_rows(named=True):
        assert 0.0 <= row["ci95_low"] <= row["pass_at_1"] <= row["ci95_high"] <= 1.0
        path = f"results/eval/{row['method']}/seed0/synth_id/grades.parquet"
        grades = pl.read_parquet(workdir / path)
        # the table's figure is recomputed from the kept grades
        assert row["pass_at_1"] == pytest.approx(grades["reward"].mean())
        assert row["n_problems"] == grades["problem_id"].n_unique()
    assert "steps (100%) done" in proc.stderr  # Snakemake's progress report


def test_every_method_trained_and_costed(smoke_run):
    workdir, _ = smoke_run
    main = pl.read_csv(workdir / "results" / "main_table.csv")
    assert main["method"].to_list() == ["base", *METHODS]
    curves = pl.read_csv(workdir / "results" / "training_curves.csv")
    assert set(curves["method"].unique()) == set(METHODS)
    last = curves.group_by("method").agg(pl.col("step").max())["step"]
    assert last.to_list() == [2] * len(METHODS)
    cost = pl.read_csv(workdir / "results" / "compute_cost.csv")
    ratio = dict(cost.select("method", "seconds_ratio_to_grpo").rows())
    assert ratio["grpo"] == pytest.approx(1.0)
    credit = dict(cost.select("method", "credit_forward_tokens_per_step").rows())
    assert credit["grpo"] == 0 and credit["rredcot"] > 0 and credit["mc"] > 0
    assert (workdir / "results" / "figures" / "training_curves.png").stat().st_size > 10_000
    for m in METHODS:
        final = workdir / f"results/train/{m}/seed0/final"
        assert (final / "config.json").exists() and (final / "tokenizer.json").exists()


def test_training_turns_reward_variance_into_a_gradient_and_writes_the_weights(smoke_run):
    """What the smoke run promises whatever its policy happens to sample: every step where one of
    a method's own groups had reward variance has a nonzero gradient; for GRPO, RRPO and SRPO,
    whose advantages are 0 in a group without variance, every other step has none; and a run
    with any gradient writes final weights that differ from the base's (a no-op trainer, or a
    final/ that is the base, fails). That hand-made variance reaches every method's gradient is
    tests/unit/test_training_signal.py's; here the groups are whatever the policy drew."""
    from safetensors.numpy import load_file

    workdir, _ = smoke_run
    base = load_file(workdir / "results/models/base/model.safetensors")
    for m in METHODS:
        metrics = pl.read_csv(workdir / f"results/train/{m}/seed0/metrics.csv")
        assert metrics["step"].to_list() == [1, 2], m
        signal = metrics["reward/frac_zero_std"] < 1  # over the groups the method normalises by
        grad = metrics["loss/grad_norm"]
        assert (grad.filter(signal) > 0).all(), m
        if m in ("grpo", "rrpo", "srpo"):
            assert (grad.filter(~signal) == 0).all(), m
        final = load_file(workdir / f"results/train/{m}/seed0/final/model.safetensors")
        assert final.keys() == base.keys(), m
        changed = [k for k in base if not np.array_equal(final[k], base[k])]
        if (grad > 0).any():  # Adam's moment then moves them at step 2 (learning rate > 0)
            assert changed, f"{m}: final weights equal the base's"


def test_learning_curves_and_the_paired_comparison(smoke_run):
    """Step 0 is the base's evaluation, step 1 the run's own curve point, step 2 the final
    evaluation; the comparison has every method against the base and the others against GRPO."""
    workdir, _ = smoke_run
    curves = pl.read_csv(workdir / "results" / "learning_curves.csv")
    assert set(curves["method"]) == set(METHODS)
    assert sorted(set(curves["step"])) == [0, 1, 2]
    base = pl.read_parquet(workdir / "results/eval/base/seed0/synth_id/grades.parquet")
    assert curves.filter(pl.col("step") == 0)["pass_at_1"].to_list() == pytest.approx(
        [base["reward"].mean()] * len(METHODS)
    )
    for m in METHODS:
        points = pl.read_csv(workdir / f"results/train/{m}/seed0/curve.csv")
        assert set(points["step"]) == {1} and points.height == base.height
        final = pl.read_parquet(workdir / f"results/eval/{m}/seed0/synth_id/grades.parquet")
        last = curves.filter((pl.col("method") == m) & (pl.col("step") == 2))["pass_at_1"][0]
        assert last == pytest.approx(final["reward"].mean())
    table = pl.read_csv(workdir / "results" / "method_comparison.csv")
    against = {(r["method"], r["against"], r["measure"]) for r in table.iter_rows(named=True)}
    assert {(m, "base", "final") for m in METHODS} <= against
    assert {(m, "grpo", x) for m in METHODS[1:] for x in ("final", "auc")} <= against
    for row in table.iter_rows(named=True):
        assert row["ci95_low"] <= row["difference"] <= row["ci95_high"]
        assert row["verdict"] in ("better", "worse", "no difference")
    assert (workdir / "results/figures/learning_curves.png").stat().st_size > 10_000


def test_the_regime_table_sets_greedy_beside_t1_for_every_policy(smoke_run):
    """A row per policy and one per method pooled over seeds; pass@1 recomputed from the kept
    sampled and greedy grades (one greedy sample per problem); the smoke world's misconception
    named, the systematic shares of the errors in [0, 1]."""
    workdir, _ = smoke_run
    table = pl.read_csv(workdir / "results" / "regime_table.csv", infer_schema_length=None)
    policies = ["base", *METHODS]
    assert table.select("method", "seed").rows() == [
        *((m, "0") for m in policies),
        *((m, "all") for m in policies),
    ]
    for row in table.filter(pl.col("seed") == "0").iter_rows(named=True):
        at = workdir / f"results/eval/{row['method']}/seed0/synth_id"
        sampled, greedy = (
            pl.read_parquet(at / f) for f in ("grades.parquet", "greedy/grades.parquet")
        )
        assert row["t1_pass1"] == pytest.approx(sampled["reward"].mean())
        assert row["greedy_pass1"] == pytest.approx(greedy["reward"].mean())
        assert greedy.height == row["n_problems"] and row["greedy_k"] == 1
        assert row["misconception"] == "smaller_from_larger" and row["t1_wrong"] > 0
        assert 0.0 <= row["t1_systematic_share"] <= 1.0


def test_the_benchmark_comparison_pairs_final_grades(smoke_run):
    """Every method − base and every other method − GRPO on each benchmark, recomputed from the
    kept grades (one seed: the bootstrap's verdict, no t interval)."""
    workdir, _ = smoke_run
    table = pl.read_csv(workdir / "results" / "benchmark_comparison.csv")
    pairs = {(r["method"], r["against"]) for r in table.iter_rows(named=True)}
    assert pairs == {(m, "base") for m in METHODS} | {(m, "grpo") for m in METHODS[1:]}
    assert set(table["benchmark"]) == {"synth_id"}
    score = {
        m: pl.read_parquet(workdir / f"results/eval/{m}/seed0/synth_id/grades.parquet")[
            "reward"
        ].mean()
        for m in ("base", *METHODS)
    }
    for row in table.iter_rows(named=True):
        expected = score[row["method"]] - score[row["against"]]
        assert row["difference"] == pytest.approx(expected)
        assert row["ci95_low"] <= row["difference"] <= row["ci95_high"]
        assert row["seed_t_verdict"] == "n/a" and row["verdict"] == row["bootstrap_verdict"]


def test_every_job_logged_and_benchmarked(smoke_run):
    workdir, _ = smoke_run
    logs = list((workdir / "results" / "logs").rglob("*.log"))
    timings = list((workdir / "results" / "benchmarks").rglob("*.tsv"))
    assert len(logs) >= 8 and len(timings) == len(logs)
    assert all(p.stat().st_size > 0 for p in logs)


def test_the_summary_states_the_runs_tables_and_times(smoke_run):
    """results/SUMMARY.md, the last job: every table of the smoke config, every method's
    primary comparison, and the job count of the benchmark files it read (all but its own)."""
    workdir, _ = smoke_run
    text = (workdir / "results" / "SUMMARY.md").read_text()
    timings = list((workdir / "results" / "benchmarks").rglob("*.tsv"))
    assert (workdir / "results" / "benchmarks" / "summary.tsv") in timings
    assert f"- Jobs: {len(timings) - 1} " in text
    # the smoke config builds every table but the placebo table, which needs a placebo variant
    # (test_a_placebo_is_trained_beside_its_method_and_compared_with_it adds one)
    not_run = [line for line in text.splitlines() if line.startswith("Not run by this config")]
    assert [("credit_attribution.csv" in line) for line in not_run] == [True]
    for method in METHODS[1:]:
        assert f"| {method} − grpo | auc" in text, method
    assert "- Config: `config.yaml` + `configs/smoke.yaml`" in text


def test_the_report_captions_carry_the_runs_numbers(
    smoke_run, repo, run_snakemake, no_mirror_env, tmp_path
):
    """`snakemake --report` after the run: the captions that state numbers include the
    fragments the summary wrote (rredcot.reporting.captions), e.g. the run's own job count."""
    workdir, _ = smoke_run
    fragment = (workdir / "results" / "report" / "summary.rst").read_text()
    jobs = re.search(r"Jobs: (\d+);", fragment).group(1)
    report = tmp_path / "report.html"
    proc = run_snakemake(
        repo, workdir, "--configfile", str(repo / "configs" / "smoke.yaml"),
        "--report", str(report), env=no_mirror_env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    html = report.read_text().replace("\\u2212", "−")  # the report embeds captions as JSON
    assert f"Jobs: {jobs}; summed CPU" in html
    assert "rredcot − grpo, area under the held-out curve (primary)" in html


def test_a_run_without_a_snapshot_of_its_config_says_so_at_its_start(smoke_run):
    _, proc = smoke_run
    assert (
        "expected time: no measured reference for this config (config.yaml + configs/smoke.yaml)"
    ) in proc.stderr


def test_real_aime24_graded_offline_from_the_mirror(smoke_aime24):
    workdir, _ = smoke_aime24
    table = pl.read_csv(workdir / "results" / "aime24_table.csv")
    row = table.row(0, named=True)
    assert row["dataset_id"] == "HuggingFaceH4/aime_2024"
    assert row["data_origin"].startswith("mirror:")
    assert row["n_problems"] == 5 and row["k"] == 1  # smoke: first 5 problems, one sample each
    assert "math-verify" in row["grader"]
    grades = pl.read_parquet(workdir / "results/eval/base/seed0/aime24/grades.parquet")
    assert set(grades["status"].unique()) <= {"ok", "no_answer", "timeout", "error"}


def test_rerun_is_a_no_op(smoke_run, repo, run_snakemake):
    workdir, _ = smoke_run
    proc = run_snakemake(repo, workdir, "--configfile", str(repo / "configs/smoke.yaml"), "-n")
    assert proc.returncode == 0
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_bad_config_stops_naming_the_key(repo, tmp_path, run_snakemake):
    bad = tmp_path / "bad.yaml"
    smoke = (repo / "configs" / "smoke.yaml").read_text()
    bad.write_text(smoke.replace("samples_per_problem: 2", "samples_per_problem: 0"))
    proc = run_snakemake(repo, tmp_path, "--configfile", str(bad), "-n")
    assert proc.returncode != 0
    assert "evaluation.samples_per_problem" in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("data: {train: gsm8kk}", "data.train"),  # neither a world table nor a training set
        ("studies: {split: nowhere, pool: null}", "studies.split"),
        ("conda_env: envs/missing.yaml", "conda_env"),
    ],
)
def test_unknown_problem_set_or_env_stops_naming_the_key(repo, tmp_path, run_snakemake, line, key):
    config = yaml.safe_load((repo / "configs" / "smoke.yaml").read_text())
    update_config(config, yaml.safe_load(line))
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    proc = run_snakemake(repo, tmp_path, "--configfile", str(bad), "-n")
    assert proc.returncode != 0
    assert f"config key '{key}'" in proc.stdout + proc.stderr, proc.stderr[-2000:]


NO_MIRROR_ENV = {k: v for k, v in os.environ.items() if k != "RREDCOT_MIRROR"}


PROBES = [  # issue 12: (config lines over smoke.yaml, environment, texts the error must name)
    pytest.param("training: {mc: {n_rolouts: 2}}", {}, ["training.mc", "'n_rollouts'"], id="mc"),
    pytest.param(
        "training: {per_method: {grpo: {max_stepz: 3}}}",
        {},
        ["training.per_method.grpo", "max_stepz", "'max_steps'"],
        id="per_method",
    ),
    pytest.param(
        "model: {arch: {hidden_sizee: 8}}",
        {},
        ["model.arch", "hidden_sizee", "'hidden_size'"],
        id="arch",
    ),
    pytest.param(
        "evaluation: {per_benchmark: {synth_idd: {top_p: 1.0}}}",
        {},
        ["config key 'evaluation.per_benchmark'", "synth_idd", "'synth_id'"],
        id="per_benchmark",
    ),
    pytest.param(
        "benchmarks: [synth_id, aime2099]",
        {},
        ["config key 'benchmarks'", "aime2099", "'aime24'"],
        id="benchmarks",
    ),
    pytest.param(
        "model: {name_or_path: ./models/missing}",
        {},
        ["config key 'model.name_or_path'", "does not exist", "or null"],
        id="model_path",
    ),
    pytest.param(
        "{benchmarks: [synth_id, aime24], data: {mirror: missing_mirror}}",
        NO_MIRROR_ENV,
        ["config key 'data.mirror'", "missing_mirror", "set it to null"],
        id="mirror",
    ),
    pytest.param(
        "benchmarks: [synth_id, aime24]",
        {**os.environ, "RREDCOT_MIRROR": "/nonexistent/mirror"},
        ["environment variable RREDCOT_MIRROR", "/nonexistent/mirror", "unset it"],
        id="mirror_env",
    ),
    # issue 21: values a job used to be the first to reject
    pytest.param("seed: -1", {}, ["config key 'seed'", "minimum of 0"], id="seed"),
    pytest.param(
        "training: {seeds: [-1]}", {}, ["config key 'training.seeds.0'"], id="training_seed"
    ),
    pytest.param(
        "studies: {accuracy_band: [0.7, 0.3]}",
        {},
        ["config key 'studies.accuracy_band'", "low <= high"],
        id="accuracy_band",
    ),
    pytest.param(
        "studies: {segmentation: {stratgy: keyword}}",
        {},
        ["studies.segmentation", "stratgy", "'strategy'"],
        id="studies_segmentation",
    ),
    pytest.param(
        "training: {seeds: [0, 0]}",
        {},
        ["config key 'training.seeds'", "non-unique"],
        id="distinct_seeds",
    ),
    pytest.param(
        "sft: {heldout_problems: 400}",
        {},
        ["config key 'sft.heldout_problems'", "no training rows"],
        id="sft_heldout",
    ),
    pytest.param(
        "training: {per_method: {rrpo: {num_generations: 3}}}",
        {},
        ["config key 'training' (run rrpo", "even num_generations"],
        id="rrpo_generations",
    ),
    pytest.param(
        "training: {gradient_accumulation_steps: 3}",
        {},
        ["config key 'training.gradient_accumulation_steps' (run grpo", "must divide"],
        id="accumulation",
    ),
    pytest.param(
        "training: {lr_scheduler: polynomial}",
        {},
        ["config key 'training.lr_scheduler'", "'cosine'"],
        id="lr_scheduler",
    ),
    pytest.param(
        "{estimator: {rredcot: {suffixes: 4}}, training: {per_method: {rredcot: {rredcot: "
        "{value: ref_suffix_max}}}}}",
        {},
        ["run rredcot", "estimator.rredcot.value", "'ref_suffix_sum' was expected"],
        id="rredcot_suffixes",
    ),
]


@pytest.mark.parametrize(("line", "env", "named"), PROBES)
def test_probe_config_errors_stop_at_load_time(repo, tmp_path, run_snakemake, line, env, named):
    """Issues 12's and 21's probe lists: each bad value stops `snakemake -n` while the Snakefile
    loads (before the DAG, so never a MissingInputException or an error inside a job), naming
    the key and what is allowed."""
    config = yaml.safe_load((repo / "configs" / "smoke.yaml").read_text())
    update_config(config, yaml.safe_load(line))
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    proc = run_snakemake(repo, tmp_path, "--configfile", str(bad), "-n", env=env or None)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "Building DAG of jobs" not in out and "MissingInputException" not in out, out[-2000:]
    for text in named:
        assert text in out, (text, out[-2000:])


def test_missing_mirror_stops_a_requested_table_before_any_job(repo, tmp_path, run_snakemake):
    """A real benchmark asked for on the command line (not in `benchmarks`): the missing mirror
    is named while the DAG is built, before any job runs."""
    missing = tmp_path / "missing.yaml"
    missing.write_text("data: {mirror: missing_mirror}\n")
    proc = run_snakemake(
        repo, tmp_path, "results/aime24_table.csv", "--configfile",
        str(repo / "configs/smoke.yaml"), str(missing), "-n", env=NO_MIRROR_ENV,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "config key 'data.mirror'" in out, out[-2000:]
    assert "rule prepare_benchmark" in out and "MissingInputException" not in out


def test_mirror_file_is_tracked(repo, tmp_path, run_snakemake):
    """The mirror file a benchmark table is read from is an input of its rule: editing the file,
    or pointing RREDCOT_MIRROR at another mirror, reruns it; an unchanged mirror does not.
    (Two mirrors of a hand-written aime24.jsonl: the test needs no real benchmark rows.)"""
    target = "results/data/benchmarks/aime24.parquet"
    rows = [
        {"id": f"aime24-{i}", "problem": f"What is {i}+{i}?", "answer": str(2 * i), "solution": ""}
        for i in (1, 2, 3)
    ]
    mirrors = {}
    for name in ("a", "b"):
        mirrors[name] = tmp_path / f"mirror_{name}"
        mirrors[name].mkdir()
        lines = "".join(json.dumps(row) + "\n" for row in rows)
        (mirrors[name] / "aime24.jsonl").write_text(lines)
    workdir = tmp_path / "work"
    workdir.mkdir()

    def run(mirror_dir: Path, *args: str):
        env = {**os.environ, "RREDCOT_MIRROR": str(mirror_dir), "HF_HUB_OFFLINE": "1"}
        smoke = str(repo / "configs/smoke.yaml")
        proc = run_snakemake(repo, workdir, target, "--configfile", smoke, *args, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout + proc.stderr

    run(mirrors["a"], "--cores", "1")
    assert "Nothing to be done" in run(mirrors["a"], "-n")
    assert "rule prepare_benchmark" in run(mirrors["b"], "-n")  # another mirror
    edited = mirrors["a"] / "aime24.jsonl"
    edited.write_text(edited.read_text().replace("\n", "\n\n", 1))  # same rows, new bytes
    later = (workdir / target).stat().st_mtime + 5
    os.utime(edited, (later, later))
    assert "rule prepare_benchmark" in run(mirrors["a"], "-n")  # the file changed
    run(mirrors["b"], "--cores", "1")
    table = pl.read_parquet(workdir / target)
    assert table["source"][0] == f"mirror:{mirrors['b'] / 'aime24.jsonl'}"


def test_lint_is_clean(repo, run_snakemake, stub_mirror):
    """`snakemake --lint` on the default config (its real benchmarks need a mirror directory at
    load time; an empty stand-in does, since linting reads no data)."""
    env = {**os.environ, "RREDCOT_MIRROR": str(stub_mirror), "HF_HUB_OFFLINE": "1"}
    proc = run_snakemake(repo, repo, "--lint", env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Lints for" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_a_variant_runs_its_method_with_its_settings_merged(repo, tmp_path, run_snakemake):
    """training.variants: an extra run named like a method, the method's settings with the
    variant's merged key by key (credit.center changed, credit.mode kept: config.yaml's mixed)."""
    extra = tmp_path / "variant.yaml"
    extra.write_text(
        "training:\n  credit: {center: none}\n  variants:\n    - {name: rredcot_center_group, "
        "method: rredcot, credit: {center: group}}\n"
    )
    proc = run_snakemake(
        repo, tmp_path, "--configfile", str(repo / "configs/smoke.yaml"), str(extra), "-n", "-p",
        "results/train/rredcot_center_group/seed0/train_summary.json",
        "results/train/rredcot/seed0/train_summary.json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    commands = [line for line in proc.stdout.splitlines() if "rredcot.steps.train_policy" in line]
    variant = next(c for c in commands if "train/rredcot_center_group/" in c)
    plain = next(c for c in commands if "train/rredcot/" in c)
    assert '"method": "rredcot"' in variant and '"center": "group"' in variant
    assert '"mode": "mixed"' in variant and '"center": "none"' in plain


def test_an_unknown_variant_method_stops_naming_the_key(repo, tmp_path, run_snakemake):
    extra = tmp_path / "variant.yaml"
    extra.write_text("training:\n  variants:\n    - {name: odd, method: ppo}\n")
    proc = run_snakemake(
        repo, tmp_path, "--configfile", str(repo / "configs/smoke.yaml"), str(extra), "-n"
    )
    assert proc.returncode != 0 and "training.variants.0.method" in proc.stdout + proc.stderr


@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_the_vllm_block_reaches_only_the_rules_that_generate_with_vllm(
    repo, tmp_path, run_snakemake, backend
):
    """Issue 32: evaluation.vllm is in the params (and so the rerun triggers) of generating rules
    under backend vllm only; under hf, and for grading and tables always, it is left out."""
    extra = tmp_path / "vllm.yaml"
    extra.write_text(f"evaluation: {{backend: {backend}, vllm: {{max_num_seqs: 7}}}}\n")
    proc = run_snakemake(
        repo, tmp_path, "--configfile", str(repo / "configs/smoke.yaml"), str(extra), "-n", "-p"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    commands = [line for line in proc.stdout.splitlines() if "python -m rredcot.steps." in line]
    with_block = {c.split("rredcot.steps.")[1].split()[0] for c in commands if "max_num_seqs" in c}
    generating = {"generate", "reference_solutions", "study_traces", "study_ground_truth"}
    generating.add("study_mc")  # the rules that sample (rollouts included) with the backend
    assert with_block == (generating if backend == "vllm" else set()), with_block


def summary_command(proc) -> str:
    return next(line for line in proc.stdout.splitlines() if "rredcot.steps.summary" in line)


def test_the_dag_ends_with_the_summary_of_what_the_config_builds(repo, tmp_path, run_snakemake):
    """The smoke DAG's last job is the summary, under the default profile Snakemake loads by
    itself; a config without the studies passes the summary no study table."""
    smoke = str(repo / "configs" / "smoke.yaml")
    proc = run_snakemake(repo, tmp_path, "--configfile", smoke, "-n", "-p")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "workflow specific profile" in proc.stderr and "profiles/default" in proc.stderr
    command = summary_command(proc)
    assert "--estimator-agreement results/estimator_agreement.csv" in command
    assert "--answer-now-rule results/answer_now_rule.json" in command
    extra = tmp_path / "no_studies.yaml"
    extra.write_text("studies: {enabled: false}\n")
    proc = run_snakemake(repo, tmp_path, "--configfile", smoke, str(extra), "-n", "-p")
    assert proc.returncode == 0, proc.stderr[-3000:]
    command = summary_command(proc)
    assert "--estimator-agreement" not in command and "--error-localization" not in command
    assert "--method-comparison results/method_comparison.csv" in command


def test_a_target_written_after_configfile_stops_naming_the_fix(repo, tmp_path, run_snakemake):
    """`--configfile` reads every word after it: a JSON result there parses as config. The
    workflow stops before merging it, naming the fix; with `--` the same target is built."""
    target = tmp_path / "results" / "answer_now_rule.json"
    target.parent.mkdir()
    target.write_text('{"seed": 3}')
    smoke = str(repo / "configs" / "smoke.yaml")
    proc = run_snakemake(
        repo, tmp_path, "-n", "--configfile", smoke, "results/answer_now_rule.json"
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "'results/answer_now_rule.json' lies under results/" in out, out[-2000:]
    assert "snakemake --configfile FILE -- results/answer_now_rule.json" in out
    proc = run_snakemake(
        repo, tmp_path, "-n", "--configfile", smoke, "--", "results/answer_now_rule.json"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_run_logs_its_expected_time_before_its_first_job(
    repo, tmp_path, run_snakemake, no_mirror_env
):
    """Two cheap jobs, the world and the study pool that waits for it, priced against a made-up
    snapshot of a smoke run: the line comes before the first job and its wall time is their
    chain's (not the longer job's alone); a dry run (which never calibrates) logs none."""
    from rredcot.planning import timing

    snapshot = tmp_path / "snapshots" / "fake"
    snapshot.mkdir(parents=True)
    jobs = [
        timing.JobTime("synthetic_world", "synthetic_world", wall_s=3000.0, cpu_s=1.0),
        timing.JobTime("study_pool", "studies/study_pool", wall_s=6000.0, cpu_s=1.0),
    ]
    timing.write_job_times(jobs, snapshot / timing.JOB_TIMES)
    (snapshot / timing.TIMING).write_text(
        json.dumps(
            {
                "calibration_s": 0.001,  # far faster than any machine: hours to read here
                "calibration_workload": timing.calibration_workload(),
                "configfiles": ["configs/smoke.yaml"],
            }
        )
    )
    env = {**no_mirror_env, "RREDCOT_SNAPSHOTS": str(tmp_path / "snapshots")}
    args = ("--configfile", str(repo / "configs" / "smoke.yaml"), "--cores", "1")
    target = "results/data/world/study_pool.parquet"
    dry = run_snakemake(repo, tmp_path, *args, "-n", target, env=env)
    assert dry.returncode == 0 and "expected" not in dry.stderr, dry.stderr[-3000:]
    proc = run_snakemake(repo, tmp_path, *args, target, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stderr.splitlines() if x.startswith("expected: ~"))
    match = re.fullmatch(
        r"expected: ~[\d,]+ CPU s, ~(\d+) h (\d+) min wall on 1 core "
        r"\(reference: fake, calibration ratio (\d+\.\d\d)\)",
        line,
    )
    assert match, line
    hours, minutes, ratio = int(match[1]), int(match[2]), float(match[3])
    assert abs(60 * hours + minutes - 9000 * ratio / 60) <= 2, line  # 3000 s, then 6000 s
    assert proc.stderr.index(line) < proc.stderr.index("localrule synthetic_world")


def _job_stats(output: str) -> dict[str, int]:
    """Jobs per rule from a dry run's "Job stats" table."""
    block = output.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    stats = dict(re.findall(r"^(\w+)\s+(\d+)$", block, flags=re.M))
    return {rule: int(n) for rule, n in stats.items() if rule != "total"}


def test_the_quick_default_dag_holds_only_what_the_summary_reads(
    repo, tmp_path, run_snakemake, no_mirror_env
):
    """The quick default (`config.yaml`, no `--configfile`): every job of its default target is
    one that the tables `results/SUMMARY.md` reads need (their rules' other outputs, such as the
    figures, come with them); `summary` and `all` are the only jobs on top."""
    from rredcot.reporting.summary import TABLES

    (tmp_path / "config.yaml").write_text((repo / "config.yaml").read_text())  # as in a checkout
    full = run_snakemake(repo, tmp_path, "-n", "--forceall", env=no_mirror_env)
    assert full.returncode == 0, full.stdout[-3000:] + full.stderr[-3000:]
    everything = _job_stats(full.stdout + full.stderr)
    built = yaml.safe_load((repo / "config.yaml").read_text())
    assert not built["studies"]["enabled"]  # no study table: the summary's study rows say not run
    assert everything["train_policy"] == len(built["training"]["methods"]) * 5
    tables = [
        f"results/{TABLES[n][0]}"
        for n in ("method_comparison", "benchmark_comparison", "main_table", "compute_cost")
    ] + ["results/regime_table.csv"]
    needed = run_snakemake(repo, tmp_path, *tables, "-n", "--forceall", env=no_mirror_env)
    assert needed.returncode == 0, needed.stdout[-3000:] + needed.stderr[-3000:]
    assert {**_job_stats(needed.stdout + needed.stderr), "summary": 1, "all": 1} == everything


def test_a_placebo_is_trained_beside_its_method_and_compared_with_it(
    smoke_run, repo, run_snakemake, no_mirror_env
):
    """configs/attribution.yaml's shape on the smoke run: a `credit.placebo` variant adds its
    own run and the placebo table, and leaves every existing run as it was (its settings omit
    the placebo at its default), so only the placebo's jobs and the table run."""
    workdir, _ = smoke_run
    extra = workdir / "placebo.yaml"
    extra.write_text(
        "training:\n  variants:\n    - {name: rredcot_perm, method: rredcot, "
        "credit: {placebo: perm}}\n"
    )
    args = ("--configfile", str(repo / "configs/smoke.yaml"), str(extra))
    target = "results/credit_attribution.csv"
    dry = run_snakemake(repo, workdir, *args, "-n", target, env=no_mirror_env)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    jobs = _job_stats(dry.stdout + dry.stderr)
    assert jobs == {
        "train_policy": 1,
        "generate": 1,
        "grade": 1,
        "generate_greedy": 1,
        "grade_greedy": 1,
        "credit_attribution": 1,
    }
    proc = run_snakemake(repo, workdir, *args, "--cores", "2", target, env=no_mirror_env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = pl.read_csv(workdir / target)
    placebo = table.filter(pl.col("against") == "rredcot_perm")
    assert set(placebo["method"]) == {"rredcot"}
    assert placebo.filter(pl.col("stratum") == "all")["measure"].to_list() == [
        "auc",
        "final",
        "t1_avoids_systematic",
        "t1_avoids_random",
        "greedy_pass1",
    ]
    # every other run against GRPO per first-error kind
    against_grpo = set(table.filter(pl.col("against") == "grpo")["method"])
    assert against_grpo == {*METHODS[1:], "rredcot_perm"}
    assert set(table["seeds"]) == {1}
    assert (workdir / "results/figures/credit_attribution.png").exists()


@pytest.mark.parametrize("name", ["attribution", "equal_compute"])
def test_an_attribution_config_runs_exactly_what_its_tables_need(
    name, repo, tmp_path, run_snakemake, no_mirror_env
):
    """configs/attribution.yaml and configs/equal_compute.yaml: one run per arm and seed, and
    every job of the default target is one that the summary's tables or
    results/credit_attribution.csv need; `summary` and `all` are the only jobs on top."""
    from rredcot.reporting.summary import TABLES

    (tmp_path / "config.yaml").write_text((repo / "config.yaml").read_text())  # as in a checkout
    overlay = repo / "configs" / f"{name}.yaml"
    args = ("--configfile", str(overlay))
    full = run_snakemake(repo, tmp_path, *args, "-n", "--forceall", env=no_mirror_env)
    assert full.returncode == 0, full.stdout[-3000:] + full.stderr[-3000:]
    everything = _job_stats(full.stdout + full.stderr)
    base = yaml.safe_load((repo / "config.yaml").read_text())["training"]
    training = {**base, **(yaml.safe_load(overlay.read_text())["training"])}
    arms = len(training["methods"]) + len(training["variants"])
    assert everything["train_policy"] == arms * len(training["seeds"])
    assert everything["credit_attribution"] == 1
    tables = [
        f"results/{TABLES[n][0]}"
        for n in ("method_comparison", "benchmark_comparison", "main_table", "compute_cost")
    ] + ["results/regime_table.csv", "results/credit_attribution.csv"]
    needed = run_snakemake(repo, tmp_path, *tables, "-n", "--forceall", *args, env=no_mirror_env)
    assert needed.returncode == 0, needed.stdout[-3000:] + needed.stderr[-3000:]
    assert {**_job_stats(needed.stdout + needed.stderr), "summary": 1, "all": 1} == everything


def test_the_dose_on_one_base_runs_each_arm_at_each_share(
    repo, tmp_path, run_snakemake, no_mirror_env
):
    """configs/dose_rule_share.yaml: every arm on every seed at each share f, one SFT base for
    all (the same world and SFT settings at each level), one attribution table per dose, the
    dose table over them and the contrasts table across the doses' placebo rows."""
    (tmp_path / "config.yaml").write_text((repo / "config.yaml").read_text())
    overlay = repo / "configs" / "dose_rule_share.yaml"
    args = ("--configfile", str(overlay))
    full = run_snakemake(repo, tmp_path, *args, "-n", "--forceall", env=no_mirror_env)
    assert full.returncode == 0, full.stdout[-3000:] + full.stderr[-3000:]
    jobs = _job_stats(full.stdout + full.stderr)
    config = yaml.safe_load(overlay.read_text())
    levels = len(config["doses"]["levels"])
    training = config["training"]
    seeds = yaml.safe_load((repo / "config.yaml").read_text())["training"]["seeds"]
    arms = len(training["methods"]) + len(training["variants"])
    train = {rule: n for rule, n in jobs.items() if rule.endswith("train_policy")}
    assert sum(train.values()) == arms * len(seeds) * levels, train
    attribution = {rule: n for rule, n in jobs.items() if rule.endswith("credit_attribution")}
    assert sum(attribution.values()) == levels, attribution
    assert sum(n for rule, n in jobs.items() if rule.endswith("credit_regimes")) == 1, jobs
    assert jobs["credit_contrasts"] == 1 and "credit_bases" not in jobs, jobs
