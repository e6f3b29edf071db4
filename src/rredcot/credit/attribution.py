"""Attribution baselines for segment credit: leave-one-out, Shapley, gradient × input, attention.

METHOD.md §5 (the coalition value function: `rredcot.credit.coalitions`; Shapley:
`rredcot.credit.shapley`). A trace x ⊕ τ has segments k = 1 … K with boundaries
0 = b_0 < … < b_K = T (`AttributionTrace`); here segment k is the player with 0-based index
k − 1 and covers τ[b_{k−1}:b_k]. Every attribution scores how much a segment supports the
reference answer y* when the answer is forced with the task's trigger A (answer_ids =
A ⊕ y* ⊕ close, already tokenized; the first `trigger_len` of them are A and are context, not
scored):

    f(S) = log π(y* ⊕ close | x ⊕ (τ segments in S, in order) ⊕ A)

- `leave_one_out`:       LOO_k = f(all) − f(all \\ {k})
- `shapley_permutation`: φ_k ≈ mean over M permutations π of f(pre_π(k) ∪ {k}) − f(pre_π(k))
- `shapley_exact`:       φ_k = Σ_{S ⊆ N∖{k}} |S|! (K − |S| − 1)! / K! · (f(S ∪ {k}) − f(S))
- `gradient_x_input`:    Σ_{j ∈ segment k} ⟨∂f/∂e_j, e_j⟩ on the input embeddings of x ⊕ τ ⊕ A ⊕ y*
- `attention_mass`:      mean over layers, heads and answer positions q of Σ_{j ∈ segment k} a_qj

The coalition scores are teacher-forced: all coalitions of one call are scored in a few padded
batched passes, each distinct coalition once. Every result carries its cost (forward tokens,
padding included, and backward tokens) for the estimator study's cost axis.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from transformers import DynamicCache

from rredcot.credit.coalitions import (
    DEFAULT_MAX_TOKENS_PER_PASS,
    AttributionResult,
    AttributionTrace,
    CoalitionValue,
    coalition_logprob,
    model_device,
)
from rredcot.credit.shapley import (
    sample_permutations,
    shapley_exact,
    shapley_exact_from_values,
    shapley_from_permutations,
    shapley_permutation,
)
from rredcot.scoring.logprobs import gather_logprobs


@dataclass(frozen=True)
class AttributionConfig:
    """Settings shared by the registry entries (config `attribution`)."""

    shapley_permutations: int = 64
    """M, permutations sampled for the Shapley estimate (METHOD.md §5)."""
    seed: int = 0
    """Seed of the permutation sampler."""
    antithetic: bool = False
    """Pair every sampled permutation with its reverse (variance reduction)."""
    max_tokens_per_pass: int = DEFAULT_MAX_TOKENS_PER_PASS
    """Padded tokens per coalition-scoring forward pass."""

    def __post_init__(self) -> None:
        if isinstance(self.shapley_permutations, bool) or self.shapley_permutations < 1:
            raise ValueError(
                f"attribution.shapley_permutations: expected a positive integer, got "
                f"{self.shapley_permutations!r}"
            )
        if self.max_tokens_per_pass < 1:
            raise ValueError(
                f"attribution.max_tokens_per_pass: expected a positive integer, got "
                f"{self.max_tokens_per_pass!r}"
            )


# --- the attributions --------------------------------------------------------------------------


def leave_one_out(
    model: torch.nn.Module,
    trace: AttributionTrace,
    *,
    max_tokens_per_pass: int = DEFAULT_MAX_TOKENS_PER_PASS,
) -> AttributionResult:
    """LOO_k = f(all) − f(all ∖ {k}); K + 1 sequences scored in batched passes."""
    start = time.perf_counter()
    f = CoalitionValue(model, trace, max_tokens_per_pass=max_tokens_per_pass)
    everyone = frozenset(range(f.num_segments))
    values = f([everyone, *(everyone - {k} for k in range(f.num_segments))])  # (K+1,)
    return AttributionResult(
        values=values[0] - values[1:],
        forward_tokens=f.forward_tokens,
        seconds=time.perf_counter() - start,
    )


def _full_sequence(model: torch.nn.Module, trace: AttributionTrace) -> torch.Tensor:
    ids = [*trace.prompt_ids, *trace.response_ids, *trace.answer_ids]
    return torch.tensor(ids, dtype=torch.long, device=model_device(model))[None]  # (1, L)


def gradient_x_input(model: torch.nn.Module, trace: AttributionTrace) -> AttributionResult:
    """Σ_{j ∈ segment k} ⟨∂f/∂e_j, e_j⟩ with f = log π(y* ⊕ close | x ⊕ τ ⊕ A).

    One forward and one backward pass of x ⊕ τ ⊕ A ⊕ y* ⊕ close (last token not fed). The
    embeddings are a detached leaf and `torch.autograd.grad` differentiates with respect to it
    only, so no `.grad` is left on the model's parameters; the model's train/eval mode is kept.
    """
    start = time.perf_counter()
    # inference_mode(False): tensors made under a caller's inference mode cannot enter autograd.
    with torch.inference_mode(False), torch.enable_grad():
        ids = _full_sequence(model, trace)[:, :-1]  # (1, L−1)
        targets = torch.tensor(
            trace.answer_ids[trace.trigger_len :], dtype=torch.long, device=ids.device
        )
        embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)  # (1, L−1, E)
        out = model(inputs_embeds=embeds, logits_to_keep=len(targets), use_cache=False)
        logits = out.logits[0]  # (n_target, V)
        logprobs, _ = gather_logprobs(logits, targets)
        (grad,) = torch.autograd.grad(logprobs.sum(), embeds)
    per_token = (grad * embeds.detach()).sum(-1)[0].double()  # (L−1,)
    values = [float(per_token[s].sum()) for s in trace.segment_slices(len(trace.prompt_ids))]
    return AttributionResult(
        values=np.array(values, dtype=np.float64),
        forward_tokens=ids.shape[1],
        backward_tokens=ids.shape[1],
        seconds=time.perf_counter() - start,
    )


def attention_mass(model: torch.nn.Module, trace: AttributionTrace) -> AttributionResult:
    """Mean over layers, heads and answer positions q (the y* ⊕ close tokens) of Σ_{j∈seg k} a_qj.

    x ⊕ τ ⊕ A is encoded once with the model's own attention into a KV cache; then only the
    answer tokens are run with eager attention and `output_attentions=True`, so the weights kept
    are (layers, heads, n_answer, L) rather than L × L per layer. The previous attention
    implementation is restored afterwards.
    """
    start = time.perf_counter()
    ids = _full_sequence(model, trace)  # (1, L)
    n_answer = len(trace.answer_ids) - trace.trigger_len
    context, answer = ids[:, :-n_answer], ids[:, -n_answer:]
    previous = model.config._attn_implementation
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        model(input_ids=context, past_key_values=cache, use_cache=True, logits_to_keep=1)
        try:
            if previous != "eager":
                model.set_attn_implementation("eager")
                if model.config._attn_implementation != "eager":
                    raise ValueError(
                        f"model: {type(model).__name__} cannot switch its attention "
                        f"implementation from {previous!r} to 'eager', which "
                        f"output_attentions needs"
                    )
            attentions = model(
                input_ids=answer,
                past_key_values=cache,
                use_cache=True,
                output_attentions=True,
                logits_to_keep=1,
            ).attentions  # layers × (1, H, n_answer, L)
        finally:
            if model.config._attn_implementation != previous:
                model.set_attn_implementation(previous)
        weights = torch.stack([a[0].double() for a in attentions])  # (layers, H, n_answer, L)
    mean_rows = weights.mean(dim=(0, 1, 2))  # (L,): mean attention each key position receives
    values = [float(mean_rows[s].sum()) for s in trace.segment_slices(len(trace.prompt_ids))]
    return AttributionResult(
        values=np.array(values, dtype=np.float64),
        forward_tokens=ids.shape[1],
        seconds=time.perf_counter() - start,
    )


# --- registry ----------------------------------------------------------------------------------

AttributionFn = Callable[[torch.nn.Module, AttributionTrace, AttributionConfig], AttributionResult]

ATTRIBUTIONS: dict[str, AttributionFn] = {
    "loo": lambda model, trace, config: leave_one_out(
        model, trace, max_tokens_per_pass=config.max_tokens_per_pass
    ),
    "shapley": lambda model, trace, config: shapley_permutation(
        model,
        trace,
        permutations=config.shapley_permutations,
        seed=config.seed,
        antithetic=config.antithetic,
        max_tokens_per_pass=config.max_tokens_per_pass,
    ),
    "grad_x_input": lambda model, trace, config: gradient_x_input(model, trace),
    "attention": lambda model, trace, config: attention_mass(model, trace),
}
"""Every attribution by its config name: fn(model, trace, config)."""


def attribute(
    name: str,
    model: torch.nn.Module,
    trace: AttributionTrace,
    config: AttributionConfig | None = None,
) -> AttributionResult:
    """Run the attribution called `name` (a key of ATTRIBUTIONS) on one trace."""
    if name not in ATTRIBUTIONS:
        raise ValueError(f"attribution: unknown name {name!r}; known: {list(ATTRIBUTIONS)}")
    return ATTRIBUTIONS[name](model, trace, config or AttributionConfig())


__all__ = [
    "ATTRIBUTIONS",
    "AttributionConfig",
    "AttributionResult",
    "AttributionTrace",
    "CoalitionValue",
    "attention_mass",
    "attribute",
    "coalition_logprob",
    "gradient_x_input",
    "leave_one_out",
    "sample_permutations",
    "shapley_exact",
    "shapley_exact_from_values",
    "shapley_from_permutations",
    "shapley_permutation",
]
