"""Attribution baselines for segment credit: leave-one-out, Shapley, gradient × input, attention.

METHOD.md §5. A trace x ⊕ τ has segments k = 1 … K with boundaries 0 = b_0 < … < b_K = T;
here segment k is the player with 0-based index k − 1 and covers τ[b_{k−1}:b_k]. Every
attribution scores how much a segment supports the reference answer y* when the answer is forced
with the task's trigger A (answer_ids = A ⊕ y* ⊕ close, already tokenized; the first
`trigger_len` of them are A and are context, not scored):

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

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import DynamicCache

from rredcot.scoring.logprobs import gather_logprobs, position_ids_from_mask

# Padded tokens (rows × width) per coalition-scoring forward pass; a row longer than this still
# gets a pass of its own.
DEFAULT_MAX_TOKENS_PER_PASS = 16384

# 2^K coalitions: 1024 sequences at K = 10 is still a few passes on the tiny model.
DEFAULT_MAX_EXACT_SEGMENTS = 10

# Batched value function: f for each coalition, in order.
ValueFn = Callable[[Sequence[frozenset[int]]], np.ndarray]


@dataclass(frozen=True)
class AttributionResult:
    """Segment attributions and what they cost.

    values: (K,) float64, entry k − 1 for segment k. forward_tokens: token positions fed through
    the model in forward passes (padding included). backward_tokens: positions back-propagated
    through (gradient × input only). seconds: wall-clock time of the call.
    """

    values: np.ndarray
    forward_tokens: int
    backward_tokens: int = 0
    seconds: float = 0.0


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


# --- inputs ------------------------------------------------------------------------------------


def _check_trace(
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    answer_ids: Sequence[int],
    trigger_len: int,
) -> int:
    """Validate one trace and return K, the number of segments."""
    if len(prompt_ids) == 0:
        raise ValueError("prompt_ids: must hold at least one token (the context of f(∅))")
    b, t = list(boundaries), len(response_ids)
    if len(b) < 2 or b[0] != 0 or b[-1] != t:
        raise ValueError(
            f"boundaries: expected [0, …, len(response_ids) = {t}] with at least one segment, "
            f"got {b}"
        )
    if any(right <= left for left, right in itertools.pairwise(b)):
        raise ValueError(f"boundaries: must be strictly increasing, got {b}")
    if not 0 <= trigger_len < len(answer_ids):
        raise ValueError(
            f"trigger_len: must be in [0, len(answer_ids) = {len(answer_ids)}) so that at least "
            f"one answer token is scored, got {trigger_len}"
        )
    return len(b) - 1


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _segment_slices(boundaries: Sequence[int], offset: int) -> list[slice]:
    """Positions of segment k in a sequence where τ starts at `offset`."""
    return [slice(offset + lo, offset + hi) for lo, hi in itertools.pairwise(boundaries)]


# --- the coalition value function f ------------------------------------------------------------


def _score_answer(
    model: torch.nn.Module,
    sequences: Sequence[Sequence[int]],
    targets: Sequence[int],
    max_tokens_per_pass: int,
) -> tuple[np.ndarray, int]:
    """Σ_t log π(targets_t | …) for sequences that all end with `targets`; (values, tokens fed).

    Rows are sorted by length and left-padded, so every row's targets sit in the last columns
    and only those logits are projected onto the vocabulary. The last token of each row
    predicts nothing and is not fed.
    """
    device = _device(model)
    n_target = len(targets)
    pad_id = getattr(model.config, "pad_token_id", None) or 0
    target_row = torch.tensor(targets, dtype=torch.long, device=device)
    order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
    values = np.empty(len(sequences), dtype=np.float64)
    forward_tokens = 0
    start = 0
    while start < len(order):
        width = len(sequences[order[start]]) - 1
        chunk = order[start : start + max(1, max_tokens_per_pass // width)]
        start += len(chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long, device=device)
        mask = torch.zeros((len(chunk), width), dtype=torch.long, device=device)
        for row, index in enumerate(chunk):
            fed = torch.tensor(sequences[index][:-1], dtype=torch.long, device=device)
            ids[row, width - len(fed) :] = fed
            mask[row, width - len(fed) :] = 1
        with torch.inference_mode():
            logits = model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=position_ids_from_mask(mask),
                logits_to_keep=n_target,
                use_cache=False,
            ).logits  # (B, n_target, V)
            logprobs, _ = gather_logprobs(
                logits.reshape(-1, logits.shape[-1]), target_row.repeat(len(chunk))
            )
            values[chunk] = logprobs.view(len(chunk), n_target).double().sum(-1).cpu().numpy()
        forward_tokens += len(chunk) * width
    return values, forward_tokens


class CoalitionValue:
    """f(S) = log π(y* ⊕ close | x ⊕ τ_S ⊕ A) for coalitions S ⊆ {0, …, K−1}, cached.

    Calling it with many coalitions scores the ones not seen before in a few batched passes;
    `forward_tokens` adds up what all calls fed through the model.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        prompt_ids: Sequence[int],
        response_ids: Sequence[int],
        boundaries: Sequence[int],
        answer_ids: Sequence[int],
        trigger_len: int,
        *,
        max_tokens_per_pass: int = DEFAULT_MAX_TOKENS_PER_PASS,
    ) -> None:
        self.num_segments = _check_trace(
            prompt_ids, response_ids, boundaries, answer_ids, trigger_len
        )
        if max_tokens_per_pass < 1:
            raise ValueError(
                f"max_tokens_per_pass: expected a positive integer, got {max_tokens_per_pass!r}"
            )
        self.model = model
        self.prompt_ids = list(prompt_ids)
        self.segments = [list(response_ids[s]) for s in _segment_slices(boundaries, 0)]
        self.answer_ids = list(answer_ids)
        self.trigger_len = trigger_len
        self.max_tokens_per_pass = max_tokens_per_pass
        self.forward_tokens = 0
        self._cache: dict[frozenset[int], float] = {}

    def sequence(self, coalition: frozenset[int]) -> list[int]:
        """x ⊕ (segments in S, in trace order) ⊕ A ⊕ y* ⊕ close."""
        kept = [tok for k in sorted(coalition) for tok in self.segments[k]]
        return [*self.prompt_ids, *kept, *self.answer_ids]

    def _check(self, coalition: frozenset[int]) -> frozenset[int]:
        coalition = frozenset(coalition)
        bad = sorted(k for k in coalition if not 0 <= k < self.num_segments)
        if bad:
            raise ValueError(
                f"coalitions: segment indices {bad} out of range; allowed 0 … "
                f"{self.num_segments - 1} (0-based, K = {self.num_segments})"
            )
        return coalition

    def __call__(self, coalitions: Sequence[frozenset[int]]) -> np.ndarray:
        """f for each coalition, in order: a (len(coalitions),) float64 array."""
        checked = [self._check(c) for c in coalitions]
        missing = list(dict.fromkeys(c for c in checked if c not in self._cache))
        if missing:
            values, tokens = _score_answer(
                self.model,
                [self.sequence(c) for c in missing],
                self.answer_ids[self.trigger_len :],
                self.max_tokens_per_pass,
            )
            self._cache.update(zip(missing, values.tolist(), strict=True))
            self.forward_tokens += tokens
        return np.array([self._cache[c] for c in checked], dtype=np.float64)


