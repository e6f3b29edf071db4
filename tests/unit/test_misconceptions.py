"""Systematic errors in the demonstrations (rredcot.data.misconceptions)."""

from __future__ import annotations

import random
import re

import pytest

from rredcot.data.misconceptions import (
    Misconception,
    misconceived_value,
    misconception_can_reach_answer,
)
from rredcot.data.synthetic import (
    Program,
    SplitSpec,
    Step,
    WorldConfig,
    apply_op,
    check_response,
    draw_program,
    make_world,
    slipped_solution,
    world_config,
)
from rredcot.models.sft_settings import sft_block

# a=2, b=7, c=3: d = a − b = 2 − 7 (a borrow: bug 5 = right 5, the rule does not apply),
# e = c − a = 3 − 2 (no borrow), f = a − c = 2 − 3 (a borrow: right 9, bug 1)
PROGRAM = Program(
    10,
    (("a", 2), ("b", 7), ("c", 3)),
    (Step("d", "a", "-", "b"), Step("e", "c", "-", "a"), Step("f", "a", "-", "c")),
)


def test_the_rule_applies_only_where_it_changes_a_borrow():
    assert misconceived_value("smaller_from_larger", "-", 2, 3, 10) == 1  # right: 9
    assert misconceived_value("smaller_from_larger", "-", 2, 7, 10) is None  # 5 either way
    assert misconceived_value("smaller_from_larger", "-", 3, 2, 10) is None  # no borrow
    assert misconceived_value("smaller_from_larger", "+", 2, 3, 10) is None
    with pytest.raises(ValueError, match="rule"):
        misconceived_value("carry", "-", 2, 3, 10)


def test_a_certain_misconception_writes_the_bug_and_the_checker_finds_it():
    text = slipped_solution(PROGRAM, random.Random(0), 0.0, None, Misconception(rate=1.0))
    assert text == "d=a-b=2-7=5\ne=c-a=3-2=1\nf=a-c=2-3=1\nAnswer: 1."
    check = check_response(PROGRAM, text)
    assert (check.first_error, check.error_kind, check.answer_correct) == (3, "wrong_value", False)


def test_rate_zero_draws_nothing_so_demonstrations_are_unchanged():
    for misconception in (None, Misconception(rate=0.0)):
        rng, again = random.Random(3), random.Random(3)
        slips = [slipped_solution(PROGRAM, rng, 0.3, None, misconception) for _ in range(50)]
        assert slips == [slipped_solution(PROGRAM, again, 0.3) for _ in range(50)]


def test_the_generator_yields_the_stated_share_of_systematic_errors():
    """Over many demonstrations, the steps where the rule applies are written its way at the
    stated rate (within 4 standard errors), the others never: every such error is systematic."""
    rate, world = 0.7, WorldConfig(ops=("-",), chain="any", shape="chain", avoid_misconception=None)
    draw, rng = random.Random(1), random.Random(2)
    applies = bugs = other_errors = 0
    for _ in range(2000):
        prog = draw_program(draw, 3, world)
        text = slipped_solution(prog, rng, 0.0, None, Misconception(rate=rate))
        written = dict(prog.given)
        for line, step in zip(text.split("\n"), prog.steps, strict=False):
            name, x, y, value = re.fullmatch(r"(\w)=\w-\w=(\d)-(\d)=(\d)", line).groups()
            x, y, value = int(x), int(y), int(value)
            assert (x, y) == (written[step.left], written[step.right])
            wrong = misconceived_value("smaller_from_larger", "-", x, y, 10)
            if wrong is not None:
                applies += 1
                bugs += value == wrong
            other_errors += wrong is None and value != apply_op("-", x, y, 10)
            written[name] = value
    share, se = bugs / applies, (rate * (1 - rate) / applies) ** 0.5
    assert applies > 1000 and abs(share - rate) < 4 * se
    assert other_errors == 0


def test_the_sft_block_reads_the_misconception():
    no_anneal = {"anneal_steps": None}  # held-out problems are the anneal's; none here
    _, errors, _ = sft_block({"slip_rate": 0.1, "misconception": {"rate": 0.8}, **no_anneal}, 0, 10)
    assert errors.slip_rate == 0.1 and errors.misconception == Misconception(rate=0.8)
    assert sft_block(no_anneal, 0, 10)[1].misconception is None
    with pytest.raises(ValueError, match=r"sft\.misconception\.rate"):
        sft_block({"misconception": {"rate": 1.5}}, 0, 10)


