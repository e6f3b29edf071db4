"""Reference solutions for the training problems (METHOD.md §1: U*, from the dataset or sampled).

RREDCoT scores the suffixes of a reference solution C* = U* ⊕ A ⊕ y* ⊕ close under the policy,
so every training problem needs one. Which comes first is `prefer` (config
`references.source`): `dataset` (the default, as below), or `sampled` (a verified policy sample
first, the dataset solution only where none verifies). The third kind, `own_path` (the answer
key written on each trace's own solution path, `rredcot.data.synthetic.own_path_solution`), is
per trace, not per problem: an oracle for analysis, built where the traces are. For each
problem, with `prefer: dataset`:

1. `dataset`: the problem's own `solution`, when it is non-empty and `task.grade(solution, gold)`
   verifies it (math: its last \\boxed{} against the gold answer with math-verify; synthetic: the
   answer line, which the generator always gets right — still checked).
2. `sampled`: otherwise, `samples_per_attempt` responses from the policy per attempt, up to
   `attempts` attempts; the first verified one (lowest attempt, then lowest sample index) that
   finished within the budget (finish_reason "stop": a truncated response is not a solution).
3. none: the problem keeps a null reference and is listed in the report with the reason; it is
   never dropped from the table.

The reference text is written the way a response ends under the task's answer trigger:
U* ⊕ A ⊕ y* ⊕ close, with y* the gold answer and U* the verified text before its last
occurrence of A (the whole text when A does not occur in it). So a synthetic solution
`…\\nAnswer: 5.` is its own reference, and a MATH solution `… $\\boxed{5}$.` becomes
`… $\\boxed{5}$.\\n\\nFinal answer: \\boxed{5}` — the dataset's reasoning kept verbatim, its
boxed answer included, and the canonical answer ending appended. `reference_reasoning` gives U*
back. A verified text whose U* would be blank (the answer and nothing else) is not used.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Integral
from typing import Any

import polars as pl

from rredcot.generation.base import GenerationBackend, SamplingParams, derive_seed
from rredcot.tasks.base import Grade, Task

log = logging.getLogger(__name__)

REFERENCE_SOURCES: tuple[str, ...] = ("dataset", "sampled")
REFERENCE_KINDS: tuple[str, ...] = ("dataset", "sampled", "own_path")
"""What a reference may be: a problem's dataset solution, a verified policy sample, or (per
trace, an oracle) the key on the trace's own path."""
OUTPUT_COLUMNS: tuple[str, ...] = ("reference", "reference_source", "reference_attempts")
REQUIRED_COLUMNS: tuple[str, ...] = ("id", "problem", "answer", "solution")


