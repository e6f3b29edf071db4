"""Score many continuations at many states of many traces in a few batched forward passes.

RREDCoT (METHOD.md §3) needs, for a trace x ⊕ τ and states s = x ⊕ τ_<b (b a prefix length of
the response τ) and continuations c_1 … c_M, every

    S[b, m] = log π(c_m | x ⊕ τ_<b) = Σ_t log π(c_m,t | x ⊕ τ_<b ⊕ c_m,<t).

Doing one full pass per (b, m) re-encodes the trace once per pair. Here every token of every
trace is encoded once, and the continuations of all states reuse its keys and values:

1. **Encoding** (`encode_traces`). Each distinct prompt x is run once (*prompt pass*, prompts
   left-padded), then every response τ on top of its prompt's cache (*response passes*, traces
   of similar length together so padding stays small). The n responses of a GRPO group share
   one prompt pass. The result (`EncodedTraces`) holds the KV cache of every trace in one slot
   layout, [left-padded prompt | right-padded response], and the last hidden state at every
   position: projected onto the vocabulary it gives the log-probs and entropies of the
   response tokens (the segmentation's input, `EncodedTraces.token_scores`) and the first
   token of every continuation at every state (hidden state at P + b − 1). A continuation
   whose first k tokens repeat the trace's own next tokens τ[b : b + k] (a reference line the
   policy wrote itself, the newline every continuation starts with) has its tokens 1 … k read
   off the encoding too (hidden states at P + b … P + b + k − 1); only the rest is run.
2. **Continuation passes** (`score_encoded`). Each continuation without its last token (which
   predicts nothing) is a *block*; a block sits at one state of one trace. Blocks of the same
   trace are packed back to back into batch rows of about `row_tokens` tokens (a block never
   splits; a longer block gets a row of its own). A row carries its trace's cache and a 4D
   mask: a block's tokens see the trace's cache slots up to its state (x ⊕ τ_<b) and the
   earlier tokens of their own block, nothing else; position ids are P + b + t, exactly where
   c_m,t sits in the unpacked x ⊕ τ_<b ⊕ c_m, so RoPE sees the same relative positions. The
   output at c_m,t scores c_m,t+1. Rows of similar width share a pass, so padding stays small;
   each pass keeps only the cache slots its rows can see.

3. **Pruning rounds** (optional, `Pruning`). RREDCoT sums probabilities of reference suffixes,
   and most suffixes at most states (those that would redo steps the trace already took) are
   many orders of magnitude below the answer-now probability after a few tokens. With pruning,
   blocks run their first `first_chunk` tokens; a block whose running log-prob is already
   `nats` below its state's anchor column (answer-now, run in full) is dropped (−inf: its
   probability is below e^−nats of the anchor's, and a running log-prob only falls); the others
   run their next 2·, 4· … first_chunk tokens in later rounds, each on the keys and values of
   the block's earlier tokens (kept between rounds) and its trace's cache, one block per row.

Why rows of ~`row_tokens` tokens: attention inside a row costs width × (cache + width) entries,
most of them masked, while every row pays for a copy of its trace's cache; a few hundred tokens
balance the two on the CPU (measured in scripts/bench_scoring.py). One row per state (all
continuations of one state) is `row_tokens=0`.

The number of passes does not grow with the number of states or continuations: one prompt
pass, a few response passes (one per length bucket) and a few continuation passes (one per
width bucket, more only under `max_tokens_per_pass`, which caps rows × width of a pass,
padding included). transformers hands a prepared 4D mask to the attention function as-is
(`masking_utils._preprocess_mask_arguments`); `sdpa` takes a boolean mask and `eager` an
additive one, so both work. Flash and flex attention cannot take it and are refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from rredcot.scoring.logprobs import _MAX_CHUNK_ELEMENTS, gather_logprobs

SUPPORTED_ATTENTION: tuple[str, ...] = ("eager", "sdpa")

ROW_TOKENS = 32
"""Default target width of a packed continuation row (tokens); see the module docstring."""

PAD_SLACK = 0.05
"""A pass takes one more row while its padding stays within this fraction of its real tokens."""

SPAN_SLACK = 0.25
"""… and while the cache slots its rows attend over stay within this fraction of those needed."""


@dataclass(frozen=True)
class TraceSpec:
    """One trace to score: prompt x, response τ, boundaries b_0 … b_K, continuations c_1 … c_M.

    State k is x ⊕ τ[:b_k]; boundaries must satisfy 0 = b_0 < … < b_K = T = len(response_ids).
    """

    prompt_ids: Sequence[int]
    response_ids: Sequence[int]
    boundaries: Sequence[int]
    continuations: Sequence[Sequence[int]]

    def __post_init__(self) -> None:
        if len(self.prompt_ids) == 0:
            raise ValueError(
                "prompt_ids: must hold at least one token (state 0 needs a context to score "
                "the first continuation token)"
            )
        b, t = list(self.boundaries), len(self.response_ids)
        if not b or b[0] != 0 or b[-1] != t:
            raise ValueError(
                f"boundaries: must start at 0 and end at len(response_ids) = {t}, got {b}"
            )
        if any(right <= left for left, right in zip(b, b[1:], strict=False)):
            raise ValueError(f"boundaries: must be strictly increasing, got {b}")
        _check_continuations(self.continuations)

    @property
    def num_states(self) -> int:
        """K + 1."""
        return len(self.boundaries)


@dataclass(frozen=True)
class StateQuery:
    """Continuations c_1 … c_M to score at the states x ⊕ τ[:b], b ∈ `states`, of encoded trace
    `trace` (an index into `EncodedTraces`); 0 ≤ b ≤ T, any order, repeats allowed."""

    trace: int
    states: Sequence[int]
    continuations: Sequence[Sequence[int]]

    def __post_init__(self) -> None:
        if len(self.states) == 0:
            raise ValueError(f"states: query of trace {self.trace} names no state")
        _check_continuations(self.continuations)


def _check_continuations(continuations: Sequence[Sequence[int]]) -> None:
    if len(continuations) == 0:
        raise ValueError("continuations: need at least one continuation to score")
    empty = [m for m, c in enumerate(continuations) if len(c) == 0]
    if empty:
        raise ValueError(f"continuations: entries {empty} are empty; each needs ≥ 1 token")


def _check_model(model: torch.nn.Module) -> None:
    config = model.config
    impl = getattr(config, "_attn_implementation", None)
    if impl not in SUPPORTED_ATTENTION:
        raise ValueError(
            f"model.config._attn_implementation: packed scoring needs a custom 4D attention "
            f"mask, which {impl!r} does not take; allowed: {list(SUPPORTED_ATTENTION)} (e.g. "
            f"model.set_attn_implementation('sdpa'))"
        )
    layer_types = getattr(config, "layer_types", None) or []
    other = sorted({t for t in layer_types if t != "full_attention"})
    if other:
        raise ValueError(
            f"model.config.layer_types: packed scoring supports full attention only, got {other}"
        )
    if getattr(config, "final_logit_softcapping", None) is not None:
        raise ValueError(
            "model.config.final_logit_softcapping: packed scoring projects hidden states with "
            "the output embeddings alone and cannot apply a logit soft-cap"
        )


def _allowed_to_mask(allowed: torch.Tensor, model: torch.nn.Module) -> torch.Tensor:
    """(R, Q, S) allowed → the (R, 1, Q, S) mask the attention takes: boolean for sdpa,
    additive (0 / dtype min) for eager."""
    if model.config._attn_implementation == "sdpa":
        return allowed[:, None]
    dtype = next(model.parameters()).dtype
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]


def _project(model: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """Logits (N, V) of last hidden states (N, H): the causal LM's head."""
    return model.get_output_embeddings()(hidden)


