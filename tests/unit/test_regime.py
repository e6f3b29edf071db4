"""The regime table (rredcot.evaluation.regime): greedy and T = 1 pass@1, luck and systematic
share on hand-made responses of two problems, graded by the real grader and checker."""

from __future__ import annotations

import polars as pl
import pytest

from rredcot.data.misconceptions import Misconception, rule_applies
from rredcot.data.programs import Program, Step
from rredcot.evaluation.grading import grade_generations
from rredcot.evaluation.regime import PolicyEvaluation, regime_row, regime_table
from rredcot.tasks import get_task

# p: f = a − c = 2 − 3 is a borrow (right 9, the misconception writes 1); q: no borrow anywhere
P = Program(
    10,
    (("a", 2), ("b", 7), ("c", 3)),
    (Step("d", "a", "-", "b"), Step("e", "c", "-", "a"), Step("f", "a", "-", "c")),
)
Q = Program(10, (("a", 5), ("b", 3)), (Step("c", "a", "-", "b"), Step("d", "c", "+", "a")))
PROBLEMS = pl.DataFrame(
    {
        "id": ["p", "q"],
        "problem": ["", ""],
        "answer": [P.answer, Q.answer],
        "program": [P.to_json(), Q.to_json()],
    }
)
TEXTS = {
    ("p", "right"): "d=a-b=2-7=5\ne=c-a=3-2=1\nf=a-c=2-3=9\nAnswer: 9.",
    ("p", "systematic"): "d=a-b=2-7=5\ne=c-a=3-2=1\nf=a-c=2-3=1\nAnswer: 1.",
    ("p", "lucky"): "d=a-b=2-7=6\ne=c-a=3-2=1\nf=a-c=2-3=9\nAnswer: 9.",  # first step wrong
    ("q", "right"): "c=a-b=5-3=2\nd=c+a=2+5=7\nAnswer: 7.",
    ("q", "other"): "c=a-b=5-3=3\nd=c+a=3+5=8\nAnswer: 8.",
}
RULE = Misconception("smaller_from_larger", 0.8)


def responses(method: str, seed: int, kinds: dict[str, list[str]]) -> tuple[pl.DataFrame, ...]:
    """Generations of one policy (per problem, one kind per sample) and their grades."""
    rows = [(pid, i, TEXTS[pid, kind]) for pid, ks in kinds.items() for i, kind in enumerate(ks)]
    generations = pl.DataFrame(
        {
            "problem_id": [r[0] for r in rows],
            "sample_index": [r[1] for r in rows],
            "method": [method] * len(rows),
            "seed": [seed] * len(rows),
            "num_tokens": [40] * len(rows),
            "finish_reason": ["stop"] * len(rows),
            "text": [r[2] for r in rows],
        }
    )
    grades = grade_generations(generations, PROBLEMS, get_task("synthetic"), show_progress=False)
    return grades, generations


def policy(method: str, seed: int, t1: dict, greedy: dict) -> PolicyEvaluation:
    return PolicyEvaluation(*responses(method, seed, t1), *responses(method, seed, greedy))


# greedy right on both problems; at T = 1 one right, one lucky, one systematic, one other error
BASE = policy(
    "base",
    0,
    {"p": ["systematic", "lucky"], "q": ["right", "other"]},
    {"p": ["right"], "q": ["right"]},
)
GRPO_1 = policy(
    "grpo",
    1,
    {"p": ["right", "right"], "q": ["right", "right"]},
    {"p": ["systematic"], "q": ["right"]},
)
GRPO_2 = policy(
    "grpo",
    2,
    {"p": ["systematic", "systematic"], "q": ["other", "right"]},
    {"p": ["systematic"], "q": ["other"]},
)


def test_the_grader_and_checker_see_the_hand_made_kinds():
    grades, _ = BASE.t1_grades, BASE.t1_generations
    assert grades["reward"].to_list() == [0.0, 1.0, 1.0, 0.0]
    assert grades["first_error"].to_list() == [3, 1, None, 1]


