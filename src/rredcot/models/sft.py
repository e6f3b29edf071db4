"""SFT warm-up: teach the freshly built policy the task format before RL.

RL with outcome rewards needs a policy that is sometimes right and sometimes wrong; a random
tiny model is never right. A short supervised run on (prompt, reference completion) pairs gives
that starting point. The training loop is TRL's `SFTTrainer` (prompt-completion data, loss on
completion tokens only, EOS appended); this module only sets it up and reports what it cost.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import torch
from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback
from trl import SFTConfig, SFTTrainer

from rredcot.data.misconceptions import Misconception
from rredcot.data.synthetic import Program, choice_points, slipped_solution
from rredcot.models.sft_settings import SFTSettings
from rredcot.tasks.base import Task
from rredcot.training.trl_support import checkpointing_argument

log = logging.getLogger(__name__)


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
        # TRL defaults to on; it costs time and saves nothing here
        **checkpointing_argument(False),
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


def demonstrations(
    rows: pl.DataFrame,
    task: Task,
    tokenizer: PreTrainedTokenizerBase,
    slip_rate: float = 0.0,
    seed: int = 0,
    misconception: Misconception | None = None,
) -> list[dict[str, Any]]:
    """(prompt, completion) pairs of world rows; each completion step slips with `slip_rate`,
    and steps where the `misconception` applies are written its way with its rate.

    Without either, in a chain world the completion is the row's reference solution;
    otherwise `slipped_solution` redraws it from the row's program (seeded, one stream for all
    rows), in a tree world on a uniformly drawn solution path, so that every valid path is in
    the demonstrations. A clean tree-world example also carries `alternatives`
    (`choice_points`: the offsets where another character is as valid), which `reference_fit`
    needs to call a greedy output right on any path.
    """
    rng = random.Random(seed)
    errors = bool(slip_rate) or (misconception is not None and misconception.rate > 0)
    out: list[dict[str, Any]] = []
    for row in rows.iter_rows(named=True):
        program = Program.from_json(row["program"])
        example: dict[str, Any] = {"prompt": task.build_prompt(row["problem"], tokenizer)}
        if program.listing is not None:
            path = program.random_path(rng)
            example["completion"] = slipped_solution(program, rng, slip_rate, path, misconception)
            if not errors:
                example["alternatives"] = choice_points(program, path)
        elif errors:
            example["completion"] = slipped_solution(program, rng, slip_rate, None, misconception)
        else:
            example["completion"] = task.reference_completion(row)
        out.append(example)
    return out


def mode_misconception(misconception: Misconception | None) -> Misconception | None:
    """The demonstrations' mode on the rule's steps: the misconception written every time where
    its rate makes it the more likely value (> 1/2), else none (the right value is the mode)."""
    if misconception is None or misconception.rate <= 0.5:
        return None
    return Misconception(misconception.rule, 1.0)


def heldout_demonstrations(
    rows: pl.DataFrame,
    task: Task,
    tokenizer: PreTrainedTokenizerBase,
    seed: int = 0,
    misconception: Misconception | None = None,
) -> list[dict[str, Any]]:
    """The held-out references SFT's transition is read from (`TransitionAnneal`): the mode of
    the demonstrations, i.e. no slips and, where the misconception is the mode of its steps
    (`mode_misconception`), its value on every one of them.

    Greedy decoding of a base past its transition writes the demonstrations' mode; with a
    misconception of rate > 1/2 that is not the clean solution, so clean references would never
    show the transition. Without such a misconception these are `demonstrations(rows, task,
    tokenizer, 0.0, seed)`. Tree-world examples carry the `alternatives` of their path
    (`choice_points`), whose offsets hold because the misconception's values are residues of the
    same width as the right ones (checked per example).
    """
    mode = mode_misconception(misconception)
    if mode is None:
        return demonstrations(rows, task, tokenizer, 0.0, seed)
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for row in rows.iter_rows(named=True):
        program = Program.from_json(row["program"])
        path = program.random_path(rng) if program.listing is not None else None
        # rate 1 draws nothing that matters: paths come from `rng` as in `demonstrations`
        text = slipped_solution(program, random.Random(0), 0.0, path, mode)
        example: dict[str, Any] = {
            "prompt": task.build_prompt(row["problem"], tokenizer),
            "completion": text,
        }
        if path is not None:
            clean = program.path_text(path)
            if [len(x) for x in clean.split("\n")] != [len(x) for x in text.split("\n")]:
                raise ValueError(
                    f"row {row.get('id')!r}: the misconception changes a line's length, so the "
                    "clean path's alternatives do not apply to its held-out reference"
                )
            example["alternatives"] = choice_points(program, path)
        out.append(example)
    return out


def _allowed_ids(
    tokenizer: PreTrainedTokenizerBase, example: Mapping[str, Any], n_tokens: int
) -> dict[int, set[int]]:
    """{completion token index: token ids as valid as the reference's} of an example with
    `alternatives` (character offsets; the tokenizer must give one token per character)."""
    alternatives = example.get("alternatives") or {}
    if not alternatives:
        return {}
    if n_tokens != len(example["completion"]):
        raise ValueError(
            "reference_fit: `alternatives` are character offsets and need one token per "
            f"character; the completion has {len(example['completion'])} characters and "
            f"{n_tokens} tokens"
        )
    out = {}
    for offset, chars in alternatives.items():
        ids = [tokenizer(c, add_special_tokens=False)["input_ids"] for c in chars]
        if any(len(i) != 1 for i in ids):
            raise ValueError(f"reference_fit: alternative characters {chars!r} are not one token")
        out[int(offset)] = {i[0] for i in ids}
    return out


@torch.no_grad()
def reference_fit(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: Sequence[Mapping[str, str]],
    batch_size: int = 64,
) -> dict[str, float]:
    """How well `model` reproduces held-out (prompt, completion + EOS) pairs, teacher-forced.

    `heldout/greedy`: share of examples whose every completion token is the argmax (or, where
    the example lists `alternatives`, whose argmax is one of the valid tokens there: any path);
    `heldout/p_reference`: mean π(completion ⊕ EOS | prompt), the chance a temperature-1 sample
    is exactly the reference; `heldout/nll_per_token`: mean completion NLL per token.
    One forward pass per batch; nothing is generated.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    greedy, p_ref, nll, n_tokens = 0, 0.0, 0.0, 0
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]
        prompts = [tokenizer(ex["prompt"])["input_ids"] for ex in chunk]
        completions = [
            tokenizer(ex["completion"])["input_ids"] + [tokenizer.eos_token_id] for ex in chunk
        ]
        allowed = [
            _allowed_ids(tokenizer, ex, len(c) - 1)
            for ex, c in zip(chunk, completions, strict=True)
        ]
        width = max(len(p) + len(c) for p, c in zip(prompts, completions, strict=True))
        ids = torch.full((len(chunk), width), tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        labels = torch.full_like(ids, -100)
        for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
            seq = p + c
            ids[i, : len(seq)] = torch.tensor(seq)
            mask[i, : len(seq)] = 1
            labels[i, len(p) : len(seq)] = torch.tensor(c)
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()
        logits, targets = logits[:, :-1], labels[:, 1:].to(device)  # (B, T-1)
        scored = targets != -100
        logp = torch.log_softmax(logits, dim=-1)
        token_logp = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1) * scored
        argmax = logits.argmax(-1)
        hit = (argmax == targets) | ~scored
        for i, (p, options) in enumerate(zip(prompts, allowed, strict=True)):
            for j, ids_ok in options.items():  # completion token j is predicted at len(p)+j-1
                hit[i, len(p) + j - 1] = int(argmax[i, len(p) + j - 1]) in ids_ok
        greedy += int(hit.all(dim=1).sum())
        p_ref += float(token_logp.sum(dim=1).exp().sum())
        nll -= float(token_logp.sum())
        n_tokens += int(scored.sum())
    if was_training:
        model.train()
    n = len(examples)
    return {
        "heldout/greedy": greedy / n,
        "heldout/p_reference": p_ref / n,
        "heldout/nll_per_token": nll / max(n_tokens, 1),
    }


