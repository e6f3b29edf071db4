"""Which traces share a chunk of the encoding under a memory budget (`rredcot.scoring.chunks`).

Plain arithmetic on lengths, without torch: the memory planner (`rredcot.planning.memory_plan`)
sizes the credit's chunks with it while the workflow builds the DAG, and the scorer cuts its traces
with the same plan.
"""

from __future__ import annotations

from collections.abc import Sequence


def resident_slots(prompt_lengths: Sequence[int], response_lengths: Sequence[int]) -> int:
    """Cache slots per layer an encoding of these traces holds: rows × (P_max + T_max)."""
    if not prompt_lengths:
        return 0
    return len(prompt_lengths) * (max(prompt_lengths) + max(response_lengths))


def plan_resident_chunks(
    prompt_lengths: Sequence[int],
    response_lengths: Sequence[int],
    max_resident_tokens: int | None,
) -> list[list[int]]:
    """Trace indices in chunks whose encoding holds at most `max_resident_tokens` slots.

    None, or every trace within the budget: one chunk, in the given order (the unchunked path).
    Otherwise longest traces first (a chunk's rows then pad little), each chunk filled while
    `resident_slots` stays within the budget; a trace longer than the budget alone is a chunk
    of its own (a trace cannot be split), so the bound is max(budget, longest trace).
    """
    if len(prompt_lengths) != len(response_lengths):
        raise ValueError("prompt_lengths/response_lengths: expected one length each per trace")
    n = len(prompt_lengths)
    if max_resident_tokens is not None and max_resident_tokens < 1:
        raise ValueError(f"max_resident_tokens: expected None or ≥ 1, got {max_resident_tokens}")
    if max_resident_tokens is None or resident_slots(prompt_lengths, response_lengths) <= (
        max_resident_tokens
    ):
        return [list(range(n))] if n else []
    order = sorted(range(n), key=lambda i: -(prompt_lengths[i] + response_lengths[i]))
    chunks: list[list[int]] = []
    current: list[int] = []
    p_max = t_max = 0
    for i in order:
        p, t = max(p_max, prompt_lengths[i]), max(t_max, response_lengths[i])
        if current and (len(current) + 1) * (p + t) > max_resident_tokens:
            chunks.append(current)
            current, p, t = [], prompt_lengths[i], response_lengths[i]
        current.append(i)
        p_max, t_max = p, t
    chunks.append(current)
    return chunks
