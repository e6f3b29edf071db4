"""Credit → token advantages (rredcot.credit.advantages), checked by hand (METHOD.md §4, §6)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rredcot.credit.advantages import (
    CreditConfig,
    expand_segments,
    group_ids,
    masked_stats,
    outcome_advantages,
    per_group_advantages,
    reward_to_go,
    segment_token_counts,
    token_advantages,
    whiten_groups,
    zero_std_share,
)

# --- outcome advantages ----------------------------------------------------------------------


def test_outcome_advantage_by_hand():
    # group 0: mean 0.5, sample std sqrt(1/3); group 1: all equal -> 0
    a = outcome_advantages([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0], num_generations=4)
    s = math.sqrt(1 / 3) + 1e-4
    want = [0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, 0.0, 0.0, 0.0, 0.0]
    assert a.tolist() == pytest.approx(want, rel=1e-6)


def test_outcome_advantage_scales():
    r = [2.0, 0.0, 1.0, 1.0]
    assert outcome_advantages(r, 2, scale="none").tolist() == [1.0, -1.0, 0.0, 0.0]
    batch_std = math.sqrt(2 / 3)  # sample std of (2, 0, 1, 1): mean 1, squares 1 + 1, / 3
    got = outcome_advantages(r, 2, scale="batch").tolist()
    assert got == pytest.approx([1 / (batch_std + 1e-4), -1 / (batch_std + 1e-4), 0, 0])


def test_outcome_advantage_refuses_bad_input():
    with pytest.raises(ValueError, match="multiple of num_generations"):
        outcome_advantages([1.0, 0.0, 1.0], num_generations=2)
    with pytest.raises(ValueError, match="rows \\[1\\]"):
        outcome_advantages([1.0, float("nan")], num_generations=2)
    with pytest.raises(ValueError, match="scale"):
        outcome_advantages([1.0, 0.0], 2, scale="global")


def test_group_ids_is_trl_layout():
    assert group_ids(6, 3).tolist() == [0, 0, 0, 1, 1, 1]


def test_per_group_advantages_population_std_and_zero_std():
    # labels interleaved: group 7 = rows 0, 2, 4, 6 -> r = 1, 0, 0, 0; group 3 = rows 1, 3, 5, 7
    rewards = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    groups = [7, 3, 7, 3, 7, 3, 7, 3]
    a = per_group_advantages(rewards, groups).tolist()
    std7 = math.sqrt(0.25 * 0.75)  # population std of (1, 0, 0, 0)
    assert a[0] == pytest.approx(0.75 / std7)
    assert a[2] == pytest.approx(-0.25 / std7)
    assert [a[1], a[3], a[5], a[7]] == pytest.approx([1.0, 1.0, -1.0, -1.0])  # mean .5, std .5
    assert per_group_advantages([1.0, 1.0, 0.0], [0, 0, 1]).tolist() == [0.0, 0.0, 0.0]


def test_zero_std_share_counts_rows_of_flat_groups_by_the_given_labels():
    # RRPO's halves: group 0 = (1, 0) has signal; group 1 = (0, 0) and group 2 = (1, 1, 1, 1) not
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert zero_std_share(rewards, [0, 0, 1, 1, 2, 2, 2, 2]) == pytest.approx(6 / 8)
    # TRL's groups of 4 consecutive rows on the same rewards: (1, 0, 0, 0) has signal
    assert zero_std_share(rewards, group_ids(8, 4)) == pytest.approx(4 / 8)
    # the rows it counts are exactly those per_group_advantages leaves at 0
    a = per_group_advantages(rewards, [0, 0, 1, 1, 2, 2, 2, 2])
    assert (a == 0).float().mean().item() == pytest.approx(6 / 8)
    with pytest.raises(ValueError, match="one group label per row"):
        zero_std_share([1.0, 0.0], [0])


# --- whitening and segment helpers ---------------------------------------------------------------


def test_whiten_pools_all_segments_of_a_group():
    out = whiten_groups([[1.0, 3.0], [2.0], [5.0, 5.0]], [0, 0, 1], eps=0.0)
    s = math.sqrt(2 / 3)  # population std of (1, 3, 2)
    assert out[0].tolist() == pytest.approx([-1 / s, 1 / s])
    assert out[1].tolist() == pytest.approx([0.0])
    assert out[2].tolist() == [0.0, 0.0]  # all equal: no signal


def test_whiten_weights_each_value_by_its_weight():
    # 1 counted twice, 3 and 2 once: mean 7/4, deviations (−3/4, 5/4, 1/4), variance 11/16
    out = whiten_groups([[1.0, 3.0], [2.0]], [0, 0], eps=0.0, weights=[[2, 1], [1]])
    assert out[0].tolist() == pytest.approx([-3 / math.sqrt(11), 5 / math.sqrt(11)])
    assert out[1].tolist() == pytest.approx([1 / math.sqrt(11)])
    expanded = whiten_groups([[1.0, 1.0, 3.0], [2.0]], [0, 0], eps=0.0)  # the same, unweighted
    assert out[0].tolist() == pytest.approx(expanded[0][1:].tolist())
    # a weight of 0 leaves its value out of the statistics (mean 2, std 1), not out of the output
    zero = whiten_groups([[1.0, 3.0], [50.0]], [0, 0], eps=0.0, weights=[[1, 1], [0]])
    assert zero[0].tolist() == pytest.approx([-1.0, 1.0]) and zero[1].tolist() == [48.0]
    with pytest.raises(ValueError, match="weights"):
        whiten_groups([[1.0, 3.0]], [0], weights=[[1.0]])


def test_segment_token_counts_give_the_eos_to_the_last_segment_and_padding_to_none():
    counts = segment_token_counts(
        [[0, 1, 3], [0, 2], [0]], torch.tensor([[1] * 4, [1, 1, 0, 0], [0] * 4])
    )
    assert [c.tolist() for c in counts] == [[1.0, 3.0], [2.0], []]


def test_reward_to_go():
    assert reward_to_go([1.0, 2.0, 3.0]).tolist() == [6.0, 5.0, 3.0]


def test_expand_segments_gives_the_eos_to_the_last_segment():
    assert expand_segments([0.5, -1.0], [0, 2, 5], 6).tolist() == [0.5, 0.5, -1, -1, -1, -1]
    assert expand_segments([], [0], 3).tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="num_tokens"):
        expand_segments([1.0], [0, 4], 3)
    with pytest.raises(ValueError, match="one value per segment"):
        expand_segments([1.0], [0, 2, 4], 4)
    with pytest.raises(ValueError, match="boundaries"):
        expand_segments([1.0, 2.0], [0, 2, 2], 4)


# --- token advantages, one hand-computed case per mode and center ---------------------------

SIGMAS = [[0.5, -0.5], [1.0]]
BOUNDS = [[0, 1, 3], [0, 2]]
MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])  # row 0: 3 tokens + EOS; row 1: 2 tokens, pad
# center group weighs by tokens: segment (row 0, 1) covers 1 token, (0, 2) 2 tokens and the
# EOS, (1, 1) 2 tokens (the padding counts for nothing): σ over the group's 6 tokens is
# (0.5, −0.5, −0.5, −0.5, 1, 1), mean 1/6, deviations (1/3, −2/3 ×3, 5/6 ×2), variance 17/36.
# center none divides by the std over the 3 segments (0.5, −0.5, 1): variance 7/18.
S17, S14 = math.sqrt(17), math.sqrt(14)


def by_hand(rows):
    return [pytest.approx(row, rel=1e-6, abs=1e-7) for row in rows]


def test_immediate_by_hand():
    a = token_advantages(
        SIGMAS, BOUNDS, [0, 0], MASK, CreditConfig("immediate", eps=0.0, center="group")
    )
    assert a.shape == (2, 4) and a.dtype == torch.float32
    assert a.tolist() == by_hand([[2 / S17, -4 / S17, -4 / S17, -4 / S17], [5 / S17] * 2 + [0, 0]])
    # the mean and std over the group's unmasked tokens are 0 and 1
    tokens = a[MASK.bool()].double()
    assert float(tokens.mean()) == pytest.approx(0, abs=1e-7)
    assert float(tokens.std(unbiased=False)) == pytest.approx(1, rel=1e-6)


def test_center_group_weighs_by_tokens_not_segments():
    """Counting each segment once (the mean 1/3 of (0.5, −0.5, 1)) gives other advantages:
    segment weighting is what token weighting replaced (METHOD.md §4)."""
    a = token_advantages(
        SIGMAS, BOUNDS, [0, 0], MASK, CreditConfig(eps=0.0, mode="immediate", center="group")
    )
    per_segment = whiten_groups(SIGMAS, [0, 0], eps=0.0)  # each segment once
    assert a[0, 0].item() != pytest.approx(per_segment[0][0].item(), rel=1e-3)
    weights = segment_token_counts(BOUNDS, MASK)
    by_tokens = whiten_groups(SIGMAS, [0, 0], eps=0.0, weights=weights)
    assert a[0, :2].tolist() == pytest.approx(by_tokens[0].tolist(), rel=1e-6)


def test_reward_to_go_by_hand():
    a = token_advantages(
        SIGMAS, BOUNDS, [0, 0], MASK, CreditConfig("reward_to_go", eps=0.0, center="group")
    )
    # G = (0, −0.5) and (1,); over the tokens (0, −0.5 ×3, 1 ×2): mean 1/12, variance 65/144
    s = math.sqrt(65)
    assert a.tolist() == by_hand([[-1 / s, -7 / s, -7 / s, -7 / s], [11 / s] * 2 + [0, 0]])


def test_mixed_by_hand():
    outcome = torch.tensor([0.7, -0.7])
    cfg = CreditConfig("mixed", beta=0.5, eps=0.0, center="group")
    a = token_advantages(SIGMAS, BOUNDS, [0, 0], MASK, cfg, outcome)
    want = [
        [0.7 + 0.5 * 2 / S17] + [0.7 - 0.5 * 4 / S17] * 3,
        [-0.7 + 0.5 * 5 / S17] * 2 + [0, 0],
    ]
    assert a.tolist() == by_hand(want)
    with pytest.raises(ValueError, match="mixed"):
        token_advantages(SIGMAS, BOUNDS, [0, 0], MASK, cfg)


def test_center_none_immediate_by_hand():
    # σ / std over the segments (0.5, −0.5, 1): 0.5 · 6/√14 = 3/√14; EOS as its segment
    a = token_advantages(
        SIGMAS, BOUNDS, [0, 0], MASK, CreditConfig(eps=0.0, center="none", mode="immediate")
    )
    assert a.tolist() == by_hand([[3 / S14] + [-3 / S14] * 3, [6 / S14] * 2 + [0, 0]])


def test_center_none_reward_to_go_by_hand():
    # G = (0, −0.5), (1,): its std over the segments is again √(7/18); no mean is subtracted
    cfg = CreditConfig("reward_to_go", eps=0.0, center="none")
    a = token_advantages(SIGMAS, BOUNDS, [0, 0], MASK, cfg)
    assert a.tolist() == by_hand([[0.0] + [-3 / S14] * 3, [6 / S14] * 2 + [0, 0]])


def test_center_none_mixed_by_hand():
    outcome = torch.tensor([0.7, -0.7])
    cfg = CreditConfig("mixed", beta=0.5, eps=0.0, center="none")
    a = token_advantages(SIGMAS, BOUNDS, [0, 0], MASK, cfg, outcome)
    want = [[0.7 + 1.5 / S14] + [0.7 - 1.5 / S14] * 3, [-0.7 + 3 / S14] * 2 + [0, 0]]
    assert a.tolist() == by_hand(want)


def test_eps_is_added_to_the_std():
    a = token_advantages(
        SIGMAS, BOUNDS, [0, 0], MASK, CreditConfig(center="none", eps=0.5, mode="immediate")
    )
    assert a[0, 0].item() == pytest.approx(0.5 / (math.sqrt(7 / 18) + 0.5), rel=1e-6)


def test_groups_are_whitened_separately():
    a = token_advantages(
        SIGMAS, BOUNDS, [0, 1], MASK, CreditConfig(eps=0.0, mode="immediate", center="group")
    )
    # row 0 alone, over its tokens (0.5, −0.5 ×3): mean −1/4, deviations (3/4, −1/4 ×3), std √3/4
    s3 = math.sqrt(3)
    assert a[0].tolist() == pytest.approx([s3, -1 / s3, -1 / s3, -1 / s3], rel=1e-6)
    assert a[1].tolist() == [0.0, 0.0, 0.0, 0.0]  # one segment: nothing to compare with


def test_token_advantages_refuse_bad_input():
    immediate = CreditConfig(mode="immediate", center="group")
    with pytest.raises(ValueError, match="need B rows"):
        token_advantages(SIGMAS[:1], BOUNDS, [0, 0], MASK, immediate)
    with pytest.raises(ValueError, match="not finite"):
        token_advantages([[float("nan"), 0.0], [1.0]], BOUNDS, [0, 0], MASK, immediate)
    with pytest.raises(ValueError, match="credit.mode"):
        CreditConfig(mode="gae")
    with pytest.raises(ValueError, match="unknown credit key"):
        CreditConfig.from_dict({"lambda": 0.9})


segment_rows = st.lists(
    st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=5), min_size=2, max_size=6
)


@settings(max_examples=40, deadline=None)
@given(segment_rows, st.floats(-2, 2, allow_nan=False))
def test_properties_of_the_modes(sigmas, outcome_value):
    bounds = [list(range(len(s) + 1)) for s in sigmas]  # one token per segment, then EOS
    width = max(len(s) for s in sigmas) + 2
    mask = torch.zeros(len(sigmas), width, dtype=torch.long)
    for i, s in enumerate(sigmas):
        mask[i, : len(s) + 1] = 1
    groups = [0] * len(sigmas)
    a = token_advantages(
        sigmas, bounds, groups, mask, CreditConfig(eps=0.0, mode="immediate", center="group")
    )
    assert (a[mask == 0] == 0).all()
    tokens = a[mask.bool()].double()  # whitened over the group's tokens: mean 0, std 1 (or flat)
    assert abs(float(tokens.mean())) < 1e-5
    assert (tokens == 0).all() or float(tokens.std(unbiased=False)) == pytest.approx(1, rel=1e-4)
    outcome = torch.full((len(sigmas),), outcome_value)
    plain = token_advantages(
        sigmas, bounds, groups, mask, CreditConfig("mixed", beta=0.0, center="group"), outcome
    )
    assert torch.allclose(plain, outcome[:, None] * mask)  # β = 0: the outcome advantage


def test_masked_stats_count_only_real_tokens():
    stats = masked_stats(torch.tensor([1.0, -1.0]), torch.tensor([[1, 1, 0], [1, 0, 0]]))
    assert stats["mean"] == pytest.approx(1 / 3)
    assert stats["min"] == -1.0 and stats["max"] == 1.0
    assert masked_stats(torch.zeros(1, 2), torch.zeros(1, 2))["std"] == 0.0


def test_center_none_keeps_the_sign_of_sigma() -> None:
    """An all-correct group whose segments all have positive credit: `group` pushes the smaller
    ones below zero, `none` keeps every sign and only divides by the group's std."""
    sigma = [torch.tensor([0.1, 0.3]), torch.tensor([0.2, 0.4])]
    centred = whiten_groups(sigma, [0, 0])
    kept = whiten_groups(sigma, [0, 0], center=False)
    assert (centred[0][0] < 0) and (centred[1][1] > 0)
    std = math.sqrt(0.0125)  # population std of (0.1, 0.3, 0.2, 0.4): mean 0.25, Σ dev² 0.05
    for got, s in zip(kept, sigma, strict=True):
        assert torch.all(got > 0)
        torch.testing.assert_close(got, s.double() / (std + 1e-4))


def test_center_none_through_token_advantages_and_config() -> None:
    mask = torch.ones(2, 4)
    sigma = [torch.tensor([0.5, -0.25]), torch.tensor([0.25, 0.5])]
    bounds = [[0, 2, 4], [0, 1, 4]]
    adv = token_advantages(
        sigma, bounds, [0, 0], mask, CreditConfig(center="none", mode="immediate")
    )
    assert adv[0, 0] > 0 and adv[0, 3] < 0 and torch.all(adv[1] > 0)
    with pytest.raises(ValueError, match="credit.center"):
        CreditConfig(center="mean")
