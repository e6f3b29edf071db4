"""The rule-aware checker oracle (`oracle_rule`): one line accuracy per line kind, by hand."""

from __future__ import annotations

import pytest
from misconception_world import PROGRAM, RIGHT, RULE, SLIP, SYSTEMATIC

from rredcot.credit.oracle import kind_accuracy, kind_values, step_kinds, written_kinds
from rredcot.data.checker import check_response
from rredcot.training.method_settings import MethodSettings
from rredcot.training.methods.oracle_rule import OracleRuleMethod
from rredcot.workflow.run_params import run_settings


def test_step_kinds_and_written_kinds() -> None:
    kinds = step_kinds(PROGRAM, RULE)
    assert kinds == {"d": "rule", "e": "step"}
    assert written_kinds(RIGHT, kinds, 3) == ["rule", "step", "answer"]
    # the written order decides; a line naming no step counts as a step; missing lines too
    assert written_kinds("e=d+c=9+4=3\nd=a-b=1-2=9\nAnswer: 3.", kinds, 3) == [
        "step",
        "rule",
        "answer",
    ]
    assert written_kinds("garbage", kinds, 3) == ["step", "step", "answer"]


def test_kind_accuracy_by_hand() -> None:
    """A right: every kind 1/1. B wrong at line 1 (rule): rule 0/1. C wrong at line 3 (the
    answer), kinds [step, rule, answer]: step 1/1, rule 1/1, answer 0/1. So rule 2/3, step 2/2,
    answer 1/2."""
    p = kind_accuracy(
        [None, 1, 3],
        [["rule", "step", "answer"], ["rule", "step", "answer"], ["step", "rule", "answer"]],
    )
    assert p == pytest.approx({"rule": 2 / 3, "step": 1.0, "answer": 0.5})
    # a kind nobody attempted takes the pooled accuracy: 1 right of 2 lines
    assert kind_accuracy([2], [["step", "step", "answer"]]) == pytest.approx(
        {"rule": 0.5, "step": 0.5, "answer": 0.5}
    )
    with pytest.raises(ValueError, match="not a line"):
        kind_accuracy([4], [["rule", "step", "answer"]])


def test_kind_values_by_hand() -> None:
    totals = {"rule": 1, "step": 1, "answer": 1}
    p = {"rule": 0.5, "step": 0.9, "answer": 0.8}
    kinds = ["rule", "step", "answer"]
    # before anything: all three lines left; after the rule step: the step and the answer ...
    assert kind_values([0, 1, 2, 3], None, kinds, totals, p) == pytest.approx(
        [0.5 * 0.9 * 0.8, 0.9 * 0.8, 0.8, 1.0]
    )
    # ... and 0 from the first wrong line on
    assert kind_values([0, 1, 2], 1, kinds, totals, p) == pytest.approx([0.36, 0.0, 0.0])
    # written in the other order, the risky rule step is still ahead after line 1
    assert kind_values([1], None, ["step", "rule", "answer"], totals, p) == pytest.approx(
        [0.5 * 0.8]
    )


def test_the_method_values_each_state_by_the_kinds_left() -> None:
    """Three responses to PROGRAM: right; the misconception at line 1; a slip at line 2.
    p̂: rule 2/3 (right, wrong, right), step 1/2 (right, —, wrong), answer 1/1."""
    method = OracleRuleMethod(None, None, [0], misconception=RULE)
    texts = [RIGHT, SYSTEMATIC, SLIP]
    checks = [check_response(PROGRAM, t) for t in texts]
    assert [c.first_error for c in checks] == [None, 1, 2]
    rows = [{"program": PROGRAM.to_json()}] * 3
    written = [[0, 1, 2, 3]] * 3
    values, metrics = method.state_values(rows, texts, checks, written)
    rule, step = 2 / 3, 1 / 2
    assert metrics == pytest.approx(
        {
            "credit/oracle_rule_accuracy": rule,
            "credit/oracle_step_accuracy": step,
            "credit/oracle_answer_accuracy": 1.0,
        }
    )
    assert values[0] == pytest.approx([rule * step, step, 1.0, 1.0])
    assert values[1] == pytest.approx([rule * step, 0.0, 0.0, 0.0])
    assert values[2] == pytest.approx([rule * step, step, 0.0, 0.0])


def test_the_misconception_reaches_only_the_methods_that_read_it() -> None:
    config = {
        "training": {"credit": {}, "variants": []},
        "estimator": {"rredcot": {}, "mc": {}},
        "segmentation": {},
        "sft": {"misconception": {"rule": "smaller_from_larger", "rate": 0.8}},
    }
    got = run_settings(config, "oracle_rule", 1, task="synthetic")
    assert got["misconception"] == {"rule": "smaller_from_larger", "rate": 0.8}
    assert "misconception" not in run_settings(config, "oracle_step", 1, task="synthetic")
    with pytest.raises(ValueError, match="training.misconception"):
        OracleRuleMethod.from_settings(MethodSettings(), None, None, [0])
    built = OracleRuleMethod.from_settings(
        MethodSettings(misconception={"rule": "smaller_from_larger", "rate": 0.8}), None, None, [0]
    )
    assert built.misconception == RULE
