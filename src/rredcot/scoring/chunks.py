"""Encoding traces under a memory budget: chunks of traces whose KV cache fits, one at a time.

An encoding (`encode_traces`) holds the keys and values of every trace in one slot layout,
rows × (P_max + T_max) slots per layer; at the paper's lengths (25k tokens, 32 traces per step,
Qwen3-4B's 144 KiB per slot) that is over 100 GiB, and nothing bounded it. Here the traces are
cut into chunks whose slots stay within `max_resident_tokens`; each chunk is encoded, used and
freed before the next, so the peak no longer grows with the number of traces.

`ChunkedEncoding` stands in for an `EncodedTraces` that does not fit: it reads the token scores
(the segmentation's input) chunk by chunk, and hands the credit (`rredcot_credit_batch`) the
chunks to encode again for scoring. The second encoding is the price of the bound (the
segmentation must see every trace before any is scored); when every trace fits, nothing is
chunked and nothing is encoded twice (`encode_within_budget`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from rredcot.scoring.chunk_plan import plan_resident_chunks, resident_slots
from rredcot.scoring.encoding import EncodedTraces, encode_traces


class ChunkedEncoding:
    """Traces x_i ⊕ τ_i that an encoding cannot hold at once under `max_resident_tokens`
    (None: one chunk of all of them).

    Holds the token ids only (and, once read, the token scores); `chunks(model, rows)` encodes
    the given rows chunk by chunk (`split`: as `encode_traces(split=True)`). forward_tokens:
    the real tokens `token_scores` ran (each prompt once per chunk it appears in, every
    response once), 0 before it is called.
    """

    def __init__(
        self,
        prompt_ids: Sequence[Sequence[int]],
        response_ids: Sequence[Sequence[int]],
        *,
        max_resident_tokens: int | None,
        max_tokens_per_pass: int | None = None,
        split: bool = False,
    ) -> None:
        if len(prompt_ids) != len(response_ids):
            raise ValueError("prompt_ids/response_ids: expected one prompt per response")
        self.prompt_ids = [list(p) for p in prompt_ids]
        self.response_ids = [list(r) for r in response_ids]
        self.max_resident_tokens = max_resident_tokens
        self.max_tokens_per_pass = max_tokens_per_pass
        self.split = split
        self.forward_tokens = 0
        self._scores: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    def __len__(self) -> int:
        return len(self.prompt_ids)

    def chunks(
        self, model: torch.nn.Module, rows: Sequence[int] | None = None
    ) -> Iterator[tuple[list[int], EncodedTraces]]:
        """(rows of the chunk, their encoding) for the chunks of `rows` (default: all), each
        encoded when it is reached and dropped by the caller before the next."""
        rows = list(range(len(self))) if rows is None else list(rows)
        plan = plan_resident_chunks(
            [len(self.prompt_ids[r]) for r in rows],
            [len(self.response_ids[r]) for r in rows],
            self.max_resident_tokens,
        )
        for part in plan:
            chunk = [rows[i] for i in part]
            yield (
                chunk,
                encode_traces(
                    model,
                    [self.prompt_ids[r] for r in chunk],
                    [self.response_ids[r] for r in chunk],
                    max_tokens_per_pass=self.max_tokens_per_pass,
                    split=self.split,
                ),
            )

    def token_scores(self, model: torch.nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """`EncodedTraces.token_scores` of every trace, read chunk by chunk (computed once)."""
        if self._scores is None:
            scores: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(self)
            for chunk, encoded in self.chunks(model):
                for r, pair in zip(chunk, encoded.token_scores(model), strict=True):
                    scores[r] = pair
                self.forward_tokens += encoded.forward_tokens
                del encoded
            self._scores = [s for s in scores if s is not None]
        return self._scores


def encode_within_budget(
    model: torch.nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    *,
    max_resident_tokens: int | None = None,
    max_tokens_per_pass: int | None = None,
    split: bool = False,
) -> EncodedTraces | ChunkedEncoding:
    """`encode_traces` when the traces' cache fits `max_resident_tokens` slots (or no budget is
    set); else a `ChunkedEncoding`, which encodes them chunk by chunk when they are read.
    `split`: the `split` layout's encoding (`encode_traces`)."""
    lengths = [len(p) for p in prompt_ids], [len(r) for r in response_ids]
    if max_resident_tokens is None or resident_slots(*lengths) <= max_resident_tokens:
        return encode_traces(
            model, prompt_ids, response_ids, max_tokens_per_pass=max_tokens_per_pass, split=split
        )
    return ChunkedEncoding(
        prompt_ids,
        response_ids,
        max_resident_tokens=max_resident_tokens,
        max_tokens_per_pass=max_tokens_per_pass,
        split=split,
    )
