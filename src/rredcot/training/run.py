"""Train one (method, seed) from a base checkpoint: the run itself (`train_policy`).

Setup only; what a method does differently lives in `rredcot.training.methods`. The run's
parts live beside it: its settings (`rredcot.training.settings`), TRL's config for this launch
(`.trl_config`), the run directory's record, lock and checkpoints (`.run_dir`), metrics.csv
(`.metrics`) and stopping on a signal (`.stopping`). A run writes into `out`:

    checkpoint-N/        every `save_steps` steps (and `save_minutes`), the last
                         `save_total_limit` kept; a restarted run resumes from the newest complete
                         one (every file whole, trainer_state.json included:
                         `unreadable_checkpoint`); with `lora`, the adapter weights only
    run_record.json      what the run was started with (`run_record`); a directory with another
                         record is moved aside to `<out>.stale-N` (its checkpoints deleted)
    metrics.csv          one row per optimizer step (`metrics.CSV_COLUMNS` + the method's)
    final/               the trained policy and tokenizer (save_pretrained); with `lora`, the
                         base merged with the adapter (loads as any checkpoint) and the
                         adapter alone in final/adapter/
    train_summary.json   settings, steps, seconds, where it resumed from

Beside it, `<out>.lock` is held (`fcntl.flock`) for the run's life, so a second trainer on
the same directory stops at once (`RunDirectoryLocked`, naming the holder's host and pid).

A NaN or inf loss stops the run before the optimizer step (`NonFiniteLossError`); the newest
checkpoint then is the last good one and `final/` is not written. SIGTERM or SIGUSR1 (a
scheduler's time limit) finishes the current optimizer step, saves a checkpoint at it and
raises `TrainingInterrupted` (the step script exits with `RETRY_EXIT_CODE`); the rerun resumes
there and ends with the weights of an uninterrupted run.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import polars as pl
from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl.distributed import DistributedBackend

from rredcot.data.misconceptions import rule_applies, rule_share_selection
from rredcot.data.programs import Program
from rredcot.planning.machine import machine_info
from rredcot.planning.prompt_budget import over_budget, prompt_tokens
from rredcot.tasks import get_task
from rredcot.tasks.base import Task
from rredcot.training.curves import CurveSettings, LearningCurve
from rredcot.training.lora import exact_unmerge, save_final
from rredcot.training.method_registry import method_spec
from rredcot.training.metrics_csv import MetricsCSV
from rredcot.training.precision import UpdateCheck, check_master_weights
from rredcot.training.run_dir import (
    checkpoint_step,
    claim_run_dir,
    launch_info,
    resume_point,
    run_dir_lock,
    run_record,
)
from rredcot.training.settings import RunOptions, TrainingSettings
from rredcot.training.stopping import CheckpointGuard, TrainingInterrupted
from rredcot.training.trainer import CreditGRPOTrainer, correctness_reward
from rredcot.training.trl_config import check_device, check_vllm_memory, grpo_config
from rredcot.trl import RREDCoTTrainer

log = logging.getLogger(__name__)


def _rule_share_subset(table: pl.DataFrame, settings: TrainingSettings) -> pl.DataFrame:
    """The problems `training.rule_share` keeps (`rule_share_selection`), logged with counts."""
    if "program" not in table.columns or settings.misconception is None:
        raise ValueError(
            "training.rule_share: needs the synthetic world's `program` column and its "
            f"misconception; the train table has {table.columns}"
        )
    applies = [rule_applies(Program.from_json(p), settings.misconception) for p in table["program"]]
    keep = rule_share_selection(applies, settings.rule_share)
    log.info(
        "training.rule_share %g: %d of %d problems kept (%d where the rule applies)",
        settings.rule_share, len(keep), table.height, sum(applies[i] for i in keep),
    )  # fmt: skip
    return table[keep]


def training_rows(
    table: pl.DataFrame, task: Task, tokenizer: PreTrainedTokenizerBase, settings: TrainingSettings
) -> tuple[Dataset, list[str], list[str]]:
    """Dataset rows `prompt` (task.build_prompt), `problem`, `answer`, `reference`, `problem_id`.

    A problem without a reference (null or blank in `reference_column`, as the reference-solution
    step leaves problems it could not verify), or whose prompt is longer than
    `max_prompt_tokens` (the prompt budget the vLLM context is sized for), is left out for every
    method, so all methods train on the same problems; their ids are returned and logged.
    Other blank fields are errors.
    """
    ref = settings.reference_column
    need = ["id", "problem", "answer", ref]
    missing = [c for c in need if c not in table.columns]
    if missing:
        raise ValueError(f"train table: lacks column(s) {missing}; has {table.columns}")
    oracle = method_spec(settings.method).analysis_only
    if settings.rule_share is not None:
        table = _rule_share_subset(table, settings)
    if settings.max_problems is not None:
        table = table.head(settings.max_problems)
    keyed = oracle or settings.reference == "own_path"
    if keyed and "program" not in table.columns:
        why = (
            f"training.method: {settings.method} reads the world's step checker"
            if oracle
            else "training.reference: own_path writes the key on each response's path"
        )
        raise ValueError(
            f"{why} and needs the synthetic world's `program` column; the train table has "
            f"{table.columns}"
        )
    rows, without_reference = [], []
    for row in table.iter_rows(named=True):
        for key in need[:3]:
            if not isinstance(row[key], str) or not row[key].strip():
                raise ValueError(
                    f"train table row {row['id']!r}: {key!r} must be a non-empty string"
                )
        if not isinstance(row[ref], str) or not row[ref].strip():
            without_reference.append(row["id"])
            continue
        rows.append(
            {
                "prompt": task.build_prompt(row["problem"], tokenizer),
                "problem": row["problem"],
                "answer": row["answer"],
                "reference": row[ref],
                "problem_id": row["id"],
                **({"program": row["program"]} if keyed else {}),
            }
        )
    if without_reference:
        log.warning(
            "%d problem(s) have no reference in %r and are left out: %s",
            len(without_reference),
            ref,
            without_reference[:20],
        )
    lengths = prompt_tokens([r["prompt"] for r in rows], tokenizer) if rows else []
    too_long = over_budget([r["problem_id"] for r in rows], lengths, settings.max_prompt_tokens)
    if too_long:
        log.warning(
            "%d problem(s) have a prompt over training.max_prompt_tokens %d and are left out: %s",
            len(too_long),
            settings.max_prompt_tokens,
            too_long[:20],
        )
        rows = [r for r, n in zip(rows, lengths, strict=True) if n <= settings.max_prompt_tokens]
    if not rows:
        raise ValueError(
            f"train table: no problem with a reference in {ref!r} and a prompt within "
            f"training.max_prompt_tokens ({settings.max_prompt_tokens}) to train on"
        )
    return Dataset.from_list(rows), without_reference, too_long


def build_trainer(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train: Dataset,
    settings: TrainingSettings,
    out: str | Path,
    callbacks: Sequence[TrainerCallback] = (),
    options: RunOptions | None = None,
) -> RREDCoTTrainer:
    """The trainer for `settings`: the public `RREDCoTTrainer` with the run's `RREDCoTConfig`
    (`grpo_config`), launched and reporting as `options` say. Trainable weights below float32
    without DeepSpeed are refused (`check_master_weights`), and a first update that moves none
    stops the run (`UpdateCheck`)."""
    trainer = RREDCoTTrainer(
        model=model,
        reward_funcs=[correctness_reward(get_task(settings.task))],
        args=grpo_config(settings, out, options=options),  # checks the layout against this launch
        train_dataset=train,
        processing_class=tokenizer,
        callbacks=[*callbacks, UpdateCheck()],
        peft_config=settings.lora.peft_config() if settings.lora is not None else None,
    )
    check_master_weights(trainer.model, trainer.is_deepspeed_enabled)
    if settings.lora is not None and settings.use_vllm:
        exact_unmerge(trainer.model)  # each vLLM weight sync merges and unmerges the adapter
    if settings.lora is not None and _is_zero3(trainer):
        raise ValueError(
            "training.lora: LoRA runs are not launched under DeepSpeed ZeRO-3 here (the final "
            "merge needs the whole weights on one process); use training.accelerate ddp or "
            "zero2 (the adapters and their optimizer state are small)"
        )
    return trainer


def _is_zero3(trainer: CreditGRPOTrainer) -> bool:
    return DistributedBackend(trainer.accelerator).is_zero3


def _gathered_state_dict(trainer: CreditGRPOTrainer) -> dict[str, Any] | None:
    """The policy's whole weights where ZeRO-3 sharded them, gathered (a collective, on every
    process; needs the config's zero3_save_16bit_model); None where every process holds them
    whole: without ZeRO-3, and in a run resumed at max_steps, whose model was loaded from the
    checkpoint and never prepared (sharded) by DeepSpeed, so there is no engine to gather from."""
    if not _is_zero3(trainer) or trainer.model_wrapped is trainer.model:
        return None
    return trainer.accelerator.get_state_dict(trainer.model_wrapped)


def train_policy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    table: pl.DataFrame,
    settings: TrainingSettings,
    out: str | Path,
    callbacks: Sequence[TrainerCallback] = (),
    curve: tuple[pl.DataFrame, CurveSettings] | None = None,
    fingerprints: Mapping[str, str | None] | None = None,
    arguments: Mapping[str, Any] | None = None,
    keep_stale_checkpoints: bool = False,
    options: RunOptions | None = None,
    save_minutes: float | None = None,
) -> dict[str, Any]:
    """Train `model` on the problems of `table`; resume from `out`'s newest checkpoint if any.
    `options` (ddp timeout, trackers) are not part of the run record. `training.device` auto
    without a CUDA device is refused (`check_device`).

    `curve` (held-out problems, settings): evaluate the policy on them during the run into
    `out/curve.csv` (`rredcot.training.curves`). `fingerprints` name the inputs (base model,
    training data, curve problems) and `arguments` the job's other arguments (`job_record`);
    with the settings and the launch (`launch_info`: processes, the policy's dtype) they form
    the run record, and a directory left by a run with another record is moved aside
    (`claim_run_dir`, which deletes stale checkpoints unless `keep_stale_checkpoints`) instead
    of resumed. A run whose newest checkpoint is already at max_steps takes no further step.

    The main process holds `run_dir_lock(out)` throughout (`RunDirectoryLocked` if another
    trainer does). Besides every `save_steps`, a checkpoint is written every `save_minutes` of
    wall time (None: never) and, on SIGTERM/SIGUSR1, at the end of the step under way, after
    which `TrainingInterrupted` is raised and `final/` is not written (`CheckpointGuard`).

    Writes checkpoints, metrics.csv, final/ and train_summary.json into `out` (module
    docstring). Returns the summary. Under `accelerate launch` every process runs this; the
    main one alone removes, appends and writes files.
    """
    check_device(settings, options is not None and options.allow_cpu)
    out = Path(out)
    from accelerate import PartialState

    main = PartialState(cpu=settings.device == "cpu").is_main_process
    with run_dir_lock(out) if main else nullcontext():
        return _train_policy(
            model,
            tokenizer,
            table,
            settings,
            out,
            callbacks,
            curve,
            fingerprints,
            arguments,
            keep_stale_checkpoints,
            save_minutes,
            options,
        )


def _train_policy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    table: pl.DataFrame,
    settings: TrainingSettings,
    out: Path,
    callbacks: Sequence[TrainerCallback],
    curve: tuple[pl.DataFrame, CurveSettings] | None,
    fingerprints: Mapping[str, str | None] | None,
    arguments: Mapping[str, Any] | None,
    keep_stale_checkpoints: bool,
    save_minutes: float | None,
    options: RunOptions | None,
) -> dict[str, Any]:
    """`train_policy` with the lock held (by the main process)."""
    check_vllm_memory(model, settings)
    task = get_task(settings.task)
    train, without_reference, over_prompt_budget = training_rows(table, task, tokenizer, settings)
    from accelerate import PartialState

    main = PartialState(cpu=settings.device == "cpu").is_main_process
    record = run_record(
        settings, fingerprints or {}, arguments, launch_info(model, settings.device)
    )
    claim_run_dir(out, record, main=main, keep_stale_checkpoints=keep_stale_checkpoints)
    PartialState().wait_for_everyone()
    guard = CheckpointGuard(save_minutes)
    trainer = build_trainer(
        model, tokenizer, train, settings, out, callbacks=[*callbacks, guard], options=options
    )
    accelerator = trainer.accelerator
    guard.accelerator = accelerator
    checkpoint = resume_point(out, remove_incomplete=main)
    accelerator.wait_for_everyone()
    resume_step = checkpoint_step(checkpoint) if checkpoint else None
    if checkpoint:
        log.info("resuming from %s", checkpoint)
    if main:
        metrics = MetricsCSV(out / "metrics.csv", trainer.method.metric_names, resume_step)
        trainer.add_callback(metrics)
    if main and curve is not None:
        problems, curve_settings = curve
        trainer.add_callback(
            LearningCurve(out / "curve.csv", problems, task, tokenizer, curve_settings, resume_step)
        )
    start = time.perf_counter()
    if resume_step is not None and resume_step >= settings.max_steps:
        # Already done: load the checkpoint's weights and publish them, without a step more.
        log.info(
            "checkpoint %s is at max_steps %d: no further step", checkpoint, settings.max_steps
        )
        trainer._load_from_checkpoint(str(checkpoint))
        trainer.state.global_step = resume_step
    else:
        with guard.installed():
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    seconds = time.perf_counter() - start
    if guard.stopped_at is not None:
        accelerator.wait_for_everyone()
        why = guard.received.name if guard.received is not None else "another process's signal"
        stopped = out / f"{PREFIX_CHECKPOINT_DIR}-{guard.stopped_at}"
        raise TrainingInterrupted(why, guard.stopped_at, stopped)
    final = out / "final"
    state_dict = _gathered_state_dict(trainer)
    if main:
        policy = accelerator.unwrap_model(trainer.model)
        if settings.lora is not None:
            save_final(policy, final)  # merged weights, and the adapter in final/adapter/
        else:
            policy.save_pretrained(final, state_dict=state_dict)
        tokenizer.save_pretrained(final)
    summary = {
        "settings": settings.to_dict(),
        "steps": int(trainer.state.global_step),
        "problems": len(train),
        "problems_without_reference": without_reference,
        "problems_over_prompt_budget": over_prompt_budget,
        "resumed_from_step": resume_step,
        "seconds_this_session": seconds,
        "machine": machine_info(),
    }
    if main:
        (out / "train_summary.json").write_text(json.dumps(summary, indent=2))
    accelerator.wait_for_everyone()
    log.info("training done: %s", json.dumps({k: v for k, v in summary.items() if k != "settings"}))
    return summary
