"""One generation interface, two backends: Hugging Face `generate` (`hf`) and vLLM (`vllm`).

    backend = get_backend("hf", "results/models/sft", batch_size=16)
    completions = backend.generate(prompts, SamplingParams(n=4, temperature=0.6, top_p=0.95))

The config's `backend` key picks the name; nothing else in the workflow depends on it. Steps
build their backend with `backend_from_settings`, the one place that turns a step's settings
(`backend`, `seed`, `dtype`, `device`, `vllm`, `batch_size`) into constructor options.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from rredcot.generation.base import (
    BackendUnavailableError,
    Completion,
    GenerationBackend,
    SamplingParams,
    derive_seed,
)
from rredcot.generation.vllm_arguments import VLLM_LLM_ARGUMENTS, VLLM_VERSION

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


# `evaluation.vllm` of the config: `vllm.LLM` engine arguments (null = vLLM's own default).
VLLM_DEFAULTS: dict[str, Any] = {
    "tensor_parallel_size": 1,
    "gpu_memory_utilization": 0.9,
    "max_model_len": None,
    "enable_prefix_caching": True,
    "max_num_seqs": None,
}
# Set from the step's own settings, so a copy in `evaluation.vllm` would be a second source.
_VLLM_RESERVED = ("model", "seed", "dtype")
DEFAULT_BATCH_SIZE = 64  # evaluation.batch_size's default


def backend_from_settings(
    settings: Mapping[str, Any],
    policy: str,
    *,
    batch_size: int | None = None,
    show_progress: bool = True,
) -> GenerationBackend:
    """The generation backend a step's `--params` select, on checkpoint or Hub id `policy`.

    Reads `backend` (required), `seed` (vLLM engine seed; default 0), `dtype` (null or absent:
    the checkpoint's own, "auto"), `device` (hf only; "auto", null or absent: CUDA if present,
    else CPU), `vllm` (mapping of `vllm.LLM` engine arguments over `VLLM_DEFAULTS`; other
    engine arguments go to `vllm.LLM` unchanged, null values are left to vLLM) and `batch_size`
    (hf sequences per `generate` call; the `batch_size` argument wins, then DEFAULT_BATCH_SIZE).
    One function for every step, so `generate`, references and the studies cannot drift apart.
    """
    if "backend" not in settings:
        raise ValueError("settings: missing 'backend' (evaluation.backend)")
    name = settings["backend"]
    dtype = settings.get("dtype") or "auto"
    if name == "hf":
        device = settings.get("device")
        if device is not None and not isinstance(device, str):
            raise ValueError(f"evaluation.device: expected a string such as 'cuda', got {device!r}")
        size = batch_size if batch_size is not None else settings.get("batch_size")
        return get_backend(
            name,
            policy,
            batch_size=DEFAULT_BATCH_SIZE if size is None else size,
            show_progress=show_progress,
            device=None if device in (None, "auto") else device,
            dtype=dtype,
        )
    if name == "vllm":
        return get_backend(
            name,
            policy,
            seed=settings.get("seed", 0),
            dtype=dtype,
            show_progress=show_progress,
            **vllm_options(settings.get("vllm")),
        )
    return get_backend(name, policy)  # raises the unknown-name error


def vllm_block_error(block: Any) -> str | None:
    """What is wrong with an `evaluation.vllm` block, or None: not a mapping, a reserved key, or
    a key that is no `vllm.LLM` argument (`VLLM_LLM_ARGUMENTS`, checked without importing vLLM,
    so a typo fails at load under any backend rather than when the engine starts)."""
    if block is None:
        return None
    if not isinstance(block, Mapping):
        return f"evaluation.vllm: expected a mapping of vllm.LLM engine arguments, got {block!r}"
    bad = [key for key in block if not isinstance(key, str)]
    if bad:
        return f"evaluation.vllm: keys must be strings, got {bad!r}"
    reserved = sorted(key for key in block if key in _VLLM_RESERVED)
    if reserved:
        return (
            f"evaluation.vllm: {reserved} are set from the model path, `seed` and "
            "`evaluation.dtype`; remove them from evaluation.vllm"
        )
    unknown = sorted(key for key in block if key not in VLLM_LLM_ARGUMENTS)
    if unknown:
        hints = [
            f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key)
            for key in unknown
            for close in [difflib.get_close_matches(key, VLLM_LLM_ARGUMENTS, n=1)]
        ]
        return (
            f"evaluation.vllm: {', '.join(hints)} is not a vllm.LLM engine argument "
            f"(vLLM {VLLM_VERSION}'s EngineArgs)"
        )
    return None


def vllm_options(block: Mapping[str, Any] | None) -> dict[str, Any]:
    """`vllm.LLM` keyword arguments of an `evaluation.vllm` block: defaults, then the block,
    without null values (vLLM picks those itself); a bad block is refused (`vllm_block_error`)."""
    error = vllm_block_error(block)
    if error is not None:
        raise ValueError(error)
    merged = {**VLLM_DEFAULTS, **(block or {})}
    return {key: value for key, value in merged.items() if value is not None}


__all__ = [
    "BACKENDS",
    "DEFAULT_BATCH_SIZE",
    "VLLM_DEFAULTS",
    "BackendUnavailableError",
    "Completion",
    "GenerationBackend",
    "SamplingParams",
    "backend_from_settings",
    "derive_seed",
    "get_backend",
    "vllm_block_error",
    "vllm_options",
]
