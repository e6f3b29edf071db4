"""OPPO's self-oracle (Li et al., 2026, arXiv:2605.21851), reconstructed (METHOD.md §8).

The one thing that differs from GRPO: each token's advantage comes from a running success
probability p_t along the response, a Bayesian update by the policy's own likelihood ratio with
and without the reference in the prompt (`rredcot.credit.bayes`): no value model, no rollouts,
one extra teacher-forced pass over x ⊕ O ⊕ τ per response (O: the reference solution,
`rredcot.credit.references.oracle_prompt`). The pass without O is the one HF generation computed
while sampling (`batch.generation`), else one teacher-forced pass over x ⊕ τ.

`oppo.level: token` (default): every token of τ is its own segment with σ_t = a_t (the paper's
token advantage); `segment`: σ_k = p_{b_k} − p_{b_{k−1}} (last: R − p_{b_{K−1}}) on the
configured segmentation, as RREDCoT's σ. Either way σ becomes token advantages through the
`credit` block (METHOD.md §4, `SegmentCreditMethod`), so the two levels and RREDCoT differ
only in σ; the paper's own normalisation of its advantage is not in its abstract.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from rredcot.credit.advantages import CreditConfig
from rredcot.credit.bayes import (
    OPPOConfig,
    bayes_segment_credit,
    bayes_token_advantages,
    bayes_values,
    log_ratios,
    prior_probabilities,
)
from rredcot.credit.references import oracle_prompt
from rredcot.credit.segmentation import SegmentationConfig
from rredcot.scoring.logprobs import completion_scores, pad_rows
from rredcot.scoring.packed import encoding_from_generation
from rredcot.training.methods.base import (
    RolloutBatch,
    SegmentCredit,
    SegmentCreditMethod,
    mean_segments,
    response_scores,
    segment_completions,
    strip_eos,
)

if TYPE_CHECKING:
    from rredcot.training.method_settings import MethodSettings


@dataclass
class OPPOMethod(SegmentCreditMethod):
    """Bayes success probabilities p_t from the self-oracle → σ per token or segment → token
    advantages (METHOD.md §8, §4)."""

    name: ClassVar[str] = "oppo"
    reuses_generation: ClassVar[bool] = True
    reads_reference: ClassVar[bool] = True
    metric_names: ClassVar[tuple[str, ...]] = (
        "credit/num_segments",
        "credit/p0_mean",
        "credit/p_end_mean",
        "credit/log_ratio_mean",
        "credit/sigma_abs_mean",
        "credit/generation_reused",
    )

    segmentation: SegmentationConfig = field(default_factory=SegmentationConfig)
    estimator: OPPOConfig = field(default_factory=OPPOConfig)
    credit: CreditConfig = field(default_factory=CreditConfig)
    _oracle_ids: dict[tuple[str, str], list[int]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_settings(
        cls, settings: MethodSettings, task: Any, tokenizer: Any, eos_ids: Sequence[int]
    ) -> OPPOMethod:
        return cls(
            task, tokenizer, list(eos_ids), settings.segmentation, settings.oppo, settings.credit
        )

    def oracle_ids(self, row: Mapping[str, Any]) -> list[int]:
        """The tokens of the row's prompt with its reference in it (`oracle_prompt`)."""
        for key in ("prompt", "reference"):
            if not isinstance(row.get(key), str) or not row[key].strip():
                raise ValueError(
                    f"row {row.get('problem_id')!r}: needs a non-empty string {key!r} for "
                    f"{self.name}"
                )
        key = (row["prompt"], row["reference"])
        if key not in self._oracle_ids:
            try:
                text = oracle_prompt(self.task, self.tokenizer, *key)
            except ValueError as err:
                raise ValueError(f"row {row.get('problem_id')!r}: {err}") from err
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            self._oracle_ids[key] = list(ids)
        return self._oracle_ids[key]

    def _plain_scores(
        self, batch: RolloutBatch, policy: torch.nn.Module, responses: list[list[int]]
    ) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], int, bool]:
        """Per row (log π(τ_t | x, τ_<t), H_t) (T_i,) each, the tokens run, and whether the
        generation served them."""
        if batch.generation is not None:
            encoded = encoding_from_generation(policy, batch.generation, responses)
            if encoded is not None:
                return encoded.token_scores(policy), encoded.forward_tokens, True
        lp, h, tokens = response_scores(policy, batch)
        n = [len(r) for r in responses]
        return [(lp[i, : n[i]], h[i, : n[i]]) for i in range(len(batch))], tokens, False

    def segment_credit(self, batch: RolloutBatch, policy: torch.nn.Module) -> SegmentCredit:
        """σ_i and boundaries of every row (per token or per segment), tokens spent, metrics."""
        responses = [strip_eos(batch.completion(i), self.eos_ids) for i in range(len(batch))]
        plain, plain_tokens, reused = self._plain_scores(batch, policy, responses)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids, mask = pad_rows([self.oracle_ids(row) for row in batch.rows], pad, left=True)
        oracle, _, oracle_tokens = completion_scores(
            policy, ids, mask, batch.completion_ids, batch.completion_mask
        )  # (B, T) log π(z_t | x ⊕ O, z_<t)
        lengths = [len(r) for r in responses]
        width = max(lengths, default=0)
        real = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]  # (B, T_max)
        plain_lp = torch.zeros(len(batch), width, dtype=torch.float64)
        for i, (lp, _) in enumerate(plain):
            plain_lp[i, : lengths[i]] = lp.double()
        r = log_ratios(oracle[:, :width], plain_lp, real)  # (B, T_max)
        cfg = self.estimator
        p0 = prior_probabilities(batch.rewards, batch.groups, cfg.prior)  # (B,)
        p = bayes_values(r, real, p0, cfg.clip)  # (B, T_max + 1)
        rewards = batch.rewards.tolist()
        if cfg.level == "token":
            a = bayes_token_advantages(p, r, real, batch.rewards, cfg.token_advantage)
            sigmas = [a[i, :n] for i, n in enumerate(lengths)]
            boundaries = [list(range(n + 1)) for n in lengths]
            segments = float(sum(lengths) / len(lengths)) if lengths else 0.0
        else:
            segs, _ = segment_completions(
                policy, self.tokenizer, batch, self.segmentation, self.eos_ids, scores=plain
            )
            boundaries = [s.boundaries for s in segs]
            sigmas = [
                bayes_segment_credit(p[i], b, rewards[i]) if len(b) > 1 else p.new_zeros(0)
                for i, b in enumerate(boundaries)
            ]
            segments = mean_segments(segs)
        ends = p[torch.arange(len(batch)), torch.tensor(lengths)]
        flat = torch.cat(sigmas) if sigmas else p.new_zeros(0)
        metrics = {
            "credit/num_segments": segments,
            "credit/p0_mean": float(p0.mean()),
            "credit/p_end_mean": float(ends.mean()),
            "credit/log_ratio_mean": float(r[real].mean()) if real.any() else 0.0,
            "credit/sigma_abs_mean": float(flat.abs().mean()) if flat.numel() else 0.0,
            "credit/generation_reused": float(reused),
        }
        return SegmentCredit(sigmas, boundaries, plain_tokens + oracle_tokens, metrics)