def test_a_row_of_one_policy_by_hand():
    row = regime_row(BASE, PROBLEMS, RULE, n_resamples=200)
    assert (row["method"], row["seed"], row["n_seeds"], row["n_problems"]) == ("base", "0", 1, 2)
    assert (row["t1_k"], row["greedy_k"]) == (2, 1)
    assert row["t1_pass1"] == pytest.approx(0.5)  # p 1/2, q 1/2
    assert row["t1_luck"] == pytest.approx(0.25)  # p 1/2 (the lucky one), q 0
    assert row["t1_wrong"] == 3  # systematic, lucky and other: the checker finds an error
    assert row["t1_systematic_share"] == pytest.approx(1 / 3)
    # greedy right where T = 1 fails: no error, so no share
    assert (row["greedy_pass1"], row["greedy_luck"], row["greedy_wrong"]) == (1.0, 0.0, 0)
    assert row["greedy_systematic_share"] is None
    assert (row["greedy_pass1_ci95_low"], row["greedy_pass1_ci95_high"]) == (1.0, 1.0)
    assert row["t1_pass1_ci95_low"] <= 0.5 <= row["t1_pass1_ci95_high"]
    assert row["rule_applies_share"] == pytest.approx(0.5)  # p only
    assert row["misconception"] == "smaller_from_larger"


def test_without_a_misconception_the_shares_are_null():
    row = regime_row(BASE, PROBLEMS, None, n_resamples=200)
    assert row["t1_systematic_share"] is None and row["greedy_systematic_share"] is None
    assert row["rule_applies_share"] is None and row["misconception"] == "none"
    assert (row["t1_pass1"], row["t1_luck"], row["t1_wrong"]) == (0.5, 0.25, 3)


def test_the_table_pools_each_method_over_its_seeds():
    table = regime_table([BASE, GRPO_1, GRPO_2], PROBLEMS, RULE, n_resamples=200)
    assert table.select("method", "seed").rows() == [
        ("base", "0"), ("grpo", "1"), ("grpo", "2"), ("base", "all"), ("grpo", "all"),
    ]  # fmt: skip
    rows = {(r["method"], r["seed"]): r for r in table.iter_rows(named=True)}
    one, two, pooled = rows["grpo", "1"], rows["grpo", "2"], rows["grpo", "all"]
    assert (one["t1_pass1"], two["t1_pass1"]) == (1.0, 0.25)
    assert (one["greedy_systematic_share"], two["greedy_systematic_share"]) == (1.0, 0.5)
    assert two["t1_systematic_share"] == pytest.approx(2 / 3)
    assert pooled["n_seeds"] == 2
    assert pooled["t1_pass1"] == pytest.approx(0.625)  # the mean of the seeds
    assert pooled["greedy_pass1"] == pytest.approx(0.25)
    # shares from the pooled counts: 2 of the 3 greedy errors (not the seeds' mean 0.75)
    assert (pooled["greedy_wrong"], pooled["greedy_systematic_share"]) == (3, pytest.approx(2 / 3))
    assert pooled["t1_luck"] == 0.0
    assert pooled["t1_pass1_ci95_low"] <= 0.625 <= pooled["t1_pass1_ci95_high"]
    assert rows["base", "all"]["t1_pass1"] == rows["base", "0"]["t1_pass1"]


def test_mismatched_inputs_are_refused_naming_them():
    grades, generations = responses("base", 0, {"p": ["right"], "q": ["right"]})
    with pytest.raises(ValueError, match="generations"):
        regime_row(
            PolicyEvaluation(grades, generations.head(1), grades, generations), PROBLEMS, RULE
        )
    other = GRPO_1
    mixed = PolicyEvaluation(
        BASE.t1_grades, BASE.t1_generations, other.greedy_grades, other.greedy_generations
    )
    with pytest.raises(ValueError, match="same policy"):
        regime_row(mixed, PROBLEMS, RULE)
    with pytest.raises(ValueError, match="given twice"):
        regime_table([BASE, BASE], PROBLEMS, RULE, n_resamples=10)
    with pytest.raises(ValueError, match="not in the problems table"):
        regime_row(BASE, PROBLEMS.head(1), RULE)


def test_the_rule_applies_where_the_right_solution_has_a_borrow_it_changes():
    assert rule_applies(P, RULE) and not rule_applies(Q, RULE)
