"""How long a vLLM context the runs need, and whether one sequence of it fits vLLM's memory.

Left unset, vLLM sizes its KV cache for the model's whole context (262,144 tokens for
Qwen3-4B-Instruct-2507: ~36 GiB in bf16), which a colocated engine's 0.3 × 80 GB share cannot
hold, and the job fails at its first step. So every engine gets `max_model_len` from the config's
lengths (`training_length`, `generation_length`), and the Snakefile refuses, before any job, a
length whose one-sequence KV cache and weights exceed the share (`kv_cache_error`), or a length
set in the config below what its prompts and longest budget need (`short_context_error`), naming
the key to change. A job then refuses a prompt longer than the room its context leaves
(`rredcot.planning.prompt_budget`). Torch-free: the Snakefile imports it at load time.

Model dimensions come from the model's config.json when it is on disk, else from `KNOWN_MODELS`
(the paper's models, copied from their config.json on the Hub; no download here).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rredcot.training.method_registry import method_spec

DTYPE_BYTES: Mapping[str, int] = {"bfloat16": 2, "float16": 2, "float32": 4}
GB = 1e9
PROMPT_TOKENS = 1024
"""Default prompt allowance (config `training.max_prompt_tokens`, `evaluation.max_prompt_tokens`):
open-rs's vllm_max_model_len 4608 = 1024 + its 3584-token completions."""


@dataclass(frozen=True)
class ModelDims:
    """What the KV cache and the weights of a decoder take: layers × KV heads × head width per
    token, and the parameter count (weights held by the engine)."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    num_params: int
    source: str

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """Keys and values of every layer for one token."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes


def dims_from_config(cfg: Mapping[str, Any], source: str) -> ModelDims:
    """Dimensions from a Hugging Face config.json mapping (a Qwen2/Qwen3/Llama-style decoder);
    the parameter count is that of its embeddings, attention and gated MLP."""
    hidden, layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    heads = int(cfg["num_attention_heads"])
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    vocab, inter = int(cfg["vocab_size"]), int(cfg["intermediate_size"])
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)  # q, o, k, v
    embeddings = vocab * hidden * (1 if cfg.get("tie_word_embeddings", False) else 2)
    params = embeddings + layers * (attention + 3 * hidden * inter)
    return ModelDims(layers, kv_heads, head_dim, params, source)


def _hub(cfg: dict[str, Any], model: str) -> ModelDims:
    return dims_from_config(cfg, f"config.json of {model} on the Hugging Face Hub")


QWEN3_4B_SHAPE = {
    "hidden_size": 2560,
    "intermediate_size": 9728,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}
"""Qwen3-4B's shape (the config.json of Qwen/Qwen3-4B-Instruct-2507), for when none is fetched."""
_R1_DISTILL_1P5B = {  # Qwen2.5-Math-1.5B's shape
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
}
_QWEN25_0P5B = {  # Qwen/Qwen2.5-0.5B-Instruct (configs/one_gpu.yaml)
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}
KNOWN_CONFIGS: Mapping[str, Mapping[str, Any]] = {
    "Qwen/Qwen3-4B": QWEN3_4B_SHAPE,
    "Qwen/Qwen3-4B-Instruct-2507": QWEN3_4B_SHAPE,
    "Qwen/Qwen3-4B-Thinking-2507": QWEN3_4B_SHAPE,
    "Qwen/Qwen3-4B-Base": QWEN3_4B_SHAPE,
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": _R1_DISTILL_1P5B,
    "Qwen/Qwen2.5-Math-1.5B": _R1_DISTILL_1P5B,
    "Qwen/Qwen2.5-0.5B-Instruct": _QWEN25_0P5B,
    "Qwen/Qwen2.5-0.5B": _QWEN25_0P5B,
}
"""config.json shape fields of the paper configs' models (and their base / sibling checkpoints
of the same shape)."""
KNOWN_MODELS: Mapping[str, ModelDims] = {
    name: _hub(dict(cfg), name) for name, cfg in KNOWN_CONFIGS.items()
}


def model_dims(name_or_path: str | None, local: str | Path | None = None) -> ModelDims | None:
    """The dimensions of `name_or_path`: from `local`/config.json or `name_or_path`/config.json
    when on disk, else `KNOWN_MODELS`; None when neither knows it (the job checks it then)."""
    for directory in (local, name_or_path):
        path = None if directory is None else Path(directory) / "config.json"
        if path is not None and path.is_file():
            return dims_from_config(json.loads(path.read_text()), str(path))
    return KNOWN_MODELS.get(name_or_path) if name_or_path else None


def training_length(values: Mapping[str, Any]) -> int:
    """The context one run's vLLM engine needs (config key `training.vllm_max_model_length`,
    null: this). A prompt (`max_prompt_tokens`) and one response (`max_completion_length` L),
    plus what a method appends to a response's prefix (up to L long): RRPO/SRPO sample a suffix
    of L new tokens after the reset prefix, SRPO's localization reads the whole failed chain and
    writes `resets.localization_max_new_tokens`, MC rolls out `mc.budget` tokens from its late
    states."""
    if values.get("vllm_max_model_length") is not None:
        return int(values["vllm_max_model_length"])
    extra = 0
    for path in method_spec(values["method"]).context_keys:
        value: Any = values
        for key in path.split("."):
            value = value[key]
        extra = max(extra, int(value))
    return values.get("max_prompt_tokens", PROMPT_TOKENS) + values["max_completion_length"] + extra


