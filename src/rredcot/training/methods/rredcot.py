"""RREDCoT (Ielanskyi et al., 2026, arXiv:2606.06475): segment-level reward redistribution.

The one thing that differs from GRPO: the advantage of a token is not the response's outcome
advantage A_i but the redistributed reward σ_{i,k} of the segment k it belongs to (METHOD.md §3,
§4). Per completion: segment it (hybrid keyword–entropy by default, entropies from the policy),
score the reference continuations at every state s_k with the packed scorer (one encoding of
the responses serves both, its entropies and its KV cache: the one HF generation computed while
sampling, else one encoding pass), Φ_k = R̂_k + v̂_k,
σ_k = Φ_k − Φ_{k−1} with the terminal correction σ_K += R − Φ_K; then
A_{i,k} = whiten(σ_{i,k}) over the group (`immediate`), or reward_to_go / mixed. The policy
itself is the estimator: no extra model, nothing generated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from rredcot.credit.advantages import CreditConfig
from rredcot.credit.redistribution import terminal_credit
from rredcot.credit.references import reference_reasoning
from rredcot.credit.rredcot import ReferencePath, RREDCoTConfig, rredcot_credit_batch
from rredcot.credit.segmentation import SegmentationConfig
from rredcot.credit.segmented_trace import Trace
from rredcot.scoring.chunks import encode_within_budget
from rredcot.scoring.packed import encoding_from_generation
from rredcot.training.methods.base import (
    RolloutBatch,
    SegmentCredit,
    SegmentCreditMethod,
    mean_segments,
    segment_completions,
    strip_eos,
)

if TYPE_CHECKING:
    from rredcot.training.method_settings import MethodSettings


def reference_path(task: Any, row: Mapping[str, Any]) -> ReferencePath:
    """(U*, y*) of a training row: `reference` is a reference text U* ⊕ A ⊕ y* ⊕ close (the
    synthetic world's solution, or the reference-solution step's output), `answer` is y*.

    U* is the text before the reference's last answer trigger A (`rredcot.credit.references`), split
    into one segment per line.
    """
    for key in ("reference", "answer"):
        if not isinstance(row.get(key), str) or not row[key].strip():
            raise ValueError(
                f"row {row.get('problem_id')!r}: needs a non-empty string {key!r} for RREDCoT"
            )
    try:
        reasoning = reference_reasoning(task, row["reference"])
    except ValueError as err:
        raise ValueError(f"row {row.get('problem_id')!r}: {err}") from err
    return ReferencePath.from_text(reasoning, row["answer"].strip())


@dataclass
class RREDCoTMethod(SegmentCreditMethod):
    """RREDCoT credit σ_{i,k} for every completion, turned into token advantages (§4)."""

    name: ClassVar[str] = "rredcot"
    reuses_generation: ClassVar[bool] = True
    reads_reference: ClassVar[bool] = True
    metric_names: ClassVar[tuple[str, ...]] = (
        "credit/num_segments",
        "credit/phi0_mean",
        "credit/sigma_abs_mean",
        "credit/scored_fraction",
        "credit/generation_reused",
    )

    segmentation: SegmentationConfig = field(default_factory=SegmentationConfig)
    estimator: RREDCoTConfig = field(default_factory=RREDCoTConfig)
    credit: CreditConfig = field(default_factory=CreditConfig)
    reference_source: str = "configured"
    """Where U* comes from (config key `training.reference`): `configured`, the row's
    reference; `own_path`, the answer key on each response's own path
    (`rredcot.data.synthetic.own_path_solution`; the row needs `program`), an oracle."""
    _references: dict[str, ReferencePath] = field(default_factory=dict, repr=False)

    def _reference(self, row: Mapping[str, Any], response_ids: Sequence[int]) -> ReferencePath:
        if self.reference_source == "own_path":
            from rredcot.data.synthetic import own_path_solution

            text = self.tokenizer.decode(list(response_ids), skip_special_tokens=True)
            row = {**row, "reference": own_path_solution(row["program"], text)}
        key = f"{row.get('problem_id')}\x00{row.get('reference')}"
        if key not in self._references:
            self._references[key] = reference_path(self.task, row)
        return self._references[key]

    @classmethod
    def from_settings(
        cls, settings: MethodSettings, task: Any, tokenizer: Any, eos_ids: Sequence[int]
    ) -> RREDCoTMethod:
        return cls(
            task,
            tokenizer,
            list(eos_ids),
            settings.segmentation,
            settings.rredcot,
            settings.credit,
            reference_source=settings.reference,
        )

    def segment_credit(self, batch: RolloutBatch, policy: torch.nn.Module) -> SegmentCredit:
        """σ_i (K_i,) and boundaries of every row, forward tokens spent, and metrics.

        One encoding serves both the segmentation (entropies) and the scorer (KV cache): the one
        generation computed while sampling (`batch.generation`), else one encoding pass in which
        each distinct (prompt, response) is encoded once, each prompt once.
        """
        prompts = [batch.prompt(i) for i in range(len(batch))]
        responses = [strip_eos(batch.completion(i), self.eos_ids) for i in range(len(batch))]
        encoded = None
        if batch.generation is not None:
            encoded = encoding_from_generation(policy, batch.generation, responses)
        reused = encoded is not None
        rows = list(range(len(batch)))
        if not reused:
            distinct: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
            rows = [
                distinct.setdefault((tuple(p), tuple(r)), len(distinct))
                for p, r in zip(prompts, responses, strict=True)
            ]
            encoded = encode_within_budget(  # chunked under max_resident_tokens when needed
                policy,
                [p for p, _ in distinct],
                [r for _, r in distinct],
                max_tokens_per_pass=self.estimator.max_tokens_per_pass,
                max_resident_tokens=self.estimator.max_resident_tokens,
                split=self.estimator.layout == "split",
            )
        scores = encoded.token_scores(policy) if self.segmentation.reads_token_scores else None
        segs, _ = segment_completions(
            policy,
            self.tokenizer,
            batch,
            self.segmentation,
            self.eos_ids,
            scores=None if scores is None else [scores[u] for u in rows],
        )
        # Under the terminal correction Φ_K cancels (σ_K = R − Φ_{K−1}), so the last state
        # s_K = x ⊕ τ is not scored: the trace is cut at b_{K−1}, one state in K+1 fewer.
        # Identical responses to the same prompt (frequent once the policy is confident) are
        # scored once.
        cut = self.estimator.return_equivalence == "terminal_correction"
        traces: list[Trace] = []
        trace_rows: list[int] = []
        unique: dict[tuple, int] = {}
        which = []  # row i -> its trace in `traces`
        rewards = batch.rewards.tolist()
        for s, row, r, u in zip(segs, batch.rows, rewards, rows, strict=True):
            b = s.boundaries
            short = cut and len(b) > 2
            response, bounds = (s.response_ids[: b[-2]], b[:-1]) if short else (s.response_ids, b)
            ref = self._reference(row, s.response_ids)
            key = (tuple(s.prompt_ids), tuple(response), tuple(bounds), ref, float(r))
            if key not in unique:
                unique[key] = len(traces)
                traces.append(Trace(s.prompt_ids, response, bounds, ref, float(r)))
                trace_rows.append(u)
            which.append(unique[key])
        results = rredcot_credit_batch(
            policy,
            self.tokenizer,
            self.task,
            traces,
            self.estimator,
            encoded=encoded,
            encoded_rows=trace_rows,
            seed=f"{batch.seed}/{batch.step}",
        )
        sigmas = []
        for s, r, u in zip(segs, rewards, which, strict=True):
            phi = results[u].phi
            if len(traces[u].boundaries) < len(s.boundaries):  # s_K not scored: V_K := R
                sigmas.append(terminal_credit(torch.cat([phi, phi.new_zeros(1)]), r))  # (K,)
            else:
                sigmas.append(results[u].sigma)
        metrics = {
            "credit/num_segments": mean_segments(segs),
            "credit/phi0_mean": float(np.mean([float(results[u].phi[0]) for u in which])),
            "credit/sigma_abs_mean": float(torch.cat(sigmas).abs().mean()),
            "credit/scored_fraction": len(traces) / len(segs),
            "credit/generation_reused": float(reused),
        }
        tokens = encoded.forward_tokens + sum(res.forward_tokens for res in results)
        return SegmentCredit(sigmas, [s.boundaries for s in segs], tokens, metrics)
