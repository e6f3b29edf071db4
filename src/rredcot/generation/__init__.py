"""One generation interface, two backends: Hugging Face `generate` (`hf`) and vLLM (`vllm`).

    backend = get_backend("hf", "results/models/sft", batch_size=16)
    completions = backend.generate(prompts, SamplingParams(n=4, temperature=0.6, top_p=0.95))

The config's `backend` key picks the name; nothing else in the workflow depends on it.
"""

from __future__ import annotations

from typing import Any

from rredcot.generation.base import (
    BackendUnavailableError,
    Completion,
    GenerationBackend,
    SamplingParams,
    derive_seed,
)

BACKENDS: tuple[str, ...] = ("hf", "vllm")


def get_backend(name: str, model_name_or_path: str, **options: Any) -> GenerationBackend:
    """Build backend `name` for a hub id or local path; `options` go to its constructor.

    hf: `HFBackend.from_pretrained` (batch_size, show_progress, device, dtype, revision).
    vllm: `VLLMBackend` (tensor_parallel_size, dtype, seed, show_progress, any `vllm.LLM` option).
    """
    if name == "hf":
        from rredcot.generation.hf import HFBackend

        return HFBackend.from_pretrained(model_name_or_path, **options)
    if name == "vllm":
        from rredcot.generation.vllm import VLLMBackend

        return VLLMBackend(model_name_or_path, **options)
    raise ValueError(f"backend: unknown name {name!r}; allowed names are {list(BACKENDS)}")


__all__ = [
    "BACKENDS",
    "BackendUnavailableError",
    "Completion",
    "GenerationBackend",
    "SamplingParams",
    "derive_seed",
    "get_backend",
]