def coalition_logprob(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    coalitions: Sequence[frozenset[int]],
    answer_ids: Sequence[int],
    trigger_len: int,
    *,
    max_tokens_per_pass: int = DEFAULT_MAX_TOKENS_PER_PASS,
) -> np.ndarray:
    """f(S) for each coalition (0-based segment indices): a (len(coalitions),) float64 array.

    Batched: distinct coalitions are padded into passes of at most `max_tokens_per_pass` tokens.
    Use `CoalitionValue` directly to keep the cache and the token count.
    """
    f = CoalitionValue(
        model,
        prompt_ids,
        response_ids,
        boundaries,
        answer_ids,
        trigger_len,
        max_tokens_per_pass=max_tokens_per_pass,
    )
    return f(coalitions)


# --- Shapley values of any batched game --------------------------------------------------------


def sample_permutations(
    num_players: int, permutations: int, seed: int, *, antithetic: bool = False
) -> list[tuple[int, ...]]:
    """`permutations` random orders of 0 … num_players − 1.

    antithetic: every sampled order is followed by its reverse (the count stays `permutations`).
    """
    if permutations < 1:
        raise ValueError(f"permutations: expected a positive integer, got {permutations!r}")
    rng = np.random.default_rng(seed)
    orders: list[tuple[int, ...]] = []
    while len(orders) < permutations:
        order = tuple(int(k) for k in rng.permutation(num_players))
        orders.append(order)
        if antithetic and len(orders) < permutations:
            orders.append(order[::-1])
    return orders


