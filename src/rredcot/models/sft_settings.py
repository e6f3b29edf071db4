"""The SFT warm-up's settings (config key `sft`), apart from the trainer: the config check at
Snakemake load time builds them without importing torch or TRL."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rredcot.data.misconceptions import Misconception

LR_SCHEDULERS: tuple[str, ...] = (
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
)


@dataclass(frozen=True)
class SFTSettings:
    """Hyperparameters of the SFT warm-up (config key `sft`)."""

    max_steps: int = 2000
    """Optimizer steps; the run's length (examples seen = max_steps * batch_size)."""
    batch_size: int = 64
    """Examples per optimizer step (no gradient accumulation: the tiny model fits any batch)."""
    learning_rate: float = 3e-3
    """Peak AdamW learning rate; tiny models trained from scratch take large rates."""
    warmup_ratio: float = 0.05
    """Fraction of max_steps with linear warm-up from 0 to learning_rate, in [0, 1)."""
    lr_scheduler: str = "cosine"
    """Schedule after warm-up; one of `LR_SCHEDULERS` (transformers' scheduler names)."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip; 0 disables clipping."""
    max_length: int = 256
    """Longest prompt + completion + EOS in tokens; a longer example is an error, not cut."""
    seed: int = 0
    """Seed of data order and dropout (the initial weights are seeded by build_tiny_model)."""
    logging_steps: int = 50
    """Log loss, learning rate and gradient norm every this many steps."""
    eval_steps: int = 50
    """Check the held-out references every this many steps (when held-out examples are given)."""
    transition_greedy: float = 0.9
    """SFT is past its sharp transition once this share of held-out references is the model's
    greedy (teacher-forced argmax) output at every token."""
    anneal_steps: int | None = 400
    """With held-out examples: keep the peak learning rate (after warm-up) until the held-out
    check finds SFT past its transition, then decay it to 0 by a cosine over this many steps
    and stop. When the transition comes depends on float rounding; what the base ends as does
    not: the same anneal from the same regime. max_steps caps the run. None: the ordinary
    `lr_scheduler` over max_steps."""

    def __post_init__(self) -> None:
        for name in ("max_steps", "batch_size", "max_length", "logging_steps", "eval_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"sft.{name}: expected a positive integer, got {value!r}")
        if not self.learning_rate > 0:
            raise ValueError(f"sft.learning_rate: expected > 0, got {self.learning_rate!r}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"sft.warmup_ratio: expected in [0, 1), got {self.warmup_ratio!r}")
        if self.lr_scheduler not in LR_SCHEDULERS:
            raise ValueError(
                f"sft.lr_scheduler: expected one of {list(LR_SCHEDULERS)}, "
                f"got {self.lr_scheduler!r}"
            )
        if self.weight_decay < 0 or self.max_grad_norm < 0:
            raise ValueError("sft.weight_decay and sft.max_grad_norm: expected >= 0")
        if not 0 < self.transition_greedy <= 1:
            raise ValueError(
                f"sft.transition_greedy: expected in (0, 1], got {self.transition_greedy!r}"
            )
        if self.anneal_steps is not None and (
            isinstance(self.anneal_steps, bool)
            or not isinstance(self.anneal_steps, int)
            or not 1 <= self.anneal_steps < self.max_steps
        ):
            raise ValueError(
                f"sft.anneal_steps: expected null or an integer in [1, max_steps), "
                f"got {self.anneal_steps!r}"
            )


@dataclass(frozen=True)
class DemonstrationErrors:
    """What the `sft` block says about the demonstrations' errors: random slips per step, and a
    systematic misconception (None: none)."""

    slip_rate: float = 0.0
    misconception: Misconception | None = None


def sft_block(
    sft: Mapping[str, Any], seed: int, train_rows: int
) -> tuple[SFTSettings, DemonstrationErrors, int]:
    """(settings, the demonstrations' errors, heldout_problems) of the `sft` config block for a
    train split of `train_rows` problems; raises ValueError naming the key. The step and the
    config check at load time both call it, so SFT never learns of a bad value first."""
    values = dict(sft)
    slip_rate = values.pop("slip_rate", 0.0)
    block = values.pop("misconception", None)
    if block is not None and not isinstance(block, Mapping):
        raise ValueError(f"sft.misconception: expected a mapping or null, got {block!r}")
    misconception = None if block is None else Misconception(**block)
    heldout = values.pop("heldout_problems", 0)
    settings = SFTSettings(seed=seed, **values)
    if heldout >= train_rows:
        raise ValueError(
            f"sft.heldout_problems: {heldout} leaves no training rows of the {train_rows} of the "
            "train split"
        )
    if settings.anneal_steps is not None and not heldout:
        raise ValueError("sft.anneal_steps: needs held-out problems (sft.heldout_problems > 0)")
    return settings, DemonstrationErrors(slip_rate, misconception), heldout
