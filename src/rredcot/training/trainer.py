"""The one RL trainer: TRL's `GRPOTrainer` with per-token advantages and method-built groups.

`CreditGRPOTrainer` changes five small things and inherits everything else (generation, the
PPO-clip loss, KL, logging, checkpoints):

1. `_generate_and_score_completions`: after TRL sampled, graded and normalised the batch, the
   method's `advantages(batch, policy)` replaces `output["advantages"]`, (B,) or (B, T). TRL's
   `_compute_loss` takes (B, T) as is ("to support subclasses that provide advantages with shape
   (B, T)"), so with method `grpo` the loss and gradients are exactly TRL's.
2. Sampling: a method that defines `rollout(trainer, rows)` (RRPO/SRPO resets) is plugged into
   TRL's `rollout_func` hook; it returns prompt ids (x ⊕ prefix for reset rows: the prefix gets
   no loss), completion ids, and per-row extras (`response_prefix`, `group`) that reach the
   reward function and the advantages. Without it TRL samples n fresh completions per prompt.
3. `training_step`: a NaN or inf loss stops training before the optimizer step, so the weights
   and the last checkpoint stay those of the last good step.
4. `_get_train_sampler`: TRL's `RepeatSampler` made epoch-aware (`EpochRepeatSampler`), so a
   run resumed in a later epoch sees the order an uninterrupted run sees there.
5. `_generate_single_turn`: for a method that reads the sampled traces' encoding
   (`reuses_generation`, RREDCoT) and HF generation, `generate` also hands back the keys,
   values and logits it computed while sampling (`GenerationCache`, on the batch), so the
   credit needs no pass to encode the traces again. Only while they fit:
   `GENERATION_CACHE_MAX_LOGITS` logits, no vLLM, one generate call per batch.

On several processes (`accelerate launch`) the method sees the policy as TRL's generation does:
unwrapped, with ZeRO-3 parameters gathered once per generation batch (the same collective on
every process), so its own forward passes and generation need no collectives and may differ in
number between processes. RRPO/SRPO are refused under ZeRO-3: their rollout samples a
data-dependent number of times, and each sampling call would gather the parameters anew.

It also logs what credit cost per step (`credit/forward_tokens`, `credit/seconds`) and the
advantage statistics over unmasked tokens (`credit/advantage_{mean,std,min,max}`).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from trl import GRPOTrainer
from trl.models import unwrap_model_for_generation
from trl.trainer.grpo_trainer import RepeatSampler

from rredcot.credit.advantages import group_ids, masked_stats, zero_std_share
from rredcot.generation.base import Completion, SamplingParams
from rredcot.scoring.packed import GenerationCache
from rredcot.tasks.base import Task
from rredcot.training.methods.base import Method, RolloutBatch
from rredcot.training.padding_free import packs_rows, unpadded_token_logps
from rredcot.training.trl_support import check_trl_version

check_trl_version()  # the overrides below are written against these TRL releases

log = logging.getLogger(__name__)

GENERATION_CACHE_MAX_LOGITS = 2**27
"""Most logits (rows × max completion length × vocabulary; 512 MiB in float32) that generation
keeps for a method that reuses them; larger batches are encoded again instead."""


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or inf; raised before the optimizer step."""


def completion_text(completion: Any) -> str:
    """A completion as text: a string as is, a conversational completion's last message."""
    if isinstance(completion, str):
        return completion
    return completion[-1]["content"]


