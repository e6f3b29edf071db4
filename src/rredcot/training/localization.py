"""SRPO's self-localization: the policy names the first step where its failed solution derailed.

Follows the official code (github.com/Ankur-Samanta/SRPO, MIT; `training/thought_ics_agent_loop.py`,
`ThoughtICSAgentLoop._localize_error` with the default autonomy level 2, and `_parse_error_step`;
the call site and the exception fallback are in `training/srpo_agent_loop.py`):

- The failed chain's steps are numbered `"\\nStep i: <step text, stripped>"` and placed in the
  level-2 prompt below: find the *originating* step where a key decision derailed the reasoning,
  not where the failure becomes visible; do not re-solve; end with `\\boxed{N}`. The prompt is
  the user turn of the tokenizer's chat template when it has one, plain text otherwise.
- One sample from the policy: temperature 0.3, the rollout's top_p, up to 4096 new tokens
  (`max_new_tokens`), no stop strings (a task's stop strings would cut the free-text answer).
- Parsing (`parse_error_step`), n = the number of steps:
  `boxed`    the last `\\boxed{…}` (brace-balanced) holds an integer N in 1…n → N;
  `no_error` it holds 0 (the model sees no error) → 1 (the caller's clamp to [1, n]);
  `prose`    else the last "Step N" / "step N" phrase with N in 1…n → N;
  `empty`    the model generated nothing → max(1, n // 2);
  `unparsed` anything else → 1 (the official default, "was: middle of chain"), or
             max(1, n // 2) with `unparsed_step="middle"` (METHOD.md §6 states n//2 here);
  `error`    generation raised → 1.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rredcot.generation.base import SamplingParams
from rredcot.generation.hf import HFBackend

log = logging.getLogger(__name__)

LOCALIZATION_STATUSES: tuple[str, ...] = (
    "boxed",
    "no_error",
    "prose",
    "empty",
    "unparsed",
    "error",
)
UNPARSED_STEPS: tuple[str, ...] = ("first", "middle")
"""Where an output without a parseable N resets: step 1 (official code) or n // 2 (METHOD.md)."""

_BOXED = re.compile(r"\\boxed\{")
_STEP_PHRASE = re.compile(r"[Ss]tep\s+(\d+)")


def numbered_steps(steps: Sequence[str]) -> str:
    """`\\nStep 1: …\\nStep 2: …`: each step stripped and numbered from 1 (official format)."""
    return "".join(f"\nStep {i}: {step.strip()}" for i, step in enumerate(steps, 1))


def localization_text(problem: str, steps: Sequence[str]) -> str:
    """The official level-2 localization instruction for a failed chain of `steps` (n ≥ 1)."""
    n = len(steps)
    return (
        "You are tasked with localizing the first erroneous thought in your previous solution "
        "to this problem.\n\n"
        f"Problem: {problem}\n\n"
        f"Your incorrect reasoning chain:\n{numbered_steps(steps)}\n\n"
        "The final answer this chain produces is incorrect — therefore at least one step "
        "contains an error. The error you are looking for is the originating step where a key "
        "decision or action derailed the reasoning, not just the step where the failure "
        "ultimately becomes visible. A misread of the problem, an unjustified assumption, or a "
        "logical flaw can look fine for several follow-on steps before it surfaces in the wrong "
        "answer. A step is erroneous if you cannot justify its claims from the problem statement "
        "and earlier verified steps alone. Find the originating step, not just the symptom.\n\n"
        "Do NOT re-solve the problem. Your ONLY task is to identify the step number of that "
        "originating error.\n\n"
        "Requirements:\n"
        f"- Commit to exactly ONE step number (1 to {n}).\n"
        "- Stop at the first step you cannot justify.\n"
        "- MANDATORY final line: your response MUST end with \\boxed{N} on its own line, where "
        "N is the step index (1-indexed) of the first erroneous step in the chain above — NOT "
        "the answer to the problem. Do NOT add any text after the \\boxed{N}.\n"
    )


def localization_prompt(tokenizer: Any, problem: str, steps: Sequence[str]) -> str:
    """The prompt text: the instruction as the chat template's user turn (with the assistant's
    generation prompt) when the tokenizer has a template, the bare instruction otherwise."""
    if not steps:
        raise ValueError("steps: a failed chain needs at least one step to localize")
    text = localization_text(problem.strip(), steps)
    if getattr(tokenizer, "chat_template", None):
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
        if not isinstance(prompt, str):
            raise ValueError(
                f"tokenizer.apply_chat_template(tokenize=False) returned {type(prompt).__name__}, "
                "expected str"
            )
        return prompt
    return text


