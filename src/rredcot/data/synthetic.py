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
        if self.chain == "bijective" and len(self.given_values) < min(2, self.n_given):
            raise ValueError(
                f"chain 'bijective' draws given values from the units mod {self.modulus}, "
                f"{list(self.given_values)}: too few for {self.n_given} given values"
            )

    @property
    def given_values(self) -> tuple[int, ...]:
        """Values a given variable may take: every residue, or (bijective) the units only."""
        if self.chain == "bijective":
            return tuple(v for v in range(self.modulus) if math.gcd(v, self.modulus) == 1)
        return tuple(range(self.modulus))

    @property
    def max_depth(self) -> int:
        """The deepest problem the variable names allow."""
        return len(VARIABLES) - self.n_given


@dataclass(frozen=True)
class SplitSpec:
    """Size and depths of one split; depths are assigned round-robin, so each gets n/len(depths)."""

    n: int
    depths: list[int]

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1:
            raise ValueError(f"n must be an int ≥ 1, got {self.n!r}")
        check_depths(self.depths)


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
class Program:
    """Everything the step checker needs: modulus, given values, steps; the last step is asked."""

    modulus: int
    given: tuple[tuple[str, int], ...]
    steps: tuple[Step, ...]

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

    def step_lines(self, commuted: Collection[str] = ()) -> list[str]:
        """The reference line of every step: `c=a+b=3+8=1`; the steps named in `commuted`
        (commutative ops only) with their operands swapped, `c=b+a=8+3=1`: another valid path."""
        vals = dict(self.given)
        lines = []
        for s in self.steps:
            left, right = s.left, s.right
            if s.name in commuted:
                if s.op not in COMMUTATIVE:
                    raise ValueError(
                        f"commuted: step {s.name}={left}{s.op}{right} is not commutative"
                    )
                left, right = right, left
            x, y = vals[left], vals[right]
            vals[s.name] = apply_op(s.op, x, y, self.modulus)
            lines.append(f"{s.name}={left}{s.op}{right}={x}{s.op}{y}={vals[s.name]}")
        return lines

    def commutable_steps(self) -> tuple[str, ...]:
        """Names of the steps whose op is commutative (each may be written either way round)."""
        return tuple(s.name for s in self.steps if s.op in COMMUTATIVE)

    def answer_line(self) -> str:
        return f"{ANSWER_PREFIX}{self.answer}{ANSWER_CLOSE}"

    def problem_text(self) -> str:
        given = ", ".join(f"{n}={v}" for n, v in self.given)
        steps = " ".join(f"{s.name}={s.left}{s.op}{s.right}." for s in self.steps)
        return f"{given}. {steps} Find {self.target}."

    def solution_text(self, commuted: Collection[str] = ()) -> str:
        """The reference completion: one step per line, then the answer line (no newline after);
        `commuted` as in `step_lines` (a different valid path, `check_response` accepts it)."""
        return "\n".join([*self.step_lines(commuted), self.answer_line()])

    def to_json(self) -> str:
        return json.dumps(
            {
                "modulus": self.modulus,
                "given": [[n, v] for n, v in self.given],
                "steps": [[s.name, s.left, s.op, s.right] for s in self.steps],
            },
            separators=(",", ":"),
        )

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
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(
                "program must be {'modulus': int, 'given': [[name, int], …], "
                f"'steps': [[name, left, op, right], …]}}; got {d!r} ({e})"
            ) from e
        if modulus < 2 or not steps:
            raise ValueError(f"program needs modulus ≥ 2 and ≥ 1 step, got {d!r}")
        known = {n for n, _ in given}
        for s in steps:
            if s.op not in OPS or s.left not in known or s.right not in known or s.name in known:
                raise ValueError(f"program step {s} uses an unknown op or variable: {d!r}")
            known.add(s.name)
        return cls(modulus, given, steps)


def problem_space_size(depth: int, config: WorldConfig) -> int:
    """How many distinct problems of `depth` the generator can draw.

    v^g given values (v = len(config.given_values)) × |ops|·g(g−1) first steps (|ops| if
    g = 1) × Π_{s=2..depth} |ops|·2·o_s later steps (previous result on either side, one of o_s
    other operands: every earlier variable but the previous, g + s − 2, or a given value, g).
    """
    check_depths([depth], config)
    g, k = config.n_given, len(config.ops)
    size = len(config.given_values) ** g * k * max(g * (g - 1), 1)
    bijective = config.chain == "bijective"
    return size * math.prod(k * 2 * (g if bijective else g + s - 2) for s in range(2, depth + 1))


def draw_program(rng: random.Random, depth: int, config: WorldConfig) -> Program:
    """One random problem of `depth` computed steps."""
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


