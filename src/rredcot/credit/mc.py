"""Monte Carlo state values (VinePPO-style) and the segment credit they give (METHOD.md §5).

The MC baseline and the estimator study's ground truth. For a trace with states
s_k = x ⊕ τ_{<b_k}, k = 0 … K:

    V̂(s_k) = mean_{i=1..N} r(τ_{<b_k} ⊕ c_i),  c_i ~ π(· | s_k), at most L new tokens   (K+1,)
    V̂(s_K) := R = r(τ)                               the full response is graded, not sampled
    σ_k    = V̂(s_k) − V̂(s_{k−1}),  k = 1 … K,      so Σ_k σ_k = R − V̂(s_0)            (K,)

Truncation (`TRUNCATION`): a rollout that has not finished after L new tokens
(finish_reason == "length") is either *dropped* ("drop": V̂(s_k) is the mean over the rollouts
that finished, which biases it towards short continuations — the truncated-MC bias the study
measures) or scored 0 ("zero"). Under "drop" a state none of whose rollouts finished has no
estimate: V̂(s_k) = NaN, and every σ next to it is NaN too. Callers must treat NaN as "missing"
— exclude the state (or the trace) from an agreement statistic and count it, or choose an
explicit fallback before training — and never feed it into advantages.

States are text: s_k is `prompt + response[:c_k]` with character boundaries c_k, because the
generation backends take prompts as strings. With a byte-level tokenizer the re-tokenized state is
exactly the original token prefix; with a BPE tokenizer the text round trip can merge tokens
across the prompt/prefix seam differently from the sampled τ (the same string, another
tokenization). `token_to_char_boundaries` turns the token boundaries of
`rredcot.credit.segmentation` into character offsets by decoding token-id prefixes with the
tokenizer, which is exact for multi-byte characters (a byte tokenizer has 1 token per UTF-8 byte,
not per character).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import torch

from rredcot.block_checks import check_known_keys
from rredcot.credit.redistribution import terminal_credit
from rredcot.credit.segmentation import check_boundaries
from rredcot.generation.base import Completion, GenerationBackend, SamplingParams
from rredcot.tasks.base import Grade, Task

TRUNCATION: tuple[str, ...] = ("drop", "zero")
_REPLACEMENT = "\ufffd"  # what a decoder writes for the bytes of a character cut in two


@dataclass(frozen=True)
class MCConfig:
    """The `mc` config block: how state values are estimated by rollouts (METHOD.md §5).

    `dataclasses.asdict(config)` gives exactly the keyword arguments of `mc_state_values`.
    """

    n_rollouts: int = 16
    """N: rollouts per state. Variance of V̂ is p(1−p)/N; the study sweeps N against RREDCoT."""
    budget: int = 256
    """L: new-token budget per rollout (the longest synthetic solution is ~90 byte tokens)."""
    truncation: str = "drop"
    """What a rollout that hits L counts for: `drop` (excluded; NaN when all are) or `zero`."""
    temperature: float = 1.0
    """Rollout sampling temperature; 1.0 samples from π itself, which V(s) is defined under."""
    top_p: float = 1.0
    """Nucleus mass in (0, 1]; 1.0 = no truncation (again: the value under π itself)."""

    def __post_init__(self) -> None:
        for name in ("n_rollouts", "budget"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
                raise ValueError(f"mc.{name}: expected an integer >= 1, got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.truncation not in TRUNCATION:
            raise ValueError(
                f"mc.truncation: {self.truncation!r} is not allowed; choose one of "
                f"{list(TRUNCATION)}"
            )
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, Real) or not math.isfinite(t) or t < 0:
            raise ValueError(f"mc.temperature: expected a finite number >= 0, got {t!r}")
        p = self.top_p
        if isinstance(p, bool) or not isinstance(p, Real) or not 0 < p <= 1:
            raise ValueError(f"mc.top_p: expected a number in (0, 1], got {p!r}")

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any]) -> MCConfig:
        """Build from a config mapping (e.g. `config["mc"]`); unknown keys are errors."""
        check_known_keys("mc", cls, mapping)
        return cls(**mapping)


@dataclass(frozen=True)
class MCValues:
    """MC state values of one trace and what they cost.

    values:      (K+1,) float64 V̂(s_k); values[K] = R. NaN where no rollout was usable ("drop").
    n_used:      (K+1,) int64 rollouts averaged into V̂(s_k) (n_used[K] = 0: graded, not sampled).
    n_truncated: (K+1,) int64 rollouts that hit the budget L (dropped or scored 0).
    n_dropped:   rollouts left out of every mean (Σ n_truncated under "drop", 0 under "zero").
    drop_rate:   n_dropped / (K·N); truncation_rate: Σ n_truncated / (K·N) (0 when K = 0).
    forward_tokens: new tokens generated by all K·N rollouts, truncated ones included (they were
        paid for); the prompt/prefix tokens each rollout re-encodes and the EOS token are not
        counted. seconds: wall time of generation and grading.
    """

    values: torch.Tensor
    n_used: torch.Tensor
    n_truncated: torch.Tensor
    reward: float
    n_rollouts: int
    truncation: str
    n_dropped: int
    drop_rate: float
    truncation_rate: float
    forward_tokens: int
    seconds: float

    @property
    def num_segments(self) -> int:
        """K."""
        return self.values.numel() - 1


def token_to_char_boundaries(
    tokenizer: Any,
    response_ids: Sequence[int],
    boundaries: Sequence[int],
    response: str | None = None,
) -> list[int]:
    """Character offsets c_k into the response text of token boundaries b_k.

    c_k = len(decode(response_ids[:b_k])), decoded with the tokenizer (special tokens skipped),
    so multi-byte characters count once. A boundary inside a character (a byte tokenizer can cut
    "é" between its two bytes; the decoded prefix then ends in U+FFFD) snaps down to the start of
    that character, so consecutive c_k can be equal. `response` (e.g. `Completion.text`, which
    a backend may cut right after a stop string inside the last token) must be a prefix of the
    decoded ids; offsets are then clipped to its length. Raises ValueError when a decoded prefix
    departs from the decoded whole in any other way (a decoder that is not prefix-stable).
    """
    ids = [int(i) for i in response_ids]
    b = check_boundaries(boundaries, len(ids)).tolist()
    text = tokenizer.decode(ids, skip_special_tokens=True)
    if response is not None and not text.startswith(response):
        raise ValueError(
            "response: is not a prefix of the decoded response_ids; pass the text these ids "
            "produced"
        )
    limit = len(text) if response is None else len(response)
    out = []
    for k, bk in enumerate(b):
        prefix = tokenizer.decode(ids[:bk], skip_special_tokens=True)
        common = len(os.path.commonprefix([prefix, text]))
        if common < len(prefix) and prefix[common:].strip(_REPLACEMENT):
            raise ValueError(
                f"boundaries[{k}] = {bk}: decoding the first {bk} tokens gives text that is not "
                f"a prefix of the decoded response ({prefix[common:][:20]!r} differs)"
            )
        out.append(min(common, limit))
    return out


def _check_char_boundaries(char_boundaries: Sequence[int], response: str) -> list[int]:
    cb = list(char_boundaries)
    if not cb or any(isinstance(c, bool) or not isinstance(c, Integral) for c in cb):
        raise ValueError(f"char_boundaries: expected a non-empty list of ints, got {cb!r}")
    cb = [int(c) for c in cb]
    if cb[0] != 0 or cb[-1] != len(response):
        raise ValueError(
            f"char_boundaries: must start at 0 and end at len(response) = {len(response)}, "
            f"got {cb[0]} … {cb[-1]}"
        )
    if any(right < left for left, right in zip(cb, cb[1:], strict=False)):
        raise ValueError(f"char_boundaries: must be non-decreasing, got {cb}")
    return cb


def grade_texts(task: Task, texts: Sequence[str], gold: str) -> list[Grade]:
    """task.grade over many responses against one gold; one batched pass where the task has
    `grade_many` (math: one trip through the math-verify worker instead of one per text)."""
    grade_many = getattr(task, "grade_many", None)
    if callable(grade_many):
        return list(grade_many([(t, gold) for t in texts]))
    return [task.grade(t, gold) for t in texts]


def _by_row(completions: list[Completion], num_prompts: int, n: int) -> list[list[Completion]]:
    """Completions grouped per prompt, each group ordered by sample index; checks coverage."""
    rows: list[list[Completion | None]] = [[None] * n for _ in range(num_prompts)]
    for c in completions:
        if not (0 <= c.prompt_index < num_prompts and 0 <= c.sample_index < n):
            raise ValueError(
                f"backend returned completion ({c.prompt_index}, {c.sample_index}) outside "
                f"{num_prompts} prompts x {n} samples"
            )
        rows[c.prompt_index][c.sample_index] = c
    missing = [(p, s) for p in range(num_prompts) for s in range(n) if rows[p][s] is None]
    if missing or len(completions) != num_prompts * n:
        raise ValueError(
            f"backend returned {len(completions)} completions for {num_prompts} prompts x {n} "
            f"samples (missing {missing[:5]})"
        )
    return rows  # type: ignore[return-value]


@dataclass(frozen=True)
class MCTrace:
    """One trace to value: x as the policy saw it (`task.build_prompt`), τ's text, character
    boundaries 0 = c_0 ≤ … ≤ c_K = len(response) (`token_to_char_boundaries`), and y*."""

    prompt: str
    response: str
    char_boundaries: Sequence[int]
    gold: str

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str) or not self.prompt:
            raise ValueError(f"prompt: expected a non-empty string, got {self.prompt!r}")
        if not isinstance(self.response, str):
            raise ValueError(f"response: expected a string, got {type(self.response).__name__}")
        if not isinstance(self.gold, str) or not self.gold.strip():
            raise ValueError(f"gold: expected a non-empty answer string, got {self.gold!r}")
        cb = _check_char_boundaries(self.char_boundaries, self.response)
        object.__setattr__(self, "char_boundaries", tuple(cb))


def mc_state_values(
    backend: GenerationBackend,
    task: Task,
    prompt: str,
    response: str,
    char_boundaries: Sequence[int],
    gold: str,
    *,
    n_rollouts: int,
    budget: int,
    truncation: str,
    seed: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
) -> MCValues:
    """V̂(s_k), k = 0 … K, from N rollouts per state (module docstring has the equations).

    prompt: x as the policy saw it (`task.build_prompt`); response: τ's text; char_boundaries:
    0 = c_0 ≤ … ≤ c_K = len(response) (see `token_to_char_boundaries`); gold: y*.
    All K·N rollouts come from ONE `backend.generate` call (prompts = the K states
    x ⊕ τ[:c_k], k < K, n = N, the task's stop strings); a rollout's reward is
    `task.grade(τ[:c_k] ⊕ rollout, gold)`. Deterministic in `seed` for a seeded backend (the HF
    and vLLM backends seed each (state, rollout) row); give every trace its own seed, e.g.
    `derive_seed(seed, trace_index)`, so that traces do not share random streams.
    """
    (values,) = mc_state_values_batch(
        backend,
        task,
        [MCTrace(prompt, response, char_boundaries, gold)],
        n_rollouts=n_rollouts,
        budget=budget,
        truncation=truncation,
        seed=seed,
        temperature=temperature,
        top_p=top_p,
    )
    return values


def mc_state_values_batch(
    backend: GenerationBackend,
    task: Task,
    traces: Sequence[MCTrace],
    *,
    n_rollouts: int,
    budget: int,
    truncation: str,
    seed: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
) -> list[MCValues]:
    """`mc_state_values` of many traces with ONE `backend.generate` call for all their states,
    so the backend batches rollouts across traces (the per-trace cost of small calls goes).

    The states of trace t follow those of traces < t in the call; the backend seeds each
    (state, rollout) row from `seed` and the row's position, so the result is deterministic in
    `seed` and the traces' order, and a batch of one equals `mc_state_values`. A trace's
    `seconds` is the call's time shared in proportion to its rollout tokens.
    """
    cfg = MCConfig(n_rollouts, budget, truncation, temperature, top_p)
    if isinstance(seed, bool) or not isinstance(seed, Integral) or seed < 0:
        raise ValueError(f"seed: expected an integer >= 0, got {seed!r}")
    n = cfg.n_rollouts
    start = time.perf_counter()
    prefixes = [[t.response[:c] for c in t.char_boundaries[:-1]] for t in traces]  # τ[:c_k]
    prompts = [t.prompt + p for t, ps in zip(traces, prefixes, strict=True) for p in ps]
    completions: list[Completion] = []
    if prompts:
        params = SamplingParams(
            n=n,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_new_tokens=cfg.budget,
            seed=int(seed),
            stop_strings=tuple(task.stop_strings),
        )
        completions = backend.generate(prompts, params)
    all_rows = _by_row(completions, len(prompts), n)

    # Only finished rollouts need a verdict: truncated ones are dropped or scored 0 unread.
    # Grading is per trace (one gold each), one batched call per trace.
    out: list[MCValues] = []
    first = 0
    plans = []
    for t, ps in zip(traces, prefixes, strict=True):
        rows = all_rows[first : first + len(ps)]
        first += len(ps)
        finished = [(k, c) for k in range(len(ps)) for c in rows[k] if c.finish_reason == "stop"]
        texts = [ps[k] + c.text for k, c in finished] + [t.response]
        plans.append((rows, finished, grade_texts(task, texts, t.gold)))
    seconds = time.perf_counter() - start
    total_tokens = sum(c.num_tokens for c in completions)
    for ps, (rows, finished, grades) in zip(prefixes, plans, strict=True):
        num_segments = len(ps)
        reward = grades[-1].reward  # R = r(τ)
        correct = torch.zeros(num_segments + 1, dtype=torch.float64)  # (K+1,)
        n_finished = torch.zeros(num_segments + 1, dtype=torch.int64)  # (K+1,)
        for (k, _), grade in zip(finished, grades[:-1], strict=True):
            correct[k] += grade.reward
            n_finished[k] += 1
        n_truncated = torch.zeros(num_segments + 1, dtype=torch.int64)  # (K+1,)
        n_truncated[:num_segments] = n - n_finished[:num_segments]
        n_used = n_finished.clone() if cfg.truncation == "drop" else n_truncated + n_finished
        values = torch.full((num_segments + 1,), math.nan, dtype=torch.float64)  # (K+1,)
        has = n_used > 0
        values[has] = correct[has] / n_used[has]
        values[num_segments] = reward  # V̂(s_K) := R
        total = num_segments * n
        truncated = int(n_truncated.sum())
        n_dropped = truncated if cfg.truncation == "drop" else 0
        tokens = sum(c.num_tokens for row in rows for c in row)
        out.append(
            MCValues(
                values=values,
                n_used=n_used,
                n_truncated=n_truncated,
                reward=reward,
                n_rollouts=n,
                truncation=cfg.truncation,
                n_dropped=n_dropped,
                drop_rate=n_dropped / total if total else 0.0,
                truncation_rate=truncated / total if total else 0.0,
                forward_tokens=tokens,
                seconds=seconds * tokens / total_tokens if total_tokens else 0.0,
            )
        )
    return out


def mc_segment_credit(values: torch.Tensor | Sequence[float], reward: float) -> torch.Tensor:
    """σ_k = V̂(s_k) − V̂(s_{k−1}), k = 1 … K, with V̂(s_K) := R; Σ_k σ_k = R − V̂(s_0).

    values: (K+1,) V̂(s_0) … V̂(s_K) (the last entry is replaced by R). Returns sigma (K,) float64.
    NaN values propagate: σ_k is NaN when V̂(s_k) or V̂(s_{k−1}) is (see the module docstring).
    The terminal correction of `rredcot.credit.redistribution.terminal_credit`, on MC values.
    """
    return terminal_credit(values, reward)


__all__ = [
    "TRUNCATION",
    "MCConfig",
    "MCValues",
    "grade_texts",
    "mc_segment_credit",
    "mc_state_values",
    "mc_state_values_batch",
    "MCTrace",
    "token_to_char_boundaries",
]