def _last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{…}` with balanced braces, or None (absent or unclosed)."""
    matches = list(_BOXED.finditer(text))
    if not matches:
        return None
    start = matches[-1].end()
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i].strip()
    return None


def parse_error_step(text: str, num_steps: int, unparsed_step: str = "first") -> tuple[int, str]:
    """(N, status) from a localization output for a chain of `num_steps` steps; N ∈ [1, n].

    See the module docstring for the statuses; this is the official `_parse_error_step` plus
    the caller's clamp, with the empty-output case (max(1, n // 2)) folded in.
    """
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"num_steps: expected an integer >= 1, got {num_steps!r}")
    if unparsed_step not in UNPARSED_STEPS:
        raise ValueError(
            f"unparsed_step: {unparsed_step!r} is not allowed; choose one of {list(UNPARSED_STEPS)}"
        )
    middle = max(1, num_steps // 2)
    if not text:
        return middle, "empty"
    boxed = _last_boxed(text)
    if boxed is not None:
        try:
            n = int(boxed)
        except ValueError:
            n = None
        if n == 0:
            return 1, "no_error"
        if n is not None and 1 <= n <= num_steps:
            return n, "boxed"
    phrases = list(_STEP_PHRASE.finditer(text))
    if phrases:
        n = int(phrases[-1].group(1))
        if 1 <= n <= num_steps:
            return n, "prose"
    return (middle if unparsed_step == "middle" else 1), "unparsed"


@dataclass(frozen=True)
class Localization:
    """One localization: the reset step N ∈ [1, n], how it was found (`LOCALIZATION_STATUSES`),
    the model's output and the tokens it cost (prompt + generated)."""

    step: int
    status: str
    output: str
    forward_tokens: int


@torch.no_grad()
def localize_many(
    policy: torch.nn.Module,
    tokenizer: Any,
    problems: Sequence[str],
    steps: Sequence[Sequence[str]],
    *,
    temperature: float = 0.3,
    top_p: float = 1.0,
    max_new_tokens: int = 4096,
    seed: int = 0,
    unparsed_step: str = "first",
    batch_size: int = 8,
) -> list[Localization]:
    """Self-localization of several failed chains in one batched generation (HF backend).

    problems[i]: the problem text; steps[i]: chain i's step texts (n_i ≥ 1). Row i samples with
    the stream derive_seed(seed, i, 0). If generation raises, every chain falls back to step 1
    (status `error`) and the exception is logged. The policy's train/eval mode is restored.
    """
    if len(problems) != len(steps):
        raise ValueError(
            f"problems/steps: need one step list per problem, got {len(problems)} and {len(steps)}"
        )
    if not problems:
        return []
    prompts = [localization_prompt(tokenizer, p, s) for p, s in zip(problems, steps, strict=True)]
    params = SamplingParams(
        n=1, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed
    )
    was_training = policy.training
    try:
        backend = HFBackend(policy, tokenizer, batch_size, show_progress=False)
        completions = backend.generate(prompts, params)
    except Exception as err:  # the official loop catches everything here and resets at step 1
        log.warning(
            "SRPO localization failed (%r); resetting %d chain(s) at step 1", err, len(prompts)
        )
        return [Localization(1, "error", "", 0) for _ in prompts]
    finally:
        policy.train(was_training)
    out = []
    for prompt, chain, done in zip(prompts, steps, completions, strict=True):
        step, status = parse_error_step(done.text, len(chain), unparsed_step)
        tokens = len(tokenizer(prompt)["input_ids"]) + done.num_tokens
        out.append(Localization(step, status, done.text, tokens))
    return out


def localize_first_error(
    policy: torch.nn.Module,
    tokenizer: Any,
    task: Any,
    problem: str,
    steps: list[str],
    *,
    temperature: float = 0.3,
    top_p: float = 1.0,
    max_new_tokens: int = 4096,
    seed: int = 0,
    unparsed_step: str = "first",
) -> tuple[int, str]:
    """(N, status): the step (1-based, in [1, len(steps)]) where the policy says its failed
    solution first derailed, and how N was found (`LOCALIZATION_STATUSES`).

    The error-localization study's entry point (METHOD.md §5). `task` is accepted so that every
    localizer is called the same way; the official level-2 prompt is task-agnostic and the
    task's stop strings are deliberately not applied.
    """
    del task  # see the docstring
    (result,) = localize_many(
        policy,
        tokenizer,
        [problem],
        [steps],
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        seed=seed,
        unparsed_step=unparsed_step,
        batch_size=1,
    )
    return result.step, result.status
