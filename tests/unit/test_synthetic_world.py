"""The synthetic world generator: determinism, depths, correct answers, disjoint splits, checks."""

from __future__ import annotations

import json
import random
import re

import polars as pl
import pytest

from rredcot.data.schema import COLUMNS
from rredcot.data.synthetic import (
    Program,
    SplitSpec,
    Step,
    WorldConfig,
    apply_op,
    check_response,
    derive_seed,
    draw_program,
    generate_split,
    make_world,
    problem_space_size,
    slipped_solution,
)
from rredcot.tasks.synthetic import SyntheticTask

CONFIG = WorldConfig(chain="any", shape="chain", avoid_misconception=None)


def recompute(problem: str, modulus: int) -> list[tuple[str, int]]:
    """Evaluate a problem text with Python's own arithmetic, independently of the generator."""
    given_part, *step_parts = problem.split(". ")
    env = {name: int(v) for name, v in re.findall(r"([a-z])=(\d+)", given_part)}
    out = []
    for part in step_parts:
        m = re.fullmatch(r"([a-z])=([a-z])([-+*])([a-z])\.?", part)
        if m is None:
            assert part.startswith("Find ")
            continue
        name, x, op, y = m.groups()
        env[name] = eval(f"({env[x]}){op}({env[y]})") % modulus
        out.append((name, env[name]))
    return out


def test_same_seed_same_frame_and_different_seed_different() -> None:
    a = generate_split(200, [2, 3, 4], 7, "train", CONFIG)
    b = generate_split(200, [2, 3, 4], 7, "train", CONFIG)
    c = generate_split(200, [2, 3, 4], 8, "train", CONFIG)
    assert a.equals(b)
    assert not a["problem"].equals(c["problem"])


def test_columns_ids_and_dtypes() -> None:
    df = generate_split(12, [3], 0, "synth_id", CONFIG)
    assert list(df.columns) == [*COLUMNS, "depth", "program"]
    assert df["depth"].dtype == pl.Int64
    assert all(df[c].dtype == pl.String for c in (*COLUMNS, "program"))
    assert df["id"].to_list()[:2] == ["synth-synth_id-00000", "synth-synth_id-00001"]
    assert set(df["source"]) == {"synthetic"}
    assert df["problem"].n_unique() == df.height


def test_depths_round_robin_and_respected() -> None:
    df = generate_split(30, [2, 5, 7], 1, "train", CONFIG)
    assert df["depth"].to_list() == [2, 5, 7] * 10
    for row in df.iter_rows(named=True):
        steps = recompute(row["problem"], CONFIG.modulus)
        assert len(steps) == row["depth"]
        assert row["solution"].count("\n") == row["depth"]  # depth step lines + answer line
        assert Program.from_json(row["program"]).depth == row["depth"]


@pytest.mark.parametrize(
    "config",
    [
        WorldConfig(chain="any", shape="chain", avoid_misconception=None),
        WorldConfig(
            modulus=13, n_given=2, ops=["-"], chain="any", shape="chain", avoid_misconception=None
        ),
    ],
)
def test_answers_and_step_values_match_independent_recomputation(config: WorldConfig) -> None:
    df = generate_split(300, [1, 3, 6], 3, "train", config)
    for row in df.iter_rows(named=True):
        steps = recompute(row["problem"], config.modulus)
        assert row["answer"] == str(steps[-1][1])
        lines = row["solution"].split("\n")
        assert lines[-1] == f"Answer: {row['answer']}."
        for line, (name, value) in zip(lines[:-1], steps, strict=True):
            assert line.startswith(f"{name}=") and line.endswith(f"={value}")


def test_every_step_uses_the_previous_result() -> None:
    for seed in range(50):
        prog = draw_program(random.Random(seed), 6, CONFIG)
        for prev, step in zip(prog.steps, prog.steps[1:], strict=False):
            assert prev.name in (step.left, step.right)
        first = prog.steps[0]
        assert first.left != first.right and {first.left, first.right} <= {"a", "b", "c"}


def test_problem_space_size_hand_computed_and_by_enumeration() -> None:
    two = WorldConfig(n_given=2, chain="any", shape="chain", avoid_misconception=None)
    assert problem_space_size(1, two) == 10**2 * 3 * 2  # 600
    assert problem_space_size(2, two) == 600 * 3 * 2 * 2  # 7200
    tiny = WorldConfig(
        modulus=2, n_given=2, ops=("+",), chain="any", shape="chain", avoid_misconception=None
    )
    rng = random.Random(0)
    seen = {draw_program(rng, 2, tiny).problem_text() for _ in range(3000)}
    assert len(seen) == problem_space_size(2, tiny) == 4 * 2 * 4


def test_exclude_is_never_produced() -> None:
    first = generate_split(300, [1], 5, "train", CONFIG)
    banned = frozenset(first["problem"].to_list()[:150])
    again = generate_split(300, [1], 5, "train", CONFIG, exclude=banned)
    assert banned.isdisjoint(again["problem"].to_list())
    assert again["problem"].n_unique() == 300