def generation_length(config: Mapping[str, Any]) -> int:
    """The context the generating jobs' engine (config `evaluation.vllm`) needs: a prompt
    (`evaluation.max_prompt_tokens`) and the longest of the evaluations' and references'
    budgets, and of the studies' traces plus their longest rollout from a late state."""
    ev = config["evaluation"]
    budgets = [ev["max_new_tokens"], config["references"]["max_new_tokens"]]
    budgets += [b["max_new_tokens"] for b in ev["per_benchmark"].values() if "max_new_tokens" in b]
    st = config["studies"]
    if st["enabled"]:
        rollout = max(st["ground_truth"]["budget"], config["estimator"]["mc"]["budget"])
        budgets.append(st["max_new_tokens"] + rollout)
    return ev["max_prompt_tokens"] + max(budgets)


def short_context_error(set_to: int, needs: int, key: str, why: str) -> str | None:
    """Why a context set in the config (`key`, `set_to` tokens) is shorter than what its jobs
    need (`needs`, as `why` says); None when it is long enough (or longer: extra room is the
    user's choice)."""
    if set_to >= needs:
        return None
    return (
        f"config key '{key}': {set_to:,} tokens is less than the {needs:,} its jobs need "
        f"({why}); set it to at least {needs:,}, or null to derive it"
    )


def kv_cache_error(
    dims: ModelDims,
    length: int,
    share: float,
    memory_gb: float,
    dtype: str,
    keys: tuple[str, str],
    memory_from: str = "config key 'devices.memory_gb'",
) -> str | None:
    """Why one sequence of `length` tokens cannot sit in vLLM's `share` of a `memory_gb` GPU
    beside the model's weights (dims × length, in `dtype`), naming `keys` (the length's and the
    share's config keys); None when it fits. vLLM needs the KV cache of one full-length
    sequence at least to start."""
    width = DTYPE_BYTES.get(dtype, 2)
    kv = dims.kv_bytes_per_token(width) * length
    weights = dims.num_params * width
    room = share * memory_gb * GB
    if kv + weights <= room:
        return None
    fits = max(0, int((room - weights) // dims.kv_bytes_per_token(width)))
    return (
        f"config key '{keys[0]}': a {length:,}-token context needs {kv / 2**30:.1f} GiB of KV "
        f"cache per sequence ({dims.num_layers} layers × {dims.num_kv_heads} KV heads × "
        f"{dims.head_dim} × 2 × {width} bytes per token; dims from the {dims.source}) beside "
        f"{weights / 2**30:.1f} GiB of weights, more than the {room / 2**30:.1f} GiB that "
        f"'{keys[1]}' {share} of a {memory_gb:g} GB GPU ({memory_from}) "
        f"gives vLLM; lower '{keys[0]}' to at most {fits:,} tokens or raise '{keys[1]}'"
    )


def generation_engine(config: Mapping[str, Any]) -> dict[str, Any]:
    """`evaluation.vllm` with `max_model_len` filled in (null: `generation_length`) when the
    generating jobs use vLLM; unchanged for the hf backend."""
    engine = dict(config["evaluation"]["vllm"])
    if config["evaluation"]["backend"] == "vllm" and engine.get("max_model_len") is None:
        engine["max_model_len"] = generation_length(config)
    return engine


def context_errors(config: Mapping[str, Any], runs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every vLLM context the config sets (`training.vllm_max_model_length` of a run with vLLM,
    `evaluation.vllm.max_model_len` under backend vllm) that is shorter than its jobs need
    (`short_context_error`); the model's shape does not matter here."""
    errors = []
    for name, values in runs.items():
        if values["use_vllm"] and values.get("vllm_max_model_length") is not None:
            error = short_context_error(
                values["vllm_max_model_length"],
                training_length({**values, "vllm_max_model_length": None}),
                "training.vllm_max_model_length",
                "training.max_prompt_tokens + max_completion_length + the method's own tokens",
            )
            errors += [f"run {name}: {error}"] if error else []
    if config["evaluation"]["backend"] == "vllm":
        error = short_context_error(
            generation_engine(config)["max_model_len"],
            generation_length(config),
            "evaluation.vllm.max_model_len",
            "evaluation.max_prompt_tokens + the longest evaluation, reference or study budget",
        )
        errors += [error] if error else []
    return errors


def config_errors(
    config: Mapping[str, Any],
    runs: Mapping[str, Mapping[str, Any]],
    local_model: str | Path | None = None,
) -> list[str]:
    """The load-time check: every context is long enough (`context_errors`), and every
    colocated training engine (`runs`: run name -> its settings) and the generating jobs'
    engine fit one full-length sequence into their share of a `devices.memory_gb` GPU. The
    memory check is skipped for a model whose shape is unknown here (neither on disk at
    `local_model` or model.name_or_path nor in `KNOWN_MODELS`): the job checks it."""
    errors = context_errors(config, runs)
    dims = model_dims(config["model"]["name_or_path"], local_model)
    if dims is None:
        return errors
    memory = config["devices"]["memory_gb"]
    dtype = config["model"]["dtype"]
    for name, values in runs.items():
        if not values["use_vllm"] or values["vllm_mode"] != "colocate":
            continue
        error = kv_cache_error(
            dims,
            training_length(values),
            values["vllm_gpu_memory_utilization"],
            memory,
            "bfloat16" if values["bf16"] else dtype,
            ("training.vllm_max_model_length", "training.vllm_gpu_memory_utilization"),
        )
        errors += [f"run {name}: {error}"] if error else []
    if config["evaluation"]["backend"] == "vllm":
        engine = generation_engine(config)
        error = kv_cache_error(
            dims,
            engine["max_model_len"],
            engine.get("gpu_memory_utilization") or 0.9,  # vLLM's default
            memory,
            config["evaluation"]["dtype"] or dtype,
            ("evaluation.vllm.max_model_len", "evaluation.vllm.gpu_memory_utilization"),
        )
        errors += [error] if error else []
    return errors
