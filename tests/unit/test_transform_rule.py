"""The credit → advantage transform study's formulas and its pre-registered rule
(rredcot.studies.transform_rule), on hand-made cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rredcot.studies.transform_rule import choose_transform, cosine, level_fixes, paired_table


def test_cosine_sees_a_shift_but_not_a_scale():
    a, b = np.array([1.0, -1.0, 0.0]), np.array([2.0, -2.0, 0.0])
    assert cosine(a, b) == pytest.approx(1.0)
    assert cosine(a, -b) == pytest.approx(-1.0)
    assert cosine(a + 1.0, b) == pytest.approx(2 * 2 / (math.sqrt(5) * math.sqrt(8)))  # 0.632
    assert cosine(np.zeros(3), b) == 0.0  # no signal: no agreement


def test_level_fixes_by_hand():
    # one group of two rows; terminal correction: Φ_0 = R − Σσ
    sigmas = [torch.tensor([0.1, 0.2, 0.6]), torch.tensor([0.05, -0.15])]  # Φ_0 = 0.1, 0.1
    rewards, groups = torch.tensor([1.0, 0.0]), torch.tensor([0, 0])
    out = level_fixes(sigmas, rewards, groups)
    # baseline shift: σ_1 += Φ_0 − mean R = 0.1 − 0.5
    assert torch.allclose(out["baseline_shift"][0], torch.tensor([-0.3, 0.2, 0.6]).double())
    assert torch.allclose(out["baseline_shift"][1], torch.tensor([-0.35, -0.15]).double())
    for s, r in zip(out["baseline_shift"], rewards, strict=True):
        assert float(s.sum()) == pytest.approx(float(r) - 0.5)  # R − mean_g R
    # scaled: c = mean R / mean Φ_0 = 0.5 / 0.1 = 5; row 0: Φ = 0.1, 0.2, 0.4 → 0.5, 1, 2
    assert torch.allclose(out["potential_scaled"][0], torch.tensor([0.5, 1.0, -1.0]).double())
    # row 1: Φ = 0.1, 0.15 → 0.5, 0.75; σ = 0.25, 0 − 0.75
    assert torch.allclose(out["potential_scaled"][1], torch.tensor([0.25, -0.75]).double())


def test_the_rule_picks_as_stated_on_a_hand_made_table():
    row = lambda c, a, lo: {"candidate": c, "agreement": a, "diff_ci_low": lo}  # noqa: E731
    table = [row("default", 0.50, 0.0), row("better", 0.55, 0.01), row("grpo", 0.9, 0.3)]
    assert choose_transform(table, "default", exclude=("grpo",)) == "better"
    table[1] = row("better", 0.55, -0.01)  # its CI spans 0: the default stays
    assert choose_transform(table, "default", exclude=("grpo",)) == "default"
    table[1] = row("worse", 0.45, -0.08)
    assert choose_transform(table, "default", exclude=("grpo",)) == "default"
    with pytest.raises(ValueError, match="default"):
        choose_transform(table, "missing")


def test_the_paired_table_pairs_the_groups():
    # b − a is +0.1 on every group: its paired CI is exactly +0.1 whatever the resample
    a = [0.2, 0.8, 0.5, 0.1, 0.9]
    table = {r["candidate"]: r for r in paired_table({"a": a, "b": [x + 0.1 for x in a]}, "a",
                                                     500, 0)}  # fmt: skip
    assert table["b"]["minus_default"] == pytest.approx(0.1)
    assert table["b"]["diff_ci_low"] == pytest.approx(0.1)
    assert table["b"]["diff_ci_high"] == pytest.approx(0.1)
    assert table["a"]["ci_low"] < table["a"]["agreement"] < table["a"]["ci_high"]
    with pytest.raises(ValueError, match="default"):
        paired_table({"a": a}, "z", 10, 0)
