"""SFT warm-up: teach the freshly built policy the task format before RL.

RL with outcome rewards needs a policy that is sometimes right and sometimes wrong; a random
tiny model is never right. A short supervised run on (prompt, reference completion) pairs gives
that starting point. The training loop is TRL's `SFTTrainer` (prompt-completion data, loss on
completion tokens only, EOS appended); this module only sets it up and reports what it cost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback
from trl import SFTConfig, SFTTrainer

log = logging.getLogger(__name__)

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

    max_steps: int = 600
    """Optimizer steps; the run's length (examples seen = max_steps * batch_size)."""
    batch_size: int = 32
    """Examples per optimizer step (no gradient accumulation: the tiny model fits any batch)."""
    learning_rate: float = 3e-3
    """Peak AdamW learning rate; tiny models trained from scratch take large rates."""
    warmup_ratio: float = 0.05
    """Fraction of max_steps with linear warm-up from 0 to learning_rate, in [0, 1)."""
    lr_scheduler: str = "cosine"
    """Schedule after warm-up; one of `LR_SCHEDULERS` (transformers' scheduler names)."""
    weight_decay: float = 0.01
    """AdamW decoupled weight decay."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip; 0 disables clipping."""
    max_length: int = 512
    """Longest prompt + completion + EOS in tokens; a longer example is an error, not cut."""
    seed: int = 0
    """Seed of data order and dropout (the initial weights are seeded by build_tiny_model)."""
    logging_steps: int = 50
    """Log loss, learning rate and gradient norm every this many steps."""

    def __post_init__(self) -> None:
        for name in ("max_steps", "batch_size", "max_length", "logging_steps"):
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


def sft_config(settings: SFTSettings, output_dir: str | Path) -> SFTConfig:
    """TRL's config for `settings`: CPU, fp32, completion-only loss, no reporting or checkpoints."""
    return SFTConfig(
        output_dir=str(output_dir),
        max_steps=settings.max_steps,
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=1,
        learning_rate=settings.learning_rate,
        lr_scheduler_type=settings.lr_scheduler,
        warmup_steps=float(settings.warmup_ratio),  # a float in [0, 1) is a ratio of max_steps
        weight_decay=settings.weight_decay,
        max_grad_norm=settings.max_grad_norm,
        max_length=settings.max_length,
        seed=settings.seed,
        logging_steps=settings.logging_steps,
        logging_first_step=True,
        completion_only_loss=True,
        packing=False,
        activation_checkpointing=False,  # TRL defaults to on; it costs time and saves nothing here
        use_cpu=True,
        bf16=False,
        fp16=False,
        report_to="none",
        save_strategy="no",
        eval_strategy="no",
        include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=0,
        disable_tqdm=False,
    )


def _check_examples(
    examples: Sequence[Mapping[str, str]], tokenizer: PreTrainedTokenizerBase, max_length: int
) -> None:
    """Every example has string prompt/completion and fits max_length (TRL would cut or drop it)."""
    if not examples:
        raise ValueError("sft examples: empty; need at least one (prompt, completion) pair")
    for i, example in enumerate(examples):
        for key in ("prompt", "completion"):
            if not isinstance(example.get(key), str) or not example[key]:
                raise ValueError(f"sft example {i}: {key!r} must be a non-empty string")
        n_tokens = len(tokenizer(example["prompt"] + example["completion"])["input_ids"]) + 1
        if n_tokens > max_length:
            raise ValueError(
                f"sft example {i}: {n_tokens} tokens (prompt + completion + EOS) exceed "
                f"sft.max_length={max_length}; raise max_length or shorten the example"
            )


class _LossHistory(TrainerCallback):
    """Keeps every logged training loss so the first and final values can be reported."""

    def __init__(self) -> None:
        self.losses: list[tuple[int, float]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001 (HF signature)
        if logs and "loss" in logs:
            self.losses.append((state.global_step, float(logs["loss"])))


def build_sft_trainer(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: Sequence[Mapping[str, str]],
    settings: SFTSettings,
    output_dir: str | Path,
) -> SFTTrainer:
    """TRL's trainer on `examples`; its prepared dataset holds the labels (-100 on the prompt)."""
    _check_examples(examples, tokenizer, settings.max_length)
    dataset = Dataset.from_list(
        [{"prompt": ex["prompt"], "completion": ex["completion"]} for ex in examples]
    )
    return SFTTrainer(
        model=model,
        args=sft_config(settings, output_dir),
        train_dataset=dataset,
        processing_class=tokenizer,
    )


def run_sft(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: Sequence[Mapping[str, str]],
    settings: SFTSettings,
    output_dir: str | Path,
) -> dict[str, float]:
    """Train `model` in place on (prompt, completion) pairs; save model + tokenizer to output_dir.

    Loss is the mean next-token cross-entropy over completion tokens (EOS included); prompt
    tokens are labelled -100. Returns metrics: `loss/first`, `loss/final` (logged training
    losses), `train/steps`, `train/examples`, `train/tokens` (non-padding input tokens),
    `time/sft_seconds` (training wall time) and `time/tokens_per_second`.
    """
    output_dir = Path(output_dir)
    history = _LossHistory()
    trainer = build_sft_trainer(model, tokenizer, examples, settings, output_dir)
    trainer.add_callback(history)
    model.train()
    start = time.perf_counter()
    result = trainer.train()
    seconds = time.perf_counter() - start
    model.eval()
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    tokens = int(trainer.state.num_input_tokens_seen)
    metrics = {
        "loss/first": history.losses[0][1] if history.losses else float("nan"),
        "loss/final": history.losses[-1][1] if history.losses else float("nan"),
        "loss/mean": float(result.training_loss),
        "train/steps": int(trainer.state.global_step),
        "train/examples": len(examples),
        "train/tokens": tokens,
        "time/sft_seconds": seconds,
        "time/tokens_per_second": tokens / seconds if seconds > 0 else float("nan"),
    }
    log.info("SFT done: %s", metrics)
    return metrics
