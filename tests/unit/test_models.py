"""Tiny Qwen3 construction, loading by path, and the SFT warm-up (rredcot.models)."""

from __future__ import annotations

import math

import huggingface_hub.constants
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rredcot.models.loading import load_model, load_tokenizer
from rredcot.models.sft import (
    SFTSettings,
    TransitionAnneal,
    build_sft_trainer,
    reference_fit,
    run_sft,
)
from rredcot.models.tiny import (
    ALLOWED_ARCH_KEYS,
    DEFAULT_TINY_ARCH,
    build_tiny_model,
    tiny_config,
)
from rredcot.models.tokenizer import build_byte_tokenizer

SMALL_ARCH = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
}

EXAMPLES = [
    {"prompt": "Q: 2+3\nA: ", "completion": "5"},
    {"prompt": "Q: 4+4\nA: ", "completion": "8"},
    {"prompt": "Q: 1+6\nA: ", "completion": "7"},
    {"prompt": "Q: 3+3\nA: ", "completion": "6"},
]


@pytest.fixture(scope="module")
def tokenizer():
    return build_byte_tokenizer()


def completion_nll(model, tokenizer, examples) -> float:
    """Mean NLL per completion token (EOS included), computed independently of TRL."""
    total, count = 0.0, 0
    with torch.no_grad():
        for ex in examples:
            prompt_ids = tokenizer(ex["prompt"])["input_ids"]
            completion_ids = tokenizer(ex["completion"])["input_ids"] + [tokenizer.eos_token_id]
            ids = torch.tensor([prompt_ids + completion_ids])
            logprobs = model(ids).logits[0, :-1].log_softmax(-1)
            targets = ids[0, 1:]
            token_lp = logprobs.gather(-1, targets[:, None])[:, 0]
            total -= token_lp[len(prompt_ids) - 1 :].sum().item()
            count += len(completion_ids)
    return total / count


# --- tiny.py ---------------------------------------------------------------------------------


def test_config_from_dict_takes_sizes_and_token_ids(tokenizer):
    config = tiny_config(
        {**SMALL_ARCH, "rope_theta": 5000.0, "max_position_embeddings": 64}, tokenizer
    )
    assert config.hidden_size == 32 and config.num_hidden_layers == 1
    assert config.num_key_value_heads == 1 and config.head_dim == 16
    assert config.rope_parameters["rope_theta"] == 5000.0
    assert config.max_position_embeddings == 64
    assert config.vocab_size == len(tokenizer) == 259
    assert (config.pad_token_id, config.bos_token_id, config.eos_token_id) == (256, 257, 258)


def test_config_unknown_key_names_it_and_the_allowed_keys(tokenizer):
    with pytest.raises(ValueError, match="hiden_size") as info:
        tiny_config({**SMALL_ARCH, "hiden_size": 8}, tokenizer)
    assert all(key in str(info.value) for key in ALLOWED_ARCH_KEYS)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"num_hidden_layers": None}, "num_hidden_layers"),  # removed below
        ({"hidden_size": 0}, "hidden_size"),
        ({"head_dim": 8.0}, "head_dim"),
        ({"num_key_value_heads": 3, "num_attention_heads": 4}, "num_key_value_heads"),
    ],
)
def test_config_rejects_bad_sizes(tokenizer, change, field):
    arch = {**SMALL_ARCH, **change}
    if change.get("num_hidden_layers", 0) is None:
        del arch["num_hidden_layers"]
    with pytest.raises(ValueError, match=field):
        tiny_config(arch, tokenizer)