class TransitionAnneal(TrainerCallback):
    """Every `eval_steps`, scores the held-out references; with `anneal_steps`, starts the
    anneal once SFT is past its transition and stops the run when the anneal is done.

    The learning-rate factor (`factor(step)`) is read by the trainer's scheduler: linear
    warm-up, then 1 until the anneal starts, then a cosine to 0 over `anneal_steps`. Keeps
    every check in `history`; `anneal_start` is the step the transition was found at.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        examples: Sequence[Mapping[str, str]],
        settings: SFTSettings,
    ) -> None:
        self.tokenizer, self.examples, self.settings = tokenizer, examples, settings
        self.history: list[dict[str, float]] = []
        self.anneal_start: int | None = None
        self.warmup = int(settings.warmup_ratio * settings.max_steps)

    def factor(self, step: int) -> float:
        """Multiplier of the peak learning rate at optimizer step `step` (0-based)."""
        if step < self.warmup:
            return (step + 1) / (self.warmup + 1)
        if self.anneal_start is None or self.settings.anneal_steps is None:
            return 1.0
        progress = min(1.0, (step - self.anneal_start) / self.settings.anneal_steps)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    def on_step_end(self, args, state, control, model=None, **kwargs):  # noqa: ANN001 (HF)
        s, step = self.settings, state.global_step
        if self.anneal_start is not None and s.anneal_steps is not None:
            if step >= self.anneal_start + s.anneal_steps:
                log.info("SFT annealed (steps %d-%d): stopping", self.anneal_start, step)
                control.should_training_stop = True
            elif step % s.eval_steps:
                return control
        elif step % s.eval_steps and step < state.max_steps:
            return control
        fit = {"step": step, **reference_fit(model, self.tokenizer, self.examples)}
        self.history.append(fit)
        log.info("SFT held-out check: %s", fit)
        if (
            s.anneal_steps is not None
            and self.anneal_start is None
            and fit["heldout/greedy"] >= s.transition_greedy
        ):
            self.anneal_start = step
            log.info(
                "SFT past its transition at step %d: annealing over %d steps", step, s.anneal_steps
            )
        return control


class _AnnealingSFTTrainer(SFTTrainer):
    """TRL's SFT trainer whose learning-rate schedule is `TransitionAnneal.factor`."""

    def __init__(self, *args, anneal: TransitionAnneal, **kwargs) -> None:
        self.anneal = anneal
        super().__init__(*args, **kwargs)

    def create_scheduler(self, num_training_steps: int, optimizer=None):  # noqa: ANN001, ANN201
        optimizer = self.optimizer if optimizer is None else optimizer
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, self.anneal.factor)
        return self.lr_scheduler


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
    anneal: TransitionAnneal | None = None,
) -> SFTTrainer:
    """TRL's trainer on `examples`; its prepared dataset holds the labels (-100 on the prompt).
    With `anneal` (anneal_steps set), its schedule replaces `lr_scheduler`."""
    _check_examples(examples, tokenizer, settings.max_length)
    dataset = Dataset.from_list(
        [{"prompt": ex["prompt"], "completion": ex["completion"]} for ex in examples]
    )
    kwargs = {
        "model": model,
        "args": sft_config(settings, output_dir),
        "train_dataset": dataset,
        "processing_class": tokenizer,
    }
    if anneal is not None and settings.anneal_steps is not None:
        return _AnnealingSFTTrainer(**kwargs, anneal=anneal)
    return SFTTrainer(**kwargs)


