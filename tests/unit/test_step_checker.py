"""The per-step checker: first wrong step, its kind and its span, on hand-written responses."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rredcot.data import synthetic as synthetic_world
from rredcot.data.synthetic import ANSWER_CLOSE, OPS, Program, Step, WorldConfig, draw_program
from rredcot.tasks.synthetic import StepCheck, SyntheticTask, check_response

# a=3, b=8; c=a+b=1, d=c*a=3, e=d-b=5 (mod 10)
PROGRAM = Program(
    10,
    (("a", 3), ("b", 8)),
    (Step("c", "a", "+", "b"), Step("d", "c", "*", "a"), Step("e", "d", "-", "b")),
)
PROGRAM_JSON = PROGRAM.to_json()
C, D, E = "c=a+b=3+8=1", "d=c*a=1*3=3", "e=d-b=3-8=5"
GOOD = f"{C}\n{D}\n{E}\nAnswer: 5."


def span_text(response: str, chk: StepCheck) -> str:
    assert chk.first_error_span is not None
    start, end = chk.first_error_span
    return response[start:end]


def test_reference_solution_is_the_hand_written_one() -> None:
    assert PROGRAM.solution_text() == GOOD
    assert PROGRAM.answer == "5"


@pytest.mark.parametrize(
    "response",
    [
        GOOD,
        GOOD + "\n",
        f"{C}  \n{D}\t\n{E}\r\nAnswer: 5.  \n\n",  # trailing blanks only
        f"{C}\n{D}\n{E}\nAnswer: 5",  # close dropped by the backend's stop handling
    ],
)
def test_correct_response(response: str) -> None:
    chk = check_response(PROGRAM_JSON, response)
    assert chk == StepCheck(None, 3, True, None, None)
    assert chk.correct


def test_task_module_re_exports_the_world_checker() -> None:
    assert check_response is synthetic_world.check_response
    assert SyntheticTask().check_response(PROGRAM_JSON, GOOD) == check_response(PROGRAM, GOOD)


def test_program_may_be_json_dict_or_program() -> None:
    for program in (PROGRAM_JSON, json.loads(PROGRAM_JSON), PROGRAM):
        assert check_response(program, GOOD).first_error is None


@pytest.mark.parametrize(
    ("response", "first_error", "kind", "bad_line"),
    [
        (f"c=a+b=3+8=2\n{D}\n{E}\nAnswer: 5.", 1, "wrong_value", "c=a+b=3+8=2"),
        (f"{C}\nd=c*a=1*3=4\ne=d-b=4-8=6\nAnswer: 6.", 2, "wrong_value", "d=c*a=1*3=4"),
        (f"{C}\n{D}\ne=d-b=3-8=4\nAnswer: 4.", 3, "wrong_value", "e=d-b=3-8=4"),
        (f"{C}\nd=c*a=2*3=6\n{E}\nAnswer: 5.", 2, "wrong_substitution", "d=c*a=2*3=6"),
        (f"{C}\nd=c+a=1+3=4\n{E}\nAnswer: 5.", 2, "wrong_step", "d=c+a=1+3=4"),
        (f"{C}\n{D}\ne=b-d=8-3=5\nAnswer: 5.", 3, "wrong_step", "e=b-d=8-3=5"),  # - commutes not
        (f"{C}\n{C}\n{D}\n{E}\nAnswer: 5.", 2, "wrong_step", C),  # a step computed twice
        (f"{D}\n{C}\n{E}\nAnswer: 5.", 1, "wrong_step", D),  # d needs c: not a valid order
        (f"{C}\nd=c*a=1*3=03\n{E}\nAnswer: 5.", 2, "wrong_value", "d=c*a=1*3=03"),
        (f"{C}\n d=c*a=1*3=3\n{E}\nAnswer: 5.", 2, "malformed", " d=c*a=1*3=3"),
        (f"{C}\n\n{D}\n{E}\nAnswer: 5.", 2, "malformed", ""),  # blank line between steps
        (f"{C}\nd=c*", 2, "malformed", "d=c*"),  # cut inside a line
        (f"{C}\nAnswer: 5.", 2, "malformed", "Answer: 5."),  # answered too early
        (f"{C}\n{D}\n{E}\nAnswer: 4.", 4, "wrong_answer", "Answer: 4."),
        (f"{C}\n{D}\n{E}\nAnswer: 55.", 4, "wrong_answer", "Answer: 55."),
        (f"{C}\n{D}\n{E}\nf=e+a=5+3=8\nAnswer: 8.", 4, "malformed", "f=e+a=5+3=8"),
        (f"{C}\n{D}\n{E}\nAnswer: 5.\nmore", 4, "trailing_text", "more"),
        ("hello world", 1, "malformed", "hello world"),
        ("c=a+b=3+8=1 because 3+8=11", 1, "malformed", "c=a+b=3+8=1 because 3+8=11"),
    ],
)
def test_first_error_kind_and_span(
    response: str, first_error: int, kind: str, bad_line: str
) -> None:
    chk = check_response(PROGRAM_JSON, response)
    assert (chk.first_error, chk.error_kind, chk.n_steps) == (first_error, kind, 3)
    assert span_text(response, chk) == bad_line
    if kind != "trailing_text":  # the span is the erroneous step's own line
        assert response.count("\n", 0, chk.first_error_span[0]) == first_error - 1


@pytest.mark.parametrize(
    ("response", "first_error"),
    [("", 1), (f"{C}\n", 2), (f"{C}\n{D}", 3), (f"{C}\n{D}\n  ", 3), (f"{C}\n{D}\n{E}", 4)],
)
def test_missing_step_points_at_end_of_text(response: str, first_error: int) -> None:
    chk = check_response(PROGRAM_JSON, response)
    assert (chk.first_error, chk.error_kind) == (first_error, "missing")
    assert chk.first_error_span == (len(response), len(response))
    assert not chk.answer_correct


def test_answer_correct_is_independent_of_the_steps() -> None:
    lucky = f"c=a+b=3+8=2\n{D}\n{E}\nAnswer: 5."
    chk = check_response(PROGRAM_JSON, lucky)
    assert chk.first_error == 1 and chk.answer_correct
    wrong = check_response(PROGRAM_JSON, f"{C}\n{D}\n{E}\nAnswer: 4.")
    assert wrong.first_error == 4 and not wrong.answer_correct


@st.composite
def programs(draw: st.DrawFn) -> Program:
    modulus = draw(st.integers(2, 120))
    n_given = draw(st.integers(1, 4))
    ops = draw(st.lists(st.sampled_from(OPS), min_size=1, max_size=3, unique=True))
    depth = draw(st.integers(1, 9))
    config = WorldConfig(
        modulus=modulus,
        n_given=n_given,
        ops=tuple(ops),
        chain="any",
        shape="chain",
        avoid_misconception=None,
    )
    return draw_program(random.Random(draw(st.integers(0, 2**32))), depth, config)


@settings(max_examples=150, deadline=None)
@given(prog=programs(), data=st.data())
def test_reference_is_correct_and_corrupting_step_i_gives_first_error_i(
    prog: Program, data: st.DataObject
) -> None:
    solution = prog.solution_text()
    program = prog.to_json()
    assert check_response(program, solution) == StepCheck(None, prog.depth, True, None, None)

    i = data.draw(st.integers(1, prog.depth), label="step")
    lines = solution.split("\n")
    head, _, value = lines[i - 1].rpartition("=")
    delta = data.draw(st.integers(1, prog.modulus - 1), label="delta")
    lines[i - 1] = f"{head}={(int(value) + delta) % prog.modulus}"
    corrupted = "\n".join(lines)
    chk = check_response(program, corrupted)
    assert (chk.first_error, chk.error_kind) == (i, "wrong_value")
    assert span_text(corrupted, chk) == lines[i - 1]


@settings(max_examples=60, deadline=None)
@given(prog=programs())
def test_every_truncation_errs_at_the_line_it_cuts(prog: Program) -> None:
    solution = prog.solution_text()
    program = prog.to_json()
    for p in range(len(solution) + 1):
        cut = solution[:p]
        chk = check_response(program, cut)
        if p >= len(solution) - len(ANSWER_CLOSE):
            assert chk.first_error is None  # only the close is missing
        else:
            line_complete = solution[p] == "\n"  # then the next line is missing
            assert chk.first_error == cut.count("\n") + 1 + line_complete
        assert chk.first_error is not None or chk.answer_correct


def test_every_commuted_path_passes_and_a_wrong_value_on_it_is_found() -> None:
    # c = a+b and d = c*a commute: four valid paths; e = d-b does not.
    assert PROGRAM.commutable_steps() == ("c", "d")
    paths = [(), ("c",), ("d",), ("c", "d")]
    texts = [PROGRAM.solution_text(commuted=p) for p in paths]
    assert len(set(texts)) == 4
    assert texts[3] == "c=b+a=8+3=1\nd=a*c=3*1=3\ne=d-b=3-8=5\nAnswer: 5."
    for text in texts:
        assert check_response(PROGRAM_JSON, text).first_error is None
    wrong = "c=b+a=8+3=1\nd=a*c=3*1=4\ne=d-b=4-8=6\nAnswer: 6."
    chk = check_response(PROGRAM_JSON, wrong)
    assert (chk.first_error, chk.error_kind) == (2, "wrong_value")
    swapped_values = "c=b+a=3+8=1\nd=c*a=1*3=3\ne=d-b=3-8=5\nAnswer: 5."  # names swapped only
    chk = check_response(PROGRAM_JSON, swapped_values)
    assert (chk.first_error, chk.error_kind) == (1, "wrong_substitution")
    with pytest.raises(ValueError, match="not commutative"):
        PROGRAM.solution_text(commuted=("e",))


def test_a_valid_reordering_passes_and_a_wrong_value_after_it_is_found() -> None:
    # c and d use given values only, so either may come first; e needs both.
    dag = Program(
        10,
        (("a", 3), ("b", 8)),
        (Step("c", "a", "+", "b"), Step("d", "b", "-", "a"), Step("e", "c", "*", "d")),
    )
    c, d, e = "c=a+b=3+8=1", "d=b-a=8-3=5", "e=c*d=1*5=5"
    for order in ([c, d, e], [d, c, e], [d, c, "e=d*c=5*1=5"]):
        assert check_response(dag, "\n".join([*order, "Answer: 5."])).first_error is None
    chk = check_response(dag, f"{d}\nc=a+b=3+8=2\ne=c*d=2*5=0\nAnswer: 0.")
    assert (chk.first_error, chk.error_kind) == (2, "wrong_value")
    chk = check_response(dag, f"{d}\n{e}\n{c}\nAnswer: 5.")
    assert (chk.first_error, chk.error_kind) == (2, "wrong_step")  # c is not known yet
