"""What a training method is: how a group is sampled and how its advantages are built.

A method is a small strategy object the one trainer (`CreditGRPOTrainer`) calls at two points:

- `advantages(batch, policy)`, always: after TRL generated and graded a generation batch, the
  method returns the advantages the GRPO loss uses, (B,) or per token (B, T), plus what the
  credit cost (extra forward tokens). `grpo` hands back TRL's own advantages untouched.
- `rollout(trainer, rows)`, only when the method defines it (class attribute `rollout` is None
  otherwise, and TRL samples n fresh completions per prompt): the method builds the batch's
  rows itself, e.g. RRPO/SRPO's Group 1 (fresh chains) and Group 2 (suffixes sampled after a
  reset prefix). It returns TRL's rollout dict: `prompt_ids` (per row: x, or x ⊕ prefix for a
  reset row, so the prefix is conditioned on and gets no loss), `completion_ids` (the sampled
  tokens that get loss), `logprobs` (per-token or None) and optional per-row extra fields that
  are merged into the rows the reward function and `advantages` see: `response_prefix` (text
  graded in front of the completion, so r is computed on prefix ⊕ suffix) and `group` (the
  normalisation group of each row, e.g. 2·prompt + {0, 1}; default: TRL's n consecutive rows).
  `trainer.sample(prompt_ids)` draws one completion per given prompt with TRL's generator.

The shared credit plumbing lives here too: `segment_completions` cuts every completion of a batch
with the configured segmentation (entropies from one batched teacher-forced pass, or from the
caller's own pass when it has one).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from rredcot.credit.advantages import CreditConfig, token_advantages
from rredcot.credit.placebo import placebo_sigmas
from rredcot.credit.segmentation import SegmentationConfig, segment
from rredcot.credit.segmented_trace import SegmentedTrace
from rredcot.generation.base import GenerationBackend
from rredcot.scoring.logprobs import completion_scores
from rredcot.scoring.packed import GenerationCache

if TYPE_CHECKING:
    from rredcot.training.method_settings import MethodSettings


@dataclass(frozen=True)
class RolloutBatch:
    """One process's generation batch after TRL sampled and graded it (B rows).

    rows: the dataset rows (`prompt`, `answer`, `reference`, `problem_id`, rollout extras).
    prompt_ids/prompt_mask: (B, P) left-padded; completion_ids/completion_mask: (B, T)
    right-padded, EOS included in the mask. completions: the decoded completions TRL graded.
    rewards: (B,) R_i; outcome_advantages: (B,) TRL's A_i; groups: (B,) group label of each row.
    step: the optimizer step being prepared (for seeds); seed: the run's seed.
    generation: what HF generate computed while sampling the rows (row i = batch row i), when
    the trainer kept it for a method that `reuses_generation`; else None.
    engine: the trainer's sampling engine as a generation backend when TRL samples with vLLM
    (`use_vllm`), for a method's own rollouts (MC); None: the method generates on the policy.
    """

    rows: list[dict[str, Any]]
    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    completions: list[str]
    rewards: torch.Tensor
    outcome_advantages: torch.Tensor
    groups: torch.Tensor
    step: int
    seed: int
    generation: GenerationCache | None = None
    engine: GenerationBackend | None = None

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    def prompt(self, i: int) -> list[int]:
        """Row i's prompt tokens without padding."""
        return self.prompt_ids[i][self.prompt_mask[i].bool()].tolist()

    def completion(self, i: int) -> list[int]:
        """Row i's completion tokens without padding (EOS kept when generated)."""
        return self.completion_ids[i][self.completion_mask[i].bool()].tolist()


@dataclass(frozen=True)
class MethodOutput:
    """advantages: (B,) or (B, T), 0 where the completion mask is 0; forward_tokens: tokens the
    credit computation ran through the model (teacher-forced or generated); metrics: extra
    per-step metrics named `credit/…` (listed in the method's `metric_names`)."""

    advantages: torch.Tensor
    forward_tokens: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


RolloutHook = Callable[[Any, list[dict[str, Any]]], dict[str, Any]]


class Method(ABC):
    """Base of the training methods; see the module docstring for the two hooks."""

    name: ClassVar[str] = ""
    metric_names: ClassVar[tuple[str, ...]] = ()
    """Extra `credit/…` metrics this method logs every step (columns of the metrics CSV)."""
    needs_whole_groups: ClassVar[bool] = True
    """True when `advantages` pools statistics over a group, so every group must sit on one
    process (checked by the trainer)."""
    rollout: ClassVar[RolloutHook | None] = None
    """A method that samples its own groups defines `def rollout(self, trainer, rows)`."""
    reuses_generation: ClassVar[bool] = False
    """True when `advantages` reads `batch.generation` (the trainer then keeps it)."""
    reads_reference: ClassVar[bool] = False
    """True when `advantages` reads each row's `reference` (and `answer`): RREDCoT."""

    @abstractmethod
    def advantages(self, batch: RolloutBatch, policy: torch.nn.Module) -> MethodOutput:
        """The advantages of `batch` under the current `policy` (in eval mode, no grad)."""

    @classmethod
    def from_settings(
        cls, settings: MethodSettings, task: Any, tokenizer: Any, eos_ids: Sequence[int]
    ) -> Method:
        """The method with its blocks of `settings` (a `MethodSettings` or a run's
        `TrainingSettings`: the same attributes); the blocks it does not use are ignored. The
        default: a method that reads no settings."""
        return cls()


