"""`results/SUMMARY.md`: a run's headline, generated from its own tables so no figure is typed.

The primary comparisons first (each method's area under the held-out curve against the baseline,
`training.baseline`, with both intervals and the conservative verdict), then every other pooled
comparison, the estimator studies' headlines, the cost per step against the baseline, and the
time every job took, summed from
Snakemake's `benchmark:` files. A table the config does not build is named as not run, never
left out silently, and a built table without a row to state (header only, as a study writes when
no trace qualifies, or no row the section states) as having no rows, never as an error: a paper
run must not end on its last rule. `summary_values` is the same content as flat keys, which the
docs' snapshot check compares stated numbers with (`rredcot.reporting.snapshot`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from rredcot.data.schema import read_json, read_table
from rredcot.planning.timing import benchmark_jobs
from rredcot.reporting.numbers import duration, interval, markdown_table, plain, signed
from rredcot.reporting.summary_tables import MINUS, NO_ROWS, REGIME_FIGURES, TABLES
from rredcot.studies import families


@dataclass(frozen=True)
class JobTimes:
    """What the `benchmark:` files of a run's jobs add up to."""

    jobs: int  # files read: one per job that ran
    wall_seconds: float  # the jobs' own running times, summed (parallel jobs overlap)
    cpu_seconds: float  # user + system CPU time of every job's processes, summed
    cpu_missing: int  # jobs whose CPU time Snakemake could not collect ("NA")


def job_times(benchmarks: Path, exclude: Path | None = None) -> JobTimes:
    """Sum every `*.tsv` benchmark file under `benchmarks` but `exclude` (the summary's own, from
    an earlier run of it), as `rredcot.planning.timing.benchmark_jobs` reads them."""
    jobs = benchmark_jobs(benchmarks, exclude)
    return JobTimes(
        jobs=len(jobs),
        wall_seconds=sum(j.wall_s for j in jobs),
        cpu_seconds=sum(j.cpu_s for j in jobs if j.cpu_s is not None),
        cpu_missing=sum(j.cpu_s is None for j in jobs),
    )


