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

The module also holds the world's per-step checker (`check_response`), re-exported by the task
`rredcot.tasks.synthetic`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
import re
import string
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from rredcot.data.misconceptions import Misconception
from rredcot.data.schema import COLUMNS

SOURCE = "synthetic"
ANSWER_PREFIX = "Answer: "  # starts the answer line; the task's trigger is "\n" + this
ANSWER_CLOSE = "."  # ends the answer line; never appears in a step line, so it is a stop string
VARIABLES = string.ascii_lowercase  # given values first, then one name per step
OPS: tuple[str, ...] = ("+", "-", "*")
COMMUTATIVE: frozenset[str] = frozenset(
    {"+", "*"}
)  # x op y = y op x (mod m): either order is valid
CHAINS: tuple[str, ...] = ("any", "bijective")
SHAPES: tuple[str, ...] = ("chain", "tree")
MERGE_OPS: frozenset[str] = frozenset({"+", "-"})  # bijective in each operand (unlike *)
_SPLIT_NAME = re.compile(r"^[a-z0-9_]+$")
_MAX_REDRAWS = 100_000  # per row; drawing the last of 10^4 problems takes ~10^4 tries


def apply_op(op: str, x: int, y: int, modulus: int) -> int:
    """x op y (mod modulus), result in 0 … modulus−1."""
    if op == "+":
        return (x + y) % modulus
    if op == "-":
        return (x - y) % modulus
    if op == "*":
        return (x * y) % modulus
    raise ValueError(f"op {op!r} unknown; allowed {OPS}")


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
    chain: str = "any"
    """The other operand of a later step: `any` earlier variable, or a given value
    (`bijective`: givens are units mod modulus, so each step is a bijection of the previous
    result and a single wrong step always reaches the answer)."""
    shape: str = "chain"
    """`chain`: each step uses the previous result and the text lists the steps in solution
    order (one path per problem, up to operand order). `tree`: the steps form an expression
    tree with independent branches, listed in a shuffled order; any order that computes a step
    after its operands is a solution (`draw_tree_program`)."""

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
        if self.shape == "tree" and self.n_given < 2:
            raise ValueError("shape 'tree' needs n_given >= 2 (a branch starts from two givens)")
        if self.bijective and len(self.given_values) < min(2, self.n_given):
            raise ValueError(
                f"a bijective world draws given values from the units mod {self.modulus}, "
                f"{list(self.given_values)}: too few for {self.n_given} given values"
            )

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


@dataclass(frozen=True)
class Step:
    """One computed variable: name = left op right."""

    name: str
    left: str
    op: str
    right: str


