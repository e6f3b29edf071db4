"""The one-pass Bayes value of OPPO's self-oracle (rredcot.credit.bayes, METHOD.md §8) by hand.

The hand case: a two-token vocabulary {A, B} and a policy that is a mixture of a "success"
and a "failure" process, P(success | x) = 1/2, with π(A | success) = 0.8 and
π(A | failure) = 0.2 at every step. The policy without the oracle predicts the mixture under
its current belief; with the oracle it predicts the success process. The response A A B:

    step  π(z_t | x, z_<t)                 π(z_t | x ⊕ O, z_<t)   posterior P(success | z_≤t)
    1     A: 0.5·0.8 + 0.5·0.2 = 0.5       0.8                    0.8
    2     A: 0.8·0.8 + 0.2·0.2 = 0.68      0.8                    0.64/0.68 = 16/17
    3     B: 16/17·0.2 + 1/17·0.8 = 4/17   0.2                    0.064/0.08 = 0.8

so the recursion p_t = p_0 · exp(Σ r_j) must give back the exact posterior [1/2, 4/5, 16/17, 4/5].
"""

from __future__ import annotations

import math

import pytest
import torch

from rredcot.credit.bayes import (
    OPPOConfig,
    bayes_segment_credit,
    bayes_segment_values,
    bayes_token_advantages,
    bayes_values,
    log_ratios,
    prior_probabilities,
)

PLAIN = [0.5, 0.68, 4 / 17]  # π(z_t | x, z_<t) of A, A, B
ORACLE = [0.8, 0.8, 0.2]  # π(z_t | x ⊕ O, z_<t)
POSTERIOR = [0.5, 0.8, 16 / 17, 0.8]  # P(success | x, z_≤t), t = 0 … 3


def _brute_posterior() -> list[float]:
    """P(success | z_≤t) by Bayes' rule on the two processes, from scratch."""
    out, joint = [], {"s": 0.5, "f": 0.5}
    out.append(joint["s"] / sum(joint.values()))
    for token in "AAB":
        joint["s"] *= 0.8 if token == "A" else 0.2
        joint["f"] *= 0.2 if token == "A" else 0.8
        out.append(joint["s"] / sum(joint.values()))
    return out


