"""LoRA as a training option (`training.lora`): the official RRPO/SRPO setup trains adapters.

The settings become a `peft.LoraConfig` handed to TRL's `GRPOTrainer(peft_config=...)`, so peft
wraps the policy and TRL trains only the adapter weights; nothing else of the method changes
(the adapters are injected into the base model's linear layers in place, so every scoring or
generating pass of a method runs the adapted policy). A run's `final/` is the merged model
(`merge_into`), loadable as any checkpoint by the evaluation; the adapter alone is kept next to
it in `final/adapter/` (`ADAPTER_DIR`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path
from typing import Any

from rredcot.block_checks import check_known_keys

ADAPTER_DIR = "adapter"
"""Subdirectory of `final/` with the trained adapter (adapter_config.json and weights)."""


@dataclass(frozen=True)
class LoraSettings:
    """`training.lora`: rank r, scale α (the update is α/r · B A), the layers adapted and the
    dropout on their input. `target_modules` is peft's: "all-linear" (every linear layer but
    the output head) or a list of module names."""

    r: int
    alpha: float
    target_modules: str | tuple[str, ...] = "all-linear"
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.r, bool) or not isinstance(self.r, Integral) or self.r < 1:
            raise ValueError(f"training.lora.r: expected an integer >= 1, got {self.r!r}")
        a = self.alpha
        if isinstance(a, bool) or not isinstance(a, Real) or not math.isfinite(a) or a <= 0:
            raise ValueError(f"training.lora.alpha: expected a number > 0, got {a!r}")
        d = self.dropout
        if isinstance(d, bool) or not isinstance(d, Real) or not 0 <= d < 1:
            raise ValueError(f"training.lora.dropout: expected a number in [0, 1), got {d!r}")
        targets = self.target_modules
        if isinstance(targets, str):
            ok = bool(targets.strip())
        else:
            ok = isinstance(targets, Sequence) and len(targets) > 0
            ok = ok and all(isinstance(t, str) and t.strip() for t in targets)
            targets = tuple(targets) if ok else targets
        if not ok:
            raise ValueError(
                "training.lora.target_modules: expected 'all-linear' or a non-empty list of "
                f"module names, got {self.target_modules!r}"
            )
        object.__setattr__(self, "r", int(self.r))
        object.__setattr__(self, "alpha", float(a))
        object.__setattr__(self, "dropout", float(d))
        object.__setattr__(self, "target_modules", targets)

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any]) -> LoraSettings:
        """From the `training.lora` mapping; unknown or missing keys are errors."""
        check_known_keys("training.lora", cls, mapping)
        missing = [k for k in ("r", "alpha") if k not in mapping]
        if missing:
            raise ValueError(f"training.lora: missing {missing} (e.g. {{r: 64, alpha: 64}})")
        return cls(**mapping)

    def peft_config(self) -> Any:
        """The `peft.LoraConfig` TRL's `peft_config` takes (a causal-LM task)."""
        from peft import LoraConfig

        targets = self.target_modules
        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=targets if isinstance(targets, str) else list(targets),
            task_type="CAUSAL_LM",
        )


def is_adapted(model: Any) -> bool:
    """Is `model` a peft model (a policy trained with `training.lora`)?"""
    from peft import PeftModel

    return isinstance(model, PeftModel)


def save_final(model: Any, out: str | Path) -> None:
    """Write a LoRA-trained policy as `out/` = the merged model (what evaluation, vLLM and the
    studies load, as any checkpoint) and `out/adapter/` = the adapter alone.

    Merges in place (no second copy of the weights on the GPU), so call it once training is
    over: the model is a plain transformers model afterwards.
    """
    out = Path(out)
    model.save_pretrained(out / ADAPTER_DIR)
    model.merge_and_unload().save_pretrained(out)


def exact_unmerge(model: Any) -> None:
    """Make the peft `model`'s `merge_adapter()` / `unmerge_adapter()`, which TRL's vLLM weight
    sync calls around every sync, give the base weights back bit for bit.

    peft merges W += ΔW in place and unmerges W -= ΔW, which in bf16 does not give W back: the
    error adds up over the syncs (an open TRL issue measured 28% drift of mean |w| after 100; a
    paper config syncs hundreds of times). Here the merge writes W + ΔW into new tensors (peft's
    `safe_merge`, which also refuses a NaN) and the unmerge puts the untouched originals back, no
    arithmetic: no drift, at the cost of a second copy of the adapted weights during a sync.
    """
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    peft_merge = model.merge_adapter
    kept: list[tuple[Any, Any]] = []  # (parameter, its data before the merge)

    def merge_adapter(adapter_names: list[str] | None = None, safe_merge: bool = True) -> None:
        if kept:
            raise RuntimeError("merge_adapter: the adapter is merged already (unmerge it first)")
        weights = [layer.get_base_layer().weight for layer in layers]
        kept.extend((p, p.data) for p in weights)
        peft_merge(adapter_names, safe_merge=True)
        in_place = [p for p, data in kept if p.data.data_ptr() == data.data_ptr()]
        if any(layer.merged for layer in layers) and in_place:
            raise RuntimeError(
                f"training.lora.target_modules: {len(in_place)} adapted layer(s) merged in place "
                "(not a linear layer?), so their base weights cannot be restored exactly after "
                "the vLLM weight sync; adapt linear layers only"
            )

    def unmerge_adapter() -> None:
        for p, data in kept:
            p.data = data
        kept.clear()
        for layer in layers:
            layer.merged_adapters.clear()

    model.merge_adapter = merge_adapter  # instance attributes over peft's methods
    model.unmerge_adapter = unmerge_adapter


def missing_targets(target_modules: str | Sequence[str], module_names: Sequence[str]) -> list[str]:
    """The names of `target_modules` that match no module of the model, as peft matches a
    list (a module's name or its last dotted parts); "all-linear" matches any model."""
    if isinstance(target_modules, str):
        return []
    return [
        t for t in target_modules if not any(n == t or n.endswith(f".{t}") for n in module_names)
    ]


def check_lora_targets(checkpoint: str | Path, runs: Mapping[str, Any]) -> list[str]:
    """Each run's `target_modules` (by config key) against the checkpoint's modules, built on
    the meta device (no weights read); one error line per key whose names peft would not find.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(checkpoint))
    names = [name for name, _ in model.named_modules()]
    linear = sorted(
        {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    )
    return [
        f"config key '{key}': {missing} match no module of {checkpoint} (linear layers: {linear})"
        for key, targets in runs.items()
        if (missing := missing_targets(targets, names))
    ]
