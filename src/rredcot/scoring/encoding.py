"""Encoding: every trace x ⊕ τ run once, its keys, values and last hidden states kept.

Each distinct prompt x is run once (*prompt pass*, prompts left-padded), then every response τ
on top of its prompt's cache (*response passes*, traces of similar length together so padding
stays small; each pass runs its responses in chunks of `ENCODE_CHUNK` tokens, so a chunk attends
over the slots before its end only, and its mask stays chunk × trace; the `split` layout's
encoding builds no mask, so its chunks are `SPLIT_PASS_TOKENS` wide). The n responses of a
GRPO group share one prompt pass. The result (`EncodedTraces`) holds the KV cache of every
trace in one slot layout, [left-padded prompt | right-padded response], and the last hidden
state at every position: projected onto the vocabulary it gives the log-probs and entropies of
the response tokens (the segmentation's input, `EncodedTraces.token_scores`) and the first
token of every continuation at every state (hidden state at P + b − 1). An encoding can also
be taken from what sampling computed (`encoding_from_generation`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from rredcot.scoring.attention import (
    SlotCache,
    allowed_to_mask,
    check_model,
    chunk_rows,
    decoder,
    gqa_in_kernel,
    project,
)
from rredcot.scoring.layout import SPLIT_PASS_TOKENS, _length_buckets
from rredcot.scoring.logprobs import gather_logprobs
from rredcot.scoring.split import SplitPlan, check_split, dispatch, plan_mask

ENCODE_CHUNK = 256
"""Response tokens per encoding step: a step's mask is rows × chunk × (P + chunk end)."""


def _rows_index(rows: Sequence[int]) -> slice | list[int]:
    """Batch rows as a slice when consecutive (the cache is then read as a view)."""
    if list(rows) == list(range(rows[0], rows[0] + len(rows))):
        return slice(rows[0], rows[0] + len(rows))
    return list(rows)