@dataclass(frozen=True)
class ReferenceReport:
    """How many problems got a reference, from where, and which did not (with the reason)."""

    n_problems: int
    counts: dict[str, int]  # "dataset", "sampled", "none"
    missing: dict[str, str] = field(default_factory=dict)  # problem id -> why it has none
    sampled_responses: int = 0  # responses generated and graded over all problems

    @property
    def n_with_reference(self) -> int:
        return self.counts["dataset"] + self.counts["sampled"]

    @property
    def coverage(self) -> float:
        """Fraction of problems with a reference (1.0 for an empty table)."""
        return self.n_with_reference / self.n_problems if self.n_problems else 1.0

    @property
    def missing_ids(self) -> list[str]:
        return list(self.missing)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (for the rule's report file)."""
        return {
            "n_problems": self.n_problems,
            "n_with_reference": self.n_with_reference,
            "coverage": self.coverage,
            "counts": dict(self.counts),
            "sampled_responses": self.sampled_responses,
            "missing_ids": self.missing_ids,
            "missing_reasons": dict(self.missing),
        }


def compose_reference(task: Task, text: str, answer: str) -> str | None:
    """U* ⊕ A ⊕ y* ⊕ close from a verified text; None when its U* would be blank.

    U* = the text before its last occurrence of the answer trigger A (the whole text when A
    does not occur), y* = `answer` stripped. See the module docstring for examples.
    """
    trigger = task.answer_trigger
    reasoning = text.rpartition(trigger)[0] if trigger in text else text
    if not reasoning.strip():
        return None
    return reasoning + trigger + answer.strip() + task.answer_close


def reference_reasoning(task: Task, reference: str) -> str:
    """U*: the reference text before its last answer trigger (inverse of `compose_reference`)."""
    if task.answer_trigger not in reference:
        raise ValueError(
            f"reference: holds no answer trigger {task.answer_trigger!r}; not a reference text"
        )
    return reference.rpartition(task.answer_trigger)[0]


ORACLE_HEADER = "\n\nReference solution:\n"
"""What introduces the oracle text O in the prompt (METHOD.md §8, `oracle_prompt`)."""
_PROBLEM_PROBE = "\x00problem\x00"


def oracle_prompt(task: Task, tokenizer: Any, prompt: str, reference: str) -> str:
    """x with the oracle text O = "Reference solution:" ⊕ U* ⊕ A ⊕ y* ⊕ close in it, before the
    task's own prompt end (METHOD.md §8; OPPO's self-oracle scores the response under it).

    `reference` is a reference text U* ⊕ A ⊕ y* ⊕ close (`compose_reference`; checked with
    `reference_reasoning`), so the answer is written the way the task's responses write it. The
    task's prompt end is what `task.build_prompt` writes after the problem (synthetic: "\\n";
    math: the instruction and, under a chat template, the end of the user turn and the
    assistant's header); O goes in front of it, so the response still follows the prompt's own
    ending. A prompt that does not end with it (a TRL script's own template) gets O appended.
    """
    reference_reasoning(task, reference)  # a reference text, or the error that says why not
    rendered = task.build_prompt(_PROBLEM_PROBE, tokenizer)
    end = rendered.rpartition(_PROBLEM_PROBE)[2] if _PROBLEM_PROBE in rendered else ""
    oracle = ORACLE_HEADER + reference
    if end and prompt.endswith(end):
        return prompt[: len(prompt) - len(end)] + oracle + end
    return prompt + oracle


def _grade(task: Task, pairs: list[tuple[str, str]]) -> list[Grade]:
    """task.grade over (response, gold) pairs, batched where the task can (math-verify worker)."""
    grade_many = getattr(task, "grade_many", None)
    if callable(grade_many):
        return list(grade_many(pairs))
    return [task.grade(response, gold) for response, gold in pairs]


def _check_count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_problems(problems: pl.DataFrame) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in problems.columns]
    if missing:
        raise ValueError(f"problems: lacks column(s) {missing}; has {problems.columns}")
    present = [c for c in OUTPUT_COLUMNS if c in problems.columns]
    if present:
        raise ValueError(f"problems: already has column(s) {present}; drop them to rebuild")
    ids = problems["id"]
    if ids.null_count():
        rows = problems.with_row_index().filter(pl.col("id").is_null())["index"].to_list()
        raise ValueError(f"problems: rows {rows[:10]} have a null id")
    dup = ids.filter(ids.is_duplicated()).unique().to_list()
    if dup:
        raise ValueError(f"problems: duplicate id(s) {sorted(dup)[:10]}")
    bad = problems.with_row_index().filter(
        pl.col("problem").is_null() | (pl.col("problem").str.strip_chars() == "")
    )
    if bad.height:
        raise ValueError(f"problems: empty problem text in rows with id {bad['id'].to_list()[:10]}")


