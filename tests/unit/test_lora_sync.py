"""LoRA weight sync (rredcot.training.lora.exact_unmerge): 100 of TRL's vLLM syncs leave a bf16
base exactly as it was, where peft's own merge/unmerge drifts."""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch
from trl.generation.vllm_generation import VLLMGeneration

from rredcot.models.loading import load_model
from rredcot.training.lora import exact_unmerge

SYNCS = 100


def sync(model) -> dict[str, torch.Tensor]:
    """One weight sync as TRL's colocated vLLM does it (`_iter_named_params`: merge the
    adapter, read every weight, unmerge), on one process: the weights vLLM would receive."""
    engine = SimpleNamespace(
        model=model,
        _dist=SimpleNamespace(gather_params=lambda params: nullcontext(), is_fsdp=False),
        _fix_param_name_to_vllm=lambda name, extra_prefixes=None: name,
    )
    return {name: w.clone() for name, w in VLLMGeneration._iter_named_params(engine)}


def base_weights(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if ".lora_" not in n}


@pytest.fixture
def adapted(tiny_checkpoint, with_lora):
    """A bf16 base with a LoRA adapter whose B is not zero (what a trained adapter looks like)."""
    return with_lora(load_model(tiny_checkpoint("lora_sync"), dtype="bfloat16"))


def test_peft_merge_and_unmerge_drift_in_bf16(adapted):
    """The control: peft's unmerge subtracts in bf16, and the base moves."""
    before = base_weights(adapted)
    for _ in range(SYNCS):
        sync(adapted)
    after = base_weights(adapted)
    assert any(not torch.equal(after[n], w) for n, w in before.items())


def test_exact_unmerge_leaves_the_base_unchanged_after_every_sync(adapted):
    before = base_weights(adapted)
    first = None
    exact_unmerge(adapted)
    for _ in range(SYNCS):
        sent = sync(adapted)
        first = first or sent
        assert all(torch.equal(sent[n], w) for n, w in first.items())  # vLLM gets the same
        assert not any(layer.merged for layer in adapted.modules() if hasattr(layer, "merged"))
    after = base_weights(adapted)
    assert all(torch.equal(after[n], w) for n, w in before.items())
    # vLLM received base ⊕ adapter (peft's safe merge rounds ΔW to bf16 before adding it)
    merged = adapted.merge_and_unload().state_dict()
    base = {n.removeprefix("base_model.model.").replace(".base_layer", ""): w
            for n, w in before.items()}  # fmt: skip
    assert any(not torch.equal(first[n], w) for n, w in base.items())
    for name, w in first.items():
        torch.testing.assert_close(w, merged[name], atol=2**-8, rtol=2**-6)
