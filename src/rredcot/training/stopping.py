"""Stopping on a scheduler's signal, and checkpoints by wall time (`CheckpointGuard`).

SIGTERM or SIGUSR1 finishes the optimizer step under way, saves a checkpoint at it and stops
the run (`TrainingInterrupted`; the step script exits with `RETRY_EXIT_CODE`); the rerun
resumes there and ends with the weights of an uninterrupted run.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from numbers import Real
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

log = logging.getLogger(__name__)

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGUSR1)
"""Signals that stop training at the end of the current optimizer step, after a checkpoint:
SLURM sends SIGTERM at the time limit (SIGKILL follows after its KillWait) and any signal
earlier with `sbatch --signal`."""
RETRY_EXIT_CODE = 75
"""The step script's exit status after such a stop (EX_TEMPFAIL: try again); like any nonzero
status it makes Snakemake retry the job (`--retries`), which resumes from the checkpoint."""


class TrainingInterrupted(RuntimeError):
    """Training stopped on a signal after saving a checkpoint at the current step."""

    def __init__(self, signal_name: str, step: int, checkpoint: Path) -> None:
        super().__init__(
            f"{signal_name} received: stopped after optimizer step {step} with checkpoint "
            f"{checkpoint}; rerun to resume from it"
        )
        self.signal_name, self.step, self.checkpoint = signal_name, step, checkpoint


class CheckpointGuard(TrainerCallback):
    """Checkpoints a cluster needs besides `save_steps`: one every `save_minutes` of wall time
    (None: none), and one at the current step when a `STOP_SIGNALS` signal arrives, after which
    training stops.

    The signal handler only records the signal; the step under way finishes (a half-done step
    cannot be saved) and `on_step_end` asks the HF loop to save and stop. On several processes
    each one's decision is combined (max over processes, one small all-reduce per step), so all
    save and stop at the same step even if the signal or the clock reaches them apart.
    """

    def __init__(self, save_minutes: float | None = None) -> None:
        if save_minutes is not None and not (
            isinstance(save_minutes, Real) and math.isfinite(save_minutes) and save_minutes > 0
        ):
            raise ValueError(
                f"training.save_minutes: expected a positive number or null, got {save_minutes!r}"
            )
        self.save_seconds = None if save_minutes is None else 60.0 * save_minutes
        self.received: signal.Signals | None = None
        self.stopped_at: int | None = None
        self.accelerator: Any = None  # set by train_policy once the trainer exists
        self._last_save = time.monotonic()
        self._previous: dict[signal.Signals, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signal.Signals(signum)

    @contextmanager
    def installed(self) -> Iterator[CheckpointGuard]:
        """The signal handlers, in place while the block runs (main thread only: Python
        delivers signals there)."""
        if threading.current_thread() is not threading.main_thread():
            log.warning("not the main thread: SIGTERM/SIGUSR1 will not save a checkpoint")
            yield self
            return
        self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        try:
            yield self
        finally:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)

    def _agreed(self, stop: bool, due: bool) -> tuple[bool, bool]:
        accelerator = self.accelerator
        if accelerator is None or accelerator.num_processes == 1:
            return stop, due
        flags = torch.tensor([float(stop), float(due)], device=accelerator.device)
        flags = accelerator.reduce(flags, reduction="max")
        return bool(flags[0]), bool(flags[1])

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201 (HF's signature)
        due = (
            self.save_seconds is not None
            and time.monotonic() - self._last_save >= self.save_seconds
        )
        stop, due = self._agreed(self.received is not None, due)
        if due:
            log.info("step %d: %s minutes since the last checkpoint: saving", state.global_step,
                     self.save_seconds / 60)  # fmt: skip
        if stop:
            why = self.received.name if self.received is not None else "another process's signal"
            log.warning(
                "%s received: step %d done; saving a checkpoint at it and stopping (exit %d, "
                "a rerun resumes here)",
                why,
                state.global_step,
                RETRY_EXIT_CODE,
            )
            self.stopped_at = state.global_step
            control.should_training_stop = True
        if stop or due:
            control.should_save = True
        return control

    def on_save(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201 (HF's signature)
        self._last_save = time.monotonic()
