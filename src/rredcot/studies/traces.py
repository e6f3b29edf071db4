"""The traces the estimator studies score: one sampled response per problem, with its verdicts.

METHOD.md §5 compares credit estimators on responses of the policy itself. Each problem of the
study split gets one response sampled at the study temperature (1.0 by default: the policy's own
distribution, so both correct and incorrect traces occur and none is filtered out). A trace
keeps everything the later steps need:

- ids: prompt_ids (the prompt as the backend tokenized it) and response_ids (the kept tokens);
- text: prompt, response, and token_texts (one string per response token, joined = response);
- verdicts: reward r(y); for tasks with a step checker (the synthetic world) first_error (1-based
  step), error_kind and the character span of the offending line (`check_response`);
- the reference: y* (answer) and the reference text U* ⊕ A ⊕ y* ⊕ close from the references rule;
- per-token statistics under the policy: log π(z_t | x, z_<t) and the entropy H_t of the
  distribution z_t was drawn from (the segmentation strategies' inputs).

Nothing is dropped: an empty response stays in the table (T = 0, no segments) and the steps that
need segments report how many traces they could not use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import polars as pl

from rredcot.config import accuracy_band_error
from rredcot.generation.base import GenerationBackend, SamplingParams

TRACE_COLUMNS: tuple[str, ...] = (
    "trace_index",
    "problem_id",
    "prompt",
    "response",
    "prompt_ids",
    "response_ids",
    "token_texts",
    "num_tokens",
    "finish_reason",
    "answer",
    "reference",
    "reward",
    "first_error",
    "n_steps",
    "error_kind",
    "error_start",
    "error_end",
)
STAT_COLUMNS: tuple[str, ...] = ("logprobs", "entropies")


def token_texts(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """The text of each token, so that "".join(result) == decode(ids).

    Each token is decoded alone; when that does not reassemble the whole (a byte tokenizer cutting
    a multi-byte character), the text of token j is what decoding the prefix ids[:j+1] adds to
    ids[:j] (a partial character adds nothing; the token that completes it gets the character).
    """
    ids = [int(i) for i in ids]
    whole = tokenizer.decode(ids, skip_special_tokens=True)
    pieces = [tokenizer.decode([i], skip_special_tokens=True) for i in ids]
    if "".join(pieces) == whole:
        return pieces
    out, previous = [], ""
    for j in range(len(ids)):
        prefix = tokenizer.decode(ids[: j + 1], skip_special_tokens=True)
        # A trailing U+FFFD may be a character still being completed; the last token takes
        # whatever is left (bytes that never form a character stay U+FFFD).
        stable = prefix if j == len(ids) - 1 else prefix.rstrip("\ufffd")
        if stable.startswith(previous):
            out.append(stable[len(previous) :])
            previous = stable
        else:
            out.append("")
    if "".join(out) != whole:
        raise ValueError("tokenizer: token texts do not reassemble the decoded response")
    return out


def sample_traces(
    backend: GenerationBackend,
    task: Any,
    problems: pl.DataFrame,
    tokenizer: Any,
    *,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    seed: int,
) -> pl.DataFrame:
    """One response per problem (`TRACE_COLUMNS`), graded and, where possible, step-checked.

    problems: `id, problem, answer` and `reference` (the references rule's column; null where a
    problem has none), plus `program` for the synthetic world's step checker. One
    `backend.generate` call with n = 1; row p draws from the stream derive_seed(seed, p, 0).
    """
    missing = [c for c in ("id", "problem", "answer", "reference") if c not in problems.columns]
    if missing:
        raise ValueError(f"problems: lacks column(s) {missing}; has {problems.columns}")
    rows = problems.to_dicts()
    prompts = [task.build_prompt(r["problem"], tokenizer) for r in rows]
    params = SamplingParams(
        n=1,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        seed=seed,
        stop_strings=tuple(task.stop_strings),
    )
    completions = backend.generate(prompts, params)
    if len(completions) != len(rows):
        raise ValueError(f"backend returned {len(completions)} completions for {len(rows)} prompts")
    prompt_ids = tokenizer(prompts)["input_ids"]
    checker = getattr(task, "check_response", None) if "program" in problems.columns else None
    out: dict[str, list[Any]] = {c: [] for c in TRACE_COLUMNS}
    for c in completions:
        row = rows[c.prompt_index]
        gold = str(row["answer"]).strip()
        grade = task.grade(c.text, gold)
        check = checker(row["program"], c.text) if checker is not None else None
        span = check.first_error_span if check is not None else None
        values = {
            "trace_index": c.prompt_index,
            "problem_id": row["id"],
            "prompt": prompts[c.prompt_index],
            "response": c.text,
            "prompt_ids": list(prompt_ids[c.prompt_index]),
            "response_ids": list(c.token_ids),
            "token_texts": token_texts(tokenizer, c.token_ids),
            "num_tokens": c.num_tokens,
            "finish_reason": c.finish_reason,
            "answer": gold,
            "reference": row["reference"],
            "reward": grade.reward,
            "first_error": None if check is None else check.first_error,
            "n_steps": None if check is None else check.n_steps,
            "error_kind": None if check is None else check.error_kind,
            "error_start": None if span is None else span[0],
            "error_end": None if span is None else span[1],
        }
        for key, value in values.items():
            out[key].append(value)
    schema = {
        "prompt_ids": pl.List(pl.Int64),
        "response_ids": pl.List(pl.Int64),
        "token_texts": pl.List(pl.String),
        "reference": pl.String,
        "first_error": pl.Int64,
        "n_steps": pl.Int64,
        "error_kind": pl.String,
        "error_start": pl.Int64,
        "error_end": pl.Int64,
    }
    return pl.DataFrame(out, schema_overrides=schema)


def token_statistics(model: Any, traces: pl.DataFrame) -> pl.DataFrame:
    """`traces` with `logprobs` and `entropies` (one float per response token, empty when T = 0).

    One teacher-forced pass per trace (`rredcot.scoring.response_entropies`).
    """
    from rredcot.scoring import response_entropies

    logprobs, entropies = [], []
    for prompt_ids, response_ids in zip(traces["prompt_ids"], traces["response_ids"], strict=True):
        if len(response_ids) == 0:
            logprobs.append([])
            entropies.append([])
            continue
        lp, h = response_entropies(model, list(prompt_ids), list(response_ids))
        logprobs.append(lp.double().tolist())
        entropies.append(h.double().tolist())
    return traces.with_columns(
        pl.Series("logprobs", logprobs, dtype=pl.List(pl.Float64)),
        pl.Series("entropies", entropies, dtype=pl.List(pl.Float64)),
    )


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score 95% interval of a proportion (sensible at 0, 1 and small n)."""
    if n == 0:
        return float("nan"), float("nan")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def select_study_set(
    traces: pl.DataFrame,
    band: Sequence[float] | None,
    agreement_traces: int | None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(kept traces with an `agreement` flag, the per-depth table that chose them).

    The study needs both outcomes in numbers (METHOD.md §5), whatever base the machine trained:
    the base's accuracy at each depth is measured on the sampled traces themselves (one per
    problem), and the depths whose accuracy lies in `band` = [low, high] are kept (selection on
    the problem's depth, never on the trace's outcome, so the kept traces are the policy's own
    distribution at those depths). Without a band, or without a `depth` column, every trace is
    kept. The first `agreement_traces` kept traces (in trace order, i.e. the pool's random
    order) form the agreement set, which the MC ground truth and MC-N estimators cover; the
    scored estimators and error localization use every kept trace. Stops with the table in the
    message when no depth is in the band.
    """
    if "depth" not in traces.columns or band is None:
        table = pl.DataFrame(
            {
                "depth": [None],
                "n_traces": [traces.height],
                "accuracy": [float(traces["reward"].mean()) if traces.height else float("nan")],
                "kept": [True],
            },
            schema_overrides={"depth": pl.Int64},
        )
        kept = traces
    else:
        if (error := accuracy_band_error(band)) is not None:
            raise ValueError(error)
        low, high = float(band[0]), float(band[1])
        rows = []
        for depth, part in traces.group_by("depth", maintain_order=False):
            n, right = part.height, int((part["reward"] == 1).sum())
            ci = wilson_interval(right, n)
            acc = right / n
            lucky = (
                int(((part["reward"] == 1) & part["first_error"].is_not_null()).sum())
                if "first_error" in part.columns
                else None
            )
            rows.append(
                {
                    "depth": depth[0],
                    "n_traces": n,
                    "accuracy": acc,
                    "ci95_low": ci[0],
                    "ci95_high": ci[1],
                    "kept": low <= acc <= high,
                    # right answer from a wrong chain, a share of all traces of the depth
                    "luck": None if lucky is None else lucky / n,
                }
            )
        table = pl.DataFrame(rows).sort("depth")
        depths = table.filter(pl.col("kept"))["depth"].to_list()
        if not depths:
            raise ValueError(
                f"studies.accuracy_band {list(band)}: the base's accuracy is outside the band at "
                f"every depth of the study pool; widen the band or change studies.pool.depths.\n"
                f"{table}"
            )
        kept = traces.filter(pl.col("depth").is_in(depths))
    kept = kept.sort("trace_index")
    n_agree = kept.height if agreement_traces is None else min(agreement_traces, kept.height)
    flags = [i < n_agree for i in range(kept.height)]
    return kept.with_columns(pl.Series("agreement", flags, dtype=pl.Boolean)), table


def with_reference_kinds(
    traces: pl.DataFrame,
    programs: Sequence[str | None],
    sampled: Sequence[str | None] | None = None,
) -> pl.DataFrame:
    """`traces` with every kind of reference beside the configured one (`reference`), and how
    far the trace follows each (`rredcot.data.synthetic.path_overlap`):

    - `reference_own_path`: the answer key on the trace's own path (`own_path_solution`), an
      oracle no real dataset has; null without a program;
    - `reference_sampled`: the problem's reference from the sampled-first table (`sampled`, in
      trace order; the column is left out when None);
    - `overlap`, `overlap_own_path`, `overlap_sampled`: share of the reference's step lines the
      trace writes in the same order and the same way round (null where the reference is).
    """
    from rredcot.data.synthetic import own_path_solution, path_overlap

    own = [
        None if program is None else own_path_solution(program, response)
        for program, response in zip(programs, traces["response"], strict=True)
    ]
    columns = {"reference": traces["reference"].to_list(), "reference_own_path": own}
    if sampled is not None:
        columns["reference_sampled"] = list(sampled)
    out = traces.with_columns(
        pl.Series(name, refs, dtype=pl.String)
        for name, refs in columns.items()
        if name != "reference"
    )
    responses = traces["response"].to_list()
    overlaps = {
        name.replace("reference", "overlap"): [
            None if ref is None else path_overlap(ref, resp)
            for ref, resp in zip(refs, responses, strict=True)
        ]
        for name, refs in columns.items()
    }
    return out.with_columns(pl.Series(n, v, dtype=pl.Float64) for n, v in overlaps.items())


OVERLAP_BINS: tuple[tuple[str, float, float], ...] = (
    ("overlap<0.5", 0.0, 0.5),
    ("0.5<=overlap<1", 0.5, 1.0),
    ("overlap=1", 1.0, 1.0),
)
"""How far a trace follows the configured reference's path: (label, low, high); the last bin
is the trace on the reference's own path (the answer-key case)."""