def shapley_from_permutations(
    value_fn: ValueFn, num_players: int, orders: Sequence[Sequence[int]]
) -> np.ndarray:
    """φ_k = mean over orders π of f(pre_π(k) ∪ {k}) − f(pre_π(k)); (num_players,) float64.

    All prefix coalitions of all orders are deduplicated and handed to `value_fn` in one call.
    Over all num_players! orders this is the exact Shapley value; for any set of orders the
    marginals telescope, so Σ_k φ_k = f(all) − f(∅).
    """
    if len(orders) == 0:
        raise ValueError("orders: need at least one permutation")
    players = set(range(num_players))
    prefixes: list[list[frozenset[int]]] = []
    for order in orders:
        if len(order) != num_players or set(order) != players:
            raise ValueError(
                f"orders: each must be a permutation of 0 … {num_players - 1}, got {list(order)}"
            )
        prefixes.append([frozenset(order[:i]) for i in range(num_players + 1)])
    distinct = list(dict.fromkeys(c for row in prefixes for c in row))
    f = dict(zip(distinct, value_fn(distinct).tolist(), strict=True))
    phi = np.zeros(num_players, dtype=np.float64)
    for order, row in zip(orders, prefixes, strict=True):
        for i, k in enumerate(order):
            phi[k] += f[row[i + 1]] - f[row[i]]
    return phi / len(orders)


def shapley_exact_from_values(value_fn: ValueFn, num_players: int) -> np.ndarray:
    """Exact Shapley values from all 2^n coalitions (n = num_players):

    φ_k = Σ_{S ⊆ N∖{k}} |S|! (n − |S| − 1)! / n! · (f(S ∪ {k}) − f(S))
    """
    subsets = [
        frozenset(c)
        for size in range(num_players + 1)
        for c in itertools.combinations(range(num_players), size)
    ]
    f = dict(zip(subsets, value_fn(subsets).tolist(), strict=True))
    weight = [
        math.factorial(s) * math.factorial(num_players - s - 1) / math.factorial(num_players)
        for s in range(num_players)
    ]
    phi = np.zeros(num_players, dtype=np.float64)
    for subset in subsets:
        for k in range(num_players):
            if k not in subset:
                phi[k] += weight[len(subset)] * (f[subset | {k}] - f[subset])
    return phi


# --- the attributions --------------------------------------------------------------------------


def leave_one_out(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    answer_ids: Sequence[int],
    trigger_len: int,
    *,
    max_tokens_per_pass: int = DEFAULT_MAX_TOKENS_PER_PASS,
) -> AttributionResult:
    """LOO_k = f(all) − f(all ∖ {k}); K + 1 sequences scored in batched passes."""
    start = time.perf_counter()
    f = CoalitionValue(
        model,
        prompt_ids,
        response_ids,
        boundaries,
        answer_ids,
        trigger_len,
        max_tokens_per_pass=max_tokens_per_pass,
    )
    everyone = frozenset(range(f.num_segments))
    values = f([everyone, *(everyone - {k} for k in range(f.num_segments))])  # (K+1,)
    return AttributionResult(
        values=values[0] - values[1:],
        forward_tokens=f.forward_tokens,
        seconds=time.perf_counter() - start,
    )


