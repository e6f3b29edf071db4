"""Rule `benchmark_table`: `results/{benchmark}_table.csv`, one row per method."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from rredcot.data.schema import read_parquet, read_table
from rredcot.evaluation.tables import benchmark_table, package_versions
from rredcot.steps.cli import log, parser, require, setup


def dataset_identity(benchmark: str, problems: pl.DataFrame) -> tuple[str, str, str]:
    """(dataset id, revision, where the rows came from) for the protocol columns."""
    origin = problems["source"][0] if problems.height else ""
    if origin == "synthetic":
        return f"synthetic:{benchmark}", "generated", "synthetic world (config world.*)"
    from rredcot.data.registry import registry_entry

    spec = registry_entry(benchmark)
    return spec.hub_id, spec.revision, origin


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--grades", required=True, nargs="+", type=Path)
    p.add_argument("--problems", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args()
    setup()
    prm = args.params
    benchmark, task, model, seed = require(prm, "benchmark", "task", "model", "seed")
    problems = read_parquet(args.problems)
    dataset_id, revision, origin = dataset_identity(benchmark, problems)
    protocol = {
        "benchmark": benchmark,
        "model": model,
        "dataset_id": dataset_id,
        "dataset_revision": revision,
        "data_origin": origin,
        "temperature": prm["temperature"],
        "top_p": prm["top_p"],
        "max_new_tokens": prm["max_new_tokens"],
        "backend": prm["backend"],
        "grader": "exact_match"
        if task == "synthetic"
        else "math-verify (gold first, last \\boxed{})",
        "versions": package_versions(),
    }
    frames = [read_table(path) for path in args.grades]
    table = benchmark_table(frames, protocol, prm["bootstrap_resamples"], seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.write_csv(args.out)
    log.info(
        "wrote %s:\n%s",
        args.out,
        table.select("method", "pass_at_1", "ci95_low", "ci95_high", "n_problems", "k"),
    )


if __name__ == "__main__":
    main()