def test_same_seed_same_weights_and_global_rng_untouched(tokenizer):
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a = build_tiny_model(SMALL_ARCH, tokenizer, seed=7)
    assert torch.equal(torch.rand(1), expected_next)
    b = build_tiny_model(SMALL_ARCH, tokenizer, seed=7)
    c = build_tiny_model(SMALL_ARCH, tokenizer, seed=8)
    pa, pb, pc = (torch.cat([p.flatten() for p in m.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb)
    assert not torch.equal(pa, pc)


def test_default_arch_takes_a_benchmark_length_prompt(tokenizer):
    """An AIME-length problem (~2 kB, one token per byte) plus a generation must fit."""
    model = build_tiny_model({**DEFAULT_TINY_ARCH, "num_hidden_layers": 1}, tokenizer, seed=0)
    assert model.config.max_position_embeddings >= 4096
    ids = tokenizer("Let $x$ be a real number. " * 80, return_tensors="pt")
    assert ids["input_ids"].shape[1] > 2000
    out = model.generate(**ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == ids["input_ids"].shape[1] + 4


# --- loading.py ------------------------------------------------------------------------------


def test_save_and_reload_gives_identical_logits(tokenizer, tmp_path):
    model = build_tiny_model(SMALL_ARCH, tokenizer, seed=0)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    reloaded = load_model(tmp_path)
    reloaded_tok = load_tokenizer(str(tmp_path))
    batch = reloaded_tok(["a prompt", "another, longer prompt"], return_tensors="pt", padding=True)
    assert reloaded_tok.padding_side == "left"
    assert batch["attention_mask"][0, 0] == 0  # the short prompt is padded on the left
    with torch.no_grad():
        expected = model(**batch).logits
        got = reloaded(**batch).logits
    assert not reloaded.training
    assert torch.equal(expected, got)


def test_tokenizer_pad_falls_back_to_eos(tokenizer, tmp_path):
    no_pad = build_byte_tokenizer()
    no_pad.pad_token = None
    no_pad.padding_side = "right"
    no_pad.save_pretrained(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert loaded.pad_token == loaded.eos_token == "<|eos|>"
    assert loaded.padding_side == "left"


def test_load_model_rejects_unknown_dtype(tmp_path):
    with pytest.raises(ValueError, match="dtype"):
        load_model(tmp_path, dtype="float8")


def test_missing_local_path_is_a_clear_error(tmp_path):
    missing = tmp_path / "no_such_checkpoint"
    with pytest.raises(OSError, match="local path does not exist"):
        load_model(missing)


def test_unreachable_hub_id_names_the_id_and_suggests_a_local_path(monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(OSError, match="rredcot-test/no-such-model") as info:
        load_model("rredcot-test/no-such-model")
    assert "local directory" in str(info.value)


# --- sft.py ----------------------------------------------------------------------------------


def test_prompt_tokens_carry_no_loss(tokenizer, tmp_path):
    model = build_tiny_model(SMALL_ARCH, tokenizer, seed=0)
    settings = SFTSettings(max_steps=1, batch_size=2, max_length=64, anneal_steps=None)
    trainer = build_sft_trainer(model, tokenizer, EXAMPLES, settings, tmp_path)
    for ex, row in zip(EXAMPLES, trainer.train_dataset, strict=True):
        n_prompt = len(tokenizer(ex["prompt"])["input_ids"])
        expected_completion = tokenizer(ex["completion"])["input_ids"] + [tokenizer.eos_token_id]
        assert row["labels"][:n_prompt] == [-100] * n_prompt
        assert row["labels"][n_prompt:] == expected_completion
        assert row["input_ids"][n_prompt:] == expected_completion


def test_run_sft_lowers_completion_loss_and_saves_a_loadable_checkpoint(tokenizer, tmp_path):
    torch.set_num_threads(1)
    model = build_tiny_model(SMALL_ARCH, tokenizer, seed=0)
    before = completion_nll(model, tokenizer, EXAMPLES)
    settings = SFTSettings(
        max_steps=40,
        batch_size=4,
        learning_rate=1e-2,
        warmup_ratio=0.0,
        logging_steps=10,
        anneal_steps=None,
    )
    metrics = run_sft(model, tokenizer, EXAMPLES, settings, tmp_path / "sft")
    after = completion_nll(model, tokenizer, EXAMPLES)
    assert after < 0.5 * before
    assert metrics["train/steps"] == 40
    assert metrics["loss/final"] < metrics["loss/first"]
    assert metrics["time/sft_seconds"] > 0 and metrics["time/tokens_per_second"] > 0
    assert (
        sorted(p.name for p in (tmp_path / "sft").iterdir() if p.name.startswith("checkpoint"))
        == []
    )
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "sft")
    reloaded_tok = AutoTokenizer.from_pretrained(tmp_path / "sft")
    assert reloaded_tok.eos_token_id == tokenizer.eos_token_id
    assert completion_nll(reloaded, reloaded_tok, EXAMPLES) == pytest.approx(after, rel=1e-5)


@pytest.mark.parametrize(
    ("examples", "match"),
    [
        ([], "empty"),
        ([{"prompt": "Q", "answer": "x"}], "example 0: 'completion'"),
        ([EXAMPLES[0], {"prompt": "Q" * 100, "completion": "5"}], "example 1: 102 tokens"),
    ],
)
def test_run_sft_rejects_bad_examples(tokenizer, tmp_path, examples, match):
    model = build_tiny_model(SMALL_ARCH, tokenizer, seed=0)
    with pytest.raises(ValueError, match=match):
        run_sft(
            model,
            tokenizer,
            examples,
            SFTSettings(max_steps=1, max_length=64, anneal_steps=None),
            tmp_path,
        )


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_steps", 0), ("warmup_ratio", 1.0), ("lr_scheduler", "cosine_typo"), ("batch_size", 1.5)],
)
def test_settings_name_the_bad_field(field, value):
    with pytest.raises(ValueError, match=f"sft.{field}"):
        SFTSettings(**{field: value})


# --- held-out check and the anneal after the transition ------------------------------------


def test_reference_fit_matches_an_independent_computation(tokenizer):
    torch.manual_seed(0)
    model = build_tiny_model(SMALL_ARCH, tokenizer, seed=3)
    fit = reference_fit(model, tokenizer, EXAMPLES, batch_size=3)
    nll = completion_nll(model, tokenizer, EXAMPLES)
    assert fit["heldout/nll_per_token"] == pytest.approx(nll, rel=1e-5)
    probs = []
    for ex in EXAMPLES:  # π(completion ⊕ EOS | prompt), one example at a time
        n_tokens = len(tokenizer(ex["completion"])["input_ids"]) + 1
        probs.append(math.exp(-completion_nll(model, tokenizer, [ex]) * n_tokens))
    assert fit["heldout/p_reference"] == pytest.approx(sum(probs) / len(probs), rel=1e-4)
    greedy = 0
    for ex in EXAMPLES:  # every completion token (and the EOS) the argmax, teacher-forced
        prompt = tokenizer(ex["prompt"])["input_ids"]
        target = tokenizer(ex["completion"])["input_ids"] + [tokenizer.eos_token_id]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + target])).logits[0]
        greedy += logits[len(prompt) - 1 : -1].argmax(-1).tolist() == target
    assert fit["heldout/greedy"] == greedy / len(EXAMPLES)


