"""Float32 master weights for the trained policy, and a check that the first update moved them.

AdamW writing straight into bfloat16 weights rounds away every update smaller than half a bf16
step (|w| · 2⁻⁸): at lr 1e-6 almost no weight of a matrix moves, and nothing says so. So the
weights the optimizer writes are kept in float32 wherever the optimizer is plain torch, as TRL's
own default does (float32 weights, `bf16` as autocast): the step loads a fully trained policy in
float32 (`policy_dtype`); DeepSpeed's bf16 keeps its own float32 master copy, and LoRA trains
adapters that peft holds in float32, so those keep `model.dtype`. `check_master_weights` refuses
what is left (a caller handing the trainer bf16 weights), and `UpdateCheck` stops a run whose
first update with a gradient and a learning rate left its weights where they were.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from transformers import TrainerCallback

from rredcot.training.settings import TrainingSettings

SAMPLE_PER_TENSOR = 256
"""Elements of each trainable tensor `UpdateCheck` compares before and after the update."""
MIN_GRADIENT = 1e-6
"""Gradients below this (after clipping) are left out: Adam's ε shrinks their update."""
MIN_MOVED_SHARE = 0.5
"""Share of the compared elements that must move; float32 weights move all but a few."""


def uses_deepspeed(environ: Mapping[str, str] = os.environ) -> bool:
    """Was this process started by `accelerate launch` with a DeepSpeed config?"""
    return environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"


def policy_dtype(model_dtype: str, settings: TrainingSettings, deepspeed: bool) -> str:
    """The dtype the trained policy is loaded in: `model_dtype` (config key `model.dtype`) where
    something else keeps float32 masters (DeepSpeed, or peft's float32 adapters with
    `training.lora`), else float32 (`training.bf16` then trains under bf16 autocast)."""
    if deepspeed or settings.lora is not None:
        return model_dtype
    return "float32"


def check_master_weights(model: torch.nn.Module, deepspeed: bool) -> None:
    """Refuse trainable weights below float32 when the optimizer is plain torch (no DeepSpeed)."""
    if deepspeed:
        return
    low = [(n, p.dtype) for n, p in model.named_parameters() if p.requires_grad]
    low = [(n, d) for n, d in low if d in (torch.bfloat16, torch.float16)]
    if low:
        name, dtype = low[0]
        raise ValueError(
            f"model.dtype: {len(low)} trainable weights (e.g. {name}) are {dtype} and the "
            "optimizer is plain torch AdamW (no DeepSpeed), which keeps no float32 master copy: "
            "updates below half a step of that dtype round away. Load the policy in float32 "
            "(training.bf16 trains under bf16 autocast; the train_policy step does this), or "
            "train adapters (training.lora) or under DeepSpeed (training.accelerate zero2/zero3)"
        )


class FrozenWeightsError(RuntimeError):
    """An optimizer step with a gradient and a learning rate left the trainable weights as they
    were."""


class UpdateCheck(TrainerCallback):
    """Compare a sample of the trainable weights before and after the first optimizer step that
    has a learning rate and gradients (a warm-up's lr 0 or a batch without reward spread is
    skipped), then stop checking. Only elements whose gradient is at least `MIN_GRADIENT` and
    whose float32 value an update of size lr would change are compared (Adam's first update
    is about lr per element); fewer than `MIN_MOVED_SHARE` of them moving is a
    `FrozenWeightsError`. Weights without a local gradient (sharded by DeepSpeed ZeRO-3,
    which keeps its own master copy) are not compared."""

    def __init__(self) -> None:
        self.done = False
        self._before: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.dtype]] = []
        self._lr = 0.0

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._before = []
        model, optimizer = kwargs.get("model"), kwargs.get("optimizer")
        if self.done or model is None or optimizer is None:
            return
        self._lr = max(float(g["lr"]) for g in optimizer.param_groups)
        if self._lr <= 0:
            return
        for p in model.parameters():
            if not p.requires_grad or p.grad is None or p.numel() == 0:
                continue
            index = torch.arange(0, p.numel(), max(1, p.numel() // SAMPLE_PER_TENSOR))
            index = index.to(p.device)
            grad = p.grad.detach().reshape(-1)[index].float()
            value = p.detach().reshape(-1)[index]
            keep = (grad.abs() >= MIN_GRADIENT) & (value.float().abs() * 2**-20 < self._lr)
            if keep.any():
                self._before.append((p, index[keep], value[keep].clone(), value.dtype))

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.done or not self._before:
            return
        moved = total = 0
        for p, index, value, _ in self._before:
            moved += int((p.detach().reshape(-1)[index] != value).sum())
            total += index.numel()
        dtypes = sorted({str(d).removeprefix("torch.") for *_, d in self._before})
        self._before, self.done = [], True
        if moved < MIN_MOVED_SHARE * total:
            step = state.global_step + 1
            raise FrozenWeightsError(
                f"optimizer step {step}: {total - moved} of {total} sampled trainable weights "
                f"with a gradient did not change at learning rate {self._lr:g}. Likely cause: the "
                f"weights are {'/'.join(dtypes)} without a float32 master copy (model.dtype "
                "without DeepSpeed), so each update rounds away; load the policy in float32 "
                "(training.bf16 is autocast) or raise training.learning_rate"
            )