def shapley_permutation(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    answer_ids: Sequence[int],
    trigger_len: int,
    *,
    permutations: int = 64,
    seed: int = 0,
    antithetic: bool = False,
    all_permutations: bool = False,
    max_tokens_per_pass: int = DEFAULT_MAX_TOKENS_PER_PASS,
) -> AttributionResult:
    """Permutation-sampling Shapley estimate of each segment under f (M = `permutations`).

    The prefix coalitions of all sampled orders are scored once each. `all_permutations`
    enumerates all K! orders instead of sampling (exact Shapley; small K only).
    """
    start = time.perf_counter()
    f = CoalitionValue(
        model,
        prompt_ids,
        response_ids,
        boundaries,
        answer_ids,
        trigger_len,
        max_tokens_per_pass=max_tokens_per_pass,
    )
    k = f.num_segments
    if all_permutations:
        orders: Sequence[Sequence[int]] = list(itertools.permutations(range(k)))
    else:
        orders = sample_permutations(k, permutations, seed, antithetic=antithetic)
    phi = shapley_from_permutations(f, k, orders)
    return AttributionResult(
        values=phi, forward_tokens=f.forward_tokens, seconds=time.perf_counter() - start
    )


def shapley_exact(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    answer_ids: Sequence[int],
    trigger_len: int,
    *,
    max_segments: int = DEFAULT_MAX_EXACT_SEGMENTS,
    max_tokens_per_pass: int = DEFAULT_MAX_TOKENS_PER_PASS,
) -> AttributionResult:
    """Exact Shapley values from all 2^K coalitions; refuses K > `max_segments`.

    Efficiency: Σ_k φ_k = f(all) − f(∅).
    """
    start = time.perf_counter()
    f = CoalitionValue(
        model,
        prompt_ids,
        response_ids,
        boundaries,
        answer_ids,
        trigger_len,
        max_tokens_per_pass=max_tokens_per_pass,
    )
    if f.num_segments > max_segments:
        raise ValueError(
            f"boundaries: exact Shapley enumerates 2^K coalitions; K = {f.num_segments} exceeds "
            f"max_segments = {max_segments} (use shapley_permutation)"
        )
    phi = shapley_exact_from_values(f, f.num_segments)
    return AttributionResult(
        values=phi, forward_tokens=f.forward_tokens, seconds=time.perf_counter() - start
    )


def _full_sequence(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    answer_ids: Sequence[int],
) -> torch.Tensor:
    ids = [*prompt_ids, *response_ids, *answer_ids]
    return torch.tensor(ids, dtype=torch.long, device=_device(model))[None]  # (1, L)


def gradient_x_input(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    answer_ids: Sequence[int],
    trigger_len: int,
) -> AttributionResult:
    """Σ_{j ∈ segment k} ⟨∂f/∂e_j, e_j⟩ with f = log π(y* ⊕ close | x ⊕ τ ⊕ A).

    One forward and one backward pass of x ⊕ τ ⊕ A ⊕ y* ⊕ close (last token not fed). The
    embeddings are a detached leaf and `torch.autograd.grad` differentiates with respect to it
    only, so no `.grad` is left on the model's parameters; the model's train/eval mode is kept.
    """
    start = time.perf_counter()
    _check_trace(prompt_ids, response_ids, boundaries, answer_ids, trigger_len)
    # inference_mode(False): tensors made under a caller's inference mode cannot enter autograd.
    with torch.inference_mode(False), torch.enable_grad():
        ids = _full_sequence(model, prompt_ids, response_ids, answer_ids)[:, :-1]  # (1, L−1)
        targets = torch.tensor(answer_ids[trigger_len:], dtype=torch.long, device=ids.device)
        embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)  # (1, L−1, E)
        out = model(inputs_embeds=embeds, logits_to_keep=len(targets), use_cache=False)
        logits = out.logits[0]  # (n_target, V)
        logprobs, _ = gather_logprobs(logits, targets)
        (grad,) = torch.autograd.grad(logprobs.sum(), embeds)
    per_token = (grad * embeds.detach()).sum(-1)[0].double()  # (L−1,)
    values = [float(per_token[s].sum()) for s in _segment_slices(boundaries, len(prompt_ids))]
    return AttributionResult(
        values=np.array(values, dtype=np.float64),
        forward_tokens=ids.shape[1],
        backward_tokens=ids.shape[1],
        seconds=time.perf_counter() - start,
    )