def test_reference_fit_greedy_share_of_a_policy_with_a_known_argmax(tokenizer, hand_set_lm):
    """A hand-set policy: after "A: " it writes "5", after "5" or "8" EOS (probability 1 each).
    Of the four examples only "5" is its greedy output: greedy share 1/4, π(reference) 1 for it
    and 0 for the rest. With `alternatives` allowing "5" where example 1 has "8", that example
    is greedy too: 1/2."""
    (space,), (five,), (eight,) = (tokenizer(c)["input_ids"] for c in " 58")
    eos = tokenizer.eos_token_id
    policy = hand_set_lm(tokenizer, {space: {five: 2.0}, five: {eos: 2.0}, eight: {eos: 2.0}})
    fit = reference_fit(policy, tokenizer, EXAMPLES)
    assert fit["heldout/greedy"] == 0.25
    assert fit["heldout/p_reference"] == pytest.approx(0.25)
    alternatives = [EXAMPLES[0], {**EXAMPLES[1], "alternatives": {0: "85"}}, *EXAMPLES[2:]]
    assert reference_fit(policy, tokenizer, alternatives)["heldout/greedy"] == 0.5


def test_reference_fit_greedy_share_is_one_for_a_memorized_set(tokenizer, tmp_path):
    torch.set_num_threads(1)
    model = build_tiny_model(SMALL_ARCH, tokenizer, seed=0)
    settings = SFTSettings(
        max_steps=60, batch_size=4, learning_rate=1e-2, warmup_ratio=0.0, anneal_steps=None
    )
    run_sft(model, tokenizer, EXAMPLES, settings, tmp_path / "sft")
    fit = reference_fit(model, tokenizer, EXAMPLES)
    assert fit["heldout/greedy"] == 1.0 and fit["heldout/p_reference"] > 0.5


def test_anneal_factor_warms_up_holds_then_decays(tokenizer):
    settings = SFTSettings(max_steps=100, warmup_ratio=0.1, anneal_steps=20)
    anneal = TransitionAnneal(tokenizer, EXAMPLES, settings)
    assert anneal.factor(0) == pytest.approx(1 / 11) and anneal.factor(9) == pytest.approx(10 / 11)
    assert anneal.factor(10) == 1.0 and anneal.factor(99) == 1.0  # no transition found yet
    anneal.anneal_start = 40
    assert anneal.factor(40) == 1.0
    assert anneal.factor(50) == pytest.approx(0.5)
    assert anneal.factor(60) == pytest.approx(0.0) and anneal.factor(70) == pytest.approx(0.0)


def test_run_sft_anneals_after_the_transition_and_stops(tokenizer, tmp_path):
    """A memorizable set crosses `transition_greedy` at some check; the run then anneals for
    exactly anneal_steps more steps and stops, its learning rate ending at 0."""
    torch.set_num_threads(1)
    model = build_tiny_model(SMALL_ARCH, tokenizer, seed=0)
    settings = SFTSettings(
        max_steps=400, batch_size=4, learning_rate=1e-2, warmup_ratio=0.0, eval_steps=10,
        anneal_steps=15, transition_greedy=1.0,
    )  # fmt: skip
    metrics = run_sft(model, tokenizer, EXAMPLES, settings, tmp_path / "sft", heldout=EXAMPLES)
    start = metrics["train/transition_step"]
    assert start is not None and start % 10 == 0
    assert metrics["train/steps"] == start + 15
    history = metrics["heldout_history"]
    assert history[-1]["step"] == start + 15 and history[-1]["heldout/greedy"] == 1.0


def test_anneal_needs_held_out_examples(tokenizer, tmp_path):
    model = build_tiny_model(SMALL_ARCH, tokenizer, seed=0)
    with pytest.raises(ValueError, match="anneal_steps"):
        run_sft(model, tokenizer, EXAMPLES, SFTSettings(max_steps=5, anneal_steps=2), tmp_path)
    with pytest.raises(ValueError, match="anneal_steps"):
        SFTSettings(max_steps=5, anneal_steps=5)
