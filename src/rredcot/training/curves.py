"""Learning curves: the policy's pass@1 on a fixed held-out problem set during RL.

A run evaluates its in-memory policy every `every` optimizer steps with the evaluation
protocol of the held-out split (k samples per problem, the split's temperature, top_p and
budget, one sampling seed for every run), and appends one row per sample to `curve.csv` in the
run directory. Step 0 (the base) and the final step are not evaluated here: they are the
`generate` rule's evaluations of the base and of `final/` under the same protocol and seed, so
no checkpoint is evaluated twice and the curve's end points are the benchmark table's numbers.

The sampling seed is shared by every run and step (common random numbers: the same problem
and sample index draws the same Gumbel noise), so differences between steps and methods are
not blurred by sampling noise more than they must be. The RNG states of the run are saved and
restored around an evaluation, so turning curves on does not change what the run trains on.
"""

from __future__ import annotations

import csv
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
from transformers import PreTrainedTokenizerBase, TrainerCallback

from rredcot.generation.base import SamplingParams
from rredcot.generation.hf import HFBackend
from rredcot.tasks.base import Task

log = logging.getLogger(__name__)

CURVE_COLUMNS: tuple[str, ...] = ("step", "problem_id", "sample_index", "reward")


@dataclass(frozen=True)
class CurveSettings:
    """How a run evaluates itself (config `training.curve` + the split's evaluation protocol)."""

    every: int
    """Evaluate after every this many optimizer steps (strictly between 0 and max_steps)."""
    samples_per_problem: int
    """k samples per problem (the split's evaluation k)."""
    temperature: float
    """Sampling temperature (the split's evaluation temperature)."""
    top_p: float
    """Nucleus mass (the split's evaluation top_p)."""
    max_new_tokens: int
    """Budget per sample (the split's evaluation budget)."""
    seed: int
    """Sampling seed, the same for every run and step (the evaluation seed)."""
    batch_size: int = 64
    """Sequences per generate call."""

    def __post_init__(self) -> None:
        for name in ("every", "samples_per_problem", "max_new_tokens", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"training.curve.{name}: expected an integer >= 1, got {value!r}")

    @classmethod
    def from_dict(cls, mapping: dict[str, Any]) -> CurveSettings:
        allowed = set(cls.__dataclass_fields__)
        unknown = sorted(set(mapping) - allowed)
        if unknown:
            raise ValueError(f"training.curve: unknown key(s) {unknown}; allowed {sorted(allowed)}")
        return cls(**mapping)

    @classmethod
    def from_evaluation(
        cls, evaluation: dict[str, Any], split: str, every: int, seed: int
    ) -> CurveSettings:
        """The evaluation protocol of `split` (config `evaluation` with its `per_benchmark`
        overrides): the curve of a run is scored exactly as the split's benchmark table."""
        ev = {k: v for k, v in evaluation.items() if k != "per_benchmark"}
        ev.update(evaluation.get("per_benchmark", {}).get(split, {}))
        keys = ("samples_per_problem", "temperature", "top_p", "max_new_tokens", "batch_size")
        return cls(every=every, seed=seed, **{k: ev[k] for k in keys})

    def steps(self, max_steps: int) -> list[int]:
        """The optimizer steps this run evaluates itself at."""
        return list(range(self.every, max_steps, self.every))


def _rng_state() -> tuple[Any, ...]:
    return random.getstate(), np.random.get_state(), torch.get_rng_state()


def _set_rng_state(state: tuple[Any, ...]) -> None:
    random.setstate(state[0])
    np.random.set_state(state[1])
    torch.set_rng_state(state[2])


def evaluate_policy(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    problems: pl.DataFrame,
    settings: CurveSettings,
) -> pl.DataFrame:
    """Rewards of k samples per problem: columns problem_id, sample_index, reward (0/1)."""
    was_training = model.training
    state = _rng_state()
    backend = HFBackend(model, tokenizer, batch_size=settings.batch_size, show_progress=False)
    prompts = [task.build_prompt(q, tokenizer) for q in problems["problem"].to_list()]
    params = SamplingParams(
        n=settings.samples_per_problem,
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_new_tokens=settings.max_new_tokens,
        seed=settings.seed,
        stop_strings=tuple(task.stop_strings),
    )
    try:
        with torch.no_grad():
            completions = backend.generate(prompts, params)
    finally:
        _set_rng_state(state)
        model.train(was_training)
    ids, answers = problems["id"].to_list(), problems["answer"].to_list()
    return pl.DataFrame(
        {
            "problem_id": [ids[c.prompt_index] for c in completions],
            "sample_index": [c.sample_index for c in completions],
            "reward": [
                float(task.grade(c.text, answers[c.prompt_index]).correct) for c in completions
            ],
        },
        schema={"problem_id": pl.String, "sample_index": pl.Int64, "reward": pl.Float64},
    )


class LearningCurve(TrainerCallback):
    """Appends the held-out evaluation at every `settings.steps(max_steps)` step to `path`.

    On resume, rows of steps after the checkpoint are dropped first (they will be run again),
    so every evaluated step appears once.
    """

    def __init__(
        self,
        path: Path,
        problems: pl.DataFrame,
        task: Task,
        tokenizer: PreTrainedTokenizerBase,
        settings: CurveSettings,
        resume_step: int | None,
    ) -> None:
        self.path, self.problems, self.task = path, problems, task
        self.tokenizer, self.settings = tokenizer, settings
        kept: list[dict[str, str]] = []
        if resume_step is not None and path.is_file():
            with path.open(newline="") as fh:
                kept = [r for r in csv.DictReader(fh) if int(r["step"]) <= resume_step]
        with path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, CURVE_COLUMNS)
            writer.writeheader()
            writer.writerows(kept)

    def on_step_end(self, args, state, control, model=None, **kwargs):  # noqa: ANN001 (HF)
        if state.global_step not in self.settings.steps(state.max_steps):
            return control
        rewards = evaluate_policy(model, self.tokenizer, self.task, self.problems, self.settings)
        log.info(
            "held-out pass@1 at step %d: %.4f (%d samples)",
            state.global_step,
            float(rewards["reward"].mean()),
            rewards.height,
        )
        with self.path.open("a", newline="") as fh:
            writer = csv.DictWriter(fh, CURVE_COLUMNS)
            for row in rewards.iter_rows(named=True):
                writer.writerow({"step": state.global_step, **row})
        return control