def correctness_reward(task: Task) -> Callable[..., list[float]]:
    """TRL reward function r ∈ {0, 1}: the task's verifier on response_prefix ⊕ completion.

    Rows need `answer` (y*); rows a reset rollout built carry `response_prefix`, the part of the
    response that was conditioned on, so the whole response prefix ⊕ suffix is graded. Logs
    `reward/accuracy` (fraction graded correct).
    """

    def correctness(
        prompts: list[Any],
        completions: list[Any],
        answer: list[str],
        response_prefix: list[str] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        **_: Any,
    ) -> list[float]:
        prefixes = response_prefix if response_prefix is not None else [""] * len(completions)
        pairs = [
            (p + completion_text(c), str(a))
            for p, c, a in zip(prefixes, completions, answer, strict=True)
        ]
        grade_many = getattr(task, "grade_many", None)
        grades = grade_many(pairs) if callable(grade_many) else [task.grade(t, a) for t, a in pairs]
        rewards = [g.reward for g in grades]
        if log_metric is not None and rewards:
            log_metric("reward/accuracy", sum(g.correct for g in grades) / len(grades))
        return rewards

    return correctness


class TRLEngineBackend:
    """A `GenerationBackend` over the trainer's own vLLM engine (`use_vllm`), so that a method's
    extra rollouts (MC's state values) are sampled where TRL samples, with the weights TRL
    synced for this step, instead of with HF `generate` on the policy.

    Each call sets the engine's sampling settings to the given `SamplingParams` (temperature,
    top_p, budget, stop strings; no top-k, min-p or repetition penalty: samples from π as the
    HF backend does) and restores TRL's afterwards. Prompts are tokenized as TRL tokenizes text
    prompts. vLLM hands back token ids only, so the finish reason is read off them: the first
    stop string in the decoded text or a closing EOS is "stop" (text cut right after the stop
    string, the EOS dropped), `max_new_tokens` tokens without either is "length". Samples come
    from the engine's own random stream (as TRL's rollouts do), not from per-row seeds.
    """

    def __init__(self, trainer: GRPOTrainer) -> None:
        self.trainer = trainer
        self.tokenizer = trainer.processing_class
        self.eos_ids = set(trainer.eos_token_ids)

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Completion]:
        if not prompts:
            return []
        ids = self.tokenizer(text=list(prompts))["input_ids"]
        n = params.n
        engine = self.trainer.vllm_generation
        settings = {
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": 0,
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "max_completion_length": params.max_new_tokens,
            "generation_kwargs": {
                **engine.generation_kwargs,
                "stop": list(params.stop_strings) or None,
                "include_stop_str_in_output": True,
            },
        }
        saved = {key: getattr(engine, key) for key in settings}
        try:
            for key, value in settings.items():
                setattr(engine, key, value)
            sampled = self.trainer.sample([list(x) for x in ids for _ in range(n)], n)
        finally:
            for key, value in saved.items():
                setattr(engine, key, value)
        if len(sampled) != len(ids) * n:
            raise RuntimeError(f"vLLM engine: {len(sampled)} completions for {len(ids)} × {n}")
        return [self._completion(i // n, i % n, tokens, params) for i, tokens in enumerate(sampled)]

    def _completion(
        self, prompt_index: int, sample_index: int, tokens: list[int], params: SamplingParams
    ) -> Completion:
        ids = list(tokens)
        ended = bool(ids) and ids[-1] in self.eos_ids
        if ended:
            ids = ids[:-1]
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        ends = [text.find(s) + len(s) for s in params.stop_strings if s in text]
        if ends:
            text, reason = text[: min(ends)], "stop"
        else:
            reason = "length" if not ended and len(ids) >= params.max_new_tokens else "stop"
        return Completion(prompt_index, sample_index, text, ids, reason, len(ids))


class EpochRepeatSampler(RepeatSampler):
    """TRL's `RepeatSampler` whose order is a function of (seed, epoch) alone.

    TRL's draws one permutation from a generator seeded once at construction, so in one
    process epoch e gets the generator's (e+1)-th permutation; a resumed run builds a new
    sampler and got the first one again, i.e. epoch 0's order replayed in epoch e. Here each
    iteration reseeds and skips e permutations (`set_epoch`, which the HF loop calls at every
    epoch, and on resume with the checkpoint's epoch): the same order as TRL's in an
    uninterrupted run, and after a resume too.
    """

    epoch: int = 0

    @classmethod
    def like(cls, sampler: RepeatSampler) -> EpochRepeatSampler:
        """An epoch-aware copy of TRL's sampler (same data, repeats, batch, shuffle and seed)."""
        return cls(
            sampler.data_source,
            mini_repeat_count=sampler.mini_repeat_count,
            batch_size=sampler.batch_size,
            repeat_count=sampler.repeat_count,
            shuffle=sampler.shuffle,
            seed=sampler.seed,
        )

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):  # noqa: ANN204 (a generator, as TRL's)
        if self.shuffle and self.seed is not None:
            self.generator.manual_seed(self.seed)
            for _ in range(self.epoch):
                torch.randperm(self.num_samples, generator=self.generator)
        return super().__iter__()


class CreditGRPOTrainer(GRPOTrainer):
    """GRPO with a method strategy for advantages (B, T) and, optionally, group sampling.

    Takes GRPOTrainer's arguments plus `method` (a `rredcot.training.methods.Method`); a
    subclass may leave it out and build it in `default_method` (the public `RREDCoTTrainer`
    builds it from its config), and may hand the method other rows than TRL's (`method_rows`).
    """

    _tag_names = ["trl", "grpo", "rredcot"]

    def __init__(
        self, *args: Any, method: Method | None = None, padding_free: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        method = self.default_method() if method is None else method
        self.method = method
        self.padding_free = padding_free
        self._rows: list[dict[str, Any]] | None = None
        self._scored: tuple[list[str], torch.Tensor] | None = None
        self._generation: list[GenerationCache] = []  # this batch's generate calls, captured
        if method.rollout is not None:
            if self._dist.is_zero3:
                raise ValueError(
                    f"method {method.name!r} samples a data-dependent number of times per step, "
                    "and under DeepSpeed ZeRO-3 every sampling call gathers the parameters on all "
                    "processes (they would deadlock); launch it with the ddp or zero2 accelerate "
                    "config"
                )
            self.rollout_func = self._method_rollout
        local = self.args.per_device_train_batch_size * self.args.steps_per_generation
        if (
            method.needs_whole_groups
            and self.accelerator.num_processes > 1
            and local % self.num_generations
        ):
            raise ValueError(
                f"method {method.name!r} pools each group's statistics, so a group must sit on one "
                f"process: per_device_train_batch_size × steps_per_generation = {local} must be a "
                f"multiple of num_generations = {self.num_generations}"
            )

    def default_method(self) -> Method:
        """The method when none is given (after TRL's setup: tokenizer, eos ids are known)."""
        raise TypeError("CreditGRPOTrainer: needs method= (a rredcot.training.methods.Method)")

    def method_rows(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows the method sees for TRL's batch rows `inputs` (the rows themselves here)."""
        return inputs

    # ---------------------------------------------------------------- data order

    def _get_train_sampler(self, dataset=None):  # noqa: ANN001, ANN202 (TRL's signature)
        return EpochRepeatSampler.like(super()._get_train_sampler(dataset))

    # ---------------------------------------------------------------- sampling hook

    def _method_rollout(self, prompts: list[Any], trainer: GRPOTrainer) -> dict[str, Any]:
        """TRL's rollout_func: hand the method the batch's rows (it needs answers, not only
        prompts)."""
        if self._rows is None or len(self._rows) != len(prompts):
            raise RuntimeError("rollout: the batch rows were not recorded before generation")
        return self.method.rollout(self, self.method_rows(self._rows))

    def sample(
        self, prompt_ids: Sequence[Sequence[int]], num_generations: int = 1
    ) -> list[list[int]]:
        """One completion per given prompt (token ids), drawn with TRL's generator and settings.
        With `num_generations` n > 1 the prompts come as n consecutive copies of each (TRL's
        layout; vLLM's server mode samples n per distinct prompt).

        TRL's `_generate_single_turn` picks the backend: with `use_vllm` it syncs the policy's
        weights into vLLM when the step changed and samples there (colocate: this process's
        engine; server: prompts gathered to the main process, a collective); otherwise HF
        `generate` on the unwrapped policy. So the RRPO/SRPO rollouts follow vLLM as TRL's own
        sampling does.
        """
        completion_ids, _ = self._generate_single_turn(
            [list(p) for p in prompt_ids], None, {}, num_generations
        )
        return [list(c) for c in completion_ids]

    # ---------------------------------------------------------------- generation cache

    def _keeps_generation(self, rows: int) -> bool:
        """Keep what HF generate computed for this batch? (See the module docstring, 4.)"""
        head = self.accelerator.unwrap_model(self.model).get_output_embeddings().weight
        # ZeRO-3 leaves each process an empty shard (shape (0,)); DeepSpeed keeps the real shape
        vocab = getattr(head, "ds_shape", head.shape)[0]
        return (
            getattr(self.method, "reuses_generation", False)
            and not self.use_vllm
            and not getattr(self, "use_transformers_continuous_batching", False)
            and rows * self.max_completion_length * vocab <= GENERATION_CACHE_MAX_LOGITS
        )

    def _generate_single_turn(self, prompt_ids, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202 (TRL's signature)
        if not self._keeps_generation(len(prompt_ids)):
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)
        model = self.accelerator.unwrap_model(self.model)
        sample = model.generate

        def generate(*a: Any, **kw: Any) -> torch.Tensor:
            config = copy.deepcopy(kw.pop("generation_config", None) or model.generation_config)
            config.return_dict_in_generate, config.output_logits = True, True
            out = sample(*a, **kw, generation_config=config)
            layers = out.past_key_values.layers
            self._generation.append(
                GenerationCache(
                    kw["input_ids"],
                    kw["attention_mask"],
                    out.sequences,
                    [layer.keys for layer in layers],
                    [layer.values for layer in layers],
                    torch.stack(out.logits, 1),
                )
            )
            return out.sequences

        model.generate = generate  # an instance attribute over the class's method, removed below
        try:
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)
        finally:
            del model.generate

    # ---------------------------------------------------------------- advantage hook

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # noqa: ANN001, ANN202 (TRL's signature)
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        self._scored = ([completion_text(c) for c in completions], rewards_per_func)
        return rewards_per_func

    def _rollout_batch(self, inputs: list[dict[str, Any]], output: dict[str, Any]) -> RolloutBatch:
        if self._scored is None:
            raise RuntimeError("rewards: _calculate_rewards did not run for this batch")
        completions, rewards_per_func = self._scored
        weights = self.reward_weights.to(rewards_per_func.device)
        rewards_all = (rewards_per_func * weights[None]).nansum(dim=1)  # (B·processes,)
        b = len(inputs)
        first = self.accelerator.process_index * b
        if all("group" in row for row in inputs):
            groups = torch.tensor([int(row["group"]) for row in inputs])
        else:
            n = self.num_generations if self.model.training else self.num_generations_eval
            groups = group_ids(rewards_all.numel(), n)[first : first + b]
        return RolloutBatch(
            rows=self.method_rows(inputs),
            prompt_ids=output["prompt_ids"],
            prompt_mask=output["prompt_mask"],
            completion_ids=output["completion_ids"],
            completion_mask=output["completion_mask"],
            completions=completions,
            rewards=rewards_all[first : first + b].cpu(),
            outcome_advantages=output["advantages"],
            groups=groups,
            step=int(self.state.global_step),
            seed=int(self.args.seed),
            generation=self._generation[0] if len(self._generation) == 1 else None,
            engine=TRLEngineBackend(self) if self.use_vllm else None,
        )

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        self._rows, self._generation = inputs, []
        output = super()._generate_and_score_completions(inputs)
        batch = self._rollout_batch(inputs, output)
        if all("group" in row for row in inputs):
            # TRL counted zero-std groups of n consecutive rows; a method that labels its own
            # groups (RRPO/SRPO: n/2 fresh, n/2 reset rows) normalises over those, so count those.
            # Labelled groups lie within one process's rows; TRL's may span processes, so its
            # gathered value stays for every other method.
            mode = "train" if self.model.training else "eval"
            self._metrics[mode]["frac_reward_zero_std"][-1] = zero_std_share(
                batch.rewards, batch.groups
            )
        start = time.perf_counter()
        # As TRL's generation: unwrapped, ZeRO-3 parameters gathered (always: the method's passes
        # must not be collectives), FSDP1 parameters summoned, activation checkpointing paused.
        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=True,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
            ) as policy,
            self._dist.summon_full_params(self.model_wrapped, recurse=False),
        ):
            was_training = policy.training
            policy.eval()  # the estimator is π without dropout; lets the scorer use its KV cache
            try:
                with torch.no_grad():
                    result = self.method.advantages(batch, policy)
            finally:
                policy.train(was_training)
        seconds = time.perf_counter() - start
        advantages = result.advantages.to(output["advantages"].device, torch.float32)
        b, t = output["completion_ids"].shape
        if advantages.shape not in ((b,), (b, t)):
            raise ValueError(
                f"method {self.method.name!r}: advantages must have shape ({b},) or ({b}, {t}), "
                f"got {tuple(advantages.shape)}"
            )
        if not torch.isfinite(advantages).all():
            rows = torch.nonzero(~torch.isfinite(advantages).reshape(b, -1).all(dim=1)).flatten()
            raise FloatingPointError(
                f"method {self.method.name!r}: advantages of rows {rows.tolist()} are not finite "
                f"(problems {[inputs[i].get('problem_id') for i in rows.tolist()]})"
            )
        output["advantages"] = advantages
        self._log_credit(advantages, output["completion_mask"], result, seconds)
        self._rows, self._scored, self._generation = None, None, []
        return output

    def _log_credit(
        self, advantages: torch.Tensor, mask: torch.Tensor, result: Any, seconds: float
    ) -> None:
        mode = "train" if self.model.training else "eval"
        metrics = self._metrics[mode]
        for name, value in masked_stats(advantages.cpu(), mask.cpu()).items():
            metrics[f"credit/advantage_{name}"].append(value)
        metrics["credit/forward_tokens"].append(float(result.forward_tokens))
        metrics["credit/seconds"].append(seconds)
        for name, value in result.metrics.items():
            metrics[name].append(float(value))

    # ---------------------------------------------------------------- padding-free scoring

    def _get_per_token_logps_and_entropies(  # noqa: ANN202 (TRL's signature)
        self,
        model,  # noqa: ANN001
        input_ids,  # noqa: ANN001
        attention_mask,  # noqa: ANN001
        logits_to_keep,  # noqa: ANN001
        batch_size=None,  # noqa: ANN001
        compute_entropy=False,  # noqa: ANN001
        compute_aux_loss=False,  # noqa: ANN001
        **media: Any,
    ):
        """TRL's, or under `padding_free` the rows unpadded (`rredcot.training.padding_free`:
        no (rows, 1, L, L) mask); images and MoE auxiliary losses keep TRL's path."""
        unpadded = None
        if self.padding_free and not compute_aux_loss and all(v is None for v in media.values()):
            unpadded = unpadded_token_logps(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                compute_entropy=compute_entropy,
                packed=packs_rows(self.accelerator.unwrap_model(model)),
                autocast=self.accelerator.autocast,
            )
        if unpadded is not None:
            return (*unpadded, None)
        return super()._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size,
            compute_entropy,
            compute_aux_loss,
            **media,
        )

    # ---------------------------------------------------------------- NaN guard

    def training_step(self, model, inputs, num_items_in_batch):  # noqa: ANN001, ANN201 (HF's signature)
        loss = super().training_step(model, inputs, num_items_in_batch)
        if not torch.isfinite(loss).all():
            raise NonFiniteLossError(
                f"loss is {loss.item()} at optimizer step {self.state.global_step + 1} "
                f"(method {self.method.name!r}); stopped before the optimizer step, so the "
                f"weights and the last checkpoint are those of step {self.state.global_step}"
            )
        return loss
