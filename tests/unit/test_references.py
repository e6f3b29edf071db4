"""Reference solutions: dataset first when it verifies, sampled only when needed, gaps listed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import polars as pl
import pytest
import torch

from rredcot.credit.references import (
    ReferenceReport,
    build_references,
    compose_reference,
    reference_reasoning,
)
from rredcot.data.synthetic import WorldConfig, generate_split
from rredcot.generation import Completion, SamplingParams, derive_seed
from rredcot.generation.hf import HFBackend
from rredcot.tasks import get_task

SYNTH = get_task("synthetic")
MATH = get_task("math")
OPTIONS = {"attempts": 2, "samples_per_attempt": 3, "max_new_tokens": 64, "temperature": 1.0}


class ScriptedBackend:
    """Call c answers prompt p with script[c][p] (a list of (text, finish_reason))."""

    def __init__(self, script: list[dict[str, list[tuple[str, str]]]]) -> None:
        self.script = script
        self.calls: list[tuple[list[str], SamplingParams]] = []

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Completion]:
        answers = self.script[len(self.calls)]
        self.calls.append((list(prompts), params))
        out = []
        for p, prompt in enumerate(prompts):
            assert len(answers[prompt]) == params.n
            for s, (text, reason) in enumerate(answers[prompt]):
                ids = list(text.encode())
                out.append(Completion(p, s, text, ids, reason, len(ids)))
        return out


@pytest.fixture()
def problems() -> pl.DataFrame:
    """Five synthetic problems; rows 1–4 get their solution or answer spoiled."""
    df = generate_split(
        5,
        [2],
        seed=0,
        split="train",
        config=WorldConfig(chain="any", shape="chain", avoid_misconception=None),
    )
    solutions = df["solution"].to_list()
    answers = df["answer"].to_list()
    wrong = str((int(answers[1]) + 1) % 10)
    solutions[1] = solutions[1].rpartition("Answer: ")[0] + f"Answer: {wrong}."  # does not verify
    solutions[2] = None  # no dataset solution
    solutions[3] = ""  # empty: not usable
    answers[4] = ""  # no gold answer: nothing can be verified
    return df.with_columns(
        pl.Series("solution", solutions, dtype=pl.String()),
        pl.Series("answer", answers, dtype=pl.String()),
    )


def _wrong(gold: str) -> str:
    return f"x=1\nAnswer: {(int(gold) + 1) % 10}."


def _script(df: pl.DataFrame) -> list[dict[str, list[tuple[str, str]]]]:
    rows = df.to_dicts()
    p = [SYNTH.build_prompt(r["problem"]) for r in rows]
    gold = [r["answer"] for r in rows]
    first_verified = f"y=2\nAnswer: {gold[1]}."  # verifies (only the answer line is graded)
    attempt0 = {
        p[1]: [(_wrong(gold[1]), "stop"), (first_verified, "stop"), (rows[0]["solution"], "stop")],
        p[2]: [(_wrong(gold[2]), "stop")] * 3,
        p[3]: [(_wrong(gold[3]), "stop")] * 3,
    }
    attempt1 = {
        # A correct answer cut by the budget is no solution; the finished one is kept.
        p[2]: [(f"z=3\nAnswer: {gold[2]}.", "length"), (f"w=4\nAnswer: {gold[2]}", "stop")]
        + [(_wrong(gold[2]), "stop")],
        p[3]: [(_wrong(gold[3]), "length")] * 3,
    }
    return [attempt0, attempt1]


def test_selection_attempts_and_report(problems: pl.DataFrame) -> None:
    backend = ScriptedBackend(_script(problems))
    out, report = build_references(problems, SYNTH, backend, seed=5, **OPTIONS)
    rows, gold = out.to_dicts(), problems["answer"].to_list()

    assert out.columns == [*problems.columns, "reference", "reference_source", "reference_attempts"]
    assert out.select(problems.columns).equals(problems)  # nothing else changed, order kept
    # Row 0: the dataset solution verifies, so it is the reference and nothing is sampled.
    assert rows[0]["reference_source"] == "dataset"
    assert rows[0]["reference"] == problems["solution"][0]
    assert rows[0]["reference_attempts"] == 0
    # Row 1: wrong dataset answer; attempt 0 has two verified samples: the first one is kept.
    assert rows[1]["reference_source"] == "sampled"
    assert rows[1]["reference"] == f"y=2\nAnswer: {gold[1]}."
    assert rows[1]["reference_attempts"] == 3
    # Row 2: no solution; attempt 1's truncated correct sample is skipped, the finished kept,
    # and its missing "." is written as the task's close.
    assert rows[2]["reference_source"] == "sampled"
    assert rows[2]["reference"] == f"w=4\nAnswer: {gold[2]}."
    assert rows[2]["reference_attempts"] == 6
    # Row 3: nothing verifies in two attempts; row 4: no gold answer, never sampled.
    assert rows[3]["reference"] is None and rows[3]["reference_source"] is None
    assert rows[3]["reference_attempts"] == 6
    assert rows[4]["reference"] is None and rows[4]["reference_attempts"] == 0

    ids = problems["id"].to_list()
    assert isinstance(report, ReferenceReport)
    assert report.counts == {"dataset": 1, "sampled": 2, "none": 2}
    assert report.coverage == pytest.approx(3 / 5) and report.n_with_reference == 3
    assert report.missing_ids == [ids[3], ids[4]]
    assert "6 sampled responses" in report.missing[ids[3]]
    assert "no gold" in report.missing[ids[4]]
    assert report.sampled_responses == 15
    assert report.to_dict()["missing_ids"] == [ids[3], ids[4]]

    # Sampling only for the problems that need it, one generate call per attempt.
    p = [SYNTH.build_prompt(q) for q in problems["problem"].to_list()]
    assert [prompts for prompts, _ in backend.calls] == [[p[1], p[2], p[3]], [p[2], p[3]]]
    params = [params for _, params in backend.calls]
    assert [sp.seed for sp in params] == [derive_seed(5, 0), derive_seed(5, 1)]
    assert all(sp.n == 3 and sp.max_new_tokens == 64 for sp in params)
    assert all(sp.stop_strings == SYNTH.stop_strings for sp in params)


def test_no_backend_samples_nothing_and_lists_the_rest(problems: pl.DataFrame) -> None:
    out, report = build_references(problems, SYNTH, None, seed=0, **OPTIONS)
    assert out["reference_source"].to_list() == ["dataset", None, None, None, None]
    assert out["reference_attempts"].to_list() == [0] * 5
    ids = problems["id"].to_list()
    assert report.missing_ids == ids[1:]
    assert "sampling disabled" in report.missing[ids[1]]
    assert report.sampled_responses == 0


def test_attempts_stop_once_every_problem_has_one(problems: pl.DataFrame) -> None:
    ok = problems.head(1)
    backend = ScriptedBackend([])
    out, report = build_references(ok, SYNTH, backend, seed=0, **OPTIONS)
    assert backend.calls == [] and report.coverage == 1.0 and report.missing == {}


def test_synthetic_dataset_solutions_are_their_own_references() -> None:
    df = generate_split(
        20,
        [2, 3, 5],
        seed=1,
        split="train",
        config=WorldConfig(chain="any", shape="chain", avoid_misconception=None),
    )
    out, report = build_references(df, SYNTH, None, seed=0, **OPTIONS)
    assert report.counts["dataset"] == 20 and report.coverage == 1.0
    assert out["reference"].to_list() == df["solution"].to_list()
    for row in out.to_dicts():
        assert reference_reasoning(SYNTH, row["reference"]) == SYNTH.reference_reasoning(row)
        assert SYNTH.grade(row["reference"], row["answer"]).correct


def test_math_dataset_solution_used_when_its_last_box_verifies() -> None:
    df = pl.DataFrame(
        {
            "id": ["m0", "m1", "m2"],
            "problem": ["What is 1/2 + 1/2?", "What is 2+2?", "What is 3+3?"],
            "answer": ["1", "4", "6"],
            "solution": [
                "We add: $\\frac12+\\frac12 = \\boxed{1}$.",
                "First $\\boxed{3}$, no: 2+2 is $\\boxed{5}$.",  # last box is wrong
                None,
            ],
            "source": ["t", "t", "t"],
        }
    )
    out, report = build_references(df, MATH, None, seed=0, **OPTIONS)
    assert out["reference_source"].to_list() == ["dataset", None, None]
    assert out["reference"][0] == (
        "We add: $\\frac12+\\frac12 = \\boxed{1}$.\n\nFinal answer: \\boxed{1}"
    )
    assert report.missing_ids == ["m1", "m2"]


# --- the reference text ------------------------------------------------------------------------


def test_compose_reference() -> None:
    assert compose_reference(SYNTH, "a=1\nAnswer: 3.", "3") == "a=1\nAnswer: 3."
    assert compose_reference(SYNTH, "a=1\nAnswer: 3", " 3 ") == "a=1\nAnswer: 3."
    assert compose_reference(SYNTH, "a=1\nAnswer: 2.\nAnswer: 3.", "3") == (
        "a=1\nAnswer: 2.\nAnswer: 3."  # only the last answer line is replaced
    )
    assert compose_reference(SYNTH, "Answer: 3.", "3") == "Answer: 3.\nAnswer: 3."  # no trigger
    assert compose_reference(SYNTH, "\nAnswer: 3.", "3") is None  # blank U*
    assert compose_reference(MATH, "So $\\boxed{2}$.", "2") == (
        "So $\\boxed{2}$.\n\nFinal answer: \\boxed{2}"
    )
    ref = compose_reference(MATH, "x\n\nFinal answer: \\boxed{\\dfrac12} done", "\\frac{1}{2}")
    assert ref == "x\n\nFinal answer: \\boxed{\\frac{1}{2}}"
    assert reference_reasoning(MATH, ref) == "x"
    with pytest.raises(ValueError, match="answer trigger"):
        reference_reasoning(SYNTH, "no trigger here")


# --- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"attempts": -1}, "attempts"),
        ({"samples_per_attempt": 0}, "samples_per_attempt"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"temperature": -1.0}, "temperature"),
        ({"seed": -2}, "seed"),
    ],
)
def test_bad_options(problems: pl.DataFrame, options: dict, match: str) -> None:
    kwargs = OPTIONS | {"seed": 0} | options
    with pytest.raises(ValueError, match=match):
        build_references(problems, SYNTH, None, **kwargs)


def test_bad_tables(problems: pl.DataFrame) -> None:
    with pytest.raises(ValueError, match="lacks column"):
        build_references(problems.drop("solution"), SYNTH, None, seed=0, **OPTIONS)
    with pytest.raises(ValueError, match="duplicate id"):
        build_references(pl.concat([problems, problems]), SYNTH, None, seed=0, **OPTIONS)
    done, _ = build_references(problems, SYNTH, None, seed=0, **OPTIONS)
    with pytest.raises(ValueError, match="already has"):
        build_references(done, SYNTH, None, seed=0, **OPTIONS)


# --- a tiny random Qwen3 as the policy ---------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_backend(tiny_checkpoint: Callable[..., Path]) -> HFBackend:
    path = tiny_checkpoint("ref_qwen3")
    return HFBackend.from_pretrained(str(path), batch_size=16, show_progress=False, device="cpu")


def test_tiny_policy_attempts_counted_and_reproducible(
    tiny_backend: HFBackend, problems: pl.DataFrame
) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        options = {"attempts": 2, "samples_per_attempt": 2, "max_new_tokens": 8, "temperature": 1}
        first, report = build_references(problems, SYNTH, tiny_backend, seed=3, **options)
        again, _ = build_references(problems, SYNTH, tiny_backend, seed=3, **options)
    finally:
        torch.set_num_threads(threads)
    assert first.equals(again)
    # A random model never writes a verified solution in 8 bytes: rows 1–3 use both attempts.
    assert first["reference_attempts"].to_list() == [0, 4, 4, 4, 0]
    assert report.counts == {"dataset": 1, "sampled": 0, "none": 4}


def test_the_oracle_prompt_puts_the_reference_before_the_tasks_prompt_end() -> None:
    """O = "Reference solution:" ⊕ the reference text goes after the problem, before what the
    task writes after it (math: the instruction and the chat turn's end); a prompt written
    another way gets it appended."""
    from rredcot.credit.references import ORACLE_HEADER, oracle_prompt
    from rredcot.models.tokenizer import build_chat_tokenizer

    tokenizer, task = build_chat_tokenizer(), get_task("math")
    reference = compose_reference(task, "Add them: $2 + 3 = 5$.", "5")
    prompt = task.build_prompt("What is 2 + 3?", tokenizer)
    oracle = oracle_prompt(task, tokenizer, prompt, reference)
    assert oracle == task.build_prompt("What is 2 + 3?" + ORACLE_HEADER + reference, tokenizer)
    assert oracle.endswith("<|im_start|>assistant\n") and oracle.count("<|im_start|>") == 2
    assert oracle_prompt(task, tokenizer, "Q: 2 + 3?", reference) == (
        "Q: 2 + 3?" + ORACLE_HEADER + reference
    )
    with pytest.raises(ValueError, match="answer trigger"):
        oracle_prompt(task, tokenizer, prompt, "5")