def test_make_world_splits_disjoint_sized_and_seeded_per_split() -> None:
    benchmarks = {"synth_id": SplitSpec(300, [1, 2]), "synth_ood": SplitSpec(50, [6])}
    world = make_world(SplitSpec(2000, [1, 2]), benchmarks, seed=0, config=CONFIG)
    assert list(world) == ["synth_id", "synth_ood", "train"]
    assert {k: v.height for k, v in world.items()} == {
        "synth_id": 300,
        "synth_ood": 50,
        "train": 2000,
    }
    sets = {k: set(v["problem"]) for k, v in world.items()}
    assert sets["train"].isdisjoint(sets["synth_id"] | sets["synth_ood"])
    assert set(world["synth_ood"]["depth"]) == {6}
    # each split is its own stream: the benchmark does not change when train grows
    bigger = make_world(SplitSpec(3000, [1, 2]), benchmarks, seed=0, config=CONFIG)
    assert bigger["synth_id"].equals(world["synth_id"])
    assert derive_seed(0, "train") != derive_seed(0, "synth_id") != derive_seed(1, "synth_id")


def test_make_world_rejects_benchmark_named_train() -> None:
    with pytest.raises(ValueError, match="train"):
        make_world(SplitSpec(10, [2]), {"train": SplitSpec(10, [2])}, 0, CONFIG)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"modulus": 1}, "modulus"),
        ({"modulus": 2.5}, "modulus"),
        ({"n_given": 0}, "n_given"),
        ({"n_given": 26}, "n_given"),
        ({"ops": ()}, "ops"),
        ({"ops": ("+", "/")}, "ops"),
        ({"ops": ("+", "+")}, "ops"),
    ],
)
def test_world_config_field_checks(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        WorldConfig(**kwargs)


@pytest.mark.parametrize(
    ("n", "depths", "field"), [(0, [2], "n"), (5, [], "depths"), (5, [0], "depths")]
)
def test_split_spec_field_checks(n: int, depths: list[int], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SplitSpec(n, depths)


def test_generate_split_argument_checks() -> None:
    with pytest.raises(ValueError, match="depths: 24"):
        generate_split(5, [24], 0, "train", CONFIG)  # 3 given + 24 steps > 26 letters
    with pytest.raises(ValueError, match="depth 1"):
        generate_split(20_000, [1], 0, "train", CONFIG)  # only 18,000 depth-1 problems exist
    with pytest.raises(ValueError, match="split"):
        generate_split(5, [2], 0, "Train set", CONFIG)
    tiny = WorldConfig(
        n_given=1, ops=("+",), chain="any", shape="chain", avoid_misconception=None
    )  # 10 depth-1 problems: a=0 … a=9, b=a+a
    assert generate_split(10, [1], 0, "train", tiny)["problem"].n_unique() == 10  # all of them
    taken = frozenset(generate_split(9, [1], 0, "train", tiny)["problem"])
    with pytest.raises(ValueError, match="no new problem of depth 1"):
        generate_split(2, [1], 0, "train", tiny, exclude=taken)


def test_program_json_round_trip_and_errors() -> None:
    prog = Program(10, (("a", 3), ("b", 8)), (Step("c", "a", "+", "b"), Step("d", "c", "*", "a")))
    assert Program.from_json(prog.to_json()) == prog
    assert prog.problem_text() == "a=3, b=8. c=a+b. d=c*a. Find d."
    assert prog.solution_text() == "c=a+b=3+8=1\nd=c*a=1*3=3\nAnswer: 3."
    bad = json.loads(prog.to_json())
    bad["steps"][1][3] = "z"
    with pytest.raises(ValueError, match="unknown"):
        Program.from_json(bad)
    with pytest.raises(ValueError, match="program must be"):
        Program.from_json({"modulus": 10})


def test_task_prompt_trigger_and_reference_texts() -> None:
    task = SyntheticTask()
    row = generate_split(1, [3], 0, "train", CONFIG).row(0, named=True)
    assert task.build_prompt(row["problem"], None) == row["problem"] + "\n"
    assert task.reference_completion(row) == row["solution"]
    reasoning = task.reference_reasoning(row)
    assert reasoning.count("\n") == 2 and "Answer" not in reasoning
    assert reasoning + task.answer_trigger + row["answer"] + task.answer_close == row["solution"]
    assert task.answer_close not in reasoning  # the close is a safe stop string
    with pytest.raises(ValueError, match="solution"):
        task.reference_reasoning({**row, "answer": "x"})


@pytest.mark.parametrize(
    ("response", "correct", "extracted", "status"),
    [
        ("c=a+b=3+8=1\nAnswer: 1.", True, "1", "ok"),
        ("c=a+b=3+8=1\nAnswer: 1", True, "1", "ok"),  # close dropped by the backend
        ("Answer: 7.\nAnswer: 1.  ", True, "1", "ok"),  # the last answer line counts
        ("Answer: 12.", False, "12", "ok"),
        ("c=a+b=3+8=1\n", False, None, "no_answer"),
        ("c=a+b=3+8=1\nAnswer: .", False, None, "no_answer"),
        ("the answer: 1", False, None, "no_answer"),
    ],
)
def test_task_grade(response: str, correct: bool, extracted: str | None, status: str) -> None:
    grade = SyntheticTask().grade(response, "1")
    assert (grade.correct, grade.extracted, grade.status) == (correct, extracted, status)
    assert grade.reward == float(correct)


# --- bijective chains and slipped demonstrations


BIJECTIVE = WorldConfig(chain="bijective", shape="chain", avoid_misconception=None)


def test_bijective_givens_are_units_and_later_steps_use_a_given() -> None:
    assert BIJECTIVE.given_values == (1, 3, 7, 9)
    rng = random.Random(3)
    for _ in range(200):
        prog = draw_program(rng, 6, BIJECTIVE)
        assert all(v in (1, 3, 7, 9) for _, v in prog.given)
        previous = prog.steps[0].name
        for step in prog.steps[1:]:
            other = step.right if step.left == previous else step.left
            assert previous in (step.left, step.right) and other in ("a", "b", "c")
            previous = step.name


def test_bijective_one_wrong_step_always_changes_the_answer() -> None:
    """Every later step is a bijection of the previous result: any single change propagates."""
    rng = random.Random(4)
    for _ in range(300):
        prog = draw_program(rng, 5, BIJECTIVE)
        for k in range(prog.depth):
            for delta in range(1, 10):
                vals = dict(prog.given)
                for i, s in enumerate(prog.steps):
                    vals[s.name] = apply_op(s.op, vals[s.left], vals[s.right], 10)
                    if i == k:
                        vals[s.name] = (vals[s.name] + delta) % 10
                assert vals[prog.target] != int(prog.answer)


def test_problem_space_size_bijective_by_enumeration() -> None:
    tiny = WorldConfig(
        modulus=3,
        n_given=2,
        ops=("+", "*"),
        chain="bijective",
        shape="chain",
        avoid_misconception=None,
    )  # units 1, 2
    # 2^2 givens x 2 ops x 2 ordered pairs; then 2 ops x 2 sides x 2 givens per later step
    assert problem_space_size(2, tiny) == 4 * 2 * 2 * (2 * 2 * 2)
    rng = random.Random(0)
    seen = {draw_program(rng, 2, tiny).problem_text() for _ in range(5000)}
    assert len(seen) == problem_space_size(2, tiny)


def test_unknown_chain_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="chain"):
        WorldConfig(chain="tree", shape="chain", avoid_misconception=None)


def test_slipped_solution_without_slips_is_the_reference() -> None:
    rng = random.Random(0)
    prog = draw_program(rng, 5, BIJECTIVE)
    assert slipped_solution(prog, random.Random(1), 0.0) == prog.solution_text()


def test_slipped_solution_is_consistent_and_slips_at_the_rate() -> None:
    """Lines substitute the written values; the answer is the last written value; the checker
    finds the first slip as a wrong value; slips occur at ~the rate."""
    rng, draw = random.Random(5), random.Random(6)
    slips = steps = 0
    for _ in range(2000):
        prog = draw_program(draw, 4, BIJECTIVE)
        text = slipped_solution(prog, rng, 0.2)
        *lines, answer = text.split("\n")
        written = dict(prog.given)
        first_slip, slips_here = None, 0
        for i, (line, step) in enumerate(zip(lines, prog.steps, strict=True)):
            name, expr, subst, value = re.fullmatch(r"(\w)=(\w.\w)=(\d.\d)=(\d+)", line).groups()
            x, y = written[step.left], written[step.right]
            assert subst == f"{x}{step.op}{y}"
            written[name] = int(value)
            if int(value) != apply_op(step.op, x, y, 10):
                slips_here += 1
                first_slip = first_slip or i + 1
            steps += 1
        assert answer == f"Answer: {written[prog.target]}."
        check = check_response(prog, text)
        assert check.first_error == first_slip
        if first_slip is not None:
            assert check.error_kind == "wrong_value"
        if slips_here == 1:  # a single slip always reaches the answer (two may cancel)
            assert not check.answer_correct
        slips += slips_here
    assert abs(slips / steps - 0.2) < 0.02


@pytest.mark.parametrize("rate", [-0.1, 1.0])
def test_slipped_solution_rejects_a_bad_rate(rate: float) -> None:
    with pytest.raises(ValueError, match="slip_rate"):
        slipped_solution(draw_program(random.Random(0), 2, CONFIG), random.Random(0), rate)
