"""The synthetic, step-checkable world: chained modular arithmetic with named results.

A problem gives a few values and a chain of named steps; the reference solution writes one
checkable step per line, so the first wrong step of any response is known exactly (METHOD.md §5,
error localization), which no real benchmark offers. Every character is one byte-level token, so
the format is terse:

    problem:  a=3, b=8, c=2. d=a+b. e=d*a. f=e-c. Find f.
    solution: d=a+b=3+8=1
              e=d*a=1*3=3
              f=e-c=3-2=1
              Answer: 1.

A step line is `name=left op right=value(left) op value(right)=result`, all values modulo
`WorldConfig.modulus`. Step 1 combines two given values; every later step uses the previous
step's result as one operand and, by `WorldConfig.chain`, any other earlier variable (`any`) or
a given value (`bijective`) as the other. With `bijective` the given values are units of the
modulus, so every later step is a bijection of the previous result: one wrong step always
changes the answer, and a wrong chain reaches the right answer only when two slips cancel
(≈ 1/modulus of those chains). With `any`, steps such as `f=e-d` after `e=d+c` erase an error,
and wrong chains hit the right answer far more often (measured: 12–18% at modulus 10).
The answer line is `ANSWER_PREFIX + answer + ANSWER_CLOSE`.

`slipped_solution` writes a demonstration in which each step's result is wrong with a set
probability and later steps carry the wrong value on: SFT on such demonstrations gives a base
policy that slips at a rate set by the data (and not by how far SFT got), which RL can remove.

The programs themselves are `rredcot.data.programs`, the per-step checker `rredcot.data.checker`
(`check_response`, re-exported by the task `rredcot.tasks.synthetic`); `rredcot.data.synthetic`
imports all of them at once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the config check (every snakemake call) imports this module: no polars
    import polars as pl

from rredcot.data.misconceptions import (
    MISCONCEPTION_RULES,
    Misconception,
    misconception_can_reach_answer,
)
from rredcot.data.programs import (
    ANSWER_CLOSE,
    ANSWER_PREFIX,
    OPS,
    VARIABLES,
    Program,
    SolutionPath,
    Step,
    apply_op,
)

SOURCE = "synthetic"
CHAINS: tuple[str, ...] = ("any", "bijective")
SHAPES: tuple[str, ...] = ("chain", "tree")
MERGE_OPS: frozenset[str] = frozenset({"+", "-"})  # bijective in each operand (unlike *)
_SPLIT_NAME = re.compile(r"^[a-z0-9_]+$")
_MAX_REDRAWS = 100_000  # per row; drawing the last of 10^4 problems takes ~10^4 tries


@dataclass(frozen=True)
class WorldConfig:
    """How problems are drawn; every field is checked on construction."""

    modulus: int = 10
    """All values are residues 0 … modulus−1 (10 keeps every value a single digit)."""
    n_given: int = 3
    """Number of given values (named a, b, …); n_given + depth must be ≤ 26 (one letter each).
    3 rather than 2 makes the space of short problems 30x larger (depth 2: 324,000 vs 7,200)."""
    ops: tuple[str, ...] = OPS
    """Operators a step may use, a non-empty subset of + - * without repeats."""
    chain: str = "bijective"
    """The other operand of a later step: `any` earlier variable, or a given value
    (`bijective`: givens are units mod modulus, so each step is a bijection of the previous
    result and a single wrong step always reaches the answer)."""
    shape: str = "tree"
    """`chain`: each step uses the previous result and the text lists the steps in solution
    order (one path per problem, up to operand order). `tree`: the steps form an expression
    tree with independent branches, listed in a shuffled order; any order that computes a step
    after its operands is a solution (`draw_tree_program`)."""
    avoid_misconception: str | None = "smaller_from_larger"
    """A misconception rule (`rredcot.data.misconceptions`): problems on which it can reach the
    right answer through a wrong value are never drawn, so a right answer is never the rule's
    luck (`misconception_can_reach_answer`). None draws every problem (and draws the same
    problems as before the key existed)."""

    def __post_init__(self) -> None:
        if not isinstance(self.modulus, int) or isinstance(self.modulus, bool):
            raise ValueError(f"modulus must be an int ≥ 2, got {self.modulus!r}")
        if self.modulus < 2:
            raise ValueError(f"modulus must be ≥ 2, got {self.modulus}")
        if not isinstance(self.n_given, int) or isinstance(self.n_given, bool):
            raise ValueError(f"n_given must be an int in 1 … 25, got {self.n_given!r}")
        if not 1 <= self.n_given <= len(VARIABLES) - 1:
            raise ValueError(f"n_given must be in 1 … {len(VARIABLES) - 1}, got {self.n_given}")
        ops = tuple(self.ops)
        object.__setattr__(self, "ops", ops)  # accept a list from YAML, store a tuple
        if not ops or len(set(ops)) != len(ops) or any(op not in OPS for op in ops):
            raise ValueError(f"ops must be a non-empty subset of {OPS} without repeats, got {ops}")
        if self.chain not in CHAINS:
            raise ValueError(f"chain must be one of {list(CHAINS)}, got {self.chain!r}")
        if self.shape not in SHAPES:
            raise ValueError(f"shape must be one of {list(SHAPES)}, got {self.shape!r}")
        if self.shape == "tree" and not MERGE_OPS & set(ops):
            raise ValueError(
                f"shape 'tree' joins two branches with + or -, the ops bijective in each "
                f"operand; ops {list(ops)} has neither"
            )
        if self.avoid_misconception is not None and (
            self.avoid_misconception not in MISCONCEPTION_RULES
        ):
            raise ValueError(
                f"avoid_misconception: {self.avoid_misconception!r} is not a misconception rule; "
                f"choose one of {list(MISCONCEPTION_RULES)} or null"
            )
        if self.shape == "tree" and self.n_given < 2:
            raise ValueError("shape 'tree' needs n_given >= 2 (a branch starts from two givens)")
        if self.bijective and len(self.given_values) < min(2, self.n_given):
            raise ValueError(
                f"a bijective world draws given values from the units mod {self.modulus}, "
                f"{list(self.given_values)}: too few for {self.n_given} given values"
            )

    def accepts(self, program: Program) -> bool:
        """Is `program` one this world draws (`avoid_misconception`)?"""
        rule = self.avoid_misconception
        return rule is None or not misconception_can_reach_answer(program, rule)

    @property
    def bijective(self) -> bool:
        """Every step a bijection of each computed operand (`chain: bijective`, or a tree)."""
        return self.chain == "bijective" or self.shape == "tree"

    @property
    def given_values(self) -> tuple[int, ...]:
        """Values a given variable may take: every residue, or (bijective) the units only."""
        if self.bijective:
            return tuple(v for v in range(self.modulus) if math.gcd(v, self.modulus) == 1)
        return tuple(range(self.modulus))

    @property
    def max_depth(self) -> int:
        """The deepest problem the variable names allow."""
        return len(VARIABLES) - self.n_given


@dataclass(frozen=True)
class SplitSpec:
    """Size and depths of one split; depths are assigned round-robin, so each gets n/len(depths).

    `branches` (tree worlds only) fixes every problem's number of branches instead of drawing
    it: `1` gives one-branch chains, a structure the tree world never draws at depth ≥ 3, so
    such a split is disjoint from every default split by construction (an out-of-distribution
    split that shares the letters, values and line format the base has seen).
    """

    n: int
    depths: list[int]
    branches: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1:
            raise ValueError(f"n must be an int ≥ 1, got {self.n!r}")
        check_depths(self.depths)
        check_branches(self.branches, self.depths)


def max_branches(depth: int) -> int:
    """The most branches a tree of `depth` steps can have: b starts and b − 1 joins."""
    return max(1, (depth + 1) // 2)


def check_branches(branches: int | None, depths: Sequence[int]) -> None:
    """`branches` is None (drawn per problem) or an int that every depth can hold."""
    if branches is None:
        return
    if not isinstance(branches, int) or isinstance(branches, bool) or branches < 1:
        raise ValueError(f"branches must be null or an int ≥ 1, got {branches!r}")
    too_many = [d for d in depths if branches > max_branches(d)]
    if too_many:
        raise ValueError(
            f"branches: {branches} does not fit depth(s) {too_many} (a tree of depth d has at "
            "most ⌊(d+1)/2⌋ branches)"
        )


def check_depths(depths: Sequence[int], config: WorldConfig | None = None) -> None:
    if len(depths) == 0:
        raise ValueError("depths must list at least one depth, got []")
    for d in depths:
        if not isinstance(d, int) or isinstance(d, bool) or d < 1:
            raise ValueError(f"depths must be ints ≥ 1, got {list(depths)}")
        if config is not None and d > config.max_depth:
            raise ValueError(
                f"depths: {d} exceeds {config.max_depth} (26 letters − n_given={config.n_given})"
            )


def problem_space_size(depth: int, config: WorldConfig) -> int:
    """How many distinct problems of `depth` the generator can draw.

    v^g given values (v = len(config.given_values)) × |ops|·g(g−1) first steps (|ops| if
    g = 1) × Π_{s=2..depth} |ops|·2·o_s later steps (previous result on either side, one of o_s
    other operands: every earlier variable but the previous, g + s − 2, or a given value, g).
    An upper bound where `config.avoid_misconception` turns some away.
    """
    check_depths([depth], config)
    if config.shape == "tree":
        return tree_space_lower_bound(depth, config)
    g, k = config.n_given, len(config.ops)
    size = len(config.given_values) ** g * k * max(g * (g - 1), 1)
    bijective = config.chain == "bijective"
    return size * math.prod(k * 2 * (g if bijective else g + s - 2) for s in range(2, depth + 1))


def tree_space_lower_bound(depth: int, config: WorldConfig) -> int:
    """A lower bound on the distinct tree problems of `depth`: the one-branch ones alone (a
    chain: v^g givens × |ops|·g(g−1) first steps × (|ops|·2·g)^(depth−1) later steps), each
    listed in any of depth! orders."""
    g, k = config.n_given, len(config.ops)
    chains = len(config.given_values) ** g * k * g * (g - 1) * (k * 2 * g) ** (depth - 1)
    return chains * math.factorial(depth)


def draw_tree_program(
    rng: random.Random, depth: int, config: WorldConfig, branches: int | None = None
) -> Program:
    """One random expression tree of `depth` computed steps, its steps listed shuffled.

    b branches (`branches` if given; else b = 1 for depth ≤ 2, and uniform in
    2 … ⌊(depth+1)/2⌋ otherwise) each start with a
    step on two distinct givens (any op); b − 1 joins combine two computed values with + or −;
    the other depth − 2b + 1 steps combine one computed value with a given (any op, either
    side). Joins and extensions come in a uniformly shuffled sequence, each on uniformly drawn
    pending values. Every computed value is used exactly once and every step is a bijection of
    its computed operands (the givens are units), so one wrong step always changes the answer.
    The steps are named in a uniformly drawn valid order; the text lists them shuffled.
    """
    g, ops, values = config.n_given, config.ops, config.given_values
    joins = [op for op in ops if op in MERGE_OPS]
    givens = VARIABLES[:g]
    given = tuple((n, values[rng.randrange(len(values))]) for n in givens)
    if branches is None:
        branches = 1 if depth <= 2 else rng.randint(2, max_branches(depth))
    else:
        check_branches(branches, [depth])
    # Nodes by creation index: (op, left, right), an operand an int (node) or a given name.
    nodes: list[tuple[str, int | str, int | str]] = []
    pending: list[int] = []
    for _ in range(branches):
        x, y = rng.sample(givens, 2)
        nodes.append((ops[rng.randrange(len(ops))], x, y))
        pending.append(len(nodes) - 1)
    moves = ["join"] * (branches - 1) + ["extend"] * (depth - 2 * branches + 1)
    rng.shuffle(moves)
    for move in moves:
        if move == "join":
            a, b = rng.sample(pending, 2)
            pending = [p for p in pending if p not in (a, b)]
            nodes.append((joins[rng.randrange(len(joins))], a, b))
        else:
            a = pending.pop(rng.randrange(len(pending)))
            other = givens[rng.randrange(g)]
            left, right = (a, other) if rng.random() < 0.5 else (other, a)
            nodes.append((ops[rng.randrange(len(ops))], left, right))
        pending.append(len(nodes) - 1)

    # Name the nodes in a uniformly drawn valid order (the root, created last, stays last).
    def label(v: int | str) -> str:
        return f"#{v}" if isinstance(v, int) else v

    draft = Program(
        config.modulus,
        given,
        tuple(Step(f"#{i}", label(x), op, label(y)) for i, (op, x, y) in enumerate(nodes)),
    )
    order = draft.random_path(rng).order
    rename = {old: VARIABLES[g + j] for j, old in enumerate(order)} | {n: n for n in givens}
    steps = tuple(
        Step(rename[old], rename[st.left], st.op, rename[st.right])
        for old, st in ((old, draft.step(old)) for old in order)
    )
    listing = [st.name for st in steps]
    rng.shuffle(listing)
    return Program(config.modulus, given, steps, tuple(listing))


def draw_program(
    rng: random.Random, depth: int, config: WorldConfig, branches: int | None = None
) -> Program:
    """One random problem of `depth` computed steps (of the world's shape; `branches` fixes a
    tree's branch count, see `SplitSpec`)."""
    if config.shape == "tree":
        return draw_tree_program(rng, depth, config, branches)
    if branches is not None:
        raise ValueError(f"branches: {branches} needs world.shape 'tree', not {config.shape!r}")
    g, ops, values = config.n_given, config.ops, config.given_values
    names = VARIABLES[: g + depth]
    given = tuple((names[j], values[rng.randrange(len(values))]) for j in range(g))
    steps = []
    for s in range(depth):
        if s == 0:  # two distinct given values (or the only one twice)
            chained = names[rng.randrange(g)]
            others = [n for n in names[:g] if n != chained] or [chained]
        else:  # the previous result, and any other earlier variable (or a given value)
            chained = names[g + s - 1]
            others = names[:g] if config.chain == "bijective" else names[: g + s - 1]
        other = others[rng.randrange(len(others))]
        op = ops[rng.randrange(len(ops))]
        left, right = (chained, other) if rng.random() < 0.5 else (other, chained)
        steps.append(Step(names[g + s], left, op, right))
    return Program(config.modulus, given, tuple(steps))


def slipped_solution(
    program: Program,
    rng: random.Random,
    slip_rate: float,
    path: SolutionPath | None = None,
    misconception: Misconception | None = None,
) -> str:
    """A demonstration of `program` in which each step's result is wrong with prob. slip_rate.

    Written on `path`; by default on a path drawn uniformly (`Program.random_path`, first from
    `rng`) when the problem text does not fix the order (`program.listing` set: a tree world),
    else on the order of the steps. A slipped result is drawn uniformly from the other
    modulus − 1 residues; later lines substitute the values as written, so the error propagates
    to the answer line, which states the last written value. A `misconception` writes its rule's
    wrong value with probability `misconception.rate` on each step where the rule applies
    (to the operands as written), in place of a slip there (`rredcot.data.misconceptions`).
    With slip_rate 0 and no misconception this is `program.path_text(path)`, and a rate of 0
    draws nothing from `rng` (the demonstrations of a config without one are unchanged).
    """
    if not 0 <= slip_rate < 1:
        raise ValueError(f"slip_rate must be in [0, 1), got {slip_rate!r}")
    if path is None:
        path = program.random_path(rng) if program.listing is not None else None
    path = path if path is not None else program.canonical_path()
    program.check_path(path)
    m = program.modulus
    written = dict(program.given)
    lines = []
    for name in path.order:
        s = program.step(name)
        left, right = (s.right, s.left) if name in path.commuted else (s.left, s.right)
        x, y = written[left], written[right]
        value = apply_op(s.op, x, y, m)
        wrong = None
        if misconception is not None and misconception.rate:
            wrong = misconception.value(s.op, x, y, m)
        if wrong is not None:
            value = wrong if rng.random() < misconception.rate else value
        elif slip_rate and rng.random() < slip_rate:
            value = (value + 1 + rng.randrange(m - 1)) % m
        written[name] = value
        lines.append(f"{name}={left}{s.op}{right}={x}{s.op}{y}={value}")
    lines.append(f"{ANSWER_PREFIX}{written[program.target]}{ANSWER_CLOSE}")
    return "\n".join(lines)


def choice_points(program: Program, path: SolutionPath) -> dict[int, str]:
    """Where the solution text on `path` could validly differ, character by character, given
    everything before: {offset in `program.path_text(path)`: every valid character there}.

    At the start of a step line, any step whose operands are computed and that is not yet;
    at its first operand, either operand of a commutable step. Every other character is fixed
    by the ones before it (one token per character), so a model that puts its argmax on a valid
    character at every offset writes a valid solution greedily, on some path.
    """
    needs, commutable = program.operands(), set(program.commutable_steps())
    done: set[str] = set()
    out: dict[int, str] = {}
    offset = 0
    lines = program.step_lines(path.commuted, path.order)  # checks the path
    for name, line in zip(path.order, lines, strict=True):
        ready = sorted(n for n in needs if n not in done and all(x in done for x in needs[n]))
        if len(ready) > 1:
            out[offset] = "".join(ready)
        if name in commutable:
            st = program.step(name)
            out[offset + len(name) + 1] = "".join(sorted({st.left, st.right}))
        done.add(name)
        offset += len(line) + 1
    return out


def generate_split(
    n: int,
    depths: Sequence[int],
    seed: int,
    split: str,
    config: WorldConfig,
    exclude: frozenset[str] = frozenset(),
    branches: int | None = None,
) -> pl.DataFrame:
    """`n` distinct problems, row i of depth depths[i % len(depths)], none whose text is in exclude.

    Problems are redrawn until new (rejection sampling); asking for more than
    `problem_space_size` of a depth, or an `exclude` that leaves too few, raises.
    Deterministic in (n, depths, seed, config, exclude, branches); `split` names the ids
    (`synth-{split}-{i:05d}`) and, in a tree world, seeds the paths the solutions are written
    on. Columns: the normalized ones, `depth` (Int64), `program` (JSON).
    """
    import polars as pl  # here, not at the top: the config check imports this module

    from rredcot.data.schema import COLUMNS

    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be an int ≥ 1, got {n!r}")
    if not _SPLIT_NAME.match(split):
        raise ValueError(f"split must match {_SPLIT_NAME.pattern}, got {split!r}")
    check_depths(depths, config)
    check_branches(branches, depths)  # every depth up front (draw_program refuses a chain world)
    depths = list(depths)
    for d in set(depths):
        want = sum(1 for i in range(n) if depths[i % len(depths)] == d)
        space = problem_space_size(d, config)
        if want > space:
            raise ValueError(
                f"n={n}: {want} distinct problems of depth {d} requested but only {space} "
                "exist; lower n or raise depth, n_given or modulus"
            )
    rng = random.Random(seed)
    # A tree world's dataset solution is written on a uniformly drawn valid path, as a dataset
    # author would pick one: its own stream, so the problems do not depend on it.
    authors = random.Random(derive_seed(seed, f"{split}:solution_paths"))
    seen: set[str] = set()
    rows: dict[str, list[Any]] = {c: [] for c in (*COLUMNS, "depth", "program")}
    for i in range(n):
        depth = depths[i % len(depths)]
        for _ in range(_MAX_REDRAWS):
            prog = draw_program(rng, depth, config, branches)
            problem = prog.problem_text()
            if problem not in seen and problem not in exclude and config.accepts(prog):
                break
        else:
            raise ValueError(
                f"split {split!r}: no new problem of depth {depth} in {_MAX_REDRAWS} draws at "
                f"row {i}; `exclude` and earlier rows cover nearly all "
                f"{problem_space_size(depth, config)} — lower n or change depths"
            )
        seen.add(problem)
        rows["id"].append(f"synth-{split}-{i:05d}")
        rows["problem"].append(problem)
        rows["answer"].append(prog.answer)
        path = prog.random_path(authors) if prog.listing is not None else prog.canonical_path()
        rows["solution"].append(prog.path_text(path))
        rows["source"].append(SOURCE)
        rows["depth"].append(depth)
        rows["program"].append(prog.to_json())
    schema = {c: pl.String() for c in rows} | {"depth": pl.Int64()}
    return pl.DataFrame(rows, schema=schema)


def world_config(params: Mapping[str, Any]) -> WorldConfig:
    """The `WorldConfig` of a `world` config block (its generator keys; the class's defaults
    otherwise)."""
    keys = [f.name for f in dataclasses.fields(WorldConfig)]
    return WorldConfig(**{k: params[k] for k in keys if k in params})


def make_study_pool(
    spec: SplitSpec, seed: int, config: WorldConfig, exclude: frozenset[str]
) -> pl.DataFrame:
    """The estimator studies' problem pool: a split named `study_pool` drawn after the world,
    disjoint from every world table in `exclude`. Drawn apart from `make_world` so that its
    size never changes the training splits (train excludes only the world's own splits)."""
    return generate_split(
        spec.n,
        spec.depths,
        derive_seed(seed, "study_pool"),
        "study_pool",
        config,
        exclude,
        spec.branches,
    )


def derive_seed(seed: int, split: str) -> int:
    """A stable per-split seed (sha256, not Python's salted hash), so splits are independent."""
    digest = hashlib.sha256(f"rredcot-synthetic:{seed}:{split}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def make_world(
    train: SplitSpec,
    benchmarks: Mapping[str, SplitSpec],
    seed: int,
    config: WorldConfig,
) -> dict[str, pl.DataFrame]:
    """The train split and the benchmark splits (e.g. `synth_id`, `synth_ood`), pairwise disjoint.

    Benchmarks are generated first, in mapping order, each excluding the problems of the ones
    before it; train excludes them all, so no benchmark problem leaks into training. Each split
    draws from `derive_seed(seed, name)`.
    """
    if "train" in benchmarks:
        raise ValueError("benchmarks: the name 'train' is reserved for the training split")
    world: dict[str, pl.DataFrame] = {}
    taken: set[str] = set()
    for name, spec in benchmarks.items():
        df = generate_split(
            spec.n,
            spec.depths,
            derive_seed(seed, name),
            name,
            config,
            frozenset(taken),
            spec.branches,
        )
        taken.update(df["problem"].to_list())
        world[name] = df
    world["train"] = generate_split(
        train.n, train.depths, derive_seed(seed, "train"), "train", config, frozenset(taken)
    )
    return world
