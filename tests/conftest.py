"""Shared fixtures: repository paths, the benchmark mirror, one torch thread, the byte tokenizer
and tiny random Qwen3 checkpoints saved the way real ones are."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def mirror() -> Path:
    """The offline benchmark mirror (RREDCOT_MIRROR, else ../shared/data/benchmarks)."""
    path = Path(os.environ.get("RREDCOT_MIRROR") or REPO.parent / "shared" / "data" / "benchmarks")
    if not path.is_dir():
        pytest.skip(f"benchmark mirror not found at {path} (set RREDCOT_MIRROR)")
    return path


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """One torch thread for a module (tiny models run fastest so; the machine is shared).
    Modules opt in with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    """The byte-level tokenizer, fresh per module."""
    from rredcot.models.tokenizer import build_byte_tokenizer

    return build_byte_tokenizer()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """A factory of checkpoint dirs (config, weights, byte tokenizer) of a tiny random Qwen3:
    2 layers, hidden 32, weights from `torch.manual_seed(0)`. `max_position_embeddings` and
    `generation_config` (attributes set on the saved generation config) vary per caller; every
    call builds and saves afresh, so the global torch RNG ends where the caller's own build left
    it."""

    def build(
        name: str,
        max_position_embeddings: int = 256,
        generation_config: dict[str, Any] | None = None,
    ) -> Path:
        import torch
        from transformers import Qwen3Config, Qwen3ForCausalLM

        from rredcot.models.tokenizer import build_byte_tokenizer

        tokenizer = build_byte_tokenizer()
        config = Qwen3Config(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            head_dim=16,
            max_position_embeddings=max_position_embeddings,
            tie_word_embeddings=True,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        torch.manual_seed(0)
        model = Qwen3ForCausalLM(config)
        for key, value in (generation_config or {}).items():
            setattr(model.generation_config, key, value)
        path = tmp_path_factory.mktemp(name)
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        return path

    return build