def overlap_bin(overlap: float | None) -> str | None:
    """The `OVERLAP_BINS` label of an overlap (None for a missing or NaN one)."""
    if overlap is None or math.isnan(overlap):
        return None
    for label, low, high in OVERLAP_BINS:
        if low <= overlap < high or low == high == overlap:
            return label
    raise ValueError(f"overlap {overlap!r} outside [0, 1]")


def path_statistics(
    programs: Sequence[str],
    responses: Sequence[Sequence[str]],
    references: Sequence[str | None],
    rng_seed: int,
) -> dict[str, float]:
    """How many solution paths the base writes and how far two valid paths overlap.

    programs[i]: a problem; responses[i]: several base samples of it; references[i]: its
    dataset reference. Returns the mean number of distinct paths (sequences of step-line forms)
    among the samples, the share of problems with more than one, the mean number of valid paths
    (`Program.path_count`), the mean overlap between two valid paths drawn uniformly, and the
    mean overlap of a sample with the dataset reference.
    """
    import random

    from rredcot.data.synthetic import Program, path_overlap, step_forms

    rng = random.Random(rng_seed)
    distinct, valid, two_paths, with_reference = [], [], [], []
    for program, samples, reference in zip(programs, responses, references, strict=True):
        prog = Program.from_json(program)
        distinct.append(len({tuple(step_forms(r)) for r in samples}))
        valid.append(prog.path_count())
        a, b = prog.path_text(prog.random_path(rng)), prog.path_text(prog.random_path(rng))
        two_paths.append(path_overlap(a, b))
        if reference is not None:
            with_reference += [path_overlap(reference, r) for r in samples]
    n = len(distinct)
    return {
        "path_problems": n,
        "path_samples": len(responses[0]) if n else 0,
        "distinct_paths_mean": sum(distinct) / n if n else math.nan,
        "multi_path_share": sum(d > 1 for d in distinct) / n if n else math.nan,
        "valid_paths_mean": sum(valid) / n if n else math.nan,
        "overlap_two_valid_paths": sum(two_paths) / n if n else math.nan,
        "overlap_sample_dataset": (
            sum(with_reference) / len(with_reference) if with_reference else math.nan
        ),
    }


def error_char(response: str, error_start: int | None) -> int | None:
    """The character whose segment holds the first error: the offending line's first character.

    A response that ends before the erroneous step (span (len, len)) points at its last
    character: stopping there is where it went wrong. None when there is no error or no text.
    """
    if error_start is None or not response:
        return None
    return min(int(error_start), len(response) - 1)


__all__ = [
    "select_study_set",
    "wilson_interval",
    "OVERLAP_BINS",
    "overlap_bin",
    "path_statistics",
    "with_reference_kinds",
    "STAT_COLUMNS",
    "TRACE_COLUMNS",
    "error_char",
    "sample_traces",
    "token_statistics",
    "token_texts",
]
