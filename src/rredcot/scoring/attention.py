"""What the packed scorer needs from the model's attention: checks, masks, and a slot cache.

The scorer never lets the model build its own mask: every pass hands a prepared 4D mask to the
attention function, which transformers passes through as-is (`masking_utils.
_preprocess_mask_arguments`); `sdpa` takes a boolean mask and `eager` an additive one, so both
work. Flash and flex attention cannot take it and are refused (`check_model`).

`SlotCache` is the cache the encoding and the shared-prefix continuation passes run on: it
writes a pass's new keys and values straight into the trace's own cache buffer, right after the
slots the pass may see, and hands the attention a *view* of that buffer. A continuation row
therefore reads its trace's cache where it already lies in memory; nothing of it is copied.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from transformers import DynamicCache

from rredcot.scoring.logprobs import _MAX_CHUNK_ELEMENTS

SUPPORTED_ATTENTION: tuple[str, ...] = ("eager", "sdpa")


def check_model(model: torch.nn.Module) -> None:
    """Refuse a model the packed scorer cannot score exactly (clear error, not wrong numbers)."""
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


def allowed_to_mask(allowed: torch.Tensor, model: torch.nn.Module) -> torch.Tensor:
    """(R, Q, S) allowed → the (R, 1, Q, S) mask the attention takes: boolean for sdpa,
    additive (0 / dtype min) for eager."""
    if model.config._attn_implementation == "sdpa":
        return allowed[:, None]
    dtype = next(model.parameters()).dtype
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]


@contextmanager
def gqa_in_kernel(model: torch.nn.Module) -> Iterator[None]:
    """On the CPU under sdpa, let torch's attention kernel read grouped (GQA) keys and values as
    they are (`enable_gqa`) instead of transformers repeating them per query head, which copies
    every key a pass reads (`TRANSFORMERS_SDPA_FORCE_GQA`; the CPU kernel takes a mask with it,
    gives the same numbers and is no slower). Elsewhere (CUDA falls back to its math kernel
    with a mask and GQA) and under eager, nothing changes: the repeat there is a transient copy
    of one layer's visible slots."""
    device = next(model.parameters()).device
    if model.config._attn_implementation != "sdpa" or device.type != "cpu":
        yield
        return
    key = "TRANSFORMERS_SDPA_FORCE_GQA"
    before = os.environ.get(key)
    os.environ[key] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


def project(model: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """Logits (N, V) of last hidden states (N, H): the causal LM's head."""
    return model.get_output_embeddings()(hidden)


def decoder(model: torch.nn.Module) -> torch.nn.Module:
    """The model body: the scorer projects only the hidden states it scores."""
    return model.get_decoder()


def chunk_rows(vocab: int) -> int:
    """Rows of (rows, V) logits projected at once: about 2^25 elements whatever V."""
    return max(1, _MAX_CHUNK_ELEMENTS // max(vocab, 1))


class SlotCache(DynamicCache):
    """A pass's cache that lives in the traces' own buffers (per layer (B, kv, S_buf, d)).

    The pass sees, for batch rows `rows` (a slice: the attention reads a view; an index
    tensor: it reads a gathered copy, one layer at a time), buffer slots [start, at) followed by
    the pass's `extras` (keys and values of earlier continuation tokens, per layer
    (1, kv, E, d)) and its new tokens. Extras and new tokens are written into slots
    [at, at + E + W) of the buffer. With `restore` those slots are put back by `restore()`
    (they hold the trace's later tokens, which other passes read); without it they stay (the
    encoding writes the true keys of its tokens there). When the buffer has no room after `at`,
    the layer's keys are the concatenation instead (a transient copy of that layer's visible
    slots). The new keys and values of every layer are kept in `new`.
    """

    def __init__(
        self,
        keys: Sequence[torch.Tensor],
        values: Sequence[torch.Tensor],
        rows: slice | Sequence[int],
        start: int,
        at: int,
        *,
        extras: tuple[Sequence[torch.Tensor], Sequence[torch.Tensor]] | None = None,
        restore: bool = False,
    ) -> None:
        super().__init__()
        self.buffers = (list(keys), list(values))
        self.rows, self.start, self.at = rows, start, at
        self.extras = extras
        self.keep_original = restore
        self.saved: list[tuple[int, int, torch.Tensor, torch.Tensor]] = []
        self.new: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.copied_layers = 0  # layers whose keys could not be a view (no room, gathered rows)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Slots before the new tokens (only read by models that derive positions from it)."""
        return self.at - self.start

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *_, **__
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.new.append((key_states, value_states))
        keys, values = self.buffers[0][layer_idx], self.buffers[1][layer_idx]
        if self.extras is not None:
            key_states = torch.cat([self.extras[0][layer_idx], key_states], 2)
            value_states = torch.cat([self.extras[1][layer_idx], value_states], 2)
        end = self.at + key_states.shape[2]
        rows, view = self.rows, isinstance(self.rows, slice)
        if end > keys.shape[2]:  # no room after `at`: a transient copy of this layer
            self.copied_layers += 1
            return (
                torch.cat([keys[rows, :, self.start : self.at], key_states], 2),
                torch.cat([values[rows, :, self.start : self.at], value_states], 2),
            )
        if self.keep_original:
            self.saved.append(
                (
                    layer_idx,
                    end,
                    keys[rows, :, self.at : end].clone(),
                    values[rows, :, self.at : end].clone(),
                )
            )
        keys[rows, :, self.at : end] = key_states
        values[rows, :, self.at : end] = value_states
        if not view:
            self.copied_layers += 1
        return keys[rows, :, self.start : end], values[rows, :, self.start : end]

    def restore(self) -> None:
        """Put back the buffer slots this pass wrote over (with `restore`)."""
        for layer, end, k, v in self.saved:
            self.buffers[0][layer][self.rows, :, self.at : end] = k
            self.buffers[1][layer][self.rows, :, self.at : end] = v
        self.saved.clear()
