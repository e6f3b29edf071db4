"""The tree world: many valid solution paths per problem, references on their own paths."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter

import pytest

from rredcot.data.synthetic import (
    Program,
    SolutionPath,
    SplitSpec,
    Step,
    WorldConfig,
    apply_op,
    check_response,
    choice_points,
    draw_program,
    generate_split,
    make_world,
    own_path,
    own_path_solution,
    path_overlap,
    slipped_solution,
    step_forms,
)

TREE = WorldConfig(shape="tree", chain="any", avoid_misconception=None)
# a=3, b=7, c=9; d=a+b, e=c*a (two branches), f=d-e joins them; listed shuffled.
HAND = Program(
    10,
    (("a", 3), ("b", 7), ("c", 9)),
    (Step("d", "a", "+", "b"), Step("e", "c", "*", "a"), Step("f", "d", "-", "e")),
    ("f", "e", "d"),
)


def all_paths(prog: Program) -> list[SolutionPath]:
    """Every valid path by brute force: permutations × operand swaps."""
    names = [s.name for s in prog.steps]
    commutable = prog.commutable_steps()
    out = []
    for order in itertools.permutations(names):
        try:
            prog.check_path(SolutionPath(order))
        except ValueError:
            continue
        for k in range(len(commutable) + 1):
            for swapped in itertools.combinations(commutable, k):
                out.append(SolutionPath(order, frozenset(swapped)))
    return out


def test_hand_program_text_paths_and_counts() -> None:
    assert HAND.problem_text() == "a=3, b=7, c=9. f=d-e. e=c*a. d=a+b. Find f."
    assert HAND.answer == str((0 - 7) % 10)  # d=0, e=7, f=0-7=3
    assert HAND.order_count() == 2 and HAND.path_count() == 8
    assert len(all_paths(HAND)) == 8
    assert HAND.solution_text(order=("e", "d", "f"), commuted=("d",)).split("\n") == [
        "e=c*a=9*3=7",
        "d=b+a=7+3=0",
        "f=d-e=0-7=3",
        "Answer: 3.",
    ]
    with pytest.raises(ValueError, match="before its operand"):
        HAND.solution_text(order=("f", "d", "e"))
    with pytest.raises(ValueError, match="not commutative"):
        HAND.solution_text(commuted=("f",))


def test_json_round_trip_keeps_the_listing() -> None:
    assert Program.from_json(HAND.to_json()) == HAND
    with pytest.raises(ValueError, match="listing"):
        Program(HAND.modulus, HAND.given, HAND.steps, ("f", "e"))


@pytest.mark.parametrize("seed", range(40))
def test_every_path_the_generator_can_write_passes_the_checker(seed: int) -> None:
    prog = draw_program(random.Random(seed), 2 + seed % 5, TREE)
    paths = all_paths(prog)
    assert len(paths) == prog.path_count()
    texts = {prog.path_text(p) for p in paths}
    assert len(texts) == len(paths)  # distinct paths, distinct texts
    for text in texts:
        assert check_response(prog, text).correct, text


@pytest.mark.parametrize("seed", range(30))
def test_tree_programs_use_each_value_once_and_every_step_is_a_bijection(seed: int) -> None:
    depth = 3 + seed % 5
    prog = draw_program(random.Random(seed), depth, TREE)
    computed = [s.name for s in prog.steps]
    uses = Counter(x for s in prog.steps for x in (s.left, s.right) if x in computed)
    assert all(uses[n] == 1 for n in computed[:-1]) and uses[prog.target] == 0
    assert all(v in TREE.given_values for _, v in prog.given)
    assert prog.order_count() >= 2  # depth >= 3 has at least two branches
    values = prog.values()
    for name in computed[:-1]:  # changing one value changes the answer
        for wrong in range(prog.modulus):
            if wrong == values[name]:
                continue
            env = dict(values) | {name: wrong}
            for s in prog.steps[computed.index(name) + 1 :]:
                env[s.name] = apply_op(s.op, env[s.left], env[s.right], prog.modulus)
            assert env[prog.target] != values[prog.target]


def test_random_path_is_uniform_over_all_paths() -> None:
    prog = draw_program(random.Random(3), 5, TREE)
    paths = all_paths(prog)
    rng = random.Random(0)
    draws = 200 * len(paths)
    counts = Counter(prog.random_path(rng) for _ in range(draws))
    assert set(counts) == set(paths)
    chi2 = sum((counts[p] - 200) ** 2 / 200 for p in paths)
    assert chi2 < len(paths) + 6 * (2 * len(paths)) ** 0.5  # far inside the chi-square tail


def test_dataset_solutions_and_demonstrations_cover_several_paths() -> None:
    df = generate_split(60, [4, 5, 6], 7, "x", TREE)
    rng = random.Random(1)
    multi = 0
    for row in df.iter_rows(named=True):
        prog = Program.from_json(row["program"])
        assert check_response(prog, row["solution"]).correct
        demos = {slipped_solution(prog, rng, 0.0) for _ in range(8)}
        assert all(check_response(prog, d).correct for d in demos)
        multi += len(demos) > 1
    assert multi >= 55  # nearly every problem: several paths in 8 demonstrations


def test_chain_world_paths_are_unchanged() -> None:
    chain = draw_program(
        random.Random(0), 4, WorldConfig(chain="bijective", shape="chain", avoid_misconception=None)
    )
    assert chain.listing is None and chain.order_count() == 1
    assert slipped_solution(chain, random.Random(1), 0.0) == chain.solution_text()


def test_path_overlap_on_hand_cases() -> None:
    ref = "d=a+b=3+7=0\ne=c*a=9*3=7\nf=d-e=0-7=3\nAnswer: 3."
    assert path_overlap(ref, ref) == 1.0
    assert path_overlap(ref, "e=c*a=9*3=7\nd=a+b=3+7=0\nf=d-e=0-7=3\nAnswer: 3.") == 2 / 3
    assert path_overlap(ref, "d=b+a=7+3=0\ne=a*c=3*9=7\nf=d-e=0-7=3\nAnswer: 3.") == 1 / 3
    assert path_overlap(ref, "d=a+b=3+7=5\ne=c*a=5*3=5") == 2 / 3  # values do not count
    assert path_overlap(ref, "") == 0.0
    assert math.isnan(path_overlap("Answer: 3.", ref))
    assert step_forms("x\nd=a+b=3+7=0  \n") == [("d", "a", "+", "b")]


def test_own_path_follows_the_trace_order_and_operand_order() -> None:
    trace = "e=a*c=3*9=7\nd=b+a=7+3=1\nf=d-e=1-7=4\nAnswer: 4."  # a slip at d
    key = own_path_solution(HAND, trace)
    assert key == "e=a*c=3*9=7\nd=b+a=7+3=0\nf=d-e=0-7=3\nAnswer: 3."
    assert own_path(HAND, trace) == SolutionPath(("e", "d", "f"), frozenset({"e", "d"}))
    assert path_overlap(key, trace) == 1.0
    # A cut-short or garbled trace: its valid lines, then the rest in the program's order.
    assert own_path(HAND, "e=c*a=9*3=7\nzzz") == SolutionPath(("e", "d", "f"))
    assert own_path(HAND, "f=d-e=0-7=3\nd=a+b=3+7=0") == SolutionPath(("d", "e", "f"))


@pytest.mark.parametrize("seed", range(20))
def test_choice_points_are_exactly_where_valid_solutions_branch(seed: int) -> None:
    prog = draw_program(random.Random(seed), 2 + seed % 4, TREE)
    texts = {p: prog.path_text(p) for p in all_paths(prog)}
    for path, text in texts.items():
        branching = {}
        for i in range(len(text)):
            valid = {t[i] for t in texts.values() if t[:i] == text[:i] and len(t) > i}
            if len(valid) > 1:
                branching[i] = "".join(sorted(valid))
        assert choice_points(prog, path) == branching


def branch_count(prog: Program) -> int:
    """Steps on two givens: each starts a branch."""
    givens = {n for n, _ in prog.given}
    return sum(s.left in givens and s.right in givens for s in prog.steps)


@pytest.mark.parametrize("branches", [1, 2, 3])
def test_fixed_branches_give_exactly_that_many_branches(branches: int) -> None:
    rng = random.Random(branches)
    for depth in (5, 6):
        for _ in range(30):
            prog = draw_program(rng, depth, TREE, branches)
            assert branch_count(prog) == branches and prog.depth == depth


def test_drawn_branches_are_never_one_past_depth_two() -> None:
    rng = random.Random(3)
    counts = Counter(
        branch_count(draw_program(rng, d, TREE)) for d in (3, 4, 5, 6) for _ in range(50)
    )
    assert 1 not in counts and set(counts) == {2, 3}


def test_branches_that_do_not_fit_a_depth_or_a_chain_world_raise() -> None:
    with pytest.raises(ValueError, match="branches: 3 does not fit depth"):
        SplitSpec(n=4, depths=[4, 5], branches=3)
    with pytest.raises(ValueError, match="branches must be null or an int"):
        SplitSpec(n=4, depths=[4], branches=0)
    with pytest.raises(ValueError, match="needs world.shape 'tree'"):
        generate_split(
            4,
            [4],
            0,
            "x",
            WorldConfig(chain="bijective", shape="chain", avoid_misconception=None),
            branches=1,
        )


def test_a_one_branch_split_leaves_every_other_split_unchanged() -> None:
    """The out-of-distribution split is disjoint by construction, so swapping it in keeps the
    other splits (and with them SFT, RL and the studies) byte-identical."""
    train = SplitSpec(n=60, depths=[3, 4, 5])
    before = {"id": SplitSpec(n=20, depths=[4, 5]), "ood": SplitSpec(n=20, depths=[8])}
    after = {"id": before["id"], "ood": SplitSpec(n=20, depths=[4, 5], branches=1)}
    old, new = (make_world(train, b, 7, TREE) for b in (before, after))
    for name in ("id", "train"):
        assert old[name].equals(new[name])
    chains = [Program.from_json(p) for p in new["ood"]["program"]]
    assert all(branch_count(p) == 1 for p in chains)
    assert not set(new["ood"]["problem"]) & set(new["train"]["problem"])