def git_commit(repo: Path) -> str:
    """The checked-out commit of `repo` (with `+ uncommitted changes` when its tracked files
    differ from it), or `unknown` outside a git checkout."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60
        )

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return "unknown"
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return "unknown"
    return head.stdout.strip() + (" + uncommitted changes" if dirty else "")


def read_tables(paths: Mapping[str, Path | None]) -> dict[str, pl.DataFrame | dict | None]:
    """The tables by name (`TABLES`), None for one the config does not build."""
    unknown = sorted(set(paths) - set(TABLES))
    if unknown:
        raise ValueError(f"summary: unknown tables {unknown}; known: {sorted(TABLES)}")
    out: dict[str, pl.DataFrame | dict | None] = {}
    for name in TABLES:
        path = paths.get(name)
        if path is None:
            out[name] = None
        elif path.stat().st_size == 0:  # written without even a header: no rows, no columns
            out[name] = pl.DataFrame()
        elif path.suffix == ".json":
            out[name] = read_json(path)
        else:
            out[name] = read_table(path, infer_schema_length=None)
    return out


def pooled_comparisons(table: pl.DataFrame, reference: str) -> pl.DataFrame:
    """Rows pooled over seeds against the baseline `reference`: the primary endpoint's first,
    then the rest."""
    pooled = pl.col("seed").cast(pl.String) == "all"
    rows = table.filter(pooled & (pl.col("against") == reference))
    return (
        rows.with_columns((pl.col("endpoint") != "primary").alias("_later"))
        .sort("_later", "method", "measure", maintain_order=True)
        .drop("_later")
    )


def agreement_headline(table: pl.DataFrame) -> pl.DataFrame:
    """Per-trace agreement on all traces: the reference estimator, MC and the null row, each
    target."""
    rows = table.filter(pl.col("aggregation") == "per_trace")
    if "traces" in rows.columns:
        rows = rows.filter(pl.col("traces") == "all")
    default = pl.col("verdict") == "reference"
    rows = rows.filter(default | pl.col("family").is_in([families.MC, families.NULL]))
    rows = rows.with_columns((~default).alias("_later"))  # the default first, then MC by N
    return rows.sort("target", "_later", "family", "n_rollouts", maintain_order=True).drop("_later")


def localization_headline(table: pl.DataFrame) -> pl.DataFrame:
    """Top-1 localization on every incorrect trace, best first."""
    return table.filter(pl.col("trace_set") == "all_incorrect").sort("top1", descending=True)


LOCALIZATION_CONTROLS = (families.ORACLE, families.PLACEBO, families.BASELINE)
"""The families of the rows that bound a localization figure (`rredcot.studies.controls`): the
checker oracles, the within-trace placebos and the random segment."""


def localization_by_kind(table: pl.DataFrame) -> pl.DataFrame:
    """Top-1 on the incorrect traces by first-error kind: the reference estimator, its placebo
    and the controls."""
    kinds = pl.col("trace_set").is_in(["incorrect systematic", "incorrect other"])
    chosen = (pl.col("verdict") == "reference") | pl.col("family").is_in(LOCALIZATION_CONTROLS)
    return table.filter(kinds & chosen)


FRONTIER_HEADLINE = "cosine_workflow"
"""The frontier measure the summary states (the pick's, `preregistered.FAST_MEASURE`)."""


def frontier_headline(table: pl.DataFrame) -> pl.DataFrame:
    """The frontier's rows on the workflow-transform cosine, cheapest first."""
    return table.filter(pl.col("measure") == FRONTIER_HEADLINE).sort("forward_tokens_per_trace")


def _pooled(table: pl.DataFrame) -> pl.DataFrame:
    """The regime table's rows pooled over seeds, one per method (the base first, as written)."""
    return table.filter(pl.col("seed").cast(pl.String) == "all")


def _against_reference(table: pl.DataFrame, reference: str) -> pl.DataFrame:
    """The final policies' comparisons with the baseline `reference`, per benchmark."""
    return table.filter(pl.col("against") == reference)


def headline_rows(name: str, table: pl.DataFrame, reference: str) -> list[dict]:
    """The rows of table `name` that the summary states, against the baseline `reference` (none
    for a table without rows, whatever its columns: a header-only file may lack the columns a
    filter needs)."""
    if table.is_empty():
        return []
    select = {
        "method_comparison": lambda t: pooled_comparisons(t, reference),
        "benchmark_comparison": lambda t: _against_reference(t, reference),
        "estimator_agreement": agreement_headline,
        "error_localization": localization_headline,
        "estimator_frontier": frontier_headline,
        "regime_table": _pooled,
    }.get(name, lambda t: t)
    return list(select(table).iter_rows(named=True))


def difference_values(key: str, r: Mapping) -> dict[str, str]:
    """A paired comparison's difference, both intervals and verdict, as the summary prints them."""
    return {
        f"{key}/difference": signed(r["difference"]),
        f"{key}/bootstrap_ci": interval(r["ci95_low"], r["ci95_high"]),
        f"{key}/seed_t_ci": interval(r["seed_t_ci95_low"], r["seed_t_ci95_high"]),
        f"{key}/verdict": str(r["verdict"]),
    }


def comparison_values(key: str, r: Mapping) -> dict[str, str]:
    """`difference_values` with the row's seeds and its MDE at 80% power."""
    return difference_values(key, r) | {
        f"{key}/seeds": str(r["seeds"]),
        f"{key}/mde80": plain(r["mde80"]),
    }


def summary_values(
    tables: Mapping[str, pl.DataFrame | dict | None],
    times: JobTimes,
    machine: str,
    commit: str,
    reference: str,
) -> dict[str, str]:
    """Every number the summary states, under a stable key, formatted as it prints; the
    comparisons are against the baseline `reference` (`training.baseline`)."""
    values = {
        "machine": machine,
        "commit": commit,
        "baseline": reference,
        "jobs": str(times.jobs),
        "wall_seconds": duration(times.wall_seconds),
        "cpu_seconds": duration(times.cpu_seconds),
    }
    rows = {
        name: headline_rows(name, table, reference)
        for name, table in tables.items()
        if isinstance(table, pl.DataFrame)
    }
    values |= {f"no_rows/{name}": NO_ROWS for name, found in rows.items() if not found}
    for r in rows.get("method_comparison", []):
        values |= comparison_values(f"comparison/{r['method']}/{r['measure']}", r)
    for r in rows.get("benchmark_comparison", []):
        values |= difference_values(f"benchmark/{r['benchmark']}/{r['method']}", r)
    for r in rows.get("compute_cost", []):
        for unit in ("seconds", "tokens"):
            ratio = r.get(f"{unit}_ratio_to_{reference}")
            values[f"cost/{r['method']}/{unit}_ratio"] = plain(ratio, 2)
    for r in rows.get("estimator_agreement", []):
        key = f"agreement/{r['target']}/{r['estimator']}"
        values[f"{key}/rho"] = plain(r["rho"])
        values[f"{key}/ci"] = interval(r["ci95_low"], r["ci95_high"])
        values[f"{key}/verdict"] = str(r["verdict"])
        values[f"agreement/{r['target']}/ceiling"] = plain(r["ceiling"])
    rule = tables.get("answer_now_rule")
    if isinstance(rule, dict):
        values["answer_now/choice"] = str(rule.get("choice"))
        if "diff_joint_minus_conditional" in rule:
            values["answer_now/difference"] = signed(rule["diff_joint_minus_conditional"])
            values["answer_now/ci"] = interval(rule["diff_ci95_low"], rule["diff_ci95_high"])
    table = tables.get("error_localization")
    by_kind = (
        localization_by_kind(table).to_dicts()
        if isinstance(table, pl.DataFrame) and not table.is_empty()
        else []
    )
    for r in [*rows.get("error_localization", []), *by_kind]:
        key = f"localization/{r['trace_set'].replace(' ', '_')}/{r['estimator']}"
        values[f"{key}/top1"] = plain(r["top1"])
        values[f"{key}/ci"] = interval(r["top1_ci95_low"], r["top1_ci95_high"]).replace("+", "")
    for r in rows.get("estimator_frontier", []):
        key = f"frontier/{r['measure']}/{r['estimator']}"
        values[f"{key}/agreement"] = plain(r["agreement"])
        values[f"{key}/ci"] = interval(r["ci95_low"], r["ci95_high"])
        values[f"{key}/tokens"] = f"{r['forward_tokens_per_trace']:,.0f}"
        values[f"{key}/verdict_vs_best"] = str(r["verdict_vs_best"])
    pick = tables.get("estimator_pick")
    if isinstance(pick, dict):
        values["pick/choice"] = str(pick.get("choice"))
        if pick.get("diff_vs_family_best") is not None:
            values["pick/difference"] = signed(pick["diff_vs_family_best"])
            values["pick/ci"] = interval(pick["diff_ci95_low"], pick["diff_ci95_high"])
    for r in rows.get("credit_attribution", []):
        stratum = r.get("stratum") or "all"
        key = f"attribution/{r['method']}/{r['against']}/{r['measure']}"
        key += "" if stratum == "all" else f"/{stratum}"
        values |= comparison_values(key, r)
    for r in rows.get("regime_table", []):
        for figure in REGIME_FIGURES:
            values[f"regime/{r['method']}/{figure}"] = plain(r[figure])
    return values


def _not_run(name: str) -> list[str]:
    file, what = TABLES[name]
    return [f"Not run by this config (`results/{file}`, {what}, is not among its targets).", ""]


def _no_rows(name: str, table: pl.DataFrame) -> list[str]:
    """A built table without a row to state: said, not an error (a study writes its table header
    only when no trace qualifies, e.g. a stand-in base that is never right)."""
    file, what = TABLES[name]
    if table.is_empty():
        return [f"This run's `results/{file}` ({what}) has {NO_ROWS}.", ""]
    return [
        f"This run's `results/{file}` ({what}) holds {table.height} row(s) but {NO_ROWS} that this "
        "section states (see the file).",
        "",
    ]


def _section(title: str, name: str) -> list[str]:
    return [f"## {title} (`results/{TABLES[name][0]}`)", ""]


def _comparisons(table: pl.DataFrame, reference: str) -> list[str]:
    lines = [
        "Pooled over seeds. `primary`: the pre-registered endpoint (area under the held-out",
        "curve); every other row is secondary. The verdict is the more conservative of the",
        "bootstrap and the t interval; MDE 80%: the smallest effect the seeds could detect.",
        "",
    ]
    lines += _comparison_rows(pooled_comparisons(table, reference))
    if "machine" in table.columns:
        machines = sorted({str(m) for m in table["machine"].drop_nulls()})
        lines += [f"Training runs' machines: {' | '.join(machines)}", ""]
    return lines


def _measure(r: Mapping) -> str:
    """A row's measure, with its stratum of the held-out problems when it has one."""
    stratum = r.get("stratum") or "all"
    return r["measure"] if stratum == "all" else f"{r['measure']} ({stratum} problems)"


def _comparison_rows(table: pl.DataFrame) -> list[str]:
    """A markdown table of pooled paired-comparison rows (`paired_comparison`'s columns)."""
    rows = [
        [
            f"{r['method']} {MINUS} {r['against']}",
            _measure(r),
            r["endpoint"],
            signed(r["difference"]),
            interval(r["ci95_low"], r["ci95_high"]),
            interval(r["seed_t_ci95_low"], r["seed_t_ci95_high"]),
            r["verdict"],
            r["seeds"],
            plain(r["mde80"]),
        ]
        for r in table.iter_rows(named=True)
    ]
    header = ["comparison", "measure", "endpoint", "difference", "bootstrap 95% CI",
              "t 95% CI over seeds", "verdict", "seeds", "MDE 80%"]  # fmt: skip
    return markdown_table(header, rows)


def _attribution(table: pl.DataFrame) -> list[str]:
    return [
        "Each method against its placebo (same level of signal, placement destroyed; METHOD.md",
        "§9), paired over seeds and problems. `primary`: the pre-registered endpoint (area under",
        "the held-out curve, docs/attribution.md). `t1_avoids_*`: the share of final samples",
        "without a first error of that kind (positive: fewer such errors than the placebo);",
        "`(rule problems)`: held-out problems the misconception's rule applies to. Rows against",
        "a baseline given the method's budget are at equal wall seconds and forward tokens.",
        "",
        *_comparison_rows(table),
    ]


def _benchmarks(table: pl.DataFrame, reference: str) -> list[str]:
    rows = [
        [
            r["benchmark"],
            f"{r['method']} {MINUS} {r['against']}",
            signed(r["difference"]),
            interval(r["ci95_low"], r["ci95_high"]),
            interval(r["seed_t_ci95_low"], r["seed_t_ci95_high"]),
            r["verdict"],
        ]  # fmt: skip
        for r in headline_rows("benchmark_comparison", table, reference)
    ]
    header = ["benchmark", "comparison", "difference", "bootstrap 95% CI", "t 95% CI", "verdict"]
    return markdown_table(header, rows)


def _main_table(table: pl.DataFrame) -> list[str]:
    """pass@1 per method and benchmark, three decimals, with the file's 95% interval beside it
    (the seeds' spread stays in the file)."""
    benchmarks = [
        c for c in table.columns
        if f"{c}_ci95_low" in table.columns and f"{c}_ci95_high" in table.columns
    ]  # fmt: skip
    rows = [
        [r["method"], *(f"{plain(r[b])} ({plain(r[f'{b}_ci95_low'])} … "
                        f"{plain(r[f'{b}_ci95_high'])})" for b in benchmarks)]
        for r in table.iter_rows(named=True)
    ]  # fmt: skip
    return [
        "Mean over seeds, with the 95% interval of `results/main_table.csv`.",
        "",
        *markdown_table(["method", *benchmarks], rows),
    ]


def _cost(table: pl.DataFrame, reference: str) -> list[str]:
    rows = [
        [
            r["method"],
            r["n_seeds"],
            plain(r["seconds_per_step"], 2),
            plain(r.get(f"seconds_ratio_to_{reference}"), 2),
            f"{r['forward_tokens_per_step']:,.0f}",
            plain(r.get(f"tokens_ratio_to_{reference}"), 2),
            plain(r.get(f"gpu_units_ratio_to_{reference}"), 2),
        ]  # fmt: skip
        for r in table.iter_rows(named=True)
    ]
    header = ["method", "seeds", "seconds / step", f"× {reference}", "forward tokens / step",
              f"× {reference}", f"GPU-projected × {reference}"]  # fmt: skip
    return [
        "Seconds depend on what else shared the machine; forward tokens do not. The GPU "
        "projection is a stated model, not a measurement (`GPU_COST_MODEL`, docs/frontier.md).",
        "",
        *markdown_table(header, rows),
    ]


def _agreement(table: pl.DataFrame) -> list[str]:
    rows = [
        [
            r["target"],
            r["estimator"],
            plain(r["rho"]),
            interval(r["ci95_low"], r["ci95_high"]),
            r["verdict"],
            plain(r["ceiling"]),
        ]  # fmt: skip
        for r in agreement_headline(table).iter_rows(named=True)
    ]
    header = ["target", "estimator", "mean per-trace ρ", "95% CI", "vs the default", "ceiling"]
    return [
        "Per trace, all agreement traces: RREDCoT's default (`reference`), Monte Carlo with N",
        "rollouts and the null row (knows only R); the ceiling is the ground truth's own",
        "√reliability. Every estimator is in the table.",
        "",
        *markdown_table(header, rows),
    ]


def _answer_now(rule: dict) -> list[str]:
    if "diff_joint_minus_conditional" not in rule:
        return [f"Choice: {rule.get('choice')} ({rule.get('rule')}).", ""]
    return [
        f"Rule: {rule['rule']}. Joint {MINUS} conditional "
        f"{signed(rule['diff_joint_minus_conditional'])} "
        f"({interval(rule['diff_ci95_low'], rule['diff_ci95_high'])}, {rule['n_traces']} traces)"
        f" → **{rule['choice']}**.",
        "",
    ]


def _localization(table: pl.DataFrame) -> list[str]:
    rows = [
        [
            r["estimator"],
            plain(r["top1"]),
            interval(r["top1_ci95_low"], r["top1_ci95_high"]).replace("+", ""),
            r["verdict"],
            r["n_traces"],
        ]  # fmt: skip
        for r in localization_headline(table).iter_rows(named=True)
    ]
    header = ["estimator", "top-1", "95% CI", "vs the default", "traces"]
    by_kind = [
        [
            r["trace_set"].removeprefix("incorrect "),
            r["estimator"],
            plain(r["top1"]),
            interval(r["top1_ci95_low"], r["top1_ci95_high"]).replace("+", ""),
            r["n_traces"],
        ]  # fmt: skip
        for r in localization_by_kind(table).iter_rows(named=True)
    ]
    kinds = (
        [
            "",
            "By the kind of the first error (the world's misconception or another), with the "
            "controls: the checker oracles and the placebo (σ permuted within each trace: at "
            "chance, like `random`, or the study is broken).",
            "",
            *markdown_table(["first error", "estimator", "top-1", "95% CI", "traces"], by_kind),
        ]
        if by_kind
        else []
    )
    return [
        "Share of incorrect traces whose lowest-credit segment holds the first wrong step.",
        "",
        *markdown_table(header, rows),
        *kinds,
    ]


def _frontier(table: pl.DataFrame) -> list[str]:
    rows = [
        [
            r["estimator"],
            plain(r["agreement"]),
            interval(r["ci95_low"], r["ci95_high"]),
            r["verdict_vs_best"],
            f"{r['forward_tokens_per_trace']:,.0f}",
            f"{r['seconds_per_trace']:.3f}",
        ]  # fmt: skip
        for r in frontier_headline(table).iter_rows(named=True)
    ]
    header = ["estimator", "cosine", "95% CI", "vs the best", "forward tokens/trace",
              "seconds/trace"]  # fmt: skip
    return [
        "Cosine of each estimator's token advantages under the workflow's transform with the MC "
        "ground truth's, cheapest first; the Spearman and other transforms are in the file.",
        "",
        *markdown_table(header, rows),
    ]


def _pick(pick: dict) -> list[str]:
    if pick.get("choice") is None:
        return [f"No pick: {pick.get('reason')}.", ""]
    return [
        f"Rule: {pick['rule']}. Qualified: {', '.join(pick['qualified'])} → **{pick['choice']}** "
        f"({signed(pick['diff_vs_family_best'])} against the family's best {pick['family_best']}, "
        f"{interval(pick['diff_ci95_low'], pick['diff_ci95_high'])}; "
        f"{pick['forward_tokens_per_trace']:,.0f} forward tokens per trace against the configured "
        f"form's {pick['configured_forward_tokens_per_trace']:,.0f}).",
        "",
    ]


def _regime(table: pl.DataFrame) -> list[str]:
    rows = list(_pooled(table).iter_rows(named=True))
    header = ["method", "greedy pass@1", "T = 1 pass@1", "T = 1 luck",
              "systematic share of errors, greedy", "systematic share, T = 1"]  # fmt: skip
    body = [[r["method"], *(plain(r[f]) for f in REGIME_FIGURES)] for r in rows]
    return [
        "Mean over seeds; the intervals and every policy's row are in the file.",
        "",
        *markdown_table(header, body),
    ]


AGAINST_BASELINE = (_comparisons, _benchmarks, _cost)
"""The sections whose rows are against the baseline (they take it as a second argument)."""
SECTIONS = (
    ("Comparisons with {baseline} along training", "method_comparison", _comparisons),
    ("Final policies on each benchmark", "benchmark_comparison", _benchmarks),
    ("pass@1 per method", "main_table", _main_table),
    ("Cost per training step", "compute_cost", _cost),
    ("Estimator agreement with the Monte Carlo ground truth", "estimator_agreement", _agreement),
    ("The pre-registered answer-now rule", "answer_now_rule", _answer_now),
    ("Error localization", "error_localization", _localization),
    ("The cost-agreement frontier", "estimator_frontier", _frontier),
    ("The pre-registered rredcot_fast", "estimator_pick", _pick),
    ("Greedy and T = 1 on the curve split", "regime_table", _regime),
    (
        "Is the gain credit assignment? Each method against its placebo",
        "credit_attribution",
        _attribution,
    ),
)


def render_summary(
    tables: Mapping[str, pl.DataFrame | dict | None],
    times: JobTimes,
    machine: str,
    commit: str,
    configfiles: list[str],
    reference: str,
) -> str:
    """SUMMARY.md's text: the run, then one section per table (`SECTIONS`), comparisons against
    the baseline `reference` (`training.baseline`)."""
    cpu_note = f" ({times.cpu_missing} jobs without a CPU time)" if times.cpu_missing else ""
    lines = [
        "# Summary of this run",
        "",
        "Generated by the rule `summary` from this run's tables; every number below is in the",
        "file its section names. How to read the intervals and verdicts: docs/statistics.md.",
        "",
        f"- Config: `config.yaml`{''.join(f' + `{c}`' for c in configfiles)}",
        f"- Commit: {commit}",
        f"- Machine (this job): {machine}",
        f"- Baseline: {reference} (`training.baseline`: the run the comparisons are against)",
        f"- Jobs: {times.jobs} (the `benchmark:` files read under results/benchmarks/, one per job "
        "that ran; this job not counted)",
        f"- Time summed over those jobs: wall {duration(times.wall_seconds)}, CPU "
        f"{duration(times.cpu_seconds)}{cpu_note}. Jobs that ran at once overlap, so the wall sum "
        "exceeds the run's elapsed time.",
        "",
    ]
    for title, name, section in SECTIONS:
        lines += _section(title.format(baseline=reference), name)
        table = tables.get(name)
        if table is None:
            lines += _not_run(name)
        elif isinstance(table, pl.DataFrame) and not headline_rows(name, table, reference):
            lines += _no_rows(name, table)
        elif section in AGAINST_BASELINE:
            lines += section(table, reference)
        else:
            lines += section(table)
    return "\n".join(lines)
