"""The embedded default's policy: a tiny Qwen3-architecture model trained from scratch on the CPU.

It is the real `Qwen3ForCausalLM` class with small sizes, so every later stage (generation,
scoring, TRL training, `save_pretrained`/`from_pretrained`) runs the same code path as a Hub
model. Sizes come from the config's `model.arch` mapping; token ids come from the tokenizer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase, Qwen3Config, Qwen3ForCausalLM

from rredcot.models.arch import ALLOWED_ARCH_KEYS as ALLOWED_ARCH_KEYS
from rredcot.models.arch import OPTIONAL_ARCH_DEFAULTS as OPTIONAL_ARCH_DEFAULTS
from rredcot.models.arch import REQUIRED_ARCH_KEYS as REQUIRED_ARCH_KEYS
from rredcot.models.arch import arch_fields

# The embedded default (config.yaml's `model.arch` repeats it); chosen so that a short SFT on
# the synthetic world gives a competent but imperfect base policy (see the models report).
DEFAULT_TINY_ARCH: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 8192,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}


def tiny_config(arch: Mapping[str, Any], tokenizer: PreTrainedTokenizerBase) -> Qwen3Config:
    """A `Qwen3Config` from `arch`; vocab size and pad/bos/eos ids come from `tokenizer`.

    Raises ValueError for an unknown or missing key, or for sizes that do not fit together.
    """
    fields = arch_fields(arch)
    if tokenizer.eos_token_id is None:
        raise ValueError("tokenizer: has no eos token; the policy must be able to stop")
    pad_id = (
        tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    )
    rope_theta = float(fields.pop("rope_theta"))
    return Qwen3Config(
        **fields,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
        vocab_size=len(tokenizer),
        pad_token_id=pad_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        use_sliding_window=False,
        dtype="float32",
    )


def build_tiny_model(
    arch: Mapping[str, Any], tokenizer: PreTrainedTokenizerBase, seed: int
) -> Qwen3ForCausalLM:
    """A randomly initialised Qwen3 model; the same `seed` gives the same weights.

    The global torch RNG is forked, so building a model does not disturb the caller's seeds.
    """
    config = tiny_config(arch, tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config.pad_token_id = config.pad_token_id
    model.generation_config.bos_token_id = config.bos_token_id
    model.generation_config.eos_token_id = config.eos_token_id
    return model.float().eval()


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct trainable parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())
