"""Credit assignment with resets (Samanta et al., 2026, arXiv:2605.25507): what RRPO and SRPO share.

Follows the official code (github.com/Ankur-Samanta/SRPO, MIT): `training/srpo_agent_loop.py`
(`SRPOAgentLoop._fill_rollout_buffer`, `_compute_advantages`) and `training/srpo_loss.py`.
RRPO and SRPO differ only in how the reset step N of a failed chain is chosen
(`ResetMethod.reset_steps`; `rrpo.py`, `srpo.py`). Per prompt x, with n = num_generations
rollouts split 1×(n/2) (n = 8 → 4 + 4), METHOD.md §6:

1. Group 1: sample fresh chains until n/2 are kept *and* one failed chain is found, at most
   `max_fresh_attempts` (12) fresh attempts. The first failure is the *parent*: used for the
   reset only, never trained on. Later failures, and correct chains while Group 1 has room, are
   kept; correct chains after that are discarded. A chain with no response (no step) is never a
   parent. (Batched here: each round samples, for every prompt still short, the fewest chains it
   could still need, and the chains are processed in order — the official sequential rule.)
2. No parent: the n slots are Group 1's chains topped up with fresh chains, one group (plain
   GRPO, normalised as below).
3. Parent (K steps = segments of the configured segmentation, so all methods share one notion of
   step): reset step N ∈ [1, K]; prefix = steps 1 … N−1 of the parent, τ_{<b_{N−1}} (empty for
   N = 1); Group 2 = n/2 suffixes from π(· | x ⊕ prefix). A Group 2 row's prompt is x ⊕ prefix (no
   loss on the prefix), its reward grades prefix ⊕ suffix (`response_prefix`), and its suffix is
   cut to L − |prefix| tokens so prefix ⊕ suffix keeps a fresh chain's budget L.
4. Rewards r ∈ {0, 1}; each group normalised on its own, A_i = (r_i − mean_g r)/std_g r with the
   population std, A = 0 where std_g < 1e-8 (`per_group_advantages`).
5. Loss L = −mean_i [A_i · (1/|S_i|) Σ_{k∈S_i} log π_θ(o_{i,k})], S_i = the completion tokens
   (all response tokens in Group 1, the suffix in Group 2). This is TRL's inherited loss under
   `check_on_policy_loss`: loss_type "grpo" (per-sequence token mean, then the mean over rows),
   beta 0 (no KL) and one on-policy pass per generation (num_iterations 1, gradient accumulation
   a multiple of steps_per_generation, no vLLM importance weights), so the PPO ratio
   exp(log π − log π.detach()) is 1 with gradient ∇log π and the clip is inactive: TRL's gradient
   is exactly ∇L (its logged loss value is −mean_i A_i, the surrogate at ratio 1).

Per-step metrics (`credit/…`): groups with a parent, mean reset step N and parent length K,
prefix tokens, Group 2 accuracy, fresh attempts per prompt (phase 1) and fresh chains sampled in
all. `forward_tokens` counts what the method costs beyond the n trained rollouts: the parent and
discarded chains, the parents' segmentation pass and (SRPO) the localization prompts and outputs.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from rredcot.credit.advantages import per_group_advantages
from rredcot.credit.segmentation import SegmentationConfig, segment
from rredcot.scoring import response_entropies
from rredcot.training.methods.base import (
    MethodOutput,
    RolloutBatch,
    TaskMethod,
)
from rredcot.training.reset_config import ResetConfig

if TYPE_CHECKING:
    from rredcot.training.method_settings import MethodSettings


def check_on_policy_loss(trainer: Any) -> None:
    """Raise unless TRL's loss under `trainer`'s settings is RRPO/SRPO's on-policy loss (module
    docstring, item 5): loss_type grpo, beta 0, num_iterations 1, one generation per optimizer
    step, no vLLM importance weights, no entropy mask/bonus, no off-policy mask, no truncation
    mask, delta unset or ≥ 1."""
    args = trainer.args
    wrong = []
    if trainer.loss_type != "grpo":
        wrong.append(f"loss_type={trainer.loss_type!r} (need 'grpo': per-sequence token mean)")
    if trainer.beta != 0.0:
        wrong.append(f"beta={trainer.beta} (need 0: no KL term)")
    if trainer.num_iterations != 1:
        wrong.append(f"num_iterations={trainer.num_iterations} (need 1: on-policy)")
    if args.gradient_accumulation_steps % args.steps_per_generation:
        wrong.append(
            f"gradient_accumulation_steps={args.gradient_accumulation_steps} is not a multiple of "
            f"steps_per_generation={args.steps_per_generation} (samples would go off-policy)"
        )
    if trainer.use_vllm and trainer.vllm_importance_sampling_correction:
        wrong.append("vllm_importance_sampling_correction=True (need False: no ratio)")
    if trainer.top_entropy_quantile != 1.0:
        wrong.append(f"top_entropy_quantile={trainer.top_entropy_quantile} (need 1.0)")
    if trainer.off_policy_mask_threshold is not None:
        wrong.append(f"off_policy_mask_threshold={trainer.off_policy_mask_threshold} (need None)")
    if getattr(trainer, "_entropy_bonus_enabled", False):
        wrong.append("an entropy bonus is enabled (need entropy_coef 0, no adaptive entropy)")
    if trainer.mask_truncated_completions:
        wrong.append("mask_truncated_completions=True (need False: every response token counts)")
    if args.delta is not None and args.delta < 1.0:
        wrong.append(f"delta={args.delta} (need None or >= 1)")
    if wrong:
        raise ValueError(
            "RRPO/SRPO train with the on-policy loss −mean_i[A_i·mean_{k∈S_i} log π]; TRL's loss "
            "equals it only under other settings: " + "; ".join(wrong)
        )


# --------------------------------------------------------------------------- group 1


@dataclass(frozen=True)
class Chain:
    """One sampled response: its tokens (EOS kept as sampled), decoded text, correctness, and
    whether it has any response at all (a chain with none is never a parent)."""

    completion_ids: list[int]
    text: str
    correct: bool
    has_steps: bool


@dataclass
class FreshDraw:
    """Phase 1 for one prompt: Group 1's kept chains, the parent (first failure, or None), the
    fresh attempts used and the chains sampled but not kept."""

    group1: list[Chain] = field(default_factory=list)
    parent: Chain | None = None
    attempts: int = 0
    discarded: list[Chain] = field(default_factory=list)

    def needs(self, group_size: int) -> int:
        """The fewest further chains the official loop could still need."""
        return max(group_size - len(self.group1), 0) + (self.parent is None)

    def take(self, chain: Chain, group_size: int) -> None:
        """The official rule for the next fresh chain."""
        self.attempts += 1
        if not chain.has_steps:
            (self.group1 if len(self.group1) < group_size else self.discarded).append(chain)
        elif self.parent is None and not chain.correct:
            self.parent = chain
        elif len(self.group1) < group_size:
            self.group1.append(chain)
        else:
            self.discarded.append(chain)


def collect_fresh(
    sample: Callable[[list[int]], list[Chain]],
    num_prompts: int,
    group_size: int,
    max_attempts: int,
) -> list[FreshDraw]:
    """Phase 1 for every prompt: `sample(prompt_indices)` draws one graded fresh chain per entry.

    Each round asks, for every prompt still short, for min(needs, attempts left) chains, so no
    prompt is sampled past the point where the sequential loop would stop.
    """
    draws = [FreshDraw() for _ in range(num_prompts)]
    while True:
        wanted = [
            p
            for p, d in enumerate(draws)
            for _ in range(min(d.needs(group_size), max_attempts - d.attempts))
        ]
        if not wanted:
            return draws
        chains = sample(wanted)
        if len(chains) != len(wanted):
            raise RuntimeError(f"sample: asked for {len(wanted)} chains, got {len(chains)}")
        for p, chain in zip(wanted, chains, strict=True):
            draws[p].take(chain, group_size)


# --------------------------------------------------------------------------- the reset


@dataclass(frozen=True)
class Parent:
    """A failed chain cut into K steps: prompt x, response τ (no EOS), boundaries 0 = b_0 < … <
    b_K = |τ|, the step texts, and the problem text (for SRPO's localization prompt)."""

    prompt_index: int
    prompt_ids: list[int]
    response_ids: list[int]
    boundaries: list[int]
    steps: list[str]
    problem: str

    @property
    def num_steps(self) -> int:
        return len(self.boundaries) - 1

    def prefix(self, step: int) -> list[int]:
        """Steps 1 … N−1: τ_{<b_{N−1}} (token-aligned; empty for N = 1)."""
        if not 1 <= step <= self.num_steps:
            raise ValueError(f"step: {step} is outside 1 … {self.num_steps}")
        return self.response_ids[: self.boundaries[step - 1]]


@dataclass(frozen=True)
class RolloutContext:
    """What the reset rollout needs from the trainer: `sample(prompt_ids)` draws one completion
    per prompt with TRL's generator; n rollouts per prompt; budget L; the rollout's top_p; the
    (unwrapped) policy; the run's seed and the step being prepared; whether this is evaluation
    (then n plain fresh chains per prompt, as the official loop does at validation)."""

    sample: Callable[[list[list[int]]], list[list[int]]]
    policy: torch.nn.Module
    num_generations: int
    max_completion_length: int
    top_p: float
    seed: int
    step: int
    evaluating: bool = False

    @classmethod
    def from_trainer(cls, trainer: Any) -> RolloutContext:
        training = trainer.model.training
        return cls(
            sample=trainer.sample,
            policy=trainer.accelerator.unwrap_model(trainer.model),
            num_generations=trainer.num_generations if training else trainer.num_generations_eval,
            max_completion_length=int(trainer.max_completion_length),
            top_p=float(trainer.top_p),
            seed=int(trainer.args.seed),
            step=int(trainer.state.global_step),
            evaluating=not training,
        )


@dataclass(frozen=True)
class ResetChoice:
    """A parent's reset step N ∈ [1, K], how it was chosen (RRPO: `uniform`; SRPO: a
    localization status) and the tokens choosing it cost."""

    step: int
    status: str
    forward_tokens: int = 0


@dataclass
class ResetMethod(TaskMethod):
    """RRPO/SRPO: Group 1 fresh chains, Group 2 suffixes after a reset of a failed parent."""

    metric_names: ClassVar[tuple[str, ...]] = (
        "credit/reset_groups",
        "credit/reset_step_mean",
        "credit/reset_num_steps_mean",
        "credit/reset_prefix_tokens_mean",
        "credit/group2_accuracy",
        "credit/fresh_attempts_mean",
        "credit/fresh_chains",
    )

    segmentation: SegmentationConfig = field(default_factory=SegmentationConfig)
    resets: ResetConfig = field(default_factory=ResetConfig)
    _pending: tuple[int, dict[str, float]] | None = field(default=None, repr=False)

    @classmethod
    def from_settings(
        cls, settings: MethodSettings, task: Any, tokenizer: Any, eos_ids: Sequence[int]
    ) -> ResetMethod:
        return cls(
            task, tokenizer, list(eos_ids), settings.segmentation, settings.resets or ResetConfig()
        )

    @abstractmethod
    def reset_steps(self, ctx: RolloutContext, parents: list[Parent]) -> list[ResetChoice]:
        """The reset choice of every parent (N ∈ [1, K])."""

    def choice_metrics(self, choices: list[ResetChoice]) -> dict[str, float]:
        """Method-specific per-step metrics of the parents' reset choices (none by default)."""
        return {}

    # ---------------------------------------------------------------- tokens and grading

    def encode(self, text: str) -> list[int]:
        """A prompt's token ids, tokenized as TRL tokenizes text prompts."""
        return list(self.tokenizer(text=[text])["input_ids"][0])

    def decode(self, ids: Sequence[int]) -> str:
        """Token ids as text, as TRL decodes completions for the reward."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def response_of(self, completion: Sequence[int]) -> list[int]:
        """τ: the completion without its closing EOS ([] when it is nothing but EOS)."""
        ids = list(completion)
        return ids[:-1] if ids and ids[-1] in self.eos_ids else ids

    def chains(self, completions: list[list[int]], answers: list[str]) -> list[Chain]:
        """Fresh completions graded by the task's verifier (as the reward function will)."""
        texts = [self.decode(c) for c in completions]
        pairs = list(zip(texts, answers, strict=True))
        grade_many = getattr(self.task, "grade_many", None)
        grades = grade_many(pairs) if callable(grade_many) else [self.task.grade(*p) for p in pairs]
        return [
            Chain(list(c), t, g.correct, bool(self.response_of(c)))
            for c, t, g in zip(completions, texts, grades, strict=True)
        ]

    @torch.no_grad()
    def cut(
        self, policy: torch.nn.Module, index: int, x: list[int], chain: Chain, problem: str
    ) -> Parent:
        """The parent's K steps: the configured segmentation of τ (entropies under the policy)."""
        response = self.response_of(chain.completion_ids)
        texts = [self.tokenizer.decode([t], skip_special_tokens=False) for t in response]
        h = lp = None
        if self.segmentation.reads_token_scores:
            lp_t, h_t = response_entropies(policy, x, response)  # (T,) each
            h, lp = h_t.double().cpu().numpy(), lp_t.double().cpu().numpy()
        b = [int(v) for v in segment(texts, h, lp, self.segmentation)]
        steps = [self.decode(response[lo:hi]) for lo, hi in zip(b[:-1], b[1:], strict=True)]
        return Parent(index, x, response, b, steps, problem)

    # ---------------------------------------------------------------- the rollout hook

    def rollout(self, trainer: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """TRL's rollout_func for this method (see `build`)."""
        check_on_policy_loss(trainer)
        return self.build(RolloutContext.from_trainer(trainer), rows)

    def build(self, ctx: RolloutContext, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """TRL's rollout dict for `rows` (n consecutive copies per prompt, TRL's layout):
        prompt_ids, completion_ids, logprobs (None) and per row `response_prefix`, `group`
        (2g for Group 1 or a no-parent group, 2g + 1 for Group 2 of prompt g) and `reset_step`
        (N for a Group 2 row, 0 otherwise). Rows of prompt g: Group 1, then Group 2."""
        n = ctx.num_generations
        if ctx.evaluating:
            return self.plain(ctx, rows)
        if n < 2 or n % 2:
            raise ValueError(
                f"num_generations: {self.name} splits the n rollouts 1×(n/2); need an even n, "
                f"got {n}"
            )
        if len(rows) % n:
            raise ValueError(f"rows: {len(rows)} is not a multiple of num_generations {n}")
        size = n // 2
        prompts = [rows[g] for g in range(0, len(rows), n)]
        for g, first in enumerate(prompts):
            if any(r["prompt"] != first["prompt"] for r in rows[g * n : (g + 1) * n]):
                raise ValueError(
                    f"rows {g * n}…{(g + 1) * n - 1}: expected {n} copies of one prompt (problem "
                    f"{first.get('problem_id')!r}), as TRL's sampler lays them out"
                )
        xs = [self.encode(r["prompt"]) for r in prompts]
        answers = [str(r["answer"]) for r in prompts]

        def fresh(indices: list[int]) -> list[Chain]:
            return self.chains(ctx.sample([xs[p] for p in indices]), [answers[p] for p in indices])

        # Phase 1: Group 1 and the parents (the first failures)
        draws = collect_fresh(fresh, len(prompts), size, self.resets.max_fresh_attempts)
        cost = sum(
            len(xs[p]) + len(c.completion_ids)
            for p, d in enumerate(draws)
            for c in d.discarded + ([d.parent] if d.parent else [])
        )

        # Phase 2: cut each parent into steps and choose its reset step N
        policy, was_training = ctx.policy, ctx.policy.training
        policy.eval()
        try:
            parents = [
                self.cut(
                    policy, p, xs[p], d.parent, prompts[p].get("problem", prompts[p]["prompt"])
                )
                for p, d in enumerate(draws)
                if d.parent is not None
            ]
        finally:
            policy.train(was_training)
        if self.segmentation.reads_token_scores:
            cost += sum(len(q.prompt_ids) + len(q.response_ids) for q in parents)
        choices = self.reset_steps(ctx, parents) if parents else []
        if len(choices) != len(parents):
            raise RuntimeError(
                f"{self.name}: {len(choices)} reset choices for {len(parents)} parents"
            )
        for q, c in zip(parents, choices, strict=True):
            if not 1 <= c.step <= q.num_steps:
                raise RuntimeError(
                    f"{self.name}: reset step {c.step} of prompt {q.prompt_index} is outside "
                    f"1 … {q.num_steps}"
                )
        cost += sum(c.forward_tokens for c in choices)

        # Phase 3: one sampling call for the Group 2 suffixes and any fresh top-ups
        reset = {
            q.prompt_index: (q, c, q.prefix(c.step)) for q, c in zip(parents, choices, strict=True)
        }
        requests: list[tuple[int, bool]] = []  # (prompt, is a Group 2 suffix)
        for p, d in enumerate(draws):
            requests += [(p, False)] * ((size if p in reset else n) - len(d.group1))
            requests += [(p, True)] * (size if p in reset else 0)
        sampled = (
            ctx.sample([xs[p] + (reset[p][2] if suffix else []) for p, suffix in requests])
            if requests
            else []
        )
        top_ups: dict[int, list[list[int]]] = {}
        suffixes: dict[int, list[list[int]]] = {}
        for (p, suffix), completion in zip(requests, sampled, strict=True):
            if suffix:  # prefix ⊕ suffix keeps the fresh-chain budget L
                budget = ctx.max_completion_length - len(reset[p][2])
                suffixes.setdefault(p, []).append(list(completion)[:budget])
            else:
                top_ups.setdefault(p, []).append(list(completion))

        # Assemble: per prompt, Group 1 (or the whole no-parent group), then Group 2
        out: dict[str, list] = {
            k: []
            for k in ("prompt_ids", "completion_ids", "response_prefix", "group", "reset_step")
        }

        def add(prompt: list[int], completion: list[int], prefix: str, group: int, step: int):
            out["prompt_ids"].append(prompt)
            out["completion_ids"].append(completion)
            out["response_prefix"].append(prefix)
            out["group"].append(group)
            out["reset_step"].append(step)

        for p, d in enumerate(draws):
            for completion in [c.completion_ids for c in d.group1] + top_ups.get(p, []):
                add(xs[p], completion, "", 2 * p, 0)
            if p in reset:
                _, choice, prefix = reset[p]
                for completion in suffixes[p]:
                    add(xs[p] + prefix, completion, self.decode(prefix), 2 * p + 1, choice.step)
        if len(out["completion_ids"]) != len(rows):
            raise RuntimeError(
                f"{self.name}: built {len(out['completion_ids'])} rows for {len(rows)}"
            )

        def mean(values: list[float]) -> float:
            return float(np.mean(values)) if values else math.nan

        metrics = {
            "credit/reset_groups": float(len(parents)),
            "credit/reset_step_mean": mean([c.step for c in choices]),
            "credit/reset_num_steps_mean": mean([q.num_steps for q in parents]),
            "credit/reset_prefix_tokens_mean": mean([len(v[2]) for v in reset.values()]),
            "credit/fresh_attempts_mean": mean([d.attempts for d in draws]),
            "credit/fresh_chains": float(
                sum(d.attempts for d in draws) + sum(map(len, top_ups.values()))
            ),
            **self.choice_metrics(choices),
        }
        self._pending = (cost, metrics)
        return {**out, "logprobs": None}

    def plain(self, ctx: RolloutContext, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """Evaluation rollouts: one fresh chain per row, n rows per prompt in one group."""
        if len(rows) % ctx.num_generations:
            raise ValueError(
                f"rows: {len(rows)} is not a multiple of num_generations {ctx.num_generations}"
            )
        xs = [self.encode(r["prompt"]) for r in rows]
        self._pending = (0, {})
        return {
            "prompt_ids": xs,
            "completion_ids": [list(c) for c in ctx.sample(xs)],
            "logprobs": None,
            "response_prefix": [""] * len(rows),
            "group": [2 * (i // ctx.num_generations) for i in range(len(rows))],
            "reset_step": [0] * len(rows),
        }

    # ---------------------------------------------------------------- the advantage hook

    def advantages(self, batch: RolloutBatch, policy: torch.nn.Module) -> MethodOutput:
        """A_i = (r_i − mean_g r)/std_g r per group (population std, 0 where std < 1e-8). (B,)"""
        if self._pending is None:
            raise RuntimeError(f"{self.name}: advantages() without a rollout() for this batch")
        cost, metrics = self._pending
        self._pending = None
        advantages = per_group_advantages(batch.rewards, batch.groups)  # (B,)
        suffix = torch.tensor([int(r.get("reset_step", 0)) > 0 for r in batch.rows])
        accuracy = float(batch.rewards[suffix].mean()) if suffix.any() else math.nan
        return MethodOutput(advantages, cost, {**metrics, "credit/group2_accuracy": accuracy})
