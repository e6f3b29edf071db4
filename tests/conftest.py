"""Shared fixtures: repository paths, the benchmark mirror, one torch thread, the byte tokenizer,
tiny random Qwen3 checkpoints saved the way real ones are, and a fake vllm package."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(autouse=True)
def _restore_environ() -> Iterator[None]:
    """Every test leaves os.environ as it found it: TRL's vLLM colocate mode sets RANK,
    WORLD_SIZE, MASTER_ADDR/PORT on init, and a later test's subprocess (a training run that is
    killed and resumed) would inherit them and try to join a process group that is not there."""
    saved = dict(os.environ)
    yield
    for key in set(os.environ) - set(saved):
        del os.environ[key]
    os.environ.update(saved)


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
def with_lora() -> Callable[[Any], Any]:
    """Wraps a copy of a model in a LoRA adapter (r 4, alpha 8) whose B is not zero (B starts at
    0, the identity), so base ⊕ adapter computes something the base does not."""

    def adapt(model: Any) -> Any:
        import copy

        import torch
        from peft import get_peft_model

        from rredcot.training.lora import LoraSettings

        torch.manual_seed(0)  # LoRA's A init draws from the global stream
        adapted = get_peft_model(copy.deepcopy(model), LoraSettings(r=4, alpha=8).peft_config())
        with torch.no_grad():
            for name, p in adapted.named_parameters():
                if ".lora_B." in name:
                    generator = torch.Generator().manual_seed(1)
                    p.copy_(0.5 * torch.randn(p.shape, generator=generator))
        return adapted

    return adapt


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


def vllm_output(index, text, token_ids, finish_reason, stop_reason=None, logprobs=None):
    """One vLLM `CompletionOutput` (the fields our backend and TRL read)."""
    steps = None
    if logprobs is not None:
        steps = [  # vLLM's Logprob: the sampled token's log-prob, rank and text
            {t: SimpleNamespace(logprob=lp, rank=1, decoded_token=f"<{t}>")}
            for t, lp in zip(token_ids, logprobs, strict=True)
        ]
    return SimpleNamespace(
        index=index,
        text=text,
        token_ids=token_ids,
        finish_reason=finish_reason,
        stop_reason=stop_reason,
        logprobs=steps,
    )


class FakeVLLM(ModuleType):
    """Stands in for the vllm package: records what `LLM` and `SamplingParams` were given.

    Called as our `VLLMBackend` calls it (text prompts, one SamplingParams per prompt) it answers
    every prompt with n samples that end in EOS. Called as TRL's colocated engine calls it (token
    id prompts, one SamplingParams for all) it answers each prompt with `respond(prompt_ids,
    sampling_kwargs)` (default: [10, EOS]) and records the prompts in `trl_calls`; TRL's weight
    sync lands in `loaded` (parameter names). `vllm.platforms.current_platform.is_cpu()` answers
    `cpu` (a GPU platform by default)."""

    EOS = 2

    def __init__(self) -> None:
        super().__init__("vllm")
        self.llm_kwargs: list[dict] = []
        self.sampling_kwargs: list[dict] = []
        self.trl_calls: list[tuple[list[list[int]], dict]] = []
        self.loaded: list[str] = []
        self.cpu = False
        self.platforms = ModuleType("vllm.platforms")
        self.platforms.current_platform = SimpleNamespace(is_cpu=lambda: fake.cpu)
        self.respond: Callable[[list[int], dict], list[int]] = lambda ids, kw: [10, fake.EOS]
        fake = self

        class LLM:
            def __init__(self, **kwargs) -> None:
                fake.llm_kwargs.append(kwargs)
                model = SimpleNamespace(load_weights=lambda w: fake.loaded.extend(n for n, _ in w))
                runner = SimpleNamespace(model_runner=SimpleNamespace(model=model))
                self.llm_engine = SimpleNamespace(
                    model_executor=SimpleNamespace(driver_worker=runner)
                )

            def get_tokenizer(self) -> SimpleNamespace:
                return SimpleNamespace(eos_token_id=fake.EOS)

            def reset_prefix_cache(self) -> None:
                pass

            def generate(self, prompts, sampling_params, use_tqdm=True) -> list:
                if isinstance(sampling_params, dict):  # TRL: token ids, one SamplingParams
                    ids = [list(p["prompt_token_ids"]) for p in prompts]
                    fake.trl_calls.append((ids, sampling_params))
                    outs = []
                    for x in ids:
                        tokens = list(fake.respond(x, sampling_params))
                        lp = [-1.0] * len(tokens)
                        out = vllm_output(0, "", tokens, "stop", None, lp)
                        outs.append(SimpleNamespace(prompt_token_ids=x, outputs=[out]))
                    return outs
                assert len(sampling_params) == len(prompts)
                return [
                    SimpleNamespace(  # a RequestOutput carries its prompt (text and ids)
                        prompt=prompts[p],
                        prompt_token_ids=list(prompts[p].encode()),
                        outputs=[
                            vllm_output(
                                s, f"p{p}s{s}", [10 + s, fake.EOS], "stop", None, [-0.5, -0.1]
                            )
                            for s in range(sp["n"])
                        ],
                    )
                    for p, sp in enumerate(sampling_params)
                ]

        def sampling_params(**kwargs) -> dict:
            fake.sampling_kwargs.append(kwargs)
            return kwargs

        self.LLM = LLM
        self.SamplingParams = sampling_params


@pytest.fixture()
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> FakeVLLM:
    """The fake vllm package, importable as `vllm` and installed where TRL's engine looks."""
    # TRL first: its import looks vllm up with importlib.util.find_spec, which fails on a module
    # without a spec (a real vllm has one)
    from trl.generation import vllm_generation

    fake = FakeVLLM()
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setitem(sys.modules, "vllm.platforms", fake.platforms)

    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(vllm_generation, "LLM", fake.LLM, raising=False)
    monkeypatch.setattr(vllm_generation, "SamplingParams", fake.SamplingParams, raising=False)
    return fake
