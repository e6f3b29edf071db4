"""Rule `reference_solutions`: a verified reference solution for every problem of a split.

`rredcot.credit.references.build_references`: the dataset solution where it verifies, else sampled
from the policy (attempts recorded per problem). Problems left without one stay in the table with a
null reference, are named in the log and listed with the reason in a CSV.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from rredcot.credit.references import build_references
from rredcot.data.schema import read_parquet, write_parquet
from rredcot.generation.base import Completion, SamplingParams
from rredcot.steps.cli import log, parser, require, seed_everything, setup
from rredcot.steps.study_common import Timer, load_backend
from rredcot.tasks import get_task


class LazyBackend:
    """Loads the policy's backend on the first `generate` call, so that a split whose dataset
    solutions all verify (the synthetic world) never loads a model."""

    def __init__(self, settings: dict[str, Any], policy: str | None, batch_size: int) -> None:
        self.settings, self.policy, self.batch_size = settings, policy, batch_size
        self.name = settings["backend"]
        self._backend: Any = None

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Completion]:
        if self._backend is None:
            if self.policy is None:
                raise ValueError("--policy: sampling is needed but no policy was given")
            log.info("loading %s backend on %s to sample references", self.name, self.policy)
            self._backend = load_backend(self.settings, self.policy, self.batch_size)
        return self._backend.generate(prompts, params)

    @property
    def tokenizer(self) -> Any:
        if self._backend is None and self.policy is not None:
            from rredcot.models.loading import load_tokenizer

            return load_tokenizer(self.policy)
        return getattr(self._backend, "tokenizer", None)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--problems", required=True, type=Path)
    p.add_argument("--policy", default=None, help="checkpoint or Hub id that samples references")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--missing", required=True, type=Path, help="CSV of problems without one")
    p.add_argument("--summary", required=True, type=Path, help="JSON coverage report")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    setup(args.threads)
    prm = args.params
    task_name, seed, _, refs, prefer = require(
        prm, "task", "seed", "backend", "references", "prefer"
    )
    seed_everything(seed)
    task = get_task(task_name)
    problems = read_parquet(args.problems)
    backend = LazyBackend(prm, args.policy, refs["batch_size"])
    with Timer("reference_solutions"):
        table, report = build_references(
            problems,
            task,
            backend,
            attempts=refs["attempts"],
            samples_per_attempt=refs["samples_per_attempt"],
            max_new_tokens=refs["max_new_tokens"],
            temperature=refs["temperature"],
            top_p=refs["top_p"],
            seed=seed,
            prefer=prefer,
        )
    write_parquet(table, args.out)
    missing = pl.DataFrame(
        {"id": list(report.missing), "reason": list(report.missing.values())},
        schema={"id": pl.String, "reason": pl.String},
    )
    args.missing.parent.mkdir(parents=True, exist_ok=True)
    missing.write_csv(args.missing)
    summary = report.to_dict()
    args.summary.write_text(json.dumps(summary, indent=2))
    log.info(
        "references: %d of %d problems (coverage %.4f; dataset %d, sampled %d, none %d; "
        "%d responses sampled)",
        report.n_with_reference,
        report.n_problems,
        report.coverage,
        report.counts["dataset"],
        report.counts["sampled"],
        report.counts["none"],
        report.sampled_responses,
    )
    for pid, reason in report.missing.items():
        log.warning("no reference for %s: %s", pid, reason)


if __name__ == "__main__":
    main()
