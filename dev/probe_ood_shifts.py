"""Which out-of-distribution shift can the base partly solve? The probe that chose `synth_ood`.

    python dev/probe_ood_shifts.py --model results/models/base [--n 120] [--samples 4]

Draws `--n` problems per candidate shift of the tree world (config.yaml's `world`), samples
`--samples` responses each from the base with the evaluation protocol (T = 1, 128 new tokens)
and prints pass@1 and luck (right answer, wrong chain by the per-step checker). The candidates:
depth 7 (one letter past SFT's), every name drawn from the whole alphabet, two or four givens,
givens that are not units mod 10, and depths 4-6 as one-branch chains (`branches: 1`). The
split is chosen by whether the base is neither ~0 nor ~1 on it, never by a trained policy.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import string
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rredcot.data.synthetic import (  # noqa: E402
    Program,
    Step,
    WorldConfig,
    check_response,
    draw_program,
    extract_answer,
    world_config,
)
from rredcot.generation import SamplingParams, backend_from_settings  # noqa: E402
from rredcot.models.loading import load_tokenizer  # noqa: E402
from rredcot.tasks import get_task  # noqa: E402


class NonUnitGivens(WorldConfig):
    """Givens drawn from the residues that are not units mod 10 (the world draws units)."""

    @property
    def given_values(self) -> tuple[int, ...]:
        return (2, 4, 5, 6, 8)


def renamed(prog: Program, rng: random.Random) -> Program:
    """`prog` with every name (givens and steps) replaced by a distinct random letter."""
    names = [n for n, _ in prog.given] + [s.name for s in prog.steps]
    new = dict(zip(names, rng.sample(string.ascii_lowercase, len(names)), strict=True))
    steps = tuple(
        Step(new[s.name], new.get(s.left, s.left), s.op, new.get(s.right, s.right))
        for s in prog.steps
    )
    listing = tuple(new[x] for x in prog.listing) if prog.listing else None
    return Program(prog.modulus, tuple((new[n], v) for n, v in prog.given), steps, listing)


def candidates(world: WorldConfig) -> dict[str, Callable[[random.Random, int], Program]]:
    """Each candidate: (rng, row) -> one problem."""

    def with_(**fields: object) -> WorldConfig:
        return dataclasses.replace(world, **fields)

    def depth(i: int) -> int:
        return (4, 5, 6)[i % 3]

    non_unit = NonUnitGivens(**dataclasses.asdict(world))
    return {
        "depth 7": lambda rng, i: draw_program(rng, 7, world),
        "names from the whole alphabet": lambda rng, i: renamed(
            draw_program(rng, depth(i), world), rng
        ),
        "two givens": lambda rng, i: draw_program(rng, depth(i), with_(n_given=2)),
        "four givens": lambda rng, i: draw_program(rng, depth(i), with_(n_given=4)),
        "non-unit givens": lambda rng, i: draw_program(rng, depth(i), non_unit),
        "one-branch chains (branches: 1)": lambda rng, i: draw_program(rng, depth(i), world, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    p.add_argument("--n", type=int, default=120, help="problems per candidate")
    p.add_argument("--samples", type=int, default=4, help="responses per problem")
    p.add_argument("--seed", type=int, default=99)
    args = p.parse_args()
    world = world_config(yaml.safe_load(args.config.read_text())["world"])
    task = get_task("synthetic")
    tokenizer = load_tokenizer(str(args.model))
    backend = backend_from_settings({"backend": "hf", "dtype": "float32"}, str(args.model))
    sampling = SamplingParams(
        n=args.samples, temperature=1.0, top_p=1.0, max_new_tokens=128, seed=0,
        stop_strings=tuple(task.stop_strings),
    )  # fmt: skip
    print(f"{'candidate':34} pass@1   luck")
    for name, draw in candidates(world).items():
        rng = random.Random(args.seed)
        problems = [draw(rng, i) for i in range(args.n)]
        prompts = [task.build_prompt(q.problem_text(), tokenizer) for q in problems]
        right = lucky = 0
        for c in backend.generate(prompts, sampling):
            prog = problems[c.prompt_index]
            ok = extract_answer(c.text) == prog.answer
            right += ok
            lucky += ok and not check_response(prog, c.text).correct
        total = args.n * args.samples
        print(f"{name:34} {right / total:.3f}   {lucky / total:.3f}", flush=True)


if __name__ == "__main__":
    main()