def _chunk_rows(vocab: int) -> int:
    """Rows of (rows, V) logits projected at once: about 2^25 elements whatever V."""
    return max(1, _MAX_CHUNK_ELEMENTS // max(vocab, 1))


# --------------------------------------------------------------------------- encoding


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
        return hidden if self.hidden_is_logits else _project(model, hidden)

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
        chunk = _chunk_rows(vocab)
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
    _check_model(model)
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
        out = _decoder(model)(
            input_ids=seqs[:, -1:].to(device),
            attention_mask=_allowed_to_mask(allowed, model),
            position_ids=(p - lo + t_gen - 1)[:, None],
            past_key_values=DynamicCache(ddp_cache_data=list(zip(keys, values, strict=True))),
            use_cache=True,
        )
        keys = [layer.keys for layer in out.past_key_values.layers]
        values = [layer.values for layer in out.past_key_values.layers]
        last = _project(model, out.last_hidden_state[:, -1]).to(logits.dtype)
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


def _length_buckets(
    lengths: Sequence[int], cap: int | None, slack: float | None = None
) -> list[list[int]]:
    """Indices with length > 0, longest first, cut into passes: a pass takes the next index
    while rows × longest stays within (1 + slack) × its summed lengths (slack None:
    `PAD_SLACK`) and within `cap`."""
    slack = PAD_SLACK if slack is None else slack
    order = sorted((i for i, n in enumerate(lengths) if n > 0), key=lambda i: -lengths[i])
    passes: list[list[int]] = []
    real = 0
    for i in order:
        if passes:
            width = lengths[passes[-1][0]]
            rows = len(passes[-1]) + 1
            fits_pad = rows * width <= (1 + slack) * (real + lengths[i])
            fits_cap = cap is None or rows * width <= cap
            if fits_pad and fits_cap:
                passes[-1].append(i)
                real += lengths[i]
                continue
        passes.append([i])
        real = lengths[i]
    return passes


def _decoder(model: torch.nn.Module) -> torch.nn.Module:
    return model.get_decoder()


@torch.inference_mode()
def encode_traces(
    model: torch.nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    *,
    max_tokens_per_pass: int | None = None,
) -> EncodedTraces:
    """Run every trace x_i ⊕ τ_i through `model` once, each distinct prompt once.

    `max_tokens_per_pass` caps rows × width of a response pass (a longer response gets a pass
    of its own). Traces may repeat; each copy is encoded (deduplicate first to save the work).
    """
    if len(prompt_ids) != len(response_ids):
        raise ValueError(
            f"prompt_ids/response_ids: expected one prompt per response, got {len(prompt_ids)} "
            f"and {len(response_ids)}"
        )
    _check_model(model)
    decoder = _decoder(model)
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
    out = decoder(
        input_ids=ids,
        attention_mask=_allowed_to_mask(allowed, model),
        position_ids=(slot[None] - lo[:, None]).clamp_min(0),
        use_cache=True,
    )
    prompt_keys = [layer.keys for layer in out.past_key_values.layers]
    prompt_values = [layer.values for layer in out.past_key_values.layers]
    prompt_last = out.last_hidden_state[:, -1]  # (G, H): predicts τ_0
    del out

    # 2. Response passes: every response on a copy of its prompt's cache.
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
        r = torch.tensor(rows, device=device)
        ids = torch.zeros((len(rows), width), dtype=torch.long, device=device)
        for j, i in enumerate(rows):
            ids[j, : lengths[i]] = torch.tensor(responses[i])
        t = torch.arange(width, device=device)
        row_lo = lo[which[r]]  # (n,)
        prompt_ok = (slot[None, None, :] >= row_lo[:, None, None]).expand(-1, width, -1)
        own = (t[:, None] >= t[None, :]).expand(len(rows), -1, -1)  # causal over the response
        cache = DynamicCache(
            ddp_cache_data=[
                (k[r, :, :p_max], v[r, :, :p_max]) for k, v in zip(keys, values, strict=True)
            ]
        )
        prompt_len = torch.tensor([len(prompts[i]) for i in rows], device=device)
        out = decoder(
            input_ids=ids,
            attention_mask=_allowed_to_mask(torch.cat([prompt_ok, own], -1), model),
            position_ids=prompt_len[:, None] + t[None],
            past_key_values=cache,
            use_cache=True,
        )
        for k, v, layer in zip(keys, values, out.past_key_values.layers, strict=True):
            k[r, :, p_max : p_max + width] = layer.keys[:, :, p_max:]
            v[r, :, p_max : p_max + width] = layer.values[:, :, p_max:]
        hidden[r, 1 : 1 + width] = out.last_hidden_state
        del out, cache
    tokens = sum(map(len, unique)) + sum(lengths)
    return EncodedTraces(prompts, responses, p_max, keys, values, hidden, tokens)


# --------------------------------------------------------------------------- continuations


@dataclass(frozen=True)
class Pruning:
    """Stop scoring a continuation once it can no longer matter next to an anchor column.

    With pruning, continuations are scored in rounds: `first_chunk` tokens each in the first
    round (the `anchor` column in full), then 2·first_chunk, 4·first_chunk … tokens, each round
    on the keys and values of the tokens scored before it. After a round, a continuation m at
    state s whose running log-prob is below log π(c_anchor | s) − `nats` is dropped: its entry
    becomes −inf. A running log-prob only falls as tokens are added, so a dropped continuation
    has π(c_m | s) < e^−nats · π(c_anchor | s): a sum over the M columns of a state loses less
    than M · e^−nats of the anchor's probability (nats = 20: M · 2·10⁻⁹, far below the float32
    rounding of the scores themselves).
    """

    nats: float
    first_chunk: int = 16
    anchor: int = 0
    max_kept: int | None = None
    """Most continuation tokens whose keys and values are kept between rounds at once (memory):
    the continuations are taken in waves whose full lengths add up to at most this. None: all
    at once."""

    def __post_init__(self) -> None:
        if isinstance(self.nats, bool) or not math.isfinite(self.nats) or self.nats <= 0:
            raise ValueError(f"prune nats: expected a finite number > 0, got {self.nats!r}")
        if isinstance(self.first_chunk, bool) or self.first_chunk < 1:
            raise ValueError(
                f"prune first_chunk: expected an integer ≥ 1, got {self.first_chunk!r}"
            )
        if isinstance(self.anchor, bool) or self.anchor < 0:
            raise ValueError(f"prune anchor: expected a column index ≥ 0, got {self.anchor!r}")
        cap = self.max_kept
        if cap is not None and (isinstance(cap, bool) or cap < 1):
            raise ValueError(f"prune max_kept: expected an integer ≥ 1 or None, got {cap!r}")


@dataclass(frozen=True)
class _Block:
    """A run of one continuation's tokens at one state of one trace.

    The continuation's first `skip` tokens are the trace's own next tokens τ[b : b + skip]
    (their keys and values are in the trace's cache); the block runs inputs c[skip + start :
    skip + start + length] (length −1: to the end, without the last token) on top of
    c[skip : skip + start], whose keys and values the caller supplies (later rounds of
    `Pruning`; start 0: none)."""

    query: int
    state: int  # index into the query's states
    cont: int  # m
    b: int  # prefix length of the response: the state is x ⊕ τ[:b]
    start: int = 0
    length: int = -1
    skip: int = 0


@dataclass(frozen=True)
class _Row:
    """Blocks of one trace packed back to back into one batch row."""

    trace: int
    blocks: tuple[_Block, ...]
    width: int  # packed tokens
    span: int  # trace tokens its latest state sees: P + max b


def _pack_rows(
    queries: Sequence[StateQuery],
    prompt_lengths: Sequence[int],
    row_tokens: int,
    plan: dict[tuple[int, int, int], tuple[int, int]] | None = None,
) -> list[_Row]:
    """Blocks of each trace, earliest state first, greedily packed into rows of at most
    `row_tokens` tokens (0: one row per (query, state)). `prompt_lengths`: P of each trace.
    `plan`: (skip, inputs to run) per (query, state, column) where not (0, all); a column with
    nothing to run gets no block."""
    plan = plan or {}
    blocks: dict[int, list[tuple[int, _Block, int]]] = {}  # trace -> (b, block, tokens)
    per_state: list[list[tuple[int, _Block, int]]] = []
    for q, query in enumerate(queries):
        for a, b in enumerate(query.states):
            state_blocks = []
            for m, c in enumerate(query.continuations):
                # a one-token continuation is scored by its first token alone
                skip, n = plan.get((q, a, m), (0, len(c) - 1))
                if n <= 0:
                    continue
                whole = n == len(c) - 1 - skip
                block = _Block(q, a, m, b, 0, -1 if whole else n, skip)
                state_blocks.append((b + skip, block, n))
            if row_tokens <= 0:
                per_state.append(state_blocks)
            else:
                blocks.setdefault(query.trace, []).extend(state_blocks)
    if row_tokens <= 0:
        groups = [(queries[bl[0][1].query].trace, bl) for bl in per_state if bl]
    else:
        groups = []
        for trace, items in blocks.items():
            items.sort(key=lambda item: item[0])
            current: list[tuple[int, _Block, int]] = []
            for item in items:
                if current and sum(n for *_, n in current) + item[2] > row_tokens:
                    groups.append((trace, current))
                    current = []
                current.append(item)
            if current:
                groups.append((trace, current))
    return [
        _Row(
            trace,
            tuple(bl for _, bl, _ in items),
            sum(n for *_, n in items),
            prompt_lengths[trace] + max(b for b, *_ in items),
        )
        for trace, items in groups
    ]


def _plan_passes(rows: Sequence[_Row], cap: int | None) -> list[list[_Row]]:
    """Rows of similar width share a pass (`_length_buckets`: little padding, within `cap`);
    a width bucket is split further into rows that see similar spans of their traces, since
    every row attends over (and copies) the cache slots of the pass's longest span."""
    passes = []
    for bucket in _length_buckets([r.width for r in rows], cap):
        spans = [rows[i].span for i in bucket]
        for part in _length_buckets(spans, None, SPAN_SLACK):
            passes.append([rows[bucket[j]] for j in part])
    return passes


@dataclass
class _Extras:
    """Keys and values of runs of continuation tokens, one run per item, all of one length D:
    per layer (items, kv heads, D, head dim); `index[item]` is the item's row in them."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    index: dict[int, int]

    @staticmethod
    def concat(parts: Sequence[_Extras]) -> _Extras:
        """The items of several parts (disjoint), stacked."""
        parts = [p for p in parts if p.index]
        index, offset = {}, 0
        for part in parts:
            index.update({it: offset + r for it, r in part.index.items()})
            offset += len(part.index)
        layers = range(len(parts[0].keys)) if parts else range(0)
        return _Extras(
            [torch.cat([p.keys[i] for p in parts]) for i in layers],
            [torch.cat([p.values[i] for p in parts]) for i in layers],
            index,
        )

    def then(self, later: _Extras, items: Sequence[int]) -> _Extras:
        """Per item of `items`: its run here followed by its run in `later`."""
        mine = torch.tensor([self.index[it] for it in items], device=self.keys[0].device)
        theirs = torch.tensor([later.index[it] for it in items], device=self.keys[0].device)
        return _Extras(
            [
                torch.cat([a[mine], b[theirs]], 2)
                for a, b in zip(self.keys, later.keys, strict=True)
            ],
            [
                torch.cat([a[mine], b[theirs]], 2)
                for a, b in zip(self.values, later.values, strict=True)
            ],
            {it: r for r, it in enumerate(items)},
        )


def _run_pass(
    model: torch.nn.Module,
    encoded: EncodedTraces,
    items: _Items,
    batch: Sequence[_Row],
    scores: torch.Tensor,
    extras: _Extras | None,
    keep: set[int],
) -> _Extras:
    """One continuation pass over `batch`: adds Σ log π of each block's targets into
    `scores[item]` and returns the keys and values of the blocks whose item is in `keep` (all
    of them of one length). With `extras` every row holds one block, which also sees its item's
    earlier tokens (extras.keys[.., index[item]])."""
    device = next(model.parameters()).device
    p_max = encoded.prompt_width
    width = max(row.width for row in batch)
    n = len(batch)
    # Per token of the pass, row-major and padded: what it reads, predicts, where it sits.
    cols: dict[str, list[int]] = {k: [] for k in ("inputs", "targets", "position", "item")}
    cols["block"], cols["hi"] = [], []  # block id in the pass; sees cache slots < hi
    lo = [p_max - len(encoded.prompt_ids[row.trace]) for row in batch]  # and ≥ lo
    offsets: list[tuple[int, int, int, int]] = []  # (row, offset, tokens, item) per block
    blocks_seen = 0
    for j, row in enumerate(batch):
        p = len(encoded.prompt_ids[row.trace])
        offset = 0
        for bl in row.blocks:
            c = items.queries[bl.query].continuations[bl.cont]
            first = bl.skip + bl.start
            n_tok = len(c) - 1 - first if bl.length < 0 else bl.length
            item = items.at(bl.query, bl.state, bl.cont)
            cols["inputs"] += c[first : first + n_tok]
            cols["targets"] += c[first + 1 : first + 1 + n_tok]
            cols["position"] += range(p + bl.b + first, p + bl.b + first + n_tok)  # c's place
            cols["item"] += [item] * n_tok
            cols["block"] += [blocks_seen] * n_tok
            blocks_seen += 1
            cols["hi"] += [p_max + bl.b + bl.skip] * n_tok
            offsets.append((j, offset, n_tok, item))
            offset += n_tok
        pad = width - row.width
        for key, fill in (("inputs", 0), ("targets", 0), ("position", 0), ("hi", 0)):
            cols[key] += [fill] * pad
        cols["item"] += [-1] * pad
        cols["block"] += [-1 - j] * pad  # padding: its own block per row, never read
    inputs, targets, position, item, block, hi = (
        torch.tensor(cols[k], dtype=torch.long).view(n, width)
        for k in ("inputs", "targets", "position", "item", "block", "hi")
    )
    lo_t = torch.tensor(lo)
    s0, s1 = int(lo_t.min()), int(hi.max())  # the cache slots this pass can see
    slots = torch.arange(s0, s1)
    cache_ok = (slots[None, None, :] >= lo_t[:, None, None]) & (
        slots[None, None, :] < hi[:, :, None]
    )  # (n, W, S)
    idx = torch.arange(width)
    own = (block[:, :, None] == block[:, None, :]) & (idx[:, None] >= idx[None, :])
    which = torch.tensor([row.trace for row in batch], device=device)
    past = [
        (k[which, :, s0:s1], v[which, :, s0:s1])
        for k, v in zip(encoded.keys, encoded.values, strict=True)
    ]
    parts = [cache_ok]
    e = 0
    if extras is not None:  # one block per row: it sees all of its item's earlier tokens
        rows_of = torch.tensor([extras.index[it] for *_, it in offsets], device=device)
        past = [
            (torch.cat([k, ek[rows_of]], 2), torch.cat([v, ev[rows_of]], 2))
            for (k, v), ek, ev in zip(past, extras.keys, extras.values, strict=True)
        ]
        e = extras.keys[0].shape[2]
        parts.append(torch.ones(n, width, e, dtype=torch.bool))
    parts.append(own)
    cache = DynamicCache(ddp_cache_data=past)
    real = item >= 0  # (n, W)
    out = _decoder(model)(
        input_ids=inputs.to(device),
        attention_mask=_allowed_to_mask(torch.cat(parts, -1).to(device), model),
        position_ids=position.to(device),
        past_key_values=cache,
        use_cache=True,
    )
    logits = _project(model, out.last_hidden_state[real.to(device)])  # (N, V)
    log_pi, _ = gather_logprobs(logits, targets[real].to(device))  # (N,)
    scores.index_add_(0, item[real].to(device), log_pi.to(torch.float64))
    kept = [(j, offset, n_tok, it) for j, offset, n_tok, it in offsets if it in keep]
    if not kept:
        return _Extras([], [], {})
    lengths = {n_tok for _, _, n_tok, _ in kept}
    if len(lengths) != 1:
        raise RuntimeError(f"pruning: kept blocks of different lengths {sorted(lengths)}")
    start = (s1 - s0) + e  # the pass's own tokens in the returned cache
    rows = torch.tensor([j for j, *_ in kept], device=device)
    slot = torch.tensor([start + o for _, o, _, _ in kept], device=device)[:, None] + torch.arange(
        lengths.pop(), device=device
    )  # (N, L)

    def take(t: torch.Tensor) -> torch.Tensor:  # (n, kv, S, d) -> (N, kv, L, d)
        return t.transpose(1, 2)[rows[:, None], slot].transpose(1, 2)

    layers = out.past_key_values.layers
    return _Extras(
        [take(layer.keys) for layer in layers],
        [take(layer.values) for layer in layers],
        {it: r for r, (*_, it) in enumerate(kept)},
    )


@torch.inference_mode()
def score_encoded(
    model: torch.nn.Module,
    encoded: EncodedTraces,
    queries: Sequence[StateQuery],
    *,
    max_tokens_per_pass: int | None = None,
    row_tokens: int | None = None,
    prune: Pruning | None = None,
    tokens: list[int] | None = None,
) -> list[torch.Tensor]:
    """S_q[a, m] = log π(c_m | x_i ⊕ τ_i[:b_a]) for each query q = (i, states b, continuations).

    Returns one float64 CPU tensor (len(states), M) per query. The first token of every
    continuation is scored from the encoded hidden state at the state; the rest in the
    continuation passes (module docstring). `max_tokens_per_pass` caps rows × width of a pass
    (None: passes are cut by padding only); `row_tokens` is the packed row width (0: one row
    per state; None: `ROW_TOKENS`). `prune`: score in rounds and drop (−inf) what cannot matter
    next to the anchor column (`Pruning`). `tokens`: a list that receives, per query, the
    continuation tokens run for it.
    """
    if not queries:
        return []
    row_tokens = ROW_TOKENS if row_tokens is None else row_tokens
    if max_tokens_per_pass is not None and max_tokens_per_pass < 1:
        raise ValueError(f"max_tokens_per_pass: expected None or ≥ 1, got {max_tokens_per_pass}")
    _check_model(model)
    for q, query in enumerate(queries):
        if not 0 <= query.trace < len(encoded):
            raise ValueError(f"queries[{q}].trace: {query.trace} is not an encoded trace")
        t = len(encoded.response_ids[query.trace])
        bad = [b for b in query.states if not 0 <= b <= t]
        if bad:
            raise ValueError(f"queries[{q}].states: {bad} outside 0 … T = {t}")
        if prune is not None and prune.anchor >= len(query.continuations):
            raise ValueError(
                f"prune anchor: column {prune.anchor} does not exist in queries[{q}] "
                f"({len(query.continuations)} continuations)"
            )

    items = _Items(queries)
    scores, skips = _leading_scores(model, encoded, items)  # (items,) float64, per item

    # Continuation passes: one round, or rounds of pruning.
    prompt_lengths = [len(p) for p in encoded.prompt_ids]
    run = [0] * len(queries)
    plan: dict[tuple[int, int, int], tuple[int, int]] = {}
    pending: list[int] = []  # items that still run tokens after the first round
    for it in range(len(items)):
        q, a, m = items.where(it)
        todo = items.inputs(it) - skips[it]
        size = todo
        if prune is not None and m != prune.anchor and todo > prune.first_chunk:
            size = prune.first_chunk
            pending.append(it)
        if skips[it] or size != todo:
            plan[q, a, m] = (skips[it], size)
        run[q] += size
    # Waves of pending items whose kept keys stay within prune.max_kept tokens (one wave when
    # unbounded); the first wave's first round runs together with every item not pending.
    waves = _waves(pending, [items.inputs(it) - skips[it] for it in pending], prune)
    later = {it for wave in waves[1:] for it in wave}
    for w, wave in enumerate(waves or [[]]):
        if w == 0:
            wave_plan = {**plan, **{items.where(it): (skips[it], 0) for it in later}}
        else:
            wave_plan = {items.where(it): (skips[it], 0) for it in range(len(items))}
            wave_plan.update({items.where(it): plan[items.where(it)] for it in wave})
        kept = _Extras.concat(
            [
                _run_pass(model, encoded, items, batch, scores, None, set(wave))
                for batch in _plan_passes(
                    _pack_rows(queries, prompt_lengths, row_tokens, wave_plan), max_tokens_per_pass
                )
            ]
        )
        if wave:
            _pruning_rounds(
                model, encoded, items, scores, skips, wave, kept, prune, max_tokens_per_pass, run
            )
        del kept
    if tokens is not None:
        tokens[:] = run
    scores = scores.cpu()
    return [
        scores[f : f + len(q.states) * len(q.continuations)].view(len(q.states), -1)
        for f, q in zip(items.flat, queries, strict=True)
    ]


def _waves(pending: list[int], sizes: list[int], prune: Pruning | None) -> list[list[int]]:
    """`pending` cut, in order, into waves whose summed `sizes` (inputs still to run, an upper
    bound of the keys kept for them) stay within `prune.max_kept` (an item above it alone)."""
    if not pending or prune is None or prune.max_kept is None:
        return [pending] if pending else []
    waves: list[list[int]] = [[]]
    total = 0
    for it, size in zip(pending, sizes, strict=True):
        if waves[-1] and total + size > prune.max_kept:
            waves.append([])
            total = 0
        waves[-1].append(it)
        total += size
    return waves


class _Items:
    """Every (query q, state a, column m), numbered in query order: item = flat[q] + a·M_q + m."""

    def __init__(self, queries: Sequence[StateQuery]) -> None:
        self.queries = queries
        self.flat: list[int] = []
        self.owner: list[int] = []
        for q, query in enumerate(queries):
            self.flat.append(len(self.owner))
            self.owner += [q] * (len(query.states) * len(query.continuations))

    def __len__(self) -> int:
        return len(self.owner)

    def where(self, item: int) -> tuple[int, int, int]:
        """(q, a, m) of an item."""
        q = self.owner[item]
        a, m = divmod(item - self.flat[q], len(self.queries[q].continuations))
        return q, a, m

    def at(self, q: int, a: int, m: int) -> int:
        return self.flat[q] + a * len(self.queries[q].continuations) + m

    def inputs(self, item: int) -> int:
        """Tokens fed for the item's continuation: all but its last."""
        q, _, m = self.where(item)
        return len(self.queries[q].continuations[m]) - 1


def _leading_scores(
    model: torch.nn.Module, encoded: EncodedTraces, items: _Items
) -> tuple[torch.Tensor, list[int]]:
    """Σ log π of each item's leading tokens, read off the encoding, and how many inputs that
    skips: c_0 always, and c_1 … c_k when c_0 … c_{k−1} are the trace's own next tokens
    τ[b : b + k] (their keys are in the trace's cache), each from the encoded hidden state at
    P + b + t − 1. The continuation passes run the rest of c from input k on."""
    device = next(model.parameters()).device
    skips = [0] * len(items)
    at: list[tuple[int, int]] = []  # (trace, position b + t)
    token: list[int] = []
    owner: list[int] = []
    for it in range(len(items)):
        q, a, m = items.where(it)
        query = items.queries[q]
        c, b = query.continuations[m], query.states[a]
        response = encoded.response_ids[query.trace]
        k = 0
        while k < len(c) - 1 and b + k < len(response) and c[k] == response[b + k]:
            k += 1
        skips[it] = k
        at += [(query.trace, b + t) for t in range(k + 1)]
        token += c[: k + 1]
        owner += [it] * (k + 1)
    distinct = {pair: r for r, pair in enumerate(dict.fromkeys(at))}
    hidden = encoded.hidden[[i for i, _ in distinct], [t for _, t in distinct]]  # (U, ·)
    rows = _chunk_rows(model.get_output_embeddings().weight.shape[0])
    log_pi = torch.cat(
        [
            torch.log_softmax(encoded.logits(model, hidden[s : s + rows]).to(torch.float64), -1)
            for s in range(0, len(hidden), rows)
        ]
    )  # (U, V)
    lead = log_pi[
        torch.tensor([distinct[pair] for pair in at], device=device),
        torch.tensor(token, device=device),
    ]
    scores = torch.zeros(len(items), dtype=torch.float64, device=device)
    return scores.index_add_(0, torch.tensor(owner, device=device), lead), skips


def _pruning_rounds(
    model: torch.nn.Module,
    encoded: EncodedTraces,
    items: _Items,
    scores: torch.Tensor,
    skips: Sequence[int],
    pending: list[int],
    kept: _Extras,
    prune: Pruning,
    max_tokens_per_pass: int | None,
    run: list[int],
) -> None:
    """Rounds 2, 3 … of `Pruning` on the items still `pending` after the first round (which ran
    `prune.first_chunk` of their inputs; `kept`: those inputs' keys and values): drop (−inf in
    `scores`) what is below its anchor − nats, run the next 2·, 4· … first_chunk inputs of the
    rest on the keys of what they ran before, until every item is finished or dropped. Adds
    the inputs run to `run[q]`."""
    device = scores.device
    done, length = 0, prune.first_chunk
    prompt_lengths = [len(p) for p in encoded.prompt_ids]
    while pending:
        where = [items.where(it) for it in pending]
        anchor = torch.tensor([items.at(q, a, prune.anchor) for q, a, _ in where], device=device)
        alive = scores[torch.tensor(pending, device=device)] >= scores[anchor] - prune.nats
        alive = alive.tolist()
        dropped = [it for it, ok in zip(pending, alive, strict=True) if not ok]
        scores[torch.tensor(dropped, dtype=torch.long, device=device)] = -math.inf
        survivors = [it for it, ok in zip(pending, alive, strict=True) if ok]
        if not survivors:
            return
        done += length
        length *= 2
        rows, pending = [], []
        for it in survivors:
            q, a, m = items.where(it)
            todo = items.inputs(it) - skips[it] - done
            size = min(length, todo)
            if size < todo:
                pending.append(it)
            query = items.queries[q]
            b = query.states[a]
            block = _Block(q, a, m, b, done, size, skips[it])
            rows.append(
                _Row(query.trace, (block,), size, prompt_lengths[query.trace] + b + skips[it])
            )
            run[q] += size
        new = _Extras.concat(
            [
                _run_pass(model, encoded, items, batch, scores, kept, set(pending))
                for batch in _plan_passes(rows, max_tokens_per_pass)
            ]
        )
        kept = kept.then(new, pending) if pending else new


def score_states_batch(
    model: torch.nn.Module,
    traces: Sequence[TraceSpec],
    *,
    max_tokens_per_pass: int | None = None,
    row_tokens: int | None = None,
) -> list[torch.Tensor]:
    """S_i[k, m] = log π(c_m | x_i ⊕ τ_i[:b_k]) for several traces, batched in the same passes.

    Identical (prompt, response) pairs are encoded once (`encode_traces`), then all states of
    all traces are scored together (`score_encoded`). Returns one float64 CPU tensor
    (K_i+1, M_i) per trace.
    """
    if not traces:
        return []
    if max_tokens_per_pass is not None and max_tokens_per_pass < 1:
        raise ValueError(f"max_tokens_per_pass: expected None or ≥ 1, got {max_tokens_per_pass}")
    _check_model(model)
    distinct: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
    rows = [
        distinct.setdefault((tuple(s.prompt_ids), tuple(s.response_ids)), len(distinct))
        for s in traces
    ]
    encoded = encode_traces(
        model,
        [p for p, _ in distinct],
        [r for _, r in distinct],
        max_tokens_per_pass=max_tokens_per_pass,
    )
    queries = [
        StateQuery(row, list(s.boundaries), s.continuations)
        for row, s in zip(rows, traces, strict=True)
    ]
    return score_encoded(
        model, encoded, queries, max_tokens_per_pass=max_tokens_per_pass, row_tokens=row_tokens
    )


def score_states(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    continuations: Sequence[Sequence[int]],
    *,
    max_tokens_per_pass: int | None = None,
) -> torch.Tensor:
    """S[k, m] = log π(c_m | x ⊕ τ[:b_k]) for k = 0 … K, m = 1 … M: a (K+1, M) float64 tensor.

    boundaries = [b_0 = 0, …, b_K = T]; state 0 is the bare prompt, state K the full trace.
    A constant number of forward passes (see the module docstring); `max_tokens_per_pass`
    caps the tokens of each pass.
    """
    spec = TraceSpec(prompt_ids, response_ids, boundaries, continuations)
    return score_states_batch(model, [spec], max_tokens_per_pass=max_tokens_per_pass)[0]
