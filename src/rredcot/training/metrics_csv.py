"""metrics.csv: one row per optimizer step, the trainer's logs under grouped names."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from transformers import TrainerCallback

# metrics.csv column -> key in the trainer's logs (TRL's names, or ours where they match).
CSV_COLUMNS: dict[str, str] = {
    "reward/mean": "reward",
    "reward/std": "reward_std",
    "reward/accuracy": "reward/accuracy",
    "reward/frac_zero_std": "frac_reward_zero_std",
    "loss/policy": "loss",
    "loss/grad_norm": "grad_norm",
    "loss/learning_rate": "learning_rate",
    "loss/clip_ratio": "clip_ratio/region_mean",
    "policy/entropy": "entropy",
    "credit/advantage_mean": "credit/advantage_mean",
    "credit/advantage_std": "credit/advantage_std",
    "credit/advantage_min": "credit/advantage_min",
    "credit/advantage_max": "credit/advantage_max",
    "credit/forward_tokens": "credit/forward_tokens",
    "credit/seconds": "credit/seconds",
    "tokens/completion_mean": "completions/mean_length",
    "tokens/clipped_ratio": "completions/clipped_ratio",
    "tokens/seen": "num_tokens",
    "time/step_seconds": "step_time",
}


class MetricsCSV(TrainerCallback):
    """Appends one row per logged optimizer step to a CSV; on resume, rows after the checkpoint
    (steps that will be run again) are dropped first, so each step appears once."""

    def __init__(self, path: Path, extra: Sequence[str], resume_step: int | None) -> None:
        self.path = path
        self.columns = {**CSV_COLUMNS, **{name: name for name in extra if name not in CSV_COLUMNS}}
        self.header = ["step", *self.columns]
        kept: list[dict[str, str]] = []
        if resume_step is not None and path.is_file():
            with path.open(newline="") as fh:
                kept = [r for r in csv.DictReader(fh) if int(r["step"]) <= resume_step]
        with path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, self.header)
            writer.writeheader()
            writer.writerows(kept)

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001, ANN201 (HF's signature)
        if not logs or "loss" not in logs:
            return
        row = {"step": state.global_step}
        for column, key in self.columns.items():
            value = logs.get(key)
            row[column] = "" if value is None else value
        with self.path.open("a", newline="") as fh:
            csv.DictWriter(fh, self.header).writerow(row)
