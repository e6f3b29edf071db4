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


REQUIRE_MIRROR_ENV = "RREDCOT_REQUIRE_MIRROR"
"""Set to 1 (CI does), a missing benchmark mirror fails the tests that need it instead of
skipping them, so a run can never pass by skipping."""


def mirror_dir() -> Path:
    """Where the tests look for the benchmark mirror: the environment variable RREDCOT_MIRROR,
    else config.yaml's `data.mirror` (relative to the repository root, where the README runs
    pytest and Snakemake)."""
    import yaml

    env = os.environ.get("RREDCOT_MIRROR", "").strip()
    if env:
        return Path(env).expanduser()
    configured = yaml.safe_load((REPO / "config.yaml").read_text())["data"]["mirror"]
    return REPO / str(configured)


def missing_mirror(what: str) -> None:
    """Skip (or, with RREDCOT_REQUIRE_MIRROR=1, fail) a test that needs `what` of the mirror."""
    reason = (
        f"{what} not found: this test needs the benchmark mirror (set the environment variable "
        "RREDCOT_MIRROR, or config.yaml's data.mirror, to a directory of <dataset>.jsonl files)"
    )
    if os.environ.get(REQUIRE_MIRROR_ENV, "").strip() == "1":
        pytest.fail(f"{reason}; {REQUIRE_MIRROR_ENV}=1 makes a missing mirror a failure")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def mirror() -> Path:
    """The offline benchmark mirror (`mirror_dir`); a test that asks for it is skipped when it
    is absent, and fails when RREDCOT_REQUIRE_MIRROR=1. Only tests that read real benchmark
    rows ask for it: the synthetic world, the smoke DAG and the dry runs need none."""
    path = mirror_dir()
    if not path.is_dir():
        missing_mirror(f"the benchmark mirror {path}")
    return path


@pytest.fixture(scope="session")
def mirror_file(mirror: Path) -> Callable[[str], Path]:
    """`mirror_file(name)`: `<mirror>/<name>.jsonl`, skipped or failed like `mirror` when the
    mirror lacks it."""

    def find(name: str) -> Path:
        path = mirror / f"{name}.jsonl"
        if not path.is_file():
            missing_mirror(f"the mirror file {path}")
        return path

    return find


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


@pytest.fixture(scope="session")
def hand_set_lm() -> Callable[..., Any]:
    """A factory of policies whose next-token distribution is set by hand: a Qwen3 (the real
    class, so `generate`, the HF backend and scoring run their own code) whose attention and MLP
    outputs are zero, so the logits depend on the last token alone, a bigram table:

        build(tokenizer, table, rest=-1e4): table[prev][next] = logit of `next` after token
        `prev` (ids; key None: after any other token); every other next token gets `rest`.

    -1e4 is probability 0 in float32, and no Gumbel draw lifts it to the argmax, so what the
    policy can and cannot sample is known exactly (e.g. never EOS: a rollout must run to its
    budget). The embedding of a listed token is its own unit vector, of the rest the first one;
    the lm_head column of that vector holds the row's logits, divided by what the final RMSNorm
    multiplies a unit vector by."""

    def build(tokenizer: Any, table: dict[int | None, dict[int, float]], rest: float = -1e4):
        import torch
        from transformers import Qwen3Config, Qwen3ForCausalLM

        listed = [prev for prev in table if prev is not None]
        hidden = 8 * (len(listed) // 8 + 1)  # a slot per listed token, slot 0 for the rest
        config = Qwen3Config(
            vocab_size=len(tokenizer),
            hidden_size=hidden,
            intermediate_size=8,
            num_hidden_layers=1,
            num_attention_heads=1,
            num_key_value_heads=1,
            head_dim=8,
            max_position_embeddings=512,
            tie_word_embeddings=False,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        model = Qwen3ForCausalLM(config).eval()
        vocab = config.vocab_size
        scale = (1 / hidden + config.rms_norm_eps) ** -0.5  # RMSNorm of a unit vector, weight 1
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
            embed = torch.zeros(vocab, hidden)
            embed[:, 0] = 1.0
            head = torch.full((vocab, hidden), 0.0)
            head[:, 0] = rest
            for slot, prev in enumerate(listed, start=1):
                embed[prev] = 0.0
                embed[prev, slot] = 1.0
                head[:, slot] = rest
                for nxt, logit in table[prev].items():
                    head[nxt, slot] = logit
            for nxt, logit in table.get(None, {}).items():
                head[nxt, 0] = logit
            model.model.embed_tokens.weight.copy_(embed)
            model.model.norm.weight.fill_(1.0)
            model.lm_head.weight.copy_(head / scale)
        return model

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
