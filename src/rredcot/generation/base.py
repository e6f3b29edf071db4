"""What every generation backend takes and returns: sampling settings, completions, the protocol.

Two backends implement `GenerationBackend`: Hugging Face `generate` (CPU, tests, the embedded
default) and vLLM (GPU, paper scale). Both cut at the same stop strings, report the same finish
reasons and return the token ids and raw log-probs of the kept text, so every later stage
(grading, scoring, training) sees one format whichever backend produced it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

FinishReason = Literal["stop", "length"]
FINISH_REASONS: tuple[str, ...] = ("stop", "length")


class BackendUnavailableError(RuntimeError):
    """A backend was selected whose package or hardware is missing on this machine."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample: one setting per field, validated on construction.

    `temperature == 0` means greedy decoding (every one of the `n` samples is then identical).
    A completion ends at the end-of-sequence token, right after the first stop string (which is
    kept in the text), or after `max_new_tokens` tokens. `logprobs` asks for the raw
    log pi(token | prefix) of each kept token under the model's own distribution (temperature 1,
    no top-p), the quantity a policy-gradient loss uses; it is vLLM's default `raw_logprobs` too.
    """

    n: int = 1  # samples per prompt
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0  # nucleus mass in (0, 1]; 1 = no truncation
    max_new_tokens: int = 256  # budget per sample, in tokens
    seed: int = 0  # non-negative; per-(prompt, sample) streams are derived from it
    stop_strings: tuple[str, ...] = ()  # generation stops right after the first one
    logprobs: bool = False  # return the raw log-prob of every kept token

    def __post_init__(self) -> None:
        if not _is_int(self.n) or self.n < 1:
            raise ValueError(f"SamplingParams.n: expected an integer >= 1, got {self.n!r}")
        if (
            isinstance(self.temperature, bool)
            or not isinstance(self.temperature, int | float)
            or not math.isfinite(self.temperature)
            or self.temperature < 0
        ):
            raise ValueError(
                "SamplingParams.temperature: expected a finite number >= 0 (0 = greedy), "
                f"got {self.temperature!r}"
            )
        if (
            isinstance(self.top_p, bool)
            or not isinstance(self.top_p, int | float)
            or not 0 < self.top_p <= 1
        ):
            raise ValueError(
                f"SamplingParams.top_p: expected a number in (0, 1], got {self.top_p!r}"
            )
        if not _is_int(self.max_new_tokens) or self.max_new_tokens < 1:
            raise ValueError(
                "SamplingParams.max_new_tokens: expected an integer >= 1, "
                f"got {self.max_new_tokens!r}"
            )
        if not _is_int(self.seed) or self.seed < 0:
            raise ValueError(f"SamplingParams.seed: expected an integer >= 0, got {self.seed!r}")
        if isinstance(self.stop_strings, str) or not isinstance(self.stop_strings, tuple | list):
            raise ValueError(
                "SamplingParams.stop_strings: expected a tuple of non-empty strings, "
                f"got {self.stop_strings!r}"
            )
        bad = [s for s in self.stop_strings if not isinstance(s, str) or not s]
        if bad:
            raise ValueError(
                f"SamplingParams.stop_strings: every entry must be a non-empty string, got {bad!r}"
            )
        object.__setattr__(self, "stop_strings", tuple(self.stop_strings))
        if not isinstance(self.logprobs, bool):
            raise ValueError(f"SamplingParams.logprobs: expected a bool, got {self.logprobs!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class Completion:
    """One sampled response to prompt `prompt_index` (its `sample_index`-th sample).

    `token_ids` are the generated tokens of the kept text: no prompt, no padding, no
    end-of-sequence token; with a stop string they end with the token that completes it.
    `text` is their decoding (special tokens skipped), cut right after the stop string.
    """

    prompt_index: int
    sample_index: int
    text: str
    token_ids: list[int]
    finish_reason: FinishReason
    num_tokens: int
    logprobs: list[float] | None = None  # raw log pi of each entry of token_ids

    def __post_init__(self) -> None:
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(
                f"Completion.finish_reason: expected one of {list(FINISH_REASONS)}, "
                f"got {self.finish_reason!r}"
            )
        if self.num_tokens != len(self.token_ids):
            raise ValueError(
                f"Completion.num_tokens: {self.num_tokens} != len(token_ids) "
                f"{len(self.token_ids)} (prompt {self.prompt_index}, sample {self.sample_index})"
            )
        if self.logprobs is not None and len(self.logprobs) != len(self.token_ids):
            raise ValueError(
                f"Completion.logprobs: {len(self.logprobs)} values for {len(self.token_ids)} "
                f"tokens (prompt {self.prompt_index}, sample {self.sample_index})"
            )


class GenerationBackend(Protocol):
    """Samples `params.n` completions for every prompt.

    The result is ordered by (prompt_index, sample_index) and has len(prompts) * n entries.
    """

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Completion]: ...


def derive_seed(seed: int, *indices: int) -> int:
    """A 63-bit seed for one stream, e.g. (seed, prompt_index, sample_index).

    A hash, not arithmetic, so that nearby (seed, index) pairs never share or overlap streams.
    """
    key = ",".join(str(int(i)) for i in (seed, *indices)).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
