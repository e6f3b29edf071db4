"""Programs of the synthetic world: named modular-arithmetic steps and their solution paths.

A problem gives a few values and named steps; the reference solution writes one checkable step
per line (`Program.solution_text`), in any order that computes a step after its operands
(`SolutionPath`). See `rredcot.data.world` for how problems are drawn and
`rredcot.data.checker` for the per-step checker.
"""

from __future__ import annotations

import functools
import json
import random
import string
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ANSWER_PREFIX = "Answer: "  # starts the answer line; the task's trigger is "\n" + this
ANSWER_CLOSE = "."  # ends the answer line; never appears in a step line, so it is a stop string
VARIABLES = string.ascii_lowercase  # given values first, then one name per step
OPS: tuple[str, ...] = ("+", "-", "*")
COMMUTATIVE: frozenset[str] = frozenset(
    {"+", "*"}
)  # x op y = y op x (mod m): either order is valid


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