@dataclass(frozen=True)
class SegmentCredit:
    """What a credit method computes for a batch: σ_i (K_i,) per row, the boundaries
    0 = b_0 < … < b_K of each row's response, the forward tokens spent and `credit/…` metrics."""

    sigmas: list[torch.Tensor]
    boundaries: list[list[int]]
    forward_tokens: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class TaskMethod(Method):
    """A method that reads the responses themselves: the task (prompts, grading), the tokenizer
    and the ids that end a response."""

    task: Any
    tokenizer: Any
    eos_ids: Sequence[int]


class SegmentCreditMethod(TaskMethod):
    """A method that scores every segment (σ_{i,k}) and turns the scores into token advantages
    the one way METHOD.md §4 states (`token_advantages` under the `credit` block): RREDCoT, MC,
    the checker oracle. A subclass implements `segment_credit` and has a `credit` field; its
    `credit.placebo` turns the method into its own placebo (`rredcot.credit.placebo`)."""

    credit: CreditConfig

    @abstractmethod
    def segment_credit(self, batch: RolloutBatch, policy: torch.nn.Module) -> SegmentCredit:
        """σ of every segment of every row of `batch` under `policy`."""

    def advantages(self, batch: RolloutBatch, policy: torch.nn.Module) -> MethodOutput:
        credit = self.segment_credit(batch, policy)
        sigmas = placebo_sigmas(
            self.credit.placebo,
            credit.sigmas,
            credit.boundaries,
            batch.completion_mask,
            batch.seed,
            batch.step,
        )  # the method's own σ unless credit.placebo asks for a placebo (METHOD.md §9)
        advantages = token_advantages(
            sigmas,
            credit.boundaries,
            batch.groups,
            batch.completion_mask,
            self.credit,
            batch.outcome_advantages,
        )  # (B, T)
        return MethodOutput(advantages, credit.forward_tokens, credit.metrics)


# --------------------------------------------------------------------------- shared credit step


def strip_eos(completion: Sequence[int], eos_ids: Sequence[int]) -> list[int]:
    """τ: the completion without a closing EOS, unless the EOS is all there is."""
    ids = list(completion)
    if len(ids) > 1 and ids[-1] in eos_ids:
        return ids[:-1]
    return ids


def response_scores(
    policy: torch.nn.Module, batch: RolloutBatch, rows_per_pass: int = 8
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """log π(z_t | x, z_<t) and H_t of every completion token: (B, T) each, from teacher-forced
    passes of x ⊕ completion (`rows_per_pass` rows at a time). Also returns the real tokens run.
    """
    return completion_scores(
        policy,
        batch.prompt_ids,
        batch.prompt_mask,
        batch.completion_ids,
        batch.completion_mask,
        rows_per_pass,
    )


def segment_completions(
    policy: torch.nn.Module,
    tokenizer: Any,
    batch: RolloutBatch,
    config: SegmentationConfig,
    eos_ids: Sequence[int],
    *,
    scores: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None,
) -> tuple[list[SegmentedTrace], int]:
    """Cut every completion of `batch` with the configured segmentation (METHOD.md §2).

    Entropies and log-probs come from one batched teacher-forced pass under the current policy,
    run only when the strategy needs them, unless the caller hands them over: `scores` holds,
    per row, (log π(τ_t | x ⊕ τ_<t), H_t) of the completion without its closing EOS (RREDCoT
    reads them off its scorer's encoding pass). Returns the traces and the forward tokens spent.
    """
    needed = config.reads_token_scores
    if scores is not None and len(scores) != len(batch):
        raise ValueError(f"scores: expected one (logprobs, entropies) per row ({len(batch)})")
    logprobs, entropies, tokens = (
        response_scores(policy, batch) if needed and scores is None else (None, None, 0)
    )
    texts_of: dict[int, str] = {}  # token id -> its text (decoding one token is slow)
    out = []
    for i in range(len(batch)):
        response = strip_eos(batch.completion(i), eos_ids)
        for t in response:
            if t not in texts_of:
                texts_of[t] = tokenizer.decode([t], skip_special_tokens=False)
        texts = [texts_of[t] for t in response]
        n = len(response)
        h = lp = None
        if needed and scores is not None:
            lp, h = (x.double().numpy() for x in scores[i])
            if len(lp) != n or len(h) != n:
                raise ValueError(
                    f"scores[{i}]: expected {n} log-probs and entropies (the completion "
                    f"without its EOS), got {len(lp)} and {len(h)}"
                )
        elif needed:
            h = entropies[i, :n].double().numpy()
            lp = logprobs[i, :n].double().numpy()
        boundaries = segment(texts, h, lp, config) if n else [0]
        out.append(SegmentedTrace(batch.prompt(i), response, [int(b) for b in boundaries]))
    return out, tokens


def mean_segments(traces: Sequence[SegmentedTrace]) -> float:
    """Mean K over the traces (a logged metric)."""
    return float(np.mean([len(t.boundaries) - 1 for t in traces])) if traces else 0.0