def _hand_case(rows: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(r (rows, 3), mask (rows, 3)) of the hand case."""
    oracle = torch.tensor([ORACLE] * rows).log()
    plain = torch.tensor([PLAIN] * rows, dtype=torch.float64).log()
    mask = torch.ones(rows, 3, dtype=torch.long)
    return log_ratios(oracle, plain, mask), mask


def test_the_recursion_is_the_exact_posterior_of_the_hand_case():
    assert _brute_posterior() == pytest.approx(POSTERIOR)
    r, mask = _hand_case()
    assert r[0].tolist() == pytest.approx([math.log(1.6), math.log(0.8 / 0.68), math.log(0.85)])
    p = bayes_values(r, mask, torch.tensor([0.5]))
    assert p.shape == (1, 4)
    assert p[0].tolist() == pytest.approx(POSTERIOR)


def test_clipping_caps_the_closed_form_not_the_running_product():
    """p_t = min(1, p_0·exp(Σ r_j)): a step over 1 does not change the later ones."""
    r = torch.tensor([[math.log(1.6), math.log(1.6), math.log(0.4)]])
    mask = torch.ones(1, 3)
    p = bayes_values(r, mask, torch.tensor([0.5]))
    assert p[0].tolist() == pytest.approx([0.5, 0.8, 1.0, 0.512])
    unclipped = bayes_values(r, mask, torch.tensor([0.5]), clip=False)
    assert unclipped[0].tolist() == pytest.approx([0.5, 0.8, 1.28, 0.512])


@pytest.mark.parametrize("reward", [1.0, 0.0])
def test_token_advantage_delta_by_hand_sums_to_the_return_minus_the_prior(reward):
    r, mask = _hand_case()
    p = bayes_values(r, mask, torch.tensor([0.5]))
    a = bayes_token_advantages(p, r, mask, torch.tensor([reward]))
    # p_1 − p_0, p_2 − p_1, then the outcome replaces p_3: R − p_2
    assert a[0].tolist() == pytest.approx([0.3, 16 / 17 - 0.8, reward - 16 / 17])
    assert float(a.sum()) == pytest.approx(reward - 0.5)


def test_token_advantage_first_order_by_hand():
    r, mask = _hand_case()
    p = bayes_values(r, mask, torch.tensor([0.5]))
    a = bayes_token_advantages(p, r, mask, torch.tensor([1.0]), form="first_order")
    expected = [0.5 * math.log(1.6), 0.8 * math.log(0.8 / 0.68), 1.0 - 16 / 17]
    assert a[0].tolist() == pytest.approx(expected)


def test_segment_values_and_credit_by_hand():
    r, mask = _hand_case()
    p = bayes_values(r, mask, torch.tensor([0.5]))[0]
    assert bayes_segment_values(p, [0, 2, 3]).tolist() == pytest.approx([0.5, 16 / 17, 0.8])
    # σ_1 = V(s_1) − V(s_0); σ_2 = R − V(s_1): V(s_K) is the outcome
    sigma = bayes_segment_credit(p, [0, 2, 3], 0.0)
    assert sigma.tolist() == pytest.approx([16 / 17 - 0.5, -16 / 17])
    assert bayes_segment_credit(p, [0, 3], 1.0).tolist() == pytest.approx([0.5])
    with pytest.raises(ValueError, match="boundaries"):
        bayes_segment_values(p, [0, 2, 4])


def test_padding_masks_and_rows_of_other_lengths():
    """A padded row's p stays at its last value; its advantages past the end are 0; the last
    real token gets the outcome term; a row without tokens gets nothing."""
    r, _ = _hand_case(rows=3)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 0]])
    r = torch.where(mask.bool(), r, torch.full_like(r, float("nan")))  # padding is ignored
    p = bayes_values(r, mask, torch.tensor([0.5, 0.5, 0.25]))
    assert p[1].tolist() == pytest.approx([0.5, 0.8, 16 / 17, 16 / 17])
    assert p[2].tolist() == pytest.approx([0.25] * 4)
    a = bayes_token_advantages(p, torch.nan_to_num(r), mask, torch.tensor([1.0, 0.0, 1.0]))
    assert a[1].tolist() == pytest.approx([0.3, -0.8, 0.0])
    assert a[2].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="right padding"):
        bayes_values(r, torch.tensor([[1, 0, 1]] * 3), torch.tensor([0.5] * 3))


def test_a_prior_of_zero_stays_zero():
    r, mask = _hand_case()
    p = bayes_values(r, mask, torch.tensor([0.0]))
    assert p[0].tolist() == [0.0, 0.0, 0.0, 0.0]


def test_priors_are_the_groups_mean_reward_or_a_half():
    rewards, groups = torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1])
    assert prior_probabilities(rewards, groups, "group_mean").tolist() == [0.5, 0.5, 1.0, 1.0]
    assert prior_probabilities(rewards, groups, "half").tolist() == [0.5] * 4


def test_the_config_names_its_choices():
    assert OPPOConfig.from_dict({"level": "segment"}).level == "segment"
    with pytest.raises(ValueError, match="oppo.prior"):
        OPPOConfig(prior="uniform")
    with pytest.raises(ValueError, match="unknown oppo key"):
        OPPOConfig.from_dict({"levels": "token"})
    with pytest.raises(ValueError, match="oppo.clip"):
        OPPOConfig(clip="yes")


# --- as a state-value estimator in the studies -------------------------------------------------


def test_bayes_estimates_are_p_at_every_boundary_of_each_study_trace():
    """`bayes_estimates`: values p_{b_k} (k < K) and σ from one pass with and one without the
    reference in the prompt, as one-trace passes give them; p_0 = the study set's mean reward."""
    import polars as pl

    from rredcot.credit.references import oracle_prompt
    from rredcot.models.tiny import build_tiny_model
    from rredcot.models.tokenizer import build_byte_tokenizer
    from rredcot.scoring import response_entropies
    from rredcot.studies.estimators import BAYES_NAME, ESTIMATE_SCHEMA, bayes_estimates
    from rredcot.tasks import get_task

    tokenizer, task = build_byte_tokenizer(), get_task("synthetic")
    arch = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16}  # fmt: skip
    model = build_tiny_model(arch, tokenizer, seed=0).eval()
    problems = ["a=3, b=8. c=a+b. Find c.", "a=1, b=2. c=b-a. Find c.", "a=2. Find a."] * 2
    responses = ["c=a+b=3+8=1\nAnswer: 1.", "c=b-a=2-1=1\nAnswer: 2.", "Answer: 2."] * 2
    references = ["c=a+b=3+8=1\nAnswer: 1.", "c=b-a=2-1=1\nAnswer: 1.", "a=2\nAnswer: 2."]
    references += [None, None, None]
    prompts = [task.build_prompt(q) for q in problems]
    traces = pl.DataFrame(
        {
            "trace_index": list(range(6)),
            "prompt": prompts,
            "prompt_ids": [tokenizer(x)["input_ids"] for x in prompts],
            "response_ids": [tokenizer(x)["input_ids"] for x in responses],
            "reference": references,
            "reward": [1.0, 0.0, 1.0, 0.0, 0.0, 0.0],
        }
    )
    bounds = [[0, 12, 22], [0, 12, 22], [0, 3, 10]] * 2
    segmentation = pl.DataFrame({"trace_index": list(range(6)), "boundaries": bounds})
    out = bayes_estimates(model, tokenizer, task, traces, segmentation, batch_traces=3)
    assert out.schema == pl.Schema(ESTIMATE_SCHEMA)
    assert out["trace_index"].to_list() == [0, 1, 2]  # no reference: no row
    assert set(out["estimator"]) == {BAYES_NAME} and set(out["family"]) == {"bayes"}
    p0 = 2 / 3  # the scored traces' mean reward
    for row in out.iter_rows(named=True):
        t = row["trace_index"]
        x, z = traces["prompt_ids"][t].to_list(), traces["response_ids"][t].to_list()
        o = tokenizer(oracle_prompt(task, tokenizer, prompts[t], references[t]))["input_ids"]
        r = (response_entropies(model, o, z)[0] - response_entropies(model, x, z)[0]).double()
        p = bayes_values(r[None], torch.ones(1, len(z)), torch.tensor([p0]))[0]
        b = bounds[t][1]
        assert row["values"] == pytest.approx([p0, float(p[b])], abs=1e-5)
        reward = traces["reward"][t]
        assert row["sigma"] == pytest.approx([float(p[b]) - p0, reward - float(p[b])], abs=1e-5)
        assert row["forward_tokens"] == len(x) + len(o) + 2 * len(z)
        assert row["seconds"] >= 0
    half = bayes_estimates(model, tokenizer, task, traces, segmentation, OPPOConfig(prior="half"))
    assert half["values"].list.first().to_list() == [0.5] * 3