def slipped_solution(program: Program, rng: random.Random, slip_rate: float) -> str:
    """A demonstration of `program` in which each step's result is wrong with prob. slip_rate.

    A slipped result is drawn uniformly from the other modulus − 1 residues; later lines
    substitute the values as written, so the error propagates to the answer line, which states
    the last written value. With slip_rate 0 this is `program.solution_text()`.
    """
    if not 0 <= slip_rate < 1:
        raise ValueError(f"slip_rate must be in [0, 1), got {slip_rate!r}")
    m = program.modulus
    written = dict(program.given)
    lines = []
    for s in program.steps:
        x, y = written[s.left], written[s.right]
        value = apply_op(s.op, x, y, m)
        if slip_rate and rng.random() < slip_rate:
            value = (value + 1 + rng.randrange(m - 1)) % m
        written[s.name] = value
        lines.append(f"{s.name}={s.left}{s.op}{s.right}={x}{s.op}{y}={value}")
    lines.append(f"{ANSWER_PREFIX}{written[program.target]}{ANSWER_CLOSE}")
    return "\n".join(lines)


def generate_split(
    n: int,
    depths: Sequence[int],
    seed: int,
    split: str,
    config: WorldConfig,
    exclude: frozenset[str] = frozenset(),
) -> pl.DataFrame:
    """`n` distinct problems, row i of depth depths[i % len(depths)], none whose text is in exclude.

    Problems are redrawn until new (rejection sampling); asking for more than
    `problem_space_size` of a depth, or an `exclude` that leaves too few, raises.
    Deterministic in (n, depths, seed, config, exclude); `split` only names the ids
    (`synth-{split}-{i:05d}`). Columns: the normalized ones, `depth` (Int64), `program` (JSON).
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be an int ≥ 1, got {n!r}")
    if not _SPLIT_NAME.match(split):
        raise ValueError(f"split must match {_SPLIT_NAME.pattern}, got {split!r}")
    check_depths(depths, config)
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
    seen: set[str] = set()
    rows: dict[str, list[Any]] = {c: [] for c in (*COLUMNS, "depth", "program")}
    for i in range(n):
        depth = depths[i % len(depths)]
        for _ in range(_MAX_REDRAWS):
            prog = draw_program(rng, depth, config)
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
        rows["solution"].append(prog.solution_text())
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
    )


def make_study_pool(
    spec: SplitSpec, seed: int, config: WorldConfig, exclude: frozenset[str]
) -> pl.DataFrame:
    """The estimator studies' problem pool: a split named `study_pool` drawn after the world,
    disjoint from every world table in `exclude`. Drawn apart from `make_world` so that its
    size never changes the training splits (train excludes only the world's own splits)."""
    return generate_split(
        spec.n, spec.depths, derive_seed(seed, "study_pool"), "study_pool", config, exclude
    )


def commuted_steps(program: str | Mapping[str, Any] | Program, response: str) -> tuple[str, ...]:
    """Names of the program's steps that `response` writes with commuted operands (`c=b+a=…` for
    `c=a+b`): the trace's own solution path, as `Program.solution_text(commuted=…)` names it."""
    prog = Program.from_json(program)
    defs = {s.name: s for s in prog.steps}
    out = []
    for line in response.split("\n"):
        g = _STEP.fullmatch(line.rstrip(_TRAILING))
        if g is None:
            continue
        name, left, op, right = g.group(1, 2, 3, 4)
        step = defs.get(name)
        if (
            step is not None
            and step.op in COMMUTATIVE
            and step.left != step.right
            and (left, op, right) == (step.right, step.op, step.left)
            and name not in out
        ):
            out.append(name)
    return tuple(out)


def other_path_solution(program: str | Mapping[str, Any] | Program, response: str) -> str | None:
    """A valid solution on a different path than the response's: every commutable step written
    the other way round from how the response writes it (None when no step commutes)."""
    prog = Program.from_json(program)
    commutable = prog.commutable_steps()
    if not commutable:
        return None
    own = set(commuted_steps(prog, response))
    return prog.solution_text(commuted=[n for n in commutable if n not in own])


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
            spec.n, spec.depths, derive_seed(seed, name), name, config, frozenset(taken)
        )
        taken.update(df["problem"].to_list())
        world[name] = df
    world["train"] = generate_split(
        train.n, train.depths, derive_seed(seed, "train"), "train", config, frozenset(taken)
    )
    return world


# The per-step checker (used by grading and by the error localization study).

_STEP = re.compile(r"([a-z])=([a-z])([-+*])([a-z])=(\d+)([-+*])(\d+)=(\d+)")
_TRAILING = " \t\r"  # the only characters ignored at the end of a line


def _answer_value(line: str) -> str | None:
    """The value on an answer line, or None when the line is not one.

    `Answer: 5.` → "5". Tolerated: trailing spaces, spaces after the prefix, and a missing close
    (backends such as vLLM drop the stop string from the output). Nothing else.
    """
    if not line.startswith(ANSWER_PREFIX):
        return None
    value = line[len(ANSWER_PREFIX) :].rstrip(_TRAILING).removesuffix(ANSWER_CLOSE).strip()
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
    g = _STEP.fullmatch(got)
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
        name, kind = _step_verdict(line.rstrip(_TRAILING), prog, known, values)
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
