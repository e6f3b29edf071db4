"""Prompts against the token budget a vLLM context is sized for (issue 46, item 5).

The engines' contexts are derived from the config's prompt budgets (`training.max_prompt_tokens`,
`evaluation.max_prompt_tokens`; `rredcot.planning.vllm_memory`), so a longer prompt would overflow
the context in the middle of a run. Training leaves such a problem out for every method alike (named
and counted, as a problem without a reference is); a generating job refuses it before it loads
the engine, naming the problems and the key that makes room.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SHOWN = 10  # problem ids a message names (the count says how many more)


def prompt_tokens(prompts: Sequence[str], tokenizer: Any) -> list[int]:
    """Each prompt's length in the tokenizer's tokens (the chat template's text already holds
    the special tokens, so none are added)."""
    ids = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    return [len(i) for i in ids]


def over_budget(ids: Sequence[str], lengths: Sequence[int], budget: int) -> list[str]:
    """`id (n tokens)` of every prompt longer than `budget` tokens, in order."""
    return [f"{i} ({n} tokens)" for i, n in zip(ids, lengths, strict=True) if n > budget]


def refuse_long_prompts(
    ids: Sequence[str], lengths: Sequence[int], budget: int, key: str, room: str
) -> None:
    """Raise naming the problems whose prompt is longer than `budget` tokens (the room `room`
    describes) and the config key `key` that makes room; nothing when all fit."""
    over = over_budget(ids, lengths, budget)
    if over:
        more = f" and {len(over) - SHOWN} more" if len(over) > SHOWN else ""
        raise ValueError(
            f"config key '{key}': {len(over)} of {len(ids)} prompts are longer than the "
            f"{budget} tokens {room}: {', '.join(over[:SHOWN])}{more}; raise '{key}' (the "
            "derived context grows with it) or leave these problems out"
        )


def check_generation_prompts(
    ids: Sequence[str], prompts: Sequence[str], tokenizer: Any, settings: Mapping[str, Any]
) -> None:
    """A generating job's prompts against its vLLM context (`settings`: the job's evaluation
    settings, whose `vllm.max_model_len` the Snakefile derived from
    `evaluation.max_prompt_tokens` or checked against it): each must leave room for
    `max_new_tokens`. The hf backend has no fixed context, so nothing to check."""
    engine = settings.get("vllm") if settings.get("backend") == "vllm" else None
    context = (engine or {}).get("max_model_len")
    if not context:
        return
    new = settings["max_new_tokens"]
    refuse_long_prompts(
        ids,
        prompt_tokens(prompts, tokenizer),
        context - new,
        "evaluation.max_prompt_tokens",
        f"that the vLLM context (evaluation.vllm.max_model_len {context}) leaves beside "
        f"{new} new tokens",
    )