def build_references(
    problems: pl.DataFrame,
    task: Task,
    backend: GenerationBackend | None,
    *,
    attempts: int,
    samples_per_attempt: int,
    max_new_tokens: int,
    temperature: float,
    seed: int,
    top_p: float = 1.0,
    tokenizer: Any = None,
    prefer: str = "dataset",
) -> tuple[pl.DataFrame, ReferenceReport]:
    """`problems` with `reference`, `reference_source`, `reference_attempts`, and a report.

    problems: a normalized table (`id, problem, answer, solution`; extra columns kept, row order
    kept). backend: the policy that samples when a dataset solution is unusable; None (or
    attempts = 0) samples nothing. Attempt a is one `backend.generate` call over the problems
    still without a reference, n = samples_per_attempt, seed `derive_seed(seed, a)`, the task's
    stop strings; deterministic given the table, the seed and a seeded backend. tokenizer: for
    `task.build_prompt` (chat templates); defaults to `backend.tokenizer` when it has one.
    prefer: `dataset` (dataset solution first, sampling for the rest) or `sampled` (sampling
    first, the dataset solution for problems where no sample verified).

    Columns added: reference (String, null when none), reference_source ("dataset" | "sampled"
    | null), reference_attempts (Int64: responses sampled and graded for this problem, all
    samples of every attempt made; 0 when the dataset solution was used or nothing was sampled).
    """
    if prefer not in REFERENCE_SOURCES:
        raise ValueError(f"prefer: expected one of {list(REFERENCE_SOURCES)}, got {prefer!r}")
    attempts = _check_count("attempts", attempts, 0)
    samples_per_attempt = _check_count("samples_per_attempt", samples_per_attempt, 1)
    _check_count("seed", seed, 0)
    # Validate the sampling settings up front, even when nothing ends up being sampled.
    SamplingParams(
        n=samples_per_attempt,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        seed=0,
        stop_strings=tuple(task.stop_strings),
    )
    _check_problems(problems)

    rows: list[Mapping[str, Any]] = problems.select(REQUIRED_COLUMNS).to_dicts()
    n = len(rows)
    reference: list[str | None] = [None] * n
    source: list[str | None] = [None] * n
    tried = [0] * n
    missing: dict[str, str] = {}

    golds = ["" if row["answer"] is None else str(row["answer"]).strip() for row in rows]
    for i, row in enumerate(rows):
        if not golds[i]:
            missing[row["id"]] = "no gold answer to verify against"

    def from_dataset(indices: list[int]) -> None:
        """Dataset solutions that verify."""
        candidates = [
            i
            for i in indices
            if isinstance(rows[i]["solution"], str) and rows[i]["solution"].strip()
        ]
        grades = _grade(task, [(rows[i]["solution"], golds[i]) for i in candidates])
        for i, grade in zip(candidates, grades, strict=True):
            if grade.correct:
                composed = compose_reference(task, rows[i]["solution"], golds[i])
                if composed is not None:
                    reference[i], source[i] = composed, "dataset"

    def by_sampling(indices: list[int]) -> None:
        """Attempt by attempt, the first verified sample that finished."""
        if not indices or backend is None or attempts == 0:
            return
        tok = tokenizer if tokenizer is not None else getattr(backend, "tokenizer", None)
        prompts = {i: task.build_prompt(rows[i]["problem"], tok) for i in indices}
        need = list(indices)
        for attempt in range(attempts):
            if not need:
                break
            params = SamplingParams(
                n=samples_per_attempt,
                temperature=temperature,
                top_p=top_p,
                max_new_tokens=max_new_tokens,
                seed=derive_seed(seed, attempt),
                stop_strings=tuple(task.stop_strings),
            )
            completions = backend.generate([prompts[i] for i in need], params)
            if len(completions) != len(need) * samples_per_attempt:
                raise ValueError(
                    f"backend returned {len(completions)} completions for {len(need)} prompts "
                    f"x {samples_per_attempt} samples"
                )
            done = [c for c in completions if c.finish_reason == "stop"]
            verdicts = _grade(task, [(c.text, golds[need[c.prompt_index]]) for c in done])
            for i in need:
                tried[i] += samples_per_attempt
            for c, grade in sorted(
                zip(done, verdicts, strict=True),
                key=lambda pair: (pair[0].prompt_index, pair[0].sample_index),
            ):
                i = need[c.prompt_index]
                if reference[i] is None and grade.correct:
                    composed = compose_reference(task, c.text, golds[i])
                    if composed is not None:
                        reference[i], source[i] = composed, "sampled"
            need = [i for i in need if reference[i] is None]
            log.info("reference attempt %d: %d problems still without one", attempt + 1, len(need))

    with_gold = [i for i in range(n) if golds[i]]
    first, second = (
        (from_dataset, by_sampling) if prefer == "dataset" else (by_sampling, from_dataset)
    )
    first(with_gold)
    second([i for i in with_gold if reference[i] is None])
    need = [i for i in with_gold if reference[i] is None]

    for i in need:
        if backend is None or attempts == 0:
            missing[rows[i]["id"]] = "dataset solution unusable and sampling disabled"
        else:
            missing[rows[i]["id"]] = (
                f"dataset solution unusable and none of {tried[i]} sampled responses verified"
            )
    missing = {rows[i]["id"]: missing[rows[i]["id"]] for i in range(n) if rows[i]["id"] in missing}
    if missing:
        log.warning(
            "%d of %d problems have no reference solution: %s",
            len(missing),
            n,
            list(missing)[:10],
        )

    out = problems.with_columns(
        pl.Series("reference", reference, dtype=pl.String()),
        pl.Series("reference_source", source, dtype=pl.String()),
        pl.Series("reference_attempts", tried, dtype=pl.Int64()),
    )
    counts = {
        "dataset": source.count("dataset"),
        "sampled": source.count("sampled"),
        "none": source.count(None),
    }
    report = ReferenceReport(n, counts, missing, sum(tried))
    return out, report


__all__ = [
    "ORACLE_HEADER",
    "oracle_prompt",
    "OUTPUT_COLUMNS",
    "REFERENCE_KINDS",
    "REFERENCE_SOURCES",
    "ReferenceReport",
    "build_references",
    "compose_reference",
    "reference_reasoning",
]