@dataclass
class EncodedTraces:
    """Traces x_i ⊕ τ_i after one encoding: KV cache and last hidden states (`encode_traces`).

    Cache slots of row i: [0, P_max) the prompt left-padded (real from P_max − P_i), then
    [P_max, P_max + T_i) the response. hidden[i, b] is the last hidden state at position
    P_i + b − 1, the one that predicts τ_b (b < T_i) or a continuation's first token at state b;
    or, with `hidden_is_logits`, already its logits (an encoding taken from generation).
    forward_tokens: real tokens run (each distinct prompt once, every response once).
    """

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    prompt_width: int  # P_max
    keys: list[torch.Tensor]  # per layer (B, kv heads, P_max + T_max, head dim)
    values: list[torch.Tensor]
    hidden: torch.Tensor  # (B, 1 + T_max, H), or (B, 1 + T_max, V) logits
    forward_tokens: int
    hidden_is_logits: bool = False

    def __len__(self) -> int:
        return len(self.prompt_ids)

    def logits(self, model: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        """Logits (N, V) of rows (N, ·) taken from `hidden`."""
        return hidden if self.hidden_is_logits else project(model, hidden)

    def token_scores(self, model: torch.nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(log π(τ_t | x ⊕ τ_<t), H_t) for t < T_i, per trace: two float32 (float64 for a
        float64 model) CPU tensors (T_i,) each, from the cached hidden states (no new pass)."""
        lengths = [len(r) for r in self.response_ids]
        model_dtype = next(model.parameters()).dtype
        dtype = torch.float64 if model_dtype == torch.float64 else torch.float32
        if sum(lengths) == 0:
            return [(torch.zeros(0, dtype=dtype), torch.zeros(0, dtype=dtype)) for _ in lengths]
        rows = torch.cat([self.hidden[i, :n] for i, n in enumerate(lengths)])  # (ΣT, ·)
        targets = torch.tensor([t for r in self.response_ids for t in r], device=rows.device)
        vocab = model.get_output_embeddings().weight.shape[0]
        chunk = chunk_rows(vocab)
        logprobs, entropies = [], []
        with torch.inference_mode():
            for start in range(0, len(rows), chunk):
                part = slice(start, start + chunk)
                lp, h = gather_logprobs(
                    self.logits(model, rows[part]), targets[part], with_entropy=True
                )
                logprobs.append(lp.to(dtype).cpu())
                entropies.append(h.to(dtype).cpu())
        lp_all, h_all = torch.cat(logprobs), torch.cat(entropies)
        return list(zip(lp_all.split(lengths), h_all.split(lengths), strict=True))


@dataclass(frozen=True)
class GenerationCache:
    """What HF `generate` computed while it sampled a batch (`return_dict_in_generate`,
    `output_logits`): the left-padded prompts (B, P) and their mask, the sequences
    (B, P + T_gen), the keys and values of every token it fed, per layer
    (B, kv heads, P + T_gen − 1, head dim) (the last sampled token is never fed), and the raw
    logits (B, T_gen, V) of every step."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    sequences: torch.Tensor
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    logits: torch.Tensor


@torch.inference_mode()
def encoding_from_generation(
    model: torch.nn.Module, generation: GenerationCache, responses: Sequence[Sequence[int]]
) -> EncodedTraces | None:
    """The encoding of x_i ⊕ τ_i that sampling already computed, so no encoding pass runs.

    τ_i (`responses`, e.g. a completion without its EOS) must start generated row i. The
    positions, cache layout [left-padded prompt | response] and logits are those
    `encode_traces` computes (up to float rounding: generation encodes token by token, and
    hands back float32 logits). Generation never feeds its last sampled token; when a response
    ends there (cut by the token budget), that token runs here on top of the cache (one token
    per row; counted in `forward_tokens`). None when the generation does not fit: prompts not
    left-padded, or shapes that disagree.
    """
    check_model(model)
    ids, mask, seqs = generation.input_ids, generation.attention_mask, generation.sequences
    b, p = ids.shape
    t_gen = seqs.shape[1] - p
    lengths = [len(r) for r in responses]
    if len(responses) != b or t_gen < 1 or max(lengths, default=0) > t_gen:
        return None
    if any(k.shape[0] != b or k.shape[2] != p + t_gen - 1 for k in generation.keys):
        return None
    if generation.logits.shape[:2] != (b, t_gen):
        return None
    real = mask.bool()
    if (real[:, :-1] & ~real[:, 1:]).any():  # a real token before padding: not left-padded
        return None
    generated = seqs[:, p:].tolist()
    for i, r in enumerate(responses):
        if generated[i][: len(r)] != list(r):
            raise ValueError(f"responses[{i}]: does not start generated row {i}")
    keys, values, logits = generation.keys, generation.values, generation.logits
    t_max, tokens = max(lengths, default=0), 0
    if t_max == t_gen:  # run the last sampled token, which generation never fed
        device = keys[0].device
        slot = torch.arange(p + t_gen, device=device)
        lo = (p - real.sum(1)).to(device)
        allowed = (slot[None, None, :] >= lo[:, None, None]).expand(-1, 1, -1).clone()
        out = decoder(model)(
            input_ids=seqs[:, -1:].to(device),
            attention_mask=allowed_to_mask(allowed, model),
            position_ids=(p - lo + t_gen - 1)[:, None],
            past_key_values=DynamicCache(ddp_cache_data=list(zip(keys, values, strict=True))),
            use_cache=True,
        )
        keys = [layer.keys for layer in out.past_key_values.layers]
        values = [layer.values for layer in out.past_key_values.layers]
        last = project(model, out.last_hidden_state[:, -1]).to(logits.dtype)
        logits = torch.cat([logits, last[:, None]], 1)
        tokens = sum(n == t_gen for n in lengths)
    return EncodedTraces(
        prompt_ids=[ids[i][real[i]].tolist() for i in range(b)],
        response_ids=[list(r) for r in responses],
        prompt_width=p,
        keys=[k[:, :, : p + t_max] for k in keys],
        values=[v[:, :, : p + t_max] for v in values],
        hidden=logits[:, : t_max + 1],
        forward_tokens=tokens,
        hidden_is_logits=True,
    )


@torch.inference_mode()
def encode_traces(
    model: torch.nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    *,
    max_tokens_per_pass: int | None = None,
    split: bool = False,
) -> EncodedTraces:
    """Run every trace x_i ⊕ τ_i through `model` once, each distinct prompt once.

    `max_tokens_per_pass` caps rows × width of a response pass (a longer response gets a pass
    of its own). Traces may repeat; each copy is encoded (deduplicate first to save the work).
    `split` (the `split` layout's encoding, CPU only): the response chunks build no mask
    (`_split_chunk`), so they can be `SPLIT_PASS_TOKENS` wide; the same numbers to float
    rounding.
    """
    if len(prompt_ids) != len(response_ids):
        raise ValueError(
            f"prompt_ids/response_ids: expected one prompt per response, got {len(prompt_ids)} "
            f"and {len(response_ids)}"
        )
    check_model(model)
    if split:
        check_split(model)
    body = decoder(model)
    device = next(model.parameters()).device
    prompts = [list(p) for p in prompt_ids]
    responses = [list(r) for r in response_ids]
    empty = [i for i, p in enumerate(prompts) if not p]
    if empty:
        raise ValueError(f"prompt_ids: traces {empty} have an empty prompt")
    if not prompts:
        return EncodedTraces([], [], 0, [], [], torch.zeros(0, 1, 0), 0)

    # 1. Prompt pass: each distinct prompt once, left-padded to P_max.
    distinct: dict[tuple[int, ...], int] = {}
    group = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]  # trace -> prompt
    unique = [list(p) for p in distinct]
    p_max = max(map(len, unique))
    lo = torch.tensor([p_max - len(p) for p in unique], device=device)  # first real slot
    ids = torch.zeros((len(unique), p_max), dtype=torch.long, device=device)
    for g, p in enumerate(unique):
        ids[g, p_max - len(p) :] = torch.tensor(p)
    slot = torch.arange(p_max, device=device)
    causal = slot[None, :, None] >= slot[None, None, :]  # (1, Q, S)
    allowed = (causal & (slot[None, None, :] >= lo[:, None, None])) | torch.eye(
        p_max, dtype=torch.bool, device=device
    )  # a padding query sees itself, so no row is fully masked
    out = body(
        input_ids=ids,
        attention_mask=allowed_to_mask(allowed, model),
        position_ids=(slot[None] - lo[:, None]).clamp_min(0),
        use_cache=True,
    )
    prompt_keys = [layer.keys for layer in out.past_key_values.layers]
    prompt_values = [layer.values for layer in out.past_key_values.layers]
    prompt_last = out.last_hidden_state[:, -1]  # (G, H): predicts τ_0
    del out

    # 2. Response passes: every response on its prompt's cache, in chunks; each chunk's keys
    # and values are written into the trace's slots, and the next chunk reads them there.
    lengths = [len(r) for r in responses]
    t_max = max(lengths)
    which = torch.tensor(group, device=device)
    keys = [k[which] for k in prompt_keys]  # (B, kv, P_max, d), grown to P_max + T_max below
    values = [v[which] for v in prompt_values]
    if t_max:
        keys = [torch.cat([k, k.new_zeros(*k.shape[:2], t_max, k.shape[3])], 2) for k in keys]
        values = [torch.cat([v, v.new_zeros(*v.shape[:2], t_max, v.shape[3])], 2) for v in values]
    hidden = prompt_last.new_zeros(len(prompts), 1 + t_max, prompt_last.shape[-1])
    hidden[:, 0] = prompt_last[which]
    for rows in _length_buckets(lengths, max_tokens_per_pass):
        width = lengths[rows[0]]
        index = _rows_index(rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long, device=device)
        for j, i in enumerate(rows):
            ids[j, : lengths[i]] = torch.tensor(responses[i])
        row_lo = lo[which[torch.tensor(rows, device=device)]]  # (n,)
        s0 = int(row_lo.min())
        prompt_len = torch.tensor([len(prompts[i]) for i in rows], device=device)
        chunk = SPLIT_PASS_TOKENS if split else ENCODE_CHUNK
        for t0 in range(0, width, chunk):
            t = torch.arange(t0, min(width, t0 + chunk), device=device)
            if split:
                hidden[index, 1 + t0 : 1 + t0 + len(t)] = _split_chunk(
                    model,
                    (keys, values),
                    rows,
                    ids[:, t0 : t0 + len(t)],
                    (row_lo, p_max + t0),
                    prompt_len[:, None] + t[None],
                )
                continue
            seen = torch.arange(s0, p_max + t0, device=device)  # prompt and earlier chunks
            before = (seen[None, None, :] >= row_lo[:, None, None]).expand(-1, len(t), -1)
            own = (t[:, None] >= t[None, :]).expand(len(rows), -1, -1)  # causal in the chunk
            with gqa_in_kernel(model):
                out = body(
                    input_ids=ids[:, t0 : t0 + len(t)],
                    attention_mask=allowed_to_mask(torch.cat([before, own], -1), model),
                    position_ids=prompt_len[:, None] + t[None],
                    past_key_values=SlotCache(keys, values, index, s0, p_max + t0),
                    use_cache=True,
                )
            hidden[index, 1 + t0 : 1 + t0 + len(t)] = out.last_hidden_state
            del out
    tokens = sum(map(len, unique)) + sum(lengths)
    return EncodedTraces(prompts, responses, p_max, keys, values, hidden, tokens)


def _split_chunk(
    model: torch.nn.Module,
    cache: tuple[Sequence[torch.Tensor], Sequence[torch.Tensor]],
    rows: Sequence[int],
    ids: torch.Tensor,
    seen: tuple[torch.Tensor, int],
    position: torch.Tensor,
) -> torch.Tensor:
    """One response chunk τ[t] of `rows` in one pass without a mask (`scoring.split`): row j's
    tokens (at `position` (n, L)) see its cache slots [lo_j, at) (`seen`: prompt and earlier
    chunks, unmasked) and its own chunk causally; `cache`: the encoding's keys and values per
    layer. The chunk's keys and values are then written into slots [at, at + L) of each row,
    where the next chunk and the continuations read them. Returns the last hidden states
    (n, L, H)."""
    (keys, values), (lo, at) = cache, seen
    n, length = ids.shape
    plan = SplitPlan(
        keys,
        values,
        [
            (r, int(first), at, j * length, (j + 1) * length)
            for j, (r, first) in enumerate(zip(rows, lo.tolist(), strict=True))
        ],
        [(torch.arange(n * length, device=ids.device).view(n, length), None)],
    )
    with dispatch(model):
        out = decoder(model)(
            input_ids=ids.reshape(1, -1),
            attention_mask=plan_mask(plan),
            position_ids=position.reshape(1, -1),
            use_cache=False,
        )
    index = _rows_index(rows)
    for layer, (k, v) in enumerate(plan.new):  # (1, kv, n·L, d) -> (n, kv, L, d)
        keys[layer][index, :, at : at + length] = k[0].unflatten(1, (n, length)).transpose(0, 1)
        values[layer][index, :, at : at + length] = v[0].unflatten(1, (n, length)).transpose(0, 1)
    return out.last_hidden_state[0].view(n, length, -1)
