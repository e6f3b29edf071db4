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