def test_the_first_error_is_told_systematic_or_other():
    from rredcot.data.error_kinds import first_error_kind

    rule = Misconception()
    right = PROGRAM.solution_text()
    assert first_error_kind(PROGRAM, right, rule) == "correct"
    bug = "d=a-b=2-7=5\ne=c-a=3-2=1\nf=a-c=2-3=1\nAnswer: 1."
    assert first_error_kind(PROGRAM.to_json(), bug, rule) == "systematic"
    slip = "d=a-b=2-7=5\ne=c-a=3-2=4\nf=a-c=2-4=8\nAnswer: 8."  # e is no borrow: a slip
    assert first_error_kind(PROGRAM, slip, rule) == "other"
    other_value = "d=a-b=2-7=5\ne=c-a=3-2=1\nf=a-c=2-3=7\nAnswer: 7."  # a borrow, not the bug
    assert first_error_kind(PROGRAM, other_value, rule) == "other"
    assert first_error_kind(PROGRAM, "d=a-b=2-7=5\n", rule) == "other"  # missing lines


def test_sft_reads_its_transition_against_the_demonstrations_mode():
    """Held-out references: the misconception on every step where it is the mode (rate > 1/2),
    with the tree path's alternatives; at rate ≤ 1/2 (or none) the clean demonstrations."""
    import polars as pl

    from rredcot.data.error_kinds import first_error_kind
    from rredcot.models.sft import demonstrations, heldout_demonstrations, mode_misconception
    from rredcot.models.tokenizer import build_byte_tokenizer
    from rredcot.tasks import get_task

    assert mode_misconception(Misconception(rate=0.7)) == Misconception(rate=1.0)
    assert mode_misconception(Misconception(rate=0.5)) is None and mode_misconception(None) is None
    world, draw = (
        WorldConfig(shape="tree", chain="bijective", avoid_misconception=None),
        random.Random(4),
    )
    progs = [draw_program(draw, 4, world) for _ in range(60)]
    rows = pl.DataFrame(
        {"id": [str(i) for i in range(60)], "problem": [p.problem_text() for p in progs],
         "program": [p.to_json() for p in progs]}
    )  # fmt: skip
    task, tok = get_task("synthetic"), build_byte_tokenizer()
    clean = demonstrations(rows, task, tok, 0.0, 9)
    assert heldout_demonstrations(rows, task, tok, 9, Misconception(rate=0.5)) == clean
    held = heldout_demonstrations(rows, task, tok, 9, Misconception(rate=0.7))
    rule, systematic = Misconception(), 0
    for prog, ex, ref in zip(progs, held, clean, strict=True):
        # the same path as the clean reference, so its alternatives hold
        assert ex["prompt"] == ref["prompt"] and ex["alternatives"] == ref["alternatives"]
        for line in ex["completion"].split("\n")[:-1]:  # no slips; every rule step its way
            op, x, y, value = re.fullmatch(r"\w=\w([-+*])\w=(\d)[-+*](\d)=(\d)", line).groups()
            x, y, value = int(x), int(y), int(value)
            wrong = rule.value(op, x, y, 10)
            assert value == (apply_op(op, x, y, 10) if wrong is None else wrong)
        systematic += first_error_kind(prog, ex["completion"], rule) == "systematic"
    assert systematic > 10  # the rule applies on many of these problems


def _two_subtractions(a: int, b: int, c: int) -> Program:
    """d = a − b, e = c − d (mod 10): the rule can apply at both steps."""
    steps = (Step("d", "a", "-", "b"), Step("e", "c", "-", "d"))
    return Program(10, (("a", a), ("b", b), ("c", c)), steps)


def test_a_second_misconception_can_undo_the_first():
    # a=1, b=7, c=5: right d = 1−7 = 4, e = 5−4 = 1. Misconceived d = 7−1 = 6; then 5−6 has
    # 5 < 6, whose misconception 6−5 = 1 is the right answer again: luck by the rule itself.
    assert misconception_can_reach_answer(_two_subtractions(1, 7, 5), "smaller_from_larger")
    # c=9: misconceived d = 6 gives e = 9−6 = 3 (no borrow, the rule stops) ≠ 5: never right
    assert not misconception_can_reach_answer(_two_subtractions(1, 7, 9), "smaller_from_larger")
    # the right chain alone is not luck: no subtraction, nothing to misconceive
    plus = Program(10, (("a", 1), ("b", 7)), (Step("c", "a", "+", "b"),))
    assert not misconception_can_reach_answer(plus, "smaller_from_larger")


def test_a_world_that_avoids_the_misconception_draws_no_lucky_problem():
    base = dict(modulus=10, n_given=3, chain="bijective", shape="tree")
    spec = SplitSpec(600, [4, 5, 6])

    def lucky(config: WorldConfig) -> int:
        rl = make_world(SplitSpec(50, [2, 3]), {"rl": spec}, 7, config)["rl"]
        return sum(
            misconception_can_reach_answer(Program.from_json(p), "smaller_from_larger")
            for p in rl["program"]
        )

    assert lucky(WorldConfig(**base, avoid_misconception=None)) > 0  # a few percent unfiltered
    assert lucky(WorldConfig(**base, avoid_misconception="smaller_from_larger")) == 0
    with pytest.raises(ValueError, match="avoid_misconception: 'borrow'"):
        WorldConfig(**base, avoid_misconception="borrow")
    assert world_config({"avoid_misconception": "smaller_from_larger"}).avoid_misconception
