"""Graders: boxed extraction, math-verify equivalences, our timeout, threads and processes."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rredcot.tasks import grading
from rredcot.tasks.base import Grade
from rredcot.tasks.grading import exact_match, extract_last_boxed, grade_many, verify_math

# A real hang: sympy tries to evaluate the power tower (no machine finishes it within 1 s).
POWER_TOWER = "9^{9^{9^{9^{9}}}}"

# --- extraction ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so the answer is \\boxed{204}.", "204"),
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("\\boxed{a^{b^{c}}}", "a^{b^{c}}"),
        ("\\fbox{7}", "7"),
        ("\\boxed { 12 }", "12"),
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),  # escaped braces are not group braces
        ("\\boxed{\\left\\{ x \\right.}", "\\left\\{ x \\right."),
        ("Final answer: \\boxed{}", ""),
        ("no box here: 204", None),
        ("\\boxed{\\frac{1}{2}", None),  # truncated: never closes
        ("\\boxed{1} and finally \\boxed{2", None),  # the last box is unbalanced
        ("\\boxedx{3}", None),
    ],
)
def test_extract_last_boxed(text: str, expected: str | None) -> None:
    assert extract_last_boxed(text) == expected


_plain = st.text(alphabet=st.characters(blacklist_characters="{}\\"), max_size=30)


@settings(max_examples=100, deadline=None)
@given(before=_plain, inner=_plain, after=_plain, depth=st.integers(0, 4))
def test_extract_nested_roundtrip(before: str, inner: str, after: str, depth: int) -> None:
    content = "{" * depth + inner + "}" * depth
    text = f"{before}\\boxed{{{content}}}{after}"
    assert extract_last_boxed(text) == content.strip()


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=60))
def test_extract_none_without_box(text: str) -> None:
    if "\\boxed" not in text and "\\fbox" not in text:
        assert extract_last_boxed(text) is None


def test_exact_match() -> None:
    assert exact_match(" 42\n", "42")
    assert not exact_match("42.0", "42")
    assert not exact_match(None, "42")


# --- math-verify ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "gold"),
    [
        ("The answer is \\boxed{204}.", "204"),
        ("\\boxed{0.5}", "\\frac{1}{2}"),
        ("\\boxed{\\frac{1}{2}}", "0.5"),
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "(3,\\frac{\\pi}{2})"),
        ("\\boxed{(3,\\pi/2)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("\\boxed{\\sqrt{117}}", "3\\sqrt{13}"),
        ("\\boxed{4,6}", "6, 4"),
        ("\\boxed{C}", "\\text{(C)}"),
        ("\\boxed{18.90}", "\\$18.90"),
        ("\\boxed{I(0) e^{-t/(RC)}}", "I(0) e^{-\\frac{t}{R C}}\n"),  # Minerva gold, trailing \n
        ("\\boxed{(1,2)}", "1<x<2"),
    ],
)
def test_equivalent_answers_are_correct(response: str, gold: str) -> None:
    grade = verify_math(response, gold)
    assert grade == Grade(True, extract_last_boxed(response), "ok")
    assert grade.reward == 1.0


def test_gold_goes_first() -> None:
    """verify(gold, pred) is asymmetric: a gold relation accepts an interval, not vice versa."""
    assert verify_math("\\boxed{(1,2)}", "1<x<2").correct
    assert not verify_math("\\boxed{1<x<2}", "(1,2)").correct


@pytest.mark.parametrize(
    ("response", "gold"),
    [
        ("\\boxed{205}", "204"),
        ("\\boxed{\\frac{1}{3}}", "0.5"),
        ("\\boxed{(3,\\pi)}", "(3,\\pi/2)"),
    ],
)
def test_wrong_answer(response: str, gold: str) -> None:
    assert verify_math(response, gold) == Grade(False, extract_last_boxed(response), "ok")


def test_no_boxed_answer() -> None:
    assert verify_math("The answer is 204.", "204") == Grade(False, None, "no_answer")
    assert verify_math("\\boxed{}", "204") == Grade(False, "", "no_answer")
    assert verify_math("\\boxed{20", "204") == Grade(False, None, "no_answer")


def test_last_box_counts() -> None:
    assert not verify_math("first \\boxed{204}, corrected: \\boxed{205}", "204").correct
    assert verify_math("first \\boxed{205}, corrected: \\boxed{204}", "204").correct


@pytest.mark.parametrize("bad", ["", "  ", None])
def test_empty_gold_is_rejected(bad: str | None) -> None:
    with pytest.raises(ValueError, match="gold answer of pair 0"):
        verify_math("\\boxed{1}", bad)  # type: ignore[arg-type]


def test_none_response_is_a_clear_error_in_every_grader() -> None:
    """A missing response is refused like an empty gold (never a bare TypeError, never a 0)."""
    import polars as pl

    from rredcot.evaluation.grading import grade_generations
    from rredcot.tasks import get_task

    with pytest.raises(ValueError, match="response of pair 1 must be a string.*NoneType"):
        grade_many([("\\boxed{1}", "1"), (None, "1")])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="response must be a string.*NoneType"):
        get_task("synthetic").grade(None, "1")  # type: ignore[arg-type]
    generations = pl.DataFrame(
        {
            "problem_id": ["p1", "p1"],
            "sample_index": [0, 1],
            "method": ["base", "base"],
            "seed": [0, 0],
            "num_tokens": [3, 0],
            "finish_reason": ["stop", "stop"],
            "text": ["\\boxed{1}", None],
        }
    )
    problems = pl.DataFrame({"id": ["p1"], "answer": ["1"]})
    with pytest.raises(ValueError, match=r"1 generation\(s\) have no text.*\('p1', 1\)"):
        grade_generations(generations, problems, get_task("math"), show_progress=False)


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        verify_math("\\boxed{1}", "1", timeout_s=0)


def test_benchmark_golds_verify_against_themselves(mirror_file) -> None:
    """Every gold of the small benchmarks, boxed as a model would write it, is judged correct."""
    golds = [
        json.loads(line)["answer"]
        for name in ("aime24", "aime25", "amc23", "minerva")
        for line in mirror_file(name).read_text().splitlines()
    ]
    grades = grade_many([(f"\\boxed{{{g.strip()}}}", g) for g in golds])
    assert [g.status for g in grades] == ["ok"] * len(golds)
    failed = [gold for gold, g in zip(golds, grades, strict=True) if not g.correct]
    assert failed == []


# --- our timeout ---------------------------------------------------------------------------


def _stop_the_worker() -> int:
    """Freeze this process's grading worker (SIGSTOP): from now on it answers nothing, however
    fast the machine, so a grade sent to it can only end by our timeout or by its death."""
    verify_math("\\boxed{1}", "1")  # a live worker
    pid = grading._WORKER.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    return pid


def test_a_worker_that_never_answers_is_a_timeout_and_is_replaced() -> None:
    """The timeout's outcome, not its duration: status timeout, the worker replaced, and the
    next grade served by the new worker."""
    stopped = _stop_the_worker()
    grade = verify_math("\\boxed{1}", "1", timeout_s=0.2)
    assert grade == Grade(False, "1", "timeout")
    assert grading._WORKER.pid is None  # the frozen worker was killed and reaped
    assert verify_math("\\boxed{0.5}", "\\frac{1}{2}") == Grade(True, "0.5", "ok")
    assert grading._WORKER.pid not in (None, stopped)  # replaced


def test_the_power_tower_is_a_timeout_and_the_worker_recovers() -> None:
    """A real pathological input (sympy evaluating 9^9^9^9^9): graded timeout, then the next
    answer is graded by a fresh worker."""
    verify_math("\\boxed{1}", "1")
    before = grading._WORKER.pid
    grade = verify_math(f"\\boxed{{{POWER_TOWER}}}", "1", timeout_s=1.0)
    assert grade == Grade(False, POWER_TOWER, "timeout")
    assert verify_math("\\boxed{0.5}", "\\frac{1}{2}") == Grade(True, "0.5", "ok")
    assert grading._WORKER.pid not in (None, before)  # replaced


def test_worker_is_reused_across_calls() -> None:
    verify_math("\\boxed{1}", "1")
    pid = grading._WORKER.pid
    for _ in range(5):
        verify_math("\\boxed{2}", "2")
    assert grading._WORKER.pid == pid


def test_grade_many_continues_after_timeout() -> None:
    pairs = [
        ("no answer", "3"),
        ("\\boxed{3}", "3"),
        (f"\\boxed{{{POWER_TOWER}}}", "3"),
        ("\\boxed{4}", "3"),
        ("\\boxed{\\frac{6}{2}}", "3"),
    ]
    grades = grade_many(pairs, timeout_s=1.0)
    assert grades == [
        Grade(False, None, "no_answer"),
        Grade(True, "3", "ok"),
        Grade(False, POWER_TOWER, "timeout"),
        Grade(False, "4", "ok"),
        Grade(True, "\\frac{6}{2}", "ok"),
    ]


def test_worker_dying_mid_answer_is_an_error_not_a_crash(monkeypatch) -> None:
    """The worker dies after the pair was sent and before it answered (it is frozen, so it
    cannot answer first): the pair is graded error, and the next grade works."""
    pid = _stop_the_worker()
    read = grading._GradingWorker._readline

    def die_then_read(self, timeout_s):
        os.kill(pid, signal.SIGKILL)  # the pair is in the worker's pipe by now
        monkeypatch.setattr(grading._GradingWorker, "_readline", read)
        return read(self, timeout_s)

    monkeypatch.setattr(grading._GradingWorker, "_readline", die_then_read)
    grade = verify_math("\\boxed{1}", "1", timeout_s=600.0)
    assert grade == Grade(False, "1", "error")
    assert verify_math("\\boxed{7}", "7").correct
    assert grading._WORKER.pid not in (None, pid)


LONG = "1" * 4301  # one digit past Python's int-string limit (sys.get_int_max_str_digits)


@pytest.mark.parametrize(
    ("answer", "gold"),
    [
        (f"{LONG}.0", LONG),  # math-verify alone: wrong with status ok (compared as strings)
        (LONG, f"{LONG}.0"),
        ("1", LONG),
        ("1" + "{,}111" * 1434, "1"),  # thousands separators do not hide the length
    ],
)
def test_an_integer_over_the_int_string_limit_is_an_error(answer: str, gold: str) -> None:
    """Issue 21: an answer the grader cannot parse is graded status error, not wrong with ok."""
    assert verify_math(f"\\boxed{{{answer}}}", gold) == Grade(False, answer, "error")
    assert verify_math("\\boxed{7}", "7") == Grade(True, "7", "ok")  # the worker goes on


def test_an_integer_at_the_limit_is_graded() -> None:
    at_limit = "1" * 4300
    assert verify_math(f"\\boxed{{{at_limit}.0}}", at_limit) == Grade(True, f"{at_limit}.0", "ok")
    assert not grading.too_long_integer(f"{at_limit}, {at_limit}.5")
    assert grading.too_long_integer(f"{at_limit}1")


def test_the_synthetic_grader_compares_long_answers_as_text() -> None:
    """The synthetic world's exact match parses no integer: a long answer is right or wrong by
    its text, with status ok."""
    from rredcot.tasks.synthetic import SyntheticTask

    task = SyntheticTask()
    assert task.grade(f"a=1\nAnswer: {LONG}.", LONG) == Grade(True, LONG, "ok")
    assert task.grade(f"a=1\nAnswer: {LONG}.", LONG + "1") == Grade(False, LONG, "ok")


def test_worker_killed_between_calls_is_restarted() -> None:
    verify_math("\\boxed{1}", "1")
    pid = grading._WORKER.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    grading._WORKER._proc.wait()  # dead and reaped: no guess at how long dying takes
    assert verify_math("\\boxed{7}", "7") == Grade(True, "7", "ok")


def test_shutdown_worker_then_grade_again() -> None:
    verify_math("\\boxed{1}", "1")
    grading.shutdown_worker()
    assert grading._WORKER.pid is None
    assert verify_math("\\boxed{1}", "1").correct


# --- threads and processes -----------------------------------------------------------------

PAIRS = [
    ("\\boxed{204}", "204"),
    ("\\boxed{0.5}", "\\frac{1}{2}"),
    ("\\boxed{205}", "204"),
    ("no box", "1"),
    ("\\boxed{(3,\\pi/2)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("\\boxed{x^2+1}", "1+x^2"),
    ("\\boxed{\\sqrt{2}}", "2"),
    ("\\boxed{10\\%}", "0.1"),
] * 3


def test_threads_match_serial() -> None:
    serial = [verify_math(r, g) for r, g in PAIRS]
    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = list(pool.map(lambda p: verify_math(*p), PAIRS))
    assert threaded == serial
    assert [g.correct for g in serial[:8]] == [True, True, False, False, True, True, False, True]


def _grade_in_child(pair: tuple[str, str]) -> tuple[Grade, int | None, int]:
    """Runs in a pool process: the grade, that process's grading-worker pid, and its own pid."""
    return verify_math(*pair), grading._WORKER.pid, os.getpid()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_grading_inside_worker_processes(method: str) -> None:
    """A forked child must not talk to the parent's grading worker; it starts its own."""
    verify_math("\\boxed{1}", "1")  # the parent has a live worker before forking
    parent_worker = grading._WORKER.pid
    ctx = multiprocessing.get_context(method)
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        results = list(pool.map(_grade_in_child, PAIRS[:8]))
    assert [grade for grade, _, _ in results] == [verify_math(r, g) for r, g in PAIRS[:8]]
    child_workers = {worker for _, worker, _ in results}
    assert len(child_workers) == 1  # one persistent worker served the whole child
    assert child_workers.isdisjoint({None, parent_worker})
    assert {pid for _, _, pid in results} != {os.getpid()}
    assert grading._WORKER.pid == parent_worker  # the parent's worker is untouched and works
    assert verify_math("\\boxed{2}", "2") == Grade(True, "2", "ok")
