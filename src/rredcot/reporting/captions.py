"""The numbers of the Snakemake report's captions, written by the rule `summary`.

A caption (workflow/report/*.rst) is static text, rendered when `snakemake --report` runs, long
after the rules' params were fixed; so a caption that states its artifact's numbers includes
(`.. include::`) a fragment that the summary writes from the same values SUMMARY.md prints
(`summary_values`). Every fragment in `CAPTIONS` is written on every run, saying "not in this
run" where the config did not build the table and "no rows" where it built one without a row to
state (`NO_ROWS`), so no caption can point at a missing file or number.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from rredcot.reporting.summary_tables import MINUS, NO_ROWS, REGIME_FIGURES, TABLES

# Endpoints of method_comparison.csv in the order the captions state them (primary first).
ENDPOINTS = (
    ("auc", "area under the held-out curve (primary)"),
    ("final", "final step"),
    ("final_equal_seconds", "equal wall seconds"),
    ("final_equal_tokens", "equal forward tokens"),
)
# How a caption names each of the summary's regime figures (`REGIME_FIGURES`, in its order).
REGIME_LABELS = {
    "greedy_pass1": "greedy pass@1",
    "t1_pass1": "T = 1 pass@1",
    "t1_luck": "luck at T = 1",
    "greedy_systematic_share": "systematic share of greedy errors",
    "t1_systematic_share": "systematic share at T = 1",
}


def _parts(values: Mapping[str, str], prefix: str, position: int) -> list[str]:
    """The distinct key parts at `position` (after splitting on "/") of keys under `prefix`,
    in the order the values hold them."""
    seen: dict[str, None] = {}
    for key in values:
        parts = key.split("/")
        if key.startswith(prefix + "/") and len(parts) > position:
            seen.setdefault(parts[position], None)
    return list(seen)


def _difference(values: Mapping[str, str], key: str) -> str:
    """`+0.027 (bootstrap +0.017 … +0.037; t over seeds +0.019 … +0.035): better`."""
    return (
        f"{values[f'{key}/difference']} (bootstrap {values[f'{key}/bootstrap_ci']}; "
        f"t over seeds {values[f'{key}/seed_t_ci']}): **{values[f'{key}/verdict']}**"
    )


def _comparisons(values: Mapping[str, str]) -> list[str]:
    lines = []
    for method in _parts(values, "comparison", 1):
        for measure, label in ENDPOINTS:
            key = f"comparison/{method}/{measure}"
            if f"{key}/difference" not in values:
                continue
            seeds, mde = values.get(f"{key}/seeds", "?"), values.get(f"{key}/mde80", "?")
            lines.append(
                f"- {method} {MINUS} {values['baseline']}, {label}: {_difference(values, key)} "
                f"({seeds} seeds; MDE at 80% power {mde})"
            )
    return lines


def _benchmarks(values: Mapping[str, str]) -> list[str]:
    return [
        f"- {benchmark}, {method} {MINUS} {values['baseline']}: "
        f"{_difference(values, f'benchmark/{benchmark}/{method}')}"
        for benchmark in _parts(values, "benchmark", 1)
        for method in _parts(values, f"benchmark/{benchmark}", 2)
    ]


def _cost(values: Mapping[str, str]) -> list[str]:
    return [
        f"- {method}: {values[f'cost/{method}/seconds_ratio']}× {values['baseline']}'s seconds "
        "per step, "
        f"{values[f'cost/{method}/tokens_ratio']}× its forward tokens"
        for method in _parts(values, "cost", 1)
    ]


def _regime(values: Mapping[str, str]) -> list[str]:
    return [
        f"- {method}: "
        + "; ".join(
            f"{REGIME_LABELS[figure]} {values[f'regime/{method}/{figure}']}"
            for figure in REGIME_FIGURES
            if f"regime/{method}/{figure}" in values
        )
        for method in _parts(values, "regime", 1)
    ]


def _agreement(values: Mapping[str, str]) -> list[str]:
    lines = []
    for target in _parts(values, "agreement", 1):
        ceiling = values.get(f"agreement/{target}/ceiling")
        for estimator in _parts(values, f"agreement/{target}", 2):
            key = f"agreement/{target}/{estimator}"
            if f"{key}/rho" in values:
                verdict = values[f"{key}/verdict"]
                versus = "the default" if verdict == "reference" else f"against it: {verdict}"
                lines.append(
                    f"- {target}, {estimator}: mean per-trace Spearman ρ {values[f'{key}/rho']} "
                    f"(95% CI {values[f'{key}/ci']}; {versus})"
                )
        if ceiling is not None:
            lines.append(f"- {target}: ceiling (√reliability of the ground truth) {ceiling}")
    return lines


def _localization(values: Mapping[str, str]) -> list[str]:
    lines = []
    for trace_set in _parts(values, "localization", 1):
        where = "" if trace_set == "all_incorrect" else f", {trace_set.replace('_', ' ')}"
        for estimator in _parts(values, f"localization/{trace_set}", 2):
            key = f"localization/{trace_set}/{estimator}"
            lines.append(
                f"- {estimator}{where}: top-1 {values[f'{key}/top1']} "
                f"(95% CI {values[f'{key}/ci']})"
            )
    return lines


def _run(values: Mapping[str, str]) -> list[str]:
    return [
        f"- Jobs: {values['jobs']}; summed CPU {values['cpu_seconds']}, summed wall "
        f"{values['wall_seconds']}",
        f"- Machine: {values['machine']}",
        f"- Commit: {values['commit']}",
    ]


# Fragment name (the caption file's stem) -> what it states.
CAPTIONS: dict[str, Callable[[Mapping[str, str]], list[str]]] = {
    "method_comparison": _comparisons,
    "learning_curves": _comparisons,
    "benchmark_comparison": _benchmarks,
    "compute_cost": _cost,
    "regime_table": _regime,
    "estimator_agreement": _agreement,
    "error_localization": _localization,
    "summary": _run,
}


# The summary's table a fragment states (a fragment not named here states the table of its name).
CAPTION_TABLES = {"learning_curves": "method_comparison"}


def _nothing(values: Mapping[str, str], name: str) -> list[str]:
    """What a fragment says when it has no number: the table has no rows, or was not built."""
    table = CAPTION_TABLES.get(name, name)
    if values.get(f"no_rows/{table}") == NO_ROWS:
        return [f"In this run `results/{TABLES[table][0]}` has {NO_ROWS} to state."]
    return ["Not in this run: the config did not build this table."]


def caption_fragments(values: Mapping[str, str]) -> dict[str, str]:
    """One reStructuredText fragment per caption in `CAPTIONS`: its numbers in this run."""
    fragments = {}
    for name, lines_of in CAPTIONS.items():
        body = lines_of(values) or _nothing(values, name)
        head = ["**In this run** (from results/SUMMARY.md's values):", ""]
        fragments[name] = "\n".join([*head, *body]) + "\n"
    return fragments


def write_caption_fragments(values: Mapping[str, str], out: Path) -> list[Path]:
    """Write every fragment under `out/` as `<name>.rst`; the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in caption_fragments(values).items():
        path = out / f"{name}.rst"
        path.write_text(text)
        paths.append(path)
    return paths
