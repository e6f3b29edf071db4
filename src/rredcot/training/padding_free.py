"""Log-probs and entropies of a training micro-batch without padding (`training.padding_free`).

TRL 1.16 scores a micro-batch as one padded (rows, P + T) batch: left-padded prompts,
right-padded completions and an attention mask, which SDPA turns into a dense (rows, 1, L, L)
mask (boolean, then a copy in the model dtype): 15.6 GB for 8 rows of 25k tokens of Qwen3-4B,
quadratic in the length. Here each row runs on its real tokens only (its prompt and completion,
positions from 0), so no mask is built and nothing grows with L²:

- **packed** (the model's attention is flash-attention, which reads sequence boundaries from
  `position_ids`): the rows laid end to end in one (1, N) row, positions restarting at 0 in
  each; one forward, no padding at all;
- **one row at a time** otherwise (SDPA, eager): each row alone, unpadded, so SDPA runs its
  causal kernel without a mask; the rows' graphs stay alive until the loss's backward, as in
  TRL's batched pass.

Attention scores depend on positions only through RoPE's relative offsets, so the log-probs are
TRL's padded ones to float tolerance (tests/unit/test_trainer.py). The forward is TRL's fused
LM head (`model(..., labels=..., fused_lm_head=True)`): the log-prob of each completion token
and the entropy of its next-token distribution, zero at completion padding, as TRL returns them.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import torch
import torch.nn.functional as F

PACKED_ATTENTION = ("flash_attention_2", "flash_attention_3")
"""Attention implementations that take packed rows (sequence starts read off position_ids)
without a mask; others get one row at a time."""


def packs_rows(model: torch.nn.Module) -> bool:
    """Whether `model` (unwrapped) attends with a kernel that takes packed rows."""
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return impl in PACKED_ATTENTION


def _real_rows(
    attention_mask: torch.Tensor, completion: int
) -> list[tuple[int, torch.Tensor, int]]:
    """(row, index of its real tokens, completion tokens) of each row with a completion token;
    the real tokens must be one run (left-padded prompt, right-padded completion: TRL's layout),
    so that their positions keep their relative offsets."""
    rows = []
    for i, mask in enumerate(attention_mask.bool()):
        index = mask.nonzero().flatten()
        if index.numel() and index[-1] - index[0] + 1 != index.numel():
            raise ValueError(
                f"training.padding_free: row {i}'s attention mask has a gap inside it; padding-"
                "free scoring needs TRL's layout (left-padded prompt, right-padded completion)"
            )
        n_completion = int(mask[-completion:].sum())
        if n_completion:
            rows.append((i, index, n_completion))
    return rows


def unpadded_token_logps(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    *,
    compute_entropy: bool,
    packed: bool,
    autocast: Callable[[], AbstractContextManager[object]],
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """(log-probs, entropies or None), each (rows, logits_to_keep) float32 with zeros at the
    completion padding, of the completion tokens of TRL's padded micro-batch (`input_ids`,
    `attention_mask`: prompt then completion columns); `model` carries TRL's fused LM head.
    None when no row has a completion token (nothing to score; the caller's padded path keeps
    the loss attached to the model)."""
    rows = _real_rows(attention_mask, logits_to_keep)
    if not rows:
        return None
    sequences = [input_ids[i, index] for i, index, _ in rows]
    labels = []
    for (_, _, n_completion), ids in zip(rows, sequences, strict=True):
        label = ids.clone()
        label[: ids.numel() - n_completion] = -100  # the prompt (and each packed row's start)
        labels.append(label)
    lengths = [ids.numel() for ids in sequences]
    scored: list[tuple[torch.Tensor, torch.Tensor | None]] = []
    with autocast():
        if packed:
            positions = torch.cat([torch.arange(n, device=input_ids.device) for n in lengths])
            out = model(
                input_ids=torch.cat(sequences)[None],
                position_ids=positions[None],
                labels=torch.cat(labels)[None],
                fused_lm_head=True,
            )
            # log_probs[j] scores token j + 1: row r's tokens end at its cumulative length
            ends = torch.tensor(lengths).cumsum(0).tolist()
            for (_, _, n_completion), end in zip(rows, ends, strict=True):
                span = slice(end - 1 - n_completion, end - 1)
                entropy = out.entropy[0, span] if compute_entropy else None
                scored.append((out.log_probs[0, span], entropy))
        else:
            for (_, _, n_completion), ids, label in zip(rows, sequences, labels, strict=True):
                out = model(input_ids=ids[None], labels=label[None], fused_lm_head=True)
                entropy = out.entropy[0, -n_completion:] if compute_entropy else None
                scored.append((out.log_probs[0, -n_completion:], entropy))

    def gather(values: list[torch.Tensor]) -> torch.Tensor:
        """(rows, logits_to_keep), the scored rows' values left-aligned, zeros elsewhere."""
        full = [torch.zeros(logits_to_keep, device=input_ids.device)] * input_ids.size(0)
        for (i, _, _), value in zip(rows, values, strict=True):
            full[i] = F.pad(value.float(), (0, logits_to_keep - value.numel()))
        return torch.stack(full)

    logps = gather([lp for lp, _ in scored])
    entropies = gather([e for _, e in scored]) if compute_entropy else None  # type: ignore[misc]
    return logps, entropies
