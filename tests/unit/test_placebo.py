"""Placebo credit (METHOD.md §9): `perm` keeps each trace's multiset and sum of σ and only moves
it; `flat` keeps each trace's token-weighted total and removes every shape."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rredcot.credit.advantages import CreditConfig, token_advantages
from rredcot.credit.placebo import flatten_traces, permute_within_traces, placebo_sigmas
from rredcot.workflow.run_params import run_settings

SIGMAS = [torch.tensor([0.5, -0.25, 0.0, 1.0]), torch.tensor([2.0]), torch.tensor([-1.0, 3.0])]
BOUNDARIES = [[0, 1, 3, 6, 10], [0, 4], [0, 2, 3]]
# row 0: segments of 1, 2, 3, 4 tokens (+ an EOS token after b_K that belongs to the last);
# row 2: the last token masked out (padding)
MASK = torch.tensor(
    [[1] * 11 + [0], [1] * 4 + [0] * 8, [1] * 2 + [0] * 10],
)


def test_flat_gives_every_segment_the_token_weighted_mean_by_hand() -> None:
    got = flatten_traces(SIGMAS, BOUNDARIES, MASK)
    # row 0: tokens 1, 2, 3, 5 (the EOS joins the last segment): (0.5 − 0.5 + 0 + 5) / 11
    torch.testing.assert_close(got[0], torch.full((4,), 5.0 / 11, dtype=torch.float64))
    torch.testing.assert_close(got[1], torch.tensor([2.0], dtype=torch.float64))
    # row 2: segment 1 holds 2 kept tokens, segment 2 none (masked): the mean is segment 1's
    torch.testing.assert_close(got[2], torch.tensor([-1.0, -1.0], dtype=torch.float64))


def test_a_trace_with_no_kept_token_takes_the_plain_mean() -> None:
    got = flatten_traces([torch.tensor([1.0, 3.0])], [[0, 1, 2]], torch.zeros(1, 3))
    torch.testing.assert_close(got[0], torch.tensor([2.0, 2.0], dtype=torch.float64))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=8),
        min_size=1,
        max_size=6,
    ),
    st.integers(0, 2**31),
    st.integers(0, 500),
)
def test_perm_keeps_each_traces_multiset_and_sum(values, seed, step) -> None:
    sigmas = [torch.tensor(v, dtype=torch.float64) for v in values]
    got = permute_within_traces(sigmas, seed, step)
    for before, after in zip(sigmas, got, strict=True):
        assert sorted(after.tolist()) == sorted(before.tolist())
        assert float(after.sum()) == pytest.approx(float(before.sum()))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(st.floats(-5, 5, allow_nan=False), st.integers(1, 6)), min_size=1, max_size=6
        ),
        min_size=1,
        max_size=5,
    )
)
def test_flat_keeps_each_traces_token_weighted_total(rows) -> None:
    sigmas = [torch.tensor([s for s, _ in r], dtype=torch.float64) for r in rows]
    boundaries = [[0, *torch.tensor([n for _, n in r]).cumsum(0).tolist()] for r in rows]
    width = max(b[-1] for b in boundaries)
    mask = torch.zeros(len(rows), width)
    for i, b in enumerate(boundaries):
        mask[i, : b[-1]] = 1
    flats = flatten_traces(sigmas, boundaries, mask)
    for sigma, flat, b in zip(sigmas, flats, boundaries, strict=True):
        n = torch.tensor(b[1:], dtype=torch.float64) - torch.tensor(b[:-1], dtype=torch.float64)
        assert float((n * flat).sum()) == pytest.approx(float((n * sigma).sum()), abs=1e-9)
        assert torch.all(flat == flat[0])


def test_perm_is_seeded_per_run_step_and_row_and_moves_the_values() -> None:
    sigmas = [torch.arange(8, dtype=torch.float64)] * 3
    a, b = permute_within_traces(sigmas, 7, 3), permute_within_traces(sigmas, 7, 3)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))  # reproducible
    other_step = permute_within_traces(sigmas, 7, 4)
    assert not all(torch.equal(x, y) for x, y in zip(a, other_step, strict=True))
    assert not torch.equal(a[0], a[1])  # each row draws its own order
    # a row's order does not depend on the rows after it
    assert torch.equal(permute_within_traces(sigmas[:1], 7, 3)[0], a[0])


def test_perm_keeps_the_groups_whitened_level_under_center_none() -> None:
    """center none divides by the std of the group's pooled segments, which a permutation
    within traces leaves as it is: each trace's whitened values are a permutation of its own."""
    config = CreditConfig(mode="immediate", center="none")
    groups, mask = torch.tensor([0, 0, 0]), torch.ones(3, 12)
    own = token_advantages(SIGMAS, BOUNDARIES, groups, mask, config)
    perm = token_advantages(permute_within_traces(SIGMAS, 1, 0), BOUNDARIES, groups, mask, config)
    for i, b in enumerate(BOUNDARIES):
        starts = torch.tensor(b[:-1])
        assert sorted(own[i, starts].tolist()) == pytest.approx(sorted(perm[i, starts].tolist()))


def test_none_is_the_methods_own_sigma_and_an_unknown_kind_names_the_key() -> None:
    assert placebo_sigmas("none", SIGMAS, BOUNDARIES, MASK, 0, 0) == SIGMAS
    with pytest.raises(ValueError, match="credit.placebo"):
        placebo_sigmas("shuffle", SIGMAS, BOUNDARIES, MASK, 0, 0)
    with pytest.raises(ValueError, match="credit.placebo"):
        CreditConfig(placebo="shuffle")


def test_a_placebo_at_its_default_leaves_the_runs_settings_as_they_were() -> None:
    """credit.placebo came after runs were recorded: at `none` it is left out of a run's
    settings (its `--params`), set it is kept; the config's own block is never changed."""
    base = {
        "training": {"credit": {"mode": "mixed", "placebo": "none"}, "variants": []},
        "estimator": {"rredcot": {}, "mc": {}},
        "segmentation": {},
    }
    got = run_settings(base, "rredcot", 1, task="synthetic")
    assert got["credit"] == {"mode": "mixed"}
    assert base["training"]["credit"] == {"mode": "mixed", "placebo": "none"}
    variant = {"name": "rredcot_perm", "method": "rredcot", "credit": {"placebo": "perm"}}
    got = run_settings(base, "rredcot", 1, task="synthetic", variant=variant)
    assert got["credit"] == {"mode": "mixed", "placebo": "perm"}