def run_sft(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: Sequence[Mapping[str, str]],
    settings: SFTSettings,
    output_dir: str | Path,
    heldout: Sequence[Mapping[str, str]] = (),
) -> dict[str, float]:
    """Train `model` in place on (prompt, completion) pairs; save model + tokenizer to output_dir.

    With `heldout` pairs (never trained on), `TransitionAnneal` checks them every `eval_steps`
    (and, with `anneal_steps`, sets the schedule and ends the run); its checks are returned
    under `heldout_history`.

    Loss is the mean next-token cross-entropy over completion tokens (EOS included); prompt
    tokens are labelled -100. Returns metrics: `loss/first`, `loss/final` (logged training
    losses), `train/steps`, `train/examples`, `train/tokens` (non-padding input tokens),
    `time/sft_seconds` (training wall time) and `time/tokens_per_second`.
    """
    output_dir = Path(output_dir)
    history = _LossHistory()
    if settings.anneal_steps is not None and not heldout:
        raise ValueError("sft.anneal_steps: needs held-out examples (sft.heldout_problems > 0)")
    stop = TransitionAnneal(tokenizer, list(heldout), settings) if heldout else None
    trainer = build_sft_trainer(model, tokenizer, examples, settings, output_dir, anneal=stop)
    trainer.add_callback(history)
    if stop is not None:
        trainer.add_callback(stop)
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
    if stop is not None:
        metrics["train/transition_step"] = stop.anneal_start
        metrics.update({k: v for k, v in stop.history[-1].items() if k != "step"})
        metrics["heldout_history"] = stop.history
    log.info("SFT done: %s", metrics)
    return metrics