@dataclass(frozen=True)
class SolutionPath:
    """One valid way to write a program's solution: the order of its step lines and the steps
    written with their operands swapped (commutative ops only)."""

    order: tuple[str, ...]
    commuted: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Program:
    """Everything the step checker needs: modulus, given values, steps; the last step is asked.

    `steps` is in a valid solution order (each step after its operands). `listing` is the order
    the problem text lists the steps in (None: the order of `steps`)."""

    modulus: int
    given: tuple[tuple[str, int], ...]
    steps: tuple[Step, ...]
    listing: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.listing is not None and sorted(self.listing) != sorted(s.name for s in self.steps):
            raise ValueError(
                f"program listing {list(self.listing)} must name every step exactly once: "
                f"{[s.name for s in self.steps]}"
            )

    @property
    def depth(self) -> int:
        return len(self.steps)

    @property
    def target(self) -> str:
        return self.steps[-1].name

    def values(self) -> dict[str, int]:
        """Value of every variable, given and computed."""
        vals = dict(self.given)
        for s in self.steps:
            vals[s.name] = apply_op(s.op, vals[s.left], vals[s.right], self.modulus)
        return vals

    @property
    def answer(self) -> str:
        return str(self.values()[self.target])

    def step(self, name: str) -> Step:
        for s in self.steps:
            if s.name == name:
                return s
        raise ValueError(f"program has no step named {name!r}")

    def operands(self) -> dict[str, tuple[str, ...]]:
        """The computed operands of every step (givens left out): the order constraints."""
        computed = {s.name for s in self.steps}
        return {
            s.name: tuple(dict.fromkeys(x for x in (s.left, s.right) if x in computed))
            for s in self.steps
        }

    def _completions(self) -> Any:
        """count(done): how many valid orders complete the set `done` of computed steps."""
        needs = self.operands()
        names = tuple(s.name for s in self.steps)

        @functools.cache
        def count(done: frozenset[str]) -> int:
            ready = [n for n in names if n not in done and all(x in done for x in needs[n])]
            return 1 if not ready else sum(count(done | {n}) for n in ready)

        return count, needs, names

    def order_count(self) -> int:
        """Number of valid line orders (linear extensions of the step dependencies)."""
        return self._completions()[0](frozenset())

    def commutable_steps(self) -> tuple[str, ...]:
        """Names of the steps whose op is commutative with two different operands (each may be
        written either way round, a different line)."""
        return tuple(s.name for s in self.steps if s.op in COMMUTATIVE and s.left != s.right)

    def path_count(self) -> int:
        """Number of distinct valid solution texts: orders × 2^(commutable steps)."""
        return self.order_count() * 2 ** len(self.commutable_steps())

    def random_path(self, rng: random.Random) -> SolutionPath:
        """A solution path drawn uniformly from all `path_count()`: each next line with
        probability proportional to the valid orders it leaves, each commutable step swapped
        with probability 1/2."""
        count, needs, names = self._completions()
        done: frozenset[str] = frozenset()
        order: list[str] = []
        while len(order) < len(names):
            ready = [n for n in names if n not in done and all(x in done for x in needs[n])]
            weights = [count(done | {n}) for n in ready]
            pick = rng.choices(ready, weights=weights)[0]
            order.append(pick)
            done = done | {pick}
        commuted = frozenset(n for n in self.commutable_steps() if rng.random() < 0.5)
        return SolutionPath(tuple(order), commuted)

    def check_path(self, path: SolutionPath) -> None:
        """Raise unless `path` is a valid path of this program (naming the first bad step)."""
        needs = self.operands()
        if sorted(path.order) != sorted(needs):
            raise ValueError(f"path order {list(path.order)} must list every step once")
        done: set[str] = set()
        for name in path.order:
            missing = [x for x in needs[name] if x not in done]
            if missing:
                raise ValueError(f"path: step {name} comes before its operand(s) {missing}")
            done.add(name)
        bad = sorted(set(path.commuted) - set(self.commutable_steps()))
        if bad:
            raise ValueError(f"commuted: step(s) {bad} are not commutative")

    def canonical_path(self) -> SolutionPath:
        """The order of `steps`, no operand swapped."""
        return SolutionPath(tuple(s.name for s in self.steps))

    def step_lines(
        self, commuted: Collection[str] = (), order: Sequence[str] | None = None
    ) -> list[str]:
        """The reference line of every step, `c=a+b=3+8=1`, in `order` (default: the order of
        `steps`); the steps named in `commuted` (commutative ops only) with their operands
        swapped, `c=b+a=8+3=1`: another valid path."""
        path = SolutionPath(
            tuple(order) if order is not None else self.canonical_path().order,
            frozenset(commuted),
        )
        self.check_path(path)
        vals = self.values()
        lines = []
        for name in path.order:
            s = self.step(name)
            left, right = (s.right, s.left) if name in path.commuted else (s.left, s.right)
            lines.append(f"{name}={left}{s.op}{right}={vals[left]}{s.op}{vals[right]}={vals[name]}")
        return lines

    def answer_line(self) -> str:
        return f"{ANSWER_PREFIX}{self.answer}{ANSWER_CLOSE}"

    def problem_text(self) -> str:
        given = ", ".join(f"{n}={v}" for n, v in self.given)
        listed = self.listing if self.listing is not None else [s.name for s in self.steps]
        steps = " ".join(f"{s.name}={s.left}{s.op}{s.right}." for s in map(self.step, listed))
        return f"{given}. {steps} Find {self.target}."

    def solution_text(
        self, commuted: Collection[str] = (), order: Sequence[str] | None = None
    ) -> str:
        """The reference completion: one step per line, then the answer line (no newline after);
        `commuted` and `order` as in `step_lines` (any valid path; `check_response` accepts
        each)."""
        return "\n".join([*self.step_lines(commuted, order), self.answer_line()])

    def path_text(self, path: SolutionPath) -> str:
        """`solution_text` on `path`."""
        return self.solution_text(path.commuted, path.order)

    def to_json(self) -> str:
        d: dict[str, Any] = {
            "modulus": self.modulus,
            "given": [[n, v] for n, v in self.given],
            "steps": [[s.name, s.left, s.op, s.right] for s in self.steps],
        }
        if self.listing is not None:
            d["listing"] = list(self.listing)
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_json(cls, program: str | Mapping[str, Any] | Program) -> Program:
        """Parse the `program` column (JSON text or its dict); checks names and references."""
        if isinstance(program, Program):
            return program
        d = json.loads(program) if isinstance(program, str) else program
        try:
            modulus = int(d["modulus"])
            given = tuple((str(n), int(v)) for n, v in d["given"])
            steps = tuple(Step(*(str(x) for x in s)) for s in d["steps"])
            listing = None if d.get("listing") is None else tuple(str(n) for n in d["listing"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(
                "program must be {'modulus': int, 'given': [[name, int], …], "
                "'steps': [[name, left, op, right], …], optional 'listing': [name, …]}; "
                f"got {d!r} ({e})"
            ) from e
        if modulus < 2 or not steps:
            raise ValueError(f"program needs modulus ≥ 2 and ≥ 1 step, got {d!r}")
        known = {n for n, _ in given}
        for s in steps:
            if s.op not in OPS or s.left not in known or s.right not in known or s.name in known:
                raise ValueError(f"program step {s} uses an unknown op or variable: {d!r}")
            known.add(s.name)
        return cls(modulus, given, steps, listing)


def problem_space_size(depth: int, config: WorldConfig) -> int:
    """How many distinct problems of `depth` the generator can draw.

    v^g given values (v = len(config.given_values)) × |ops|·g(g−1) first steps (|ops| if
    g = 1) × Π_{s=2..depth} |ops|·2·o_s later steps (previous result on either side, one of o_s
    other operands: every earlier variable but the previous, g + s − 2, or a given value, g).
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
            if problem not in seen and problem not in exclude:
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
    """The `WorldConfig` of a `world` config block (its generator keys; defaults otherwise)."""
    return WorldConfig(
        modulus=params.get("modulus", 10),
        n_given=params.get("n_given", 3),
        ops=tuple(params.get("ops", OPS)),
        chain=params.get("chain", "any"),
        shape=params.get("shape", "chain"),
    )


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


def step_forms(text: str) -> list[tuple[str, str, str, str]]:
    """(name, left, op, right) of every well-formed step line of `text`, in order (values
    ignored: a line's form is its place on a path, right or wrong)."""
    out = []
    for line in text.split("\n"):
        g = STEP_LINE.fullmatch(line.rstrip(LINE_TRAILING))
        if g is not None:
            out.append(g.group(1, 2, 3, 4))
    return out


def path_overlap(reference: str, response: str) -> float:
    """How far `response` follows the reference's solution path: the longest common
    subsequence of their step-line forms (name and operands in order, values ignored) over the
    reference's step count. 1.0: every reference line, written the same way round, in the same
    relative order; a trace on another order or operand order scores less. NaN when the
    reference has no step line."""
    ref, resp = step_forms(reference), step_forms(response)
    if not ref:
        return math.nan
    row = [0] * (len(resp) + 1)
    for x in ref:
        prev_diag = 0
        for j, y in enumerate(resp, start=1):
            prev_diag, row[j] = row[j], prev_diag + 1 if x == y else max(row[j], row[j - 1])
    return row[-1] / len(ref)


def own_path(program: str | Mapping[str, Any] | Program, response: str) -> SolutionPath:
    """The solution path a response takes: its well-formed lines that compute a step of the
    program after that step's operands (first occurrence; in the response's order and operand
    order), then every step it left out in the program's order. Always a valid path."""
    prog = Program.from_json(program)
    needs, commutable = prog.operands(), set(prog.commutable_steps())
    order: list[str] = []
    commuted: set[str] = set()
    for name, left, op, right in step_forms(response):
        if name not in needs or name in order or any(x not in order for x in needs[name]):
            continue
        st = prog.step(name)
        if (left, op, right) == (st.left, st.op, st.right):
            order.append(name)
        elif name in commutable and (left, op, right) == (st.right, st.op, st.left):
            order.append(name)
            commuted.add(name)
    order += [st.name for st in prog.steps if st.name not in order]
    return SolutionPath(tuple(order), frozenset(commuted))


def own_path_solution(program: str | Mapping[str, Any] | Program, response: str) -> str:
    """The answer key written on the response's own path (`own_path`): an oracle reference,
    which real data never has; for analysis rows only."""
    prog = Program.from_json(program)
    return prog.path_text(own_path(prog, response))


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


# The per-step checker (used by grading and by the error localization study).

STEP_LINE = re.compile(r"([a-z])=([a-z])([-+*])([a-z])=(\d+)([-+*])(\d+)=(\d+)")
LINE_TRAILING = " \t\r"  # the only characters ignored at the end of a line


def _answer_value(line: str) -> str | None:
    """The value on an answer line, or None when the line is not one.

    `Answer: 5.` → "5". Tolerated: trailing spaces, spaces after the prefix, and a missing close
    (backends such as vLLM drop the stop string from the output). Nothing else.
    """
    if not line.startswith(ANSWER_PREFIX):
        return None
    value = line[len(ANSWER_PREFIX) :].rstrip(LINE_TRAILING).removesuffix(ANSWER_CLOSE).strip()
    return value or None


def extract_answer(response: str) -> str | None:
    """The value on the last line that starts with `Answer: `, or None."""
    for line in reversed(response.split("\n")):
        if line.startswith(ANSWER_PREFIX):
            return _answer_value(line)
    return None


@dataclass(frozen=True)
class StepCheck:
    """Verdict of the step checker on one response.

    first_error: 1-based index of the first wrong step; n_steps + 1 when every step is right but
    the answer line is missing, wrong or followed by more text; None when all is right.
    first_error_span: (start, end) character offsets in the response of the offending line
    (without its newline), or (len, len) when the response ends before it.
    error_kind: missing | malformed | wrong_step | wrong_substitution | wrong_value |
    wrong_answer | trailing_text (None when correct).
    answer_correct: exact match of `extract_answer(response)` with the reference answer, the same
    rule as `SyntheticTask.grade`; first_error None implies answer_correct.
    """

    first_error: int | None
    n_steps: int
    answer_correct: bool
    first_error_span: tuple[int, int] | None
    error_kind: str | None = None

    @property
    def correct(self) -> bool:
        return self.first_error is None


def _lines(text: str) -> list[tuple[int, int, str]]:
    """(start, end, line) for every "\\n"-separated line, offsets into `text`."""
    out, start = [], 0
    for line in text.split("\n"):
        out.append((start, start + len(line), line))
        start += len(line) + 1
    return out


def _step_verdict(
    got: str, program: Program, known: dict[str, int], values: dict[str, int]
) -> tuple[str | None, str | None]:
    """(name computed, error kind or None) of one step line, given the variables `known` so far.

    Valid: `name=L op R=x op y=z` where `name` is a step of the program not computed yet, L op R
    is its definition (or R op L for a commutative op), L and R are known, x and y are their
    values and z is the step's value.
    """
    g = STEP_LINE.fullmatch(got)
    if g is None:
        return None, "malformed"
    name, left, op, right = g.group(1, 2, 3, 4)
    step = next((s for s in program.steps if s.name == name), None)
    forms = set()
    if step is not None:
        forms.add((step.left, step.op, step.right))
        if step.op in COMMUTATIVE:
            forms.add((step.right, step.op, step.left))
    if step is None or name in known or (left, op, right) not in forms:
        return name, "wrong_step"  # another variable or expression than a step of the program
    if left not in known or right not in known:
        return name, "wrong_step"  # an operand not computed yet: not a valid order
    if g.group(5, 6, 7) != (str(known[left]), op, str(known[right])):
        return name, "wrong_substitution"
    if g.group(8) != str(values[name]):
        return name, "wrong_value"
    return name, None


def check_response(program: str | Mapping[str, Any] | Program, response: str) -> StepCheck:
    """Check a response (the text after the prompt) step by step against its program.

    Rule: lines 1 … n_steps (lines split on "\\n") compute the program's steps, one per line,
    each `c=a+b=3+8=1` character for character (trailing spaces, tabs and "\\r" ignored), in
    any order that uses only values already known (given or computed on an earlier line), with
    the operands of a commutative op (+, *) either way round: every valid solution path passes
    (`Program.solution_text(commuted=…)`; in a chain every step needs the previous one, so only
    the operand order varies). Line n_steps + 1 must be the answer line `Answer: <answer>.`
    (the same tolerance as `extract_answer`: spaces after the prefix, a missing "."), and only
    whitespace may follow it. The substituted operands must be the values (all earlier steps are
    right by then). A response that ends (or ends in blank space) before line i is missing step
    i. Nothing else is tolerated: no leading spaces, no blank lines between steps, no extra steps.
    """
    prog = Program.from_json(program)
    n = prog.depth
    values = prog.values()
    known = dict(prog.given)
    answer_correct = extract_answer(response) == prog.answer
    lines = _lines(response)
    end = (len(response), len(response))

    def error(i: int, kind: str, span: tuple[int, int]) -> StepCheck:
        return StepCheck(i, n, answer_correct, span, kind)

    def missing(i: int) -> bool:  # 0-based line i absent, or only blank space left
        return i >= len(lines) or (i == len(lines) - 1 and not lines[i][2].strip())

    for i in range(n):
        if missing(i):
            return error(i + 1, "missing", end)
        start, stop, line = lines[i]
        name, kind = _step_verdict(line.rstrip(LINE_TRAILING), prog, known, values)
        if kind is not None:
            return error(i + 1, kind, (start, stop))
        known[name] = values[name]
    if missing(n):
        return error(n + 1, "missing", end)
    start, stop, line = lines[n]
    value = _answer_value(line)
    if value is None:
        return error(n + 1, "malformed", (start, stop))
    if value != prog.answer:
        return error(n + 1, "wrong_answer", (start, stop))
    for start, stop, line in lines[n + 1 :]:
        if line.strip():
            return error(n + 1, "trailing_text", (start, stop))
    return StepCheck(None, n, answer_correct, None, None)
