"""Monte Carlo credit, VinePPO-style (Kazemnejad et al., 2024, arXiv:2410.01679).

The one thing that differs from GRPO: each segment's signal is a difference of Monte Carlo state
values, σ_k = V̂(s_k) − V̂(s_{k−1}) with V̂(s_k) the mean reward of N fresh rollouts from
s_k = x ⊕ τ_{<b_k} (at most L new tokens each) and V̂(s_K) = R (METHOD.md §5); then the same
credit modes as RREDCoT (§4). Unbiased but expensive: K·N rollouts per completion, which is the
cost comparison this method exists for. Rollouts come from the current policy, all states of all
rows in one batched call with the same budget L and truncation rule whichever engine samples:
with `training.use_vllm`, TRL's vLLM engine (the trainer's `batch.engine`, the weights TRL
synced for this step, as RRPO/SRPO sample), else the HF generation backend on the policy
(seeded per (run seed, step) and row position). `credit/mc_vllm` says which (1 = vLLM).

Under `truncation: drop` a state whose rollouts all hit the budget has no estimate (NaN). Such a
V̂(s_k) takes the value of the next state that has one (V̂(s_K) = R always does), so its segment
passes its share on to the next: σ_{k+1} = 0 and σ_k spans both. The count is logged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from rredcot.credit.advantages import CreditConfig
from rredcot.credit.mc import (
    MCConfig,
    MCTrace,
    mc_segment_credit,
    mc_state_values_batch,
    token_to_char_boundaries,
)
from rredcot.credit.segmentation import SegmentationConfig
from rredcot.generation.base import derive_seed
from rredcot.generation.hf import HFBackend
from rredcot.training.methods.base import (
    RolloutBatch,
    SegmentCredit,
    SegmentCreditMethod,
    mean_segments,
    segment_completions,
)

if TYPE_CHECKING:
    from rredcot.training.method_settings import MethodSettings


def fill_missing_values(values: torch.Tensor) -> tuple[torch.Tensor, int]:
    """V̂ (K+1,) with each NaN replaced by the next non-NaN value; values[K] must be finite.

    Returns the filled values and the number of states that were missing.
    """
    v = values.clone()
    if torch.isnan(v[-1]):
        raise ValueError("values: V̂(s_K) is NaN; it must be the graded return R")
    missing = int(torch.isnan(v).sum())
    for k in range(v.numel() - 2, -1, -1):
        if torch.isnan(v[k]):
            v[k] = v[k + 1]
    return v, missing


@dataclass
class MCMethod(SegmentCreditMethod):
    """MC state values (N rollouts per state, budget L) → σ_k → token advantages (§4, §5)."""

    name: ClassVar[str] = "mc"
    metric_names: ClassVar[tuple[str, ...]] = (
        "credit/num_segments",
        "credit/mc_rollouts",
        "credit/mc_drop_rate",
        "credit/mc_missing_states",
        "credit/mc_vllm",
    )

    segmentation: SegmentationConfig = field(default_factory=SegmentationConfig)
    mc: MCConfig = field(default_factory=MCConfig)
    credit: CreditConfig = field(default_factory=CreditConfig)
    batch_size: int = 64
    """Rollout rows per `generate` call."""

    @classmethod
    def from_settings(
        cls, settings: MethodSettings, task: Any, tokenizer: Any, eos_ids: Sequence[int]
    ) -> MCMethod:
        return cls(
            task,
            tokenizer,
            list(eos_ids),
            settings.segmentation,
            settings.mc,
            settings.credit,
            settings.mc_batch_size,
        )

    def segment_credit(self, batch: RolloutBatch, policy: torch.nn.Module) -> SegmentCredit:
        """σ_i (K_i,) of every row from MC values of its states."""
        segs, tokens = segment_completions(
            policy, self.tokenizer, batch, self.segmentation, self.eos_ids
        )
        was_training = policy.training
        backend = batch.engine or HFBackend(
            policy, self.tokenizer, self.batch_size, show_progress=False
        )
        traces = []
        for s, row in zip(segs, batch.rows, strict=True):
            text = self.tokenizer.decode(s.response_ids, skip_special_tokens=True)
            chars = token_to_char_boundaries(self.tokenizer, s.response_ids, s.boundaries, text)
            traces.append(MCTrace(row["prompt"], text, chars, row["answer"]))
        try:
            # One generate call for every state of every row: rollouts batch across rows.
            values = mc_state_values_batch(
                backend,
                self.task,
                traces,
                n_rollouts=self.mc.n_rollouts,
                budget=self.mc.budget,
                truncation=self.mc.truncation,
                seed=derive_seed(batch.seed, batch.step),
                temperature=self.mc.temperature,
                top_p=self.mc.top_p,
            )
        finally:
            policy.train(was_training)
        sigmas, rollouts, dropped, missing = [], 0, 0, 0
        for i, v in enumerate(values):
            filled, n_missing = fill_missing_values(v.values)
            sigmas.append(mc_segment_credit(filled, float(batch.rewards[i])))  # (K_i,)
            tokens += v.forward_tokens
            rollouts += v.num_segments * v.n_rollouts
            dropped += v.n_dropped
            missing += n_missing
        metrics = {
            "credit/num_segments": mean_segments(segs),
            "credit/mc_rollouts": float(rollouts),
            "credit/mc_drop_rate": dropped / rollouts if rollouts else 0.0,
            "credit/mc_missing_states": float(missing),
            "credit/mc_vllm": float(batch.engine is not None),
        }
        return SegmentCredit(sigmas, [s.boundaries for s in segs], tokens, metrics)