def attention_mass(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    answer_ids: Sequence[int],
    trigger_len: int,
) -> AttributionResult:
    """Mean over layers, heads and answer positions q (the y* ⊕ close tokens) of Σ_{j∈seg k} a_qj.

    x ⊕ τ ⊕ A is encoded once with the model's own attention into a KV cache; then only the
    answer tokens are run with eager attention and `output_attentions=True`, so the weights kept
    are (layers, heads, n_answer, L) rather than L × L per layer. The previous attention
    implementation is restored afterwards.
    """
    start = time.perf_counter()
    _check_trace(prompt_ids, response_ids, boundaries, answer_ids, trigger_len)
    ids = _full_sequence(model, prompt_ids, response_ids, answer_ids)  # (1, L)
    n_answer = len(answer_ids) - trigger_len
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
    values = [float(mean_rows[s].sum()) for s in _segment_slices(boundaries, len(prompt_ids))]
    return AttributionResult(
        values=np.array(values, dtype=np.float64),
        forward_tokens=ids.shape[1],
        seconds=time.perf_counter() - start,
    )


# --- registry ----------------------------------------------------------------------------------

# fn(model, prompt_ids, response_ids, boundaries, answer_ids, trigger_len, config)
AttributionFn = Callable[
    [
        torch.nn.Module,
        Sequence[int],
        Sequence[int],
        Sequence[int],
        Sequence[int],
        int,
        AttributionConfig,
    ],
    AttributionResult,
]


def _loo(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    answer_ids: Sequence[int],
    trigger_len: int,
    config: AttributionConfig,
) -> AttributionResult:
    trace = (prompt_ids, response_ids, boundaries, answer_ids, trigger_len)
    return leave_one_out(model, *trace, max_tokens_per_pass=config.max_tokens_per_pass)


def _shapley(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    answer_ids: Sequence[int],
    trigger_len: int,
    config: AttributionConfig,
) -> AttributionResult:
    trace = (prompt_ids, response_ids, boundaries, answer_ids, trigger_len)
    return shapley_permutation(
        model,
        *trace,
        permutations=config.shapley_permutations,
        seed=config.seed,
        antithetic=config.antithetic,
        max_tokens_per_pass=config.max_tokens_per_pass,
    )


def _grad_x_input(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    answer_ids: Sequence[int],
    trigger_len: int,
    config: AttributionConfig,
) -> AttributionResult:
    return gradient_x_input(model, prompt_ids, response_ids, boundaries, answer_ids, trigger_len)


def _attention(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    answer_ids: Sequence[int],
    trigger_len: int,
    config: AttributionConfig,
) -> AttributionResult:
    return attention_mass(model, prompt_ids, response_ids, boundaries, answer_ids, trigger_len)


ATTRIBUTIONS: dict[str, AttributionFn] = {
    "loo": _loo,
    "shapley": _shapley,
    "grad_x_input": _grad_x_input,
    "attention": _attention,
}


def attribute(
    name: str,
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    answer_ids: Sequence[int],
    trigger_len: int,
    config: AttributionConfig | None = None,
) -> AttributionResult:
    """Run the attribution called `name` (a key of ATTRIBUTIONS) on one trace."""
    if name not in ATTRIBUTIONS:
        raise ValueError(f"attribution: unknown name {name!r}; known: {list(ATTRIBUTIONS)}")
    trace = (prompt_ids, response_ids, boundaries, answer_ids, trigger_len)
    return ATTRIBUTIONS[name](model, *trace, config or AttributionConfig())
