"""Teacher-forced next-token log-probabilities and entropies (METHOD.md §1-§2).

Everything RREDCoT estimates is a teacher-forced score of given tokens under the policy;
nothing is generated. This module holds the plain, one-sequence-per-pass computations: per-token
log π and entropy H_j = −Σ_v π(v | x, z_<j) log π(v | x, z_<j) (the segmentation's decision
points), and the naive continuation score that `rredcot.scoring.packed` is tested against.

Logits are upcast to at least float32 before `log_softmax` (float64 stays float64), and the
vocabulary-sized temporaries are processed in row chunks so a long trace of a large-vocabulary
model does not hold several (L, V) float32 copies at once. `token_logprobs` and
`response_entropies` never build the (B, L, V) logits at all: they run the model's body and
project its last hidden states onto the vocabulary a chunk of positions at a time
(`hidden_scores`; 8 × 25k × 151,936 logits would be ~61 GB in bf16).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

# Rows of (rows, V) logits turned into log-probs at once: bounds the float32 temporaries to
# about 2^25 elements (128 MiB) whatever the vocabulary size.
_MAX_CHUNK_ELEMENTS = 1 << 25


def _score_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; every other floating dtype is scored in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def gather_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, *, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(target) per row of `logits` (N, V), and optionally the entropy of each row.

    log π(v) = z_v − logsumexp(z); H = −Σ_v π(v) log π(v). Rows are handled in chunks.
    Returns (logprobs (N,), entropies (N,) or None) in float32 (float64 for float64 logits).
    """
    if logits.ndim != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(
            f"logits/targets: expected (N, V) and (N,), got {tuple(logits.shape)} and "
            f"{tuple(targets.shape)}"
        )
    dtype = _score_dtype(logits.dtype)
    n, vocab = logits.shape
    chunk = max(1, _MAX_CHUNK_ELEMENTS // max(vocab, 1))
    logprobs = torch.empty(n, dtype=dtype, device=logits.device)
    entropies = torch.empty(n, dtype=dtype, device=logits.device) if with_entropy else None
    for start in range(0, n, chunk):
        rows = slice(start, start + chunk)
        log_pi = torch.log_softmax(logits[rows].to(dtype), dim=-1)  # (n_chunk, V)
        logprobs[rows] = log_pi.gather(-1, targets[rows, None]).squeeze(-1)
        if entropies is not None:
            entropies[rows] = -(log_pi.exp() * log_pi).sum(-1)
    return logprobs, entropies


def _body_and_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """(decoder body, LM head) when the logits are exactly head(body(·)), else None (a logit
    soft-cap, or a model without the two parts: the caller then takes the model's logits)."""
    if getattr(getattr(model, "config", None), "final_logit_softcapping", None) is not None:
        return None
    get_decoder = getattr(model, "get_decoder", None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if get_decoder is None or head is None:
        return None
    return get_decoder(), head


def hidden_scores(
    head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log π(target), H) per row of `hidden` (N, H) under the LM `head`, projecting a chunk of
    rows at a time (about 2^25 logits), so the (N, V) logits never exist at once."""
    vocab = head.weight.shape[0]
    chunk = max(1, _MAX_CHUNK_ELEMENTS // max(vocab, 1))
    logprobs, entropies = [], []
    for start in range(0, hidden.shape[0], chunk):
        rows = slice(start, start + chunk)
        lp, h = gather_logprobs(head(hidden[rows]), targets[rows], with_entropy=True)
        logprobs.append(lp)
        entropies.append(h)
    if not logprobs:
        dtype = _score_dtype(hidden.dtype)
        empty = torch.zeros(0, dtype=dtype, device=hidden.device)
        return empty, empty.clone()
    return torch.cat(logprobs), torch.cat(entropies)


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions 0, 1, … counted over real tokens only, so left padding does not shift RoPE."""
    return (attention_mask.long().cumsum(-1) - 1).clamp_min(0)


def token_logprobs(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-position log π of the next token and entropy of the next-token distribution.

    input_ids, attention_mask: (B, L), left or right padding (1 = real token).
    Returns (logprobs, entropies), both (B, L−1): entry j scores token j+1 given tokens ≤ j,
    i.e. logprobs[:, j] = log π(z_{j+1} | z_≤j) and entropies[:, j] = H of that distribution.
    Positions where token j or j+1 is padding are 0. Runs under the caller's grad mode.
    """
    if input_ids.ndim != 2 or attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"input_ids/attention_mask: expected equal (B, L) shapes, got "
            f"{tuple(input_ids.shape)} and {tuple(attention_mask.shape)}"
        )
    batch, length = input_ids.shape
    if length < 2:
        raise ValueError(
            f"input_ids: need at least 2 positions to score a next token, got {length}"
        )
    inputs = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids_from_mask(attention_mask),
    }
    valid = attention_mask[:, :-1].bool() & attention_mask[:, 1:].bool()  # (B, L-1)
    parts = _body_and_head(model)
    if parts is None:  # the model's own (B, L, V) logits
        logits = model(**inputs).logits[:, :-1]  # (B, L-1, V)
        logprobs, entropies = gather_logprobs(
            logits.reshape(-1, logits.shape[-1]), input_ids[:, 1:].reshape(-1), with_entropy=True
        )
        logprobs = logprobs.view(batch, length - 1).masked_fill(~valid, 0.0)
        entropies = entropies.view(batch, length - 1).masked_fill(~valid, 0.0)
        return logprobs, entropies
    body, head = parts
    hidden = body(**inputs).last_hidden_state[:, :-1]  # (B, L-1, H)
    lp, h = hidden_scores(head, hidden[valid], input_ids[:, 1:][valid])  # real positions only
    logprobs = torch.zeros(batch, length - 1, dtype=lp.dtype, device=lp.device)
    entropies = torch.zeros_like(logprobs)
    logprobs[valid], entropies[valid] = lp, h
    return logprobs, entropies


def _check_ids(name: str, ids: Sequence[int], *, allow_empty: bool) -> None:
    if not allow_empty and len(ids) == 0:
        raise ValueError(f"{name}: must hold at least one token id")


@torch.inference_mode()
def sequence_logprob_naive(
    model: torch.nn.Module, prefix_ids: Sequence[int], continuation_ids: Sequence[int]
) -> float:
    """log π(c | prefix) = Σ_t log π(c_t | prefix ⊕ c_<t) from one forward pass of prefix ⊕ c.

    The reference implementation: one full pass per (prefix, continuation) pair.
    """
    _check_ids("prefix_ids", prefix_ids, allow_empty=False)
    _check_ids("continuation_ids", continuation_ids, allow_empty=False)
    device = next(model.parameters()).device
    ids = torch.tensor([*prefix_ids, *continuation_ids], dtype=torch.long, device=device)
    n = len(continuation_ids)
    logits = model(input_ids=ids[None], logits_to_keep=n + 1).logits[0, :-1]  # (n, V)
    logprobs, _ = gather_logprobs(logits, ids[-n:])
    return float(logprobs.double().sum())


@torch.inference_mode()
def response_entropies(
    model: torch.nn.Module, prompt_ids: Sequence[int], response_ids: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """log π(z_t | x, z_<t) and H_t for every response token t = 0 … T−1 of one trace.

    H_t is the entropy of the distribution z_t was drawn from (METHOD.md §2 step 2).
    Returns (logprobs (T,), entropies (T,)), float32 (float64 for a float64 model).
    """
    _check_ids("prompt_ids", prompt_ids, allow_empty=False)
    _check_ids("response_ids", response_ids, allow_empty=False)
    device = next(model.parameters()).device
    # The last response token predicts nothing we need, so it is not fed.
    ids = torch.tensor([*prompt_ids, *response_ids[:-1]], dtype=torch.long, device=device)
    n = len(response_ids)
    targets = torch.tensor(response_ids, dtype=torch.long, device=device)
    parts = _body_and_head(model)
    if parts is None:
        logits = model(input_ids=ids[None], logits_to_keep=n).logits[0]  # (T, V)
        return gather_logprobs(logits, targets, with_entropy=True)
    body, head = parts
    hidden = body(input_ids=ids[None]).last_hidden_state[0, -n:]  # (T, H)
    return hidden_scores(head, hidden, targets)


def pad_rows(
    rows: Sequence[Sequence[int]], pad_id: int, *, left: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows as (B, L) ids and mask (1 = real), padded on the left (prompts) or the right
    (completions) with `pad_id` to the longest row (L ≥ 1)."""
    width = max([len(r) for r in rows], default=0) or 1
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        n = len(row)
        if n:
            at = slice(width - n, width) if left else slice(0, n)
            ids[i, at], mask[i, at] = torch.tensor(list(row), dtype=torch.long), 1
    return ids, mask


@torch.no_grad()
def completion_scores(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    rows_per_pass: int = 8,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """log π(z_t | x, z_<t) and H_t of every completion token: (B, T) each on the CPU, from
    teacher-forced passes of x ⊕ z (`rows_per_pass` rows at a time). prompt_*: (B, P)
    left-padded; completion_*: (B, T) right-padded. Also returns the real tokens run."""
    ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (B, P+T)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)  # (B, P+T)
    device = next(model.parameters()).device
    p, t = prompt_ids.shape[1], completion_ids.shape[1]
    logprobs, entropies = [], []
    for start in range(0, ids.shape[0], rows_per_pass):
        rows = slice(start, start + rows_per_pass)
        lp, h = token_logprobs(model, ids[rows].to(device), mask[rows].to(device))  # (b, L−1)
        logprobs.append(lp[:, p - 1 : p - 1 + t].cpu())  # entry P+t−1 scores completion token t
        entropies.append(h[:, p - 1 : p - 1 + t].cpu())
    return torch.cat(logprobs), torch.cat(entropies), int(mask.sum())
