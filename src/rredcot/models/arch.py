"""The tiny model's `model.arch` keys and the rules its sizes follow, apart from transformers:
the config check at Snakemake load time applies them without importing torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Shape keys every `model.arch` must give: they decide parameter count and speed.
REQUIRED_ARCH_KEYS: tuple[str, ...] = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
)

# Optional keys and their defaults. RoPE has no learned positions, so a long context is free;
# 8192 byte tokens cover the longest benchmark problem (~1.7 kB) plus a long generation.
OPTIONAL_ARCH_DEFAULTS: dict[str, Any] = {
    "max_position_embeddings": 8192,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "initializer_range": 0.02,
    "attention_bias": False,
    "attention_dropout": 0.0,
}

ALLOWED_ARCH_KEYS: tuple[str, ...] = REQUIRED_ARCH_KEYS + tuple(OPTIONAL_ARCH_DEFAULTS)


def arch_fields(arch: Mapping[str, Any]) -> dict[str, Any]:
    """`arch` with the optional keys' defaults filled in; ValueError (naming the key) for an
    unknown or missing key, or for sizes that do not fit together."""
    unknown = sorted(set(arch) - set(ALLOWED_ARCH_KEYS))
    if unknown:
        raise ValueError(
            f"model.arch: unknown key(s) {unknown}; allowed keys are {list(ALLOWED_ARCH_KEYS)}"
        )
    missing = [key for key in REQUIRED_ARCH_KEYS if key not in arch]
    if missing:
        raise ValueError(f"model.arch: missing required key(s) {missing}")
    fields = {**OPTIONAL_ARCH_DEFAULTS, **arch}
    for key in (*REQUIRED_ARCH_KEYS, "max_position_embeddings"):
        value = fields[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"model.arch.{key}: expected a positive integer, got {value!r}")
    if fields["num_attention_heads"] % fields["num_key_value_heads"]:
        raise ValueError(
            "model.arch.num_key_value_heads: must divide num_attention_heads "
            f"({fields['num_attention_heads']}), got {fields['num_key_value_heads']}"
        )
    return fields
