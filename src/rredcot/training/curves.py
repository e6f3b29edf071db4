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
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
from transformers import PreTrainedTokenizerBase, TrainerCallback

from rredcot.generation.base import SamplingParams
from rredcot.generation.hf import HFBackend
from rredcot.tasks.base import Task
from rredcot.training.curve_settings import CurveSettings

log = logging.getLogger(__name__)

CURVE_COLUMNS: tuple[str, ...] = ("step", "problem_id", "sample_index", "reward")


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
