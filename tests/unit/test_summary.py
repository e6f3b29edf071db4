"""results/SUMMARY.md from small hand-made tables: what it states, in what order, and what it
says about a table the config did not build."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from rredcot.reporting.captions import caption_fragments
from rredcot.reporting.summary import (
    TABLES,
    JobTimes,
    git_commit,
    job_times,
    read_tables,
    render_summary,
    summary_values,
)

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def comparison_row(method: str, against: str, measure: str, endpoint: str, seed: str, diff: float):
    return {
        "method": method, "against": against, "measure": measure, "endpoint": endpoint,
        "seed": seed, "difference": diff, "ci95_low": diff - 0.02, "ci95_high": diff + 0.02,
        "seed_t_ci95_low": diff - 0.03, "seed_t_ci95_high": diff + 0.03,
        "verdict": "no difference", "seeds": 3, "mde80": 0.041, "machine": "CPU X",
    }  # fmt: skip


def write_tables(root: Path) -> dict[str, Path]:
    """Every table the summary reads, a few rows each, as the workflow writes them."""
    rows = [
        comparison_row("rredcot", "grpo", "final", "secondary", "all", 0.013),
        comparison_row("rredcot", "grpo", "auc", "primary", "all", 0.004),
        comparison_row("rredcot", "grpo", "final", "secondary", "1", 0.5),  # one seed: not pooled
        comparison_row("grpo", "base", "final", "secondary", "all", 0.247),  # against the base
        comparison_row("mc", "grpo", "auc", "primary", "all", -0.011),
    ]
    paths = {name: root / file for name, (file, _) in TABLES.items()}
    pl.DataFrame(rows).write_csv(paths["method_comparison"])
    pl.DataFrame(
        [
            {
                **comparison_row("rredcot", "grpo", "final", "secondary", "all", 0.027),
                "benchmark": "synth_ood",
            }
        ]  # fmt: skip
    ).write_csv(paths["benchmark_comparison"])
    pl.DataFrame({"method": ["base", "grpo"], "synth_id": ["0.580", "0.827 ± 0.010"]}).write_csv(
        paths["main_table"]
    )
    pl.DataFrame(
        {
            "method": ["grpo", "rredcot"],
            "n_seeds": [5, 5],
            "seconds_per_step": [2.0, 3.44],
            "forward_tokens_per_step": [8200.0, 38540.0],
            "seconds_ratio_to_grpo": [1.0, 1.72],
            "tokens_ratio_to_grpo": [1.0, 4.7],
        }  # fmt: skip
    ).write_csv(paths["compute_cost"])
    agreement = [
        {
            "target": "credits",
            "aggregation": "per_trace",
            "traces": "all",
            "estimator": e,
            "family": f,
            "n_rollouts": n,
            "rho": rho,
            "ci95_low": rho - 0.05,
            "ci95_high": rho + 0.05,
            "verdict": v,
            "ceiling": 0.708,
        }  # fmt: skip
        for e, f, n, rho, v in [
            ("rredcot_ref_suffix_sum_joint", "rredcot", None, 0.289, "reference"),
            ("rredcot_ref_path_ratio", "rredcot", None, 0.1, "worse"),  # not a headline row
            ("mc_n4", "mc", 4, 0.321, "no difference"),
            ("null", "null", None, 0.0, "worse"),
        ]
    ]
    agreement.append({**agreement[0], "traces": "overlap < 0.5", "rho": 0.307})  # a bin
    pl.DataFrame(agreement).write_csv(paths["estimator_agreement"])
    paths["answer_now_rule"].write_text(
        json.dumps(
            {
                "choice": "joint",
                "rho_conditional": 0.233,
                "rho_joint": 0.289,
                "diff_joint_minus_conditional": 0.056,
                "diff_ci95_low": 0.005,
                "diff_ci95_high": 0.106,
                "n_traces": 254,
                "rule": "joint if the CI is above 0",
            }  # fmt: skip
        )
    )
    pl.DataFrame(
        {
            "trace_set": [
                "all_incorrect",
                "all_incorrect",
                "agreement_incorrect",
                "incorrect systematic",
                "incorrect systematic",
                "incorrect other",
            ],
            "estimator": [
                "random",
                "rredcot_ref_suffix_sum_joint",
                "mc_n4",
                "rredcot_ref_suffix_sum_joint_perm",
                "oracle_rule",
                "loo",
            ],
            "family": ["baseline", "rredcot", "mc", "placebo", "oracle", "attribution"],
            "top1": [0.184, 0.765, 0.9, 0.171, 0.98, 0.3],
            "top1_ci95_low": [0.15, 0.724, 0.8, 0.13, 0.95, 0.2],
            "top1_ci95_high": [0.22, 0.809, 0.95, 0.21, 1.0, 0.4],
            "verdict": ["worse", "reference", "better", "worse", "better", "worse"],
            "n_traces": [387, 387, 110, 120, 120, 267],
        }  # fmt: skip
    ).write_csv(paths["error_localization"])
    frontier = [
        {"measure": m, "estimator": e, "agreement": a, "ci95_low": a - 0.04,
         "ci95_high": a + 0.04, "verdict_vs_best": v, "forward_tokens_per_trace": t,
         "seconds_per_trace": t / 1e4}
        for m in ("cosine_workflow", "spearman_credits")
        for e, a, v, t in [("rredcot_x", 0.412, "best", 1334.0),
                           ("rredcot_x_suffixes1", 0.398, "no difference", 402.0)]
    ]  # fmt: skip
    pl.DataFrame(frontier).write_csv(paths["estimator_frontier"])
    paths["estimator_pick"].write_text(
        json.dumps(
            {
                "choice": "rredcot_x_suffixes1",
                "rule": "the cheapest within the CI",
                "qualified": ["rredcot_x_suffixes1", "rredcot_x"],
                "family_best": "rredcot_x",
                "diff_vs_family_best": -0.014,
                "diff_ci95_low": -0.031,
                "diff_ci95_high": 0.002,
                "forward_tokens_per_trace": 402.0,
                "configured_forward_tokens_per_trace": 1334.0,
            }  # fmt: skip
        )
    )
    regime = ["method", "seed", "greedy_pass1", "t1_pass1", "t1_luck", "greedy_systematic_share",
              "t1_systematic_share"]  # fmt: skip
    pl.DataFrame(
        [
            ("base", "0", 0.51, 0.356, 0.05, 0.97, 0.53),
            ("grpo", "all", 0.66, 0.568, 0.02, 0.9, 0.69),
            ("base", "all", 0.51, 0.356, 0.05, 0.97, 0.53),
        ],
        schema=regime,
        orient="row",
    ).write_csv(paths["regime_table"])
    pl.DataFrame(
        [
            {**comparison_row("rredcot", "rredcot_perm", "auc", "primary", "all", 0.006),
             "error_kind": "all", "stratum": "all"},
            {**comparison_row("rredcot", "rredcot_perm", "t1_avoids_systematic", "secondary",
                              "all", -0.012), "error_kind": "systematic", "stratum": "all"},
            {**comparison_row("rredcot", "rredcot_perm", "auc", "secondary", "all", 0.02),
             "error_kind": "all", "stratum": "rule"},
        ]
    ).write_csv(paths["credit_attribution"])  # fmt: skip
    return paths


TIMES = JobTimes(jobs=12, wall_seconds=7590.0, cpu_seconds=12140.0, cpu_missing=0)


def test_the_primary_endpoint_comes_first_with_both_intervals_and_the_verdict(tmp_path):
    text = render_summary(read_tables(write_tables(tmp_path)), TIMES, "CPU X", "abc123", [], "grpo")
    table = [line for line in text.splitlines() if line.startswith("| rredcot − grpo")]
    assert table[0].startswith("| rredcot − grpo | auc | primary | +0.004 |")
    assert "−0.016 … +0.024" in table[0] and "−0.026 … +0.034" in table[0]
    assert "| rredcot − grpo | final | secondary | +0.013 |" in text
    assert "+0.500" not in text  # the per-seed row is not a pooled comparison
    assert "grpo − base" not in text.split("## Final policies")[0]  # only rows against grpo
    assert text.index("mc − grpo | auc | primary") < text.index("rredcot − grpo | final")


def test_the_studies_headlines_keep_the_default_mc_and_the_null_row(tmp_path):
    text = render_summary(read_tables(write_tables(tmp_path)), TIMES, "CPU X", "abc123", [], "grpo")
    agreement = text.split("## Estimator agreement")[1].split("## ")[0]
    assert "rredcot_ref_suffix_sum_joint | 0.289 | +0.239 … +0.339 | reference | 0.708" in agreement
    rows = [line.split(" | ")[1] for line in agreement.splitlines() if line.startswith("| credits")]
    assert rows == ["rredcot_ref_suffix_sum_joint", "mc_n4", "null"]  # the default first
    assert "ref_path_ratio" not in agreement and "0.307" not in agreement  # not all traces
    assert "+0.056 (+0.005 … +0.106, 254 traces) → **joint**" in text
    localization = text.split("## Error localization")[1]
    assert localization.index("rredcot_ref_suffix_sum_joint | 0.765 | 0.724 … 0.809") < (
        localization.index("random | 0.184")
    )
    assert "mc_n4" not in localization  # another trace set


def test_the_regime_table_states_each_methods_pooled_figures(tmp_path):
    tables = read_tables(write_tables(tmp_path))
    text = render_summary(tables, TIMES, "CPU X", "abc123", [], "grpo")
    section = text.split("## Greedy and T = 1 on the curve split")[1]
    # greedy, T = 1, luck, systematic share greedy and T = 1: one row per method, pooled
    assert "| base | 0.510 | 0.356 | 0.050 | 0.970 | 0.530 |" in section
    assert "| grpo | 0.660 | 0.568 | 0.020 | 0.900 | 0.690 |" in section
    values = summary_values(tables, TIMES, "CPU X", "abc123", "grpo")
    assert values["regime/grpo/greedy_pass1"] == "0.660"
    assert values["regime/base/t1_luck"] == "0.050"


def test_the_run_the_cost_and_the_time_are_stated(tmp_path):
    text = render_summary(
        read_tables(write_tables(tmp_path)),
        TIMES,
        "CPU X",
        "abc123",
        ["configs/smoke.yaml"],
        "grpo",
    )
    assert "- Config: `config.yaml` + `configs/smoke.yaml`" in text
    assert "- Commit: abc123" in text and "- Machine (this job): CPU X" in text
    assert "- Jobs: 12 " in text
    assert "wall 7,590 s (2 h 06 min), CPU 12,140 s (3 h 22 min)" in text
    assert "| rredcot | 5 | 3.44 | 1.72 | 38,540 | 4.70 |" in text
    assert "Training runs' machines: CPU X" in text


def test_a_table_the_config_does_not_build_is_named_as_not_run(tmp_path):
    paths = write_tables(tmp_path)
    chosen = {k: v for k, v in paths.items() if k in ("main_table", "compute_cost")}
    text = render_summary(read_tables(chosen), TIMES, "CPU X", "unknown", [], "grpo")
    for name, (file, _) in TABLES.items():
        section = text.split(f"(`results/{file}`)")[1].split("\n## ")[0]
        assert ("Not run by this config" in section) == (name not in chosen), name
    with pytest.raises(ValueError, match="unknown tables"):
        read_tables({"main_tabel": paths["main_table"]})


def test_every_value_the_docs_may_quote_is_printed_as_the_summary_prints_it(tmp_path):
    tables = read_tables(write_tables(tmp_path))
    text = render_summary(tables, TIMES, "CPU X", "abc123", [], "grpo")
    values = summary_values(tables, TIMES, "CPU X", "abc123", "grpo")
    assert values["comparison/rredcot/auc/difference"] == "+0.004"
    assert values["localization/all_incorrect/random/top1"] == "0.184"
    # by first-error kind: the reference's placebo and the controls, not the other estimators
    assert values["localization/incorrect_systematic/oracle_rule/top1"] == "0.980"
    assert values["localization/incorrect_systematic/rredcot_ref_suffix_sum_joint_perm/top1"] == (
        "0.171"
    )
    assert not any(k.startswith("localization/incorrect_other/") for k in values)
    # the frontier on the workflow transform, and the pick
    assert values["frontier/cosine_workflow/rredcot_x_suffixes1/tokens"] == "402"
    assert "frontier/spearman_credits/rredcot_x/agreement" not in values
    assert values["pick/choice"] == "rredcot_x_suffixes1"
    assert values["pick/ci"] == "−0.031 … +0.002"
    assert values["cost/rredcot/tokens_ratio"] == "4.70"
    assert values["regime/base/greedy_pass1"] == "0.510"
    missing = {k: v for k, v in values.items() if v not in text}
    assert not missing


# A row of each table that its summary section does not state (tables whose every row is stated
# have none): "no rows after filtering".
UNSTATED = {
    "method_comparison": {"seed": "1"},
    "benchmark_comparison": {"against": "base"},
    "estimator_agreement": {"aggregation": "pooled"},
    "error_localization": {"trace_set": "agreement_incorrect"},
    "regime_table": {"seed": "0"},
    "estimator_frontier": {"measure": "spearman_credits"},
}


def empty_tables(root: Path, kind: str) -> dict[str, Path]:
    """`write_tables` with every CSV emptied as `kind` says: `header` (its own columns),
    `partial` (the first two columns only, as a study's empty table lacks the columns its rows
    would add, e.g. the rehearsal's estimator_agreement.csv without `family`), `bare` (a zero-byte
    file), or `unstated` (rows, none that the summary states; the other tables header only)."""
    paths = write_tables(root)
    for name, path in paths.items():
        if path.suffix != ".csv":
            continue
        table = pl.read_csv(path, infer_schema_length=None)
        if kind == "bare":
            path.write_text("")
        elif kind == "partial":
            table.head(0).select(table.columns[:2]).write_csv(path)
        elif kind == "unstated" and name in UNSTATED:
            table.head(1).with_columns(
                pl.lit(v).alias(k) for k, v in UNSTATED[name].items()
            ).write_csv(path)
        else:
            table.head(0).write_csv(path)
    return paths


@pytest.mark.parametrize("kind", ["header", "partial", "bare", "unstated"])
def test_a_table_without_rows_to_state_is_said_to_have_none(tmp_path, kind):
    """The CPU rehearsal's summary stopped on its header-only estimator_agreement.csv (issue 46,
    item 10): every section and caption fragment of such a table says "no rows" instead."""
    paths = empty_tables(tmp_path, kind)
    tables = read_tables(paths)
    text = render_summary(tables, TIMES, "CPU X", "abc123", [], "grpo")
    values = summary_values(tables, TIMES, "CPU X", "abc123", "grpo")
    fragments = caption_fragments(values)
    for name, (file, _) in TABLES.items():
        if file.endswith(".json"):  # a rule's choice: written whole or not at all
            continue
        section = text.split(f"(`results/{file}`)")[1].split("\n## ")[0]
        assert f"This run's `results/{file}`" in section and "no rows" in section, (name, section)
        assert values[f"no_rows/{name}"] == "no rows", name
        if name in fragments:
            assert f"`results/{file}` has no rows" in fragments[name], name
    assert "no rows" in fragments["learning_curves"]
    assert not {k: v for k, v in values.items() if v not in text}


def write_benchmark(path: Path, *rows: tuple[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    cells = "".join(f"{s}\t0:00:01\t1\t1\t1\t1\t0\t0\t50\t{cpu}\n" for s, cpu in rows)
    path.write_text(HEADER + cells)


def test_job_times_sum_every_benchmark_file_but_the_summarys_own(tmp_path):
    bench = tmp_path / "benchmarks"
    write_benchmark(bench / "a.tsv", ("10.5", "20.0"))
    write_benchmark(bench / "train_policy/grpo/seed1.tsv", ("100", "150.5"))
    write_benchmark(bench / "generate/x.tsv", ("2", "NA"))  # Snakemake could not measure it
    write_benchmark(bench / "summary.tsv", ("1000", "1000"))
    times = job_times(bench, exclude=bench / "summary.tsv")
    assert times == JobTimes(jobs=3, wall_seconds=112.5, cpu_seconds=170.5, cpu_missing=1)
    assert job_times(tmp_path / "none") == JobTimes(0, 0.0, 0.0, 0)
    (bench / "odd.tsv").write_text("seconds\n1\n")
    with pytest.raises(ValueError, match="odd.tsv: no column 's'"):
        job_times(bench)


def test_the_commit_is_git_s_or_unknown(tmp_path):
    assert git_commit(tmp_path) == "unknown"
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    env = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "f").write_text("1")
    subprocess.run(["git", "-C", str(tmp_path), "add", "f"], check=True)
    subprocess.run(["git", "-C", str(tmp_path), *env, "commit", "-qm", "m"], check=True)
    head = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert git_commit(tmp_path) == head
    (tmp_path / "f").write_text("2")
    assert git_commit(tmp_path) == f"{head} + uncommitted changes"


def test_each_method_is_set_against_its_placebo(tmp_path):
    text = render_summary(read_tables(write_tables(tmp_path)), TIMES, "CPU X", "abc123", [], "grpo")
    section = text.split("## Is the gain credit assignment?")[1].split("\n## ")[0]
    assert "(`results/credit_attribution.csv`)" in section
    assert "| rredcot − rredcot_perm | auc | primary | +0.006 |" in section
    assert "| rredcot − rredcot_perm | t1_avoids_systematic | secondary | −0.012 |" in section
    assert "| rredcot − rredcot_perm | auc (rule problems) | secondary | +0.020 |" in section
    values = summary_values(read_tables(write_tables(tmp_path)), TIMES, "CPU X", "abc123", "grpo")
    assert values["attribution/rredcot/rredcot_perm/auc/difference"] == "+0.006"
    assert values["attribution/rredcot/rredcot_perm/auc/rule/seeds"] == "3"
    empty = tmp_path / "empty.csv"
    pl.read_csv(tmp_path / "credit_attribution.csv").head(0).write_csv(empty)
    text = render_summary(read_tables({"credit_attribution": empty}), TIMES, "X", "abc", [], "grpo")
    assert "has no rows." in text.split("## Is the gain credit assignment?")[1]
