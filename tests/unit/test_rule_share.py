"""`training.rule_share`: the dose of issue 43's design (docs/attribution.md), the share of the
RL problems on which the misconception's rule applies, on one frozen base."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rredcot.data.misconceptions import Misconception, rule_share_selection
from rredcot.data.programs import Program, Step
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.tasks import get_task
from rredcot.training.run import training_rows
from rredcot.training.settings import TrainingSettings

RULE = {"rule": "smaller_from_larger", "rate": 0.8}


def test_selection_by_hand() -> None:
    applies = [True, False, True, True, False, True]  # 4 rule problems, 2 others
    assert rule_share_selection(applies, 1.0) == [0, 2, 3, 5]
    assert rule_share_selection(applies, 0.0) == [1, 4]
    # 0.5: n = min(4 / 0.5, 2 / 0.5) = 4, the first two of each pool, in the problems' order
    assert rule_share_selection(applies, 0.5) == [0, 1, 2, 4]
    # 0.75: n = min(4 / 0.75, 2 / 0.25) = 5, k = 4 rule problems and 1 other
    assert rule_share_selection(applies, 0.75) == [0, 1, 2, 3, 5]
    with pytest.raises(ValueError, match="no problem to keep"):
        rule_share_selection([True, True], 0.0)
    with pytest.raises(ValueError, match="training.rule_share"):
        rule_share_selection(applies, 1.5)


@given(st.lists(st.booleans(), min_size=1, max_size=60), st.sampled_from([0.0, 0.25, 0.5, 1.0]))
def test_the_kept_subset_has_the_stated_share(applies, share) -> None:
    rule, other = sum(applies), len(applies) - sum(applies)
    if (share > 0 and rule == 0) or (share < 1 and other == 0):
        return  # a pool the share needs is empty (an error or an empty subset; by hand above)
    keep = rule_share_selection(applies, share)
    kept_rule = sum(applies[i] for i in keep)
    assert keep == sorted(set(keep))
    assert abs(kept_rule - share * len(keep)) <= 0.5  # the share, up to rounding one problem
    # as many as the pools allow at that share
    n = rule if share == 1 else other if share == 0 else int(min(rule / share, other / (1 - share)))
    assert len(keep) == n and kept_rule <= rule and len(keep) - kept_rule <= other


def test_training_rows_keep_the_share_of_rule_problems() -> None:
    """d = a − b with a < b: the rule applies (problem r); d = a + b: it does not (problem n)."""

    def program(op: str, a: int, b: int) -> Program:
        return Program(10, (("a", a), ("b", b)), (Step("d", "a", op, "b"),))

    programs = [program("-", 1, 2), program("+", 1, 2), program("-", 3, 9), program("+", 4, 5)]
    table = pl.DataFrame(
        {
            "id": ["r1", "n1", "r2", "n2"],
            "problem": ["p"] * 4,
            "answer": [str(p.answer) for p in programs],
            "solution": ["s"] * 4,
            "program": [p.to_json() for p in programs],
        }
    )
    tokenizer, task = build_byte_tokenizer(), get_task("synthetic")
    kept = lambda share: [  # noqa: E731
        r["problem_id"]
        for r in training_rows(
            table, task, tokenizer, TrainingSettings(rule_share=share, misconception=RULE)
        )[0].to_list()
    ]
    assert kept(1.0) == ["r1", "r2"] and kept(0.0) == ["n1", "n2"]
    assert kept(0.5) == ["r1", "n1", "r2", "n2"]
    with pytest.raises(ValueError, match="misconception"):
        TrainingSettings(rule_share=0.5)
    with pytest.raises(ValueError, match="program"):
        training_rows(
            table.drop("program"), task, tokenizer,
            TrainingSettings(rule_share=0.5, misconception=RULE),
        )  # fmt: skip
    assert Misconception(**RULE).value("-", 1, 2, 10) is not None
