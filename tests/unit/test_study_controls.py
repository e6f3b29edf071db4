"""The localization study's controls: checker oracles by hand, a placebo at chance, error kinds."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from misconception_world import PROGRAM, RIGHT, RULE, SLIP, SYSTEMATIC

from rredcot.data.checker import check_response
from rredcot.studies.controls import (
    first_error_kinds,
    oracle_estimates,
    placebo_estimates,
    placebo_name,
)
from rredcot.studies.estimators import ESTIMATE_SCHEMA
from rredcot.studies.localization import localization_sets, localization_table

TEXTS = [RIGHT, SYSTEMATIC, SLIP]


def _traces() -> tuple[pl.DataFrame, pl.DataFrame]:
    rows, seg = [], []
    for i, text in enumerate(TEXTS):
        check = check_response(PROGRAM, text)
        # a state before each line, then the end
        starts = [0, text.index("\n") + 1, text.rindex("\n") + 1, len(text)]
        rows.append(
            {
                "trace_index": i,
                "problem_id": "p",
                "response": text,
                "reward": float(check.correct),
                "first_error": check.first_error,
                "n_steps": check.n_steps,
            }
        )
        seg.append({"trace_index": i, "char_boundaries": starts, "num_segments": 3})
    return pl.DataFrame(rows), pl.DataFrame(seg)


def test_the_oracles_value_the_study_states_by_hand() -> None:
    """Lines written before the three states: 0, 1, 2 of m = 3. p̂ (one for all lines): right 3/3,
    systematic 0/1, slip 1/2 → 4/6. Per kind: rule 2/3, step 1/2, answer 1/1."""
    traces, seg = _traces()
    est = oracle_estimates(traces, seg, {"p": PROGRAM.to_json()}, RULE)
    assert est.schema == pl.Schema(ESTIMATE_SCHEMA)
    step = {
        t: v
        for t, v in est.filter(pl.col("estimator") == "oracle_step")
        .select("trace_index", "values")
        .iter_rows()
    }
    p = 4 / 6
    assert step[0] == pytest.approx([p**3, p**2, p])
    assert step[1] == pytest.approx([p**3, 0.0, 0.0])
    assert step[2] == pytest.approx([p**3, p**2, 0.0])
    rule = {
        t: (v, s)
        for t, v, s in est.filter(pl.col("estimator") == "oracle_rule")
        .select("trace_index", "values", "sigma")
        .iter_rows()
    }
    v0 = 2 / 3 * 1 / 2 * 1.0
    assert rule[0][0] == pytest.approx([v0, 1 / 2, 1.0])
    # σ_k = V(s_k) − V(s_{k−1}), V(s_K) = R: the drop sits on the wrong line's segment
    assert rule[1][1] == pytest.approx([-v0, 0.0, 0.0])
    assert rule[2][1] == pytest.approx([1 / 2 - v0, -1 / 2, 0.0])
    assert set(est["family"]) == {"oracle"} and set(est["forward_tokens"]) == {0}
    # without a misconception only the one-accuracy oracle exists
    assert set(oracle_estimates(traces, seg, {"p": PROGRAM}, None)["estimator"]) == {"oracle_step"}
    with pytest.raises(ValueError, match="no program"):
        oracle_estimates(traces, seg, {}, RULE)


def test_first_error_kinds_name_the_misconception() -> None:
    traces, _ = _traces()
    assert first_error_kinds(traces, {"p": PROGRAM}, RULE) == {1: "systematic", 2: "other"}


def _estimates(sigmas: dict[int, list[float]], name: str = "rredcot_x") -> pl.DataFrame:
    rows = [
        {
            "trace_index": t,
            "estimator": name,
            "family": "rredcot",
            "n_rollouts": None,
            "sigma": s,
            "values": None,
            "forward_tokens": 10,
            "backward_tokens": 0,
            "seconds": 0.5,
            "cost_basis": "x",
        }
        for t, s in sigmas.items()
    ]
    return pl.DataFrame(rows, schema=ESTIMATE_SCHEMA)


def test_the_placebo_keeps_each_traces_values_and_sits_at_chance() -> None:
    """A perfect localizer (its minimum always on the true segment) permuted within traces: each
    trace keeps its multiset, the permutation is seeded, and top-1 falls to 1/K."""
    rng = np.random.default_rng(0)
    k, n = 4, 4000
    true = rng.integers(0, k, n)
    sigmas = {t: [(-1.0 if j == true[t] else float(j)) for j in range(k)] for t in range(n)}
    est = _estimates(sigmas)
    perm = placebo_estimates(est, ["rredcot_x"], seed=3)
    assert set(perm["estimator"]) == {placebo_name("rredcot_x")} == {"rredcot_x_perm"}
    assert set(perm["family"]) == {"placebo"}
    for (t, s), (t2, s2) in zip(
        est.select("trace_index", "sigma").iter_rows(),
        perm.select("trace_index", "sigma").iter_rows(),
        strict=True,
    ):
        assert t == t2 and sorted(s) == sorted(s2)
    assert perm.equals(placebo_estimates(est, ["rredcot_x"], seed=3))
    assert not perm.equals(placebo_estimates(est, ["rredcot_x"], seed=4))
    truth = pl.DataFrame({"trace_index": range(n), "num_segments": [k] * n, "true_segment": true})
    table = localization_table(
        pl.concat([est, perm]), truth, baseline_estimator="rredcot_x", resamples=200, seed=0
    )
    top1 = dict(table.select("estimator", "top1").iter_rows())
    assert top1["rredcot_x"] == 1.0 and top1["random"] == pytest.approx(1 / k)
    assert abs(top1["rredcot_x_perm"] - 1 / k) < 0.03  # 4000 traces: sd 0.007
    with pytest.raises(ValueError, match="no estimates"):
        placebo_estimates(est, ["mc_n4"], seed=0)


def test_the_kind_sets_hold_the_controls_and_the_reference_only() -> None:
    est = pl.concat(
        [
            _estimates({0: [0.0], 1: [0.0]}, "rredcot_x"),
            _estimates({0: [0.0], 1: [0.0]}, "rredcot_y").with_columns(family=pl.lit("rredcot")),
            _estimates({0: [0.0], 1: [0.0]}, "loo").with_columns(family=pl.lit("attribution")),
            _estimates({0: [0.0], 1: [0.0]}, "oracle_rule").with_columns(family=pl.lit("oracle")),
            _estimates({0: [0.0], 1: [0.0]}, "mc_n4").with_columns(family=pl.lit("mc")),
        ]
    )
    truth = pl.DataFrame({"trace_index": [0, 1], "num_segments": [1, 1], "true_segment": [0, 0]})
    sets = localization_sets(
        truth,
        truth.head(1),
        est,
        baseline_estimator="rredcot_x",
        error_kinds={0: "systematic", 1: "other"},
    )
    assert list(sets) == [
        "all_incorrect",
        "agreement_incorrect",
        "incorrect systematic",
        "agreement_incorrect systematic",
        "incorrect other",
    ]
    names = {label: set(e["estimator"]) for label, (_, e) in sets.items()}
    assert names["incorrect systematic"] == {"rredcot_x", "oracle_rule"}
    assert names["agreement_incorrect systematic"] == {"rredcot_x", "oracle_rule", "mc_n4"}
    assert names["all_incorrect"] == {"rredcot_x", "rredcot_y", "loo", "oracle_rule"}
    assert sets["incorrect other"][0]["trace_index"].to_list() == [1]
