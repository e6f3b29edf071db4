"""Estimator studies (METHOD.md §5): statistics, rollout tables, localization, sweeps, figures.

Hand-computed small cases for every pure function, property tests for Spearman, a scripted
backend that checks the rollout table against `mc_state_values`, and one tiny random Qwen3 that
checks the post-hoc budget cut against a real run with the smaller budget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import Qwen3Config, Qwen3ForCausalLM

from rredcot.credit.mc import TRUNCATION, mc_state_values
from rredcot.credit.segmentation import SegmentationConfig
from rredcot.data.synthetic import (
    Program,
    SplitSpec,
    Step,
    WorldConfig,
    check_response,
    make_study_pool,
    make_world,
)
from rredcot.generation import Completion, SamplingParams
from rredcot.generation.hf import HFBackend
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.reporting import figures
from rredcot.studies import rollouts as rollouts_module
from rredcot.studies.agreement import agreement_table, common_set, correlation_matrix
from rredcot.studies.cost_match import cost_match
from rredcot.studies.estimators import ESTIMATE_SCHEMA, reference_kind, rredcot_name
from rredcot.studies.ground_truth import ground_truth_sigmas, split_half, split_half_step_up
from rredcot.studies.localization import localization_sets, localization_table, true_segments
from rredcot.studies.null_estimator import NULL, null_estimates
from rredcot.studies.preregistered import preregistered_answer_now
from rredcot.studies.rollouts import (
    ROLLOUT_SCHEMA,
    forward_tokens_per_trace,
    sample_rollouts,
    sigma_from_values,
    state_values,
)
from rredcot.studies.segmentations import (
    MAIN,
    distinct_states,
    segmentation_table,
    sweep_configs,
)
from rredcot.studies.statistics import (
    argmin_set,
    average_ranks,
    bootstrap_mean_ci,
    ceiling,
    disattenuate,
    kendall_flat0,
    localization_hits,
    percentile_ci,
    random_localization,
    rankdata,
    spearman,
    spearman_brown,
    spearman_flat0,
    split_half_factor,
)
from rredcot.studies.sweep import sweep_table
from rredcot.studies.traces import (
    error_char,
    overlap_bin,
    sample_traces,
    select_study_set,
    token_texts,
    wilson_interval,
    with_reference_kinds,
)
from rredcot.studies.truncation import truncation_table
from rredcot.tasks import get_task

TASK = get_task("synthetic")

# --- statistics ---------------------------------------------------------------------------------


def test_rankdata_averages_ties() -> None:
    assert rankdata([10, 30, 20, 20]).tolist() == [1.0, 4.0, 2.5, 2.5]
    assert rankdata([5, 5, 5]).tolist() == [2.0, 2.0, 2.0]


def test_spearman_hand_computed() -> None:
    # ρ = 1 − 6 Σd² / (n(n²−1)) without ties: d = (0, 1, −1, 0) -> 1 − 12/60 = 0.8
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    # with ties: ranks (1.5, 1.5, 3) vs (1, 2, 3) -> Pearson of ranks = √3/2
    assert spearman([0, 0, 1], [1, 2, 3]) == pytest.approx(math.sqrt(3) / 2)


def test_spearman_undefined_cases_are_nan() -> None:
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    assert math.isnan(spearman([1, 2, 3], [4, 4, 4]))
    assert math.isnan(spearman([1.0], [2.0]))
    assert math.isnan(spearman([1, float("nan"), 3], [1, 2, 3]))
    with pytest.raises(ValueError, match="equal length"):
        spearman([1, 2], [1, 2, 3])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-50, 50), st.integers(-50, 50)),
        min_size=2,
        max_size=12,
    )
)
def test_spearman_bounded_symmetric_and_rank_invariant(pairs: list[tuple[int, int]]) -> None:
    a = np.array([p[0] for p in pairs])
    b = np.array([p[1] for p in pairs])
    rho = spearman(a, b)
    if math.isnan(rho):
        assert np.all(a == a[0]) or np.all(b == b[0])
        return
    assert -1.0 <= rho <= 1.0
    assert spearman(b, a) == pytest.approx(rho)
    assert spearman(np.exp(a / 10), b) == pytest.approx(rho)  # strictly increasing transform


def test_bootstrap_ci_drops_nan_and_brackets_the_mean() -> None:
    mean, low, high = bootstrap_mean_ci([0.2, float("nan"), 0.4, 0.9], 500, seed=0)
    assert mean == pytest.approx(0.5)
    assert low <= mean <= high
    assert low >= 0.2 and high <= 0.9
    assert bootstrap_mean_ci([0.3, 0.3], 100, seed=1) == pytest.approx((0.3, 0.3, 0.3))
    assert all(math.isnan(x) for x in bootstrap_mean_ci([float("nan")], 100, seed=1))


def test_localization_hits_count_ties_fractionally() -> None:
    assert argmin_set([0.0, -1.0, -1.0, 2.0]).tolist() == [1, 2]
    assert localization_hits([0.0, -1.0, -1.0, 2.0], 1) == (0.5, 1.0)
    assert localization_hits([0.0, -1.0, -1.0, 2.0], 3) == (0.0, 0.5)
    assert localization_hits([3.0, 1.0, 2.0], 1) == (1.0, 1.0)
    # a flat σ scores exactly like a random segment
    assert localization_hits([0.0] * 4, 0) == random_localization(4, 0)
    assert all(math.isnan(x) for x in localization_hits([0.0, float("nan")], 0))


def test_random_localization_exact_expectation() -> None:
    assert random_localization(4, 0) == (0.25, 0.5)
    assert random_localization(4, 1) == (0.25, 0.75)
    assert random_localization(1, 0) == (1.0, 1.0)
    with pytest.raises(ValueError, match="true_segment"):
        random_localization(3, 3)


# --- agreement and correlation ------------------------------------------------------------------


def _estimates(
    rows: list[tuple[int, str, list[float]]],
    family: str = "mc",
    values: dict[tuple[int, str], list[float]] | None = None,
) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "trace_index": [r[0] for r in rows],
            "estimator": [r[1] for r in rows],
            "family": [family] * len(rows),
            "n_rollouts": [None] * len(rows),
            "sigma": [r[2] for r in rows],
            "values": [(values or {}).get((r[0], r[1])) for r in rows],
            "forward_tokens": [100] * len(rows),
            "backward_tokens": [0] * len(rows),
            "seconds": [0.5] * len(rows),
            "cost_basis": ["own pass"] * len(rows),
        },
        schema=ESTIMATE_SCHEMA,
    )


GT = pl.DataFrame(
    {
        "trace_index": [0, 1, 2],
        "sigma": [[0.1, 0.5, -0.3], [0.0, 0.0, 0.0], [0.2, -0.2, 0.4]],
        "values": [[0.2, 0.3, 0.8], [0.5, 0.5, 0.5], [0.1, 0.3, 0.1]],
    }
)


def test_spearman_flat0_scores_a_flat_vector_zero() -> None:
    assert spearman_flat0([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) == 0.0
    assert spearman_flat0([1.0, 2.0, 3.0], [2.0, 4.0, 9.0]) == pytest.approx(1.0)
    assert spearman_flat0([3.0, 2.0, 1.0], [1.0, 2.0, 3.0]) == pytest.approx(-1.0)
    assert math.isnan(spearman_flat0([1.0], [2.0]))
    assert math.isnan(spearman_flat0([1.0, float("nan")], [1.0, 2.0]))
    assert np.allclose(average_ranks(np.array([10.0, 30.0, 20.0, 20.0])), [1, 4, 2.5, 2.5])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=2, max_size=12))
def test_spearman_flat0_matches_spearman_where_defined(pairs: list[tuple[int, int]]) -> None:
    x, y = [float(a) for a, _ in pairs], [float(b) for _, b in pairs]
    ref = spearman(x, y)
    assert spearman_flat0(x, y) == pytest.approx(0.0 if math.isnan(ref) else ref)


def test_spearman_brown_and_the_ceiling_on_a_known_case() -> None:
    # Two halves correlating 0.5: the full-length reliability is 2·0.5/1.5 = 2/3, ceiling √(2/3).
    assert spearman_brown(0.5, 2) == pytest.approx(2 / 3)
    assert ceiling(spearman_brown(0.5, 2)) == pytest.approx(math.sqrt(2 / 3))
    assert spearman_brown(1.0, 2) == 1.0 and spearman_brown(0.0, 2) == 0.0
    assert spearman_brown(0.25, factor=4) == pytest.approx(1 / 1.75)
    assert math.isnan(ceiling(-0.1)) and math.isnan(ceiling(float("nan")))
    assert disattenuate(0.4, 0.64) == pytest.approx(0.5)
    # Simulated: a true signal plus independent noise in two halves; the stepped-up split half
    # predicts the correlation of the full average with the truth, squared.
    rng = np.random.default_rng(0)
    truth = rng.normal(size=200_000)
    a = truth + rng.normal(scale=1.5, size=truth.size)
    b = truth + rng.normal(scale=1.5, size=truth.size)
    r_half = np.corrcoef(a, b)[0, 1]
    r_full = np.corrcoef((a + b) / 2, truth)[0, 1]
    assert ceiling(spearman_brown(r_half, 2)) == pytest.approx(r_full, abs=0.01)
    # The factor is n_total / n_half: 33 rollouts split into halves of 16 step up by 33/16
    assert split_half_factor(33, 16) == pytest.approx(33 / 16)
    assert spearman_brown(0.5, 33 / 16) == pytest.approx((33 / 16 * 0.5) / (1 + 17 / 16 * 0.5))
    with pytest.raises(ValueError, match="n_half"):
        split_half_factor(8, 0)


def test_common_set_drops_a_trace_for_everyone_or_no_one() -> None:
    truth = {
        0: np.array([0.1, 0.5, -0.3]),
        1: np.array([0.0, 0.0, 0.0]),  # flat ground truth: out for all
        2: np.array([0.2, -0.2, 0.4]),
        3: np.array([0.3]),  # one entry: out for all
        4: np.array([0.1, np.nan]),  # missing ground truth: out for all
        5: np.array([0.1, 0.2]),
    }
    est = {
        "a": {t: np.array([1.0] * v.size) for t, v in truth.items()},  # flat everywhere: scored
        "b": {0: np.array([1.0, 2.0, 0.0]), 2: np.array([0.0, 1.0, 2.0]), 5: np.array([np.nan, 1])},
    }
    common = common_set(truth, est)
    assert common.traces == [0, 2]  # b has no finite estimate of trace 5: out for a as well
    assert common.excluded == {
        "single_entry": 1,
        "missing_ground_truth": 1,
        "flat_ground_truth": 1,
        "missing_estimate": 1,
    }


def test_agreement_table_hand_computed_and_paired() -> None:
    est = _estimates(
        [
            (0, "good", [1.0, 2.0, 0.0]),  # same order as σ_gt: ρ = 1
            (1, "good", [1.0, 2.0, 3.0]),  # flat σ_gt: out of the common set for everyone
            (2, "good", [0.0, -1.0, 5.0]),  # same order: ρ = 1
            (0, "flat", [2.0, 1.0, 3.0]),  # reversed order of trace 0: ρ = −1
            (1, "flat", [1.0, 1.0, 1.0]),
            (2, "flat", [1.0, 1.0, 1.0]),  # flat estimate: scored 0, not dropped
        ],
        values={
            (0, "good"): [0.0, 1.0, 2.0],
            (1, "good"): [0.0, 1.0, 2.0],
            (2, "good"): [0.0, 1.0, 0.0],
            (0, "flat"): [0.5, 0.5, 0.5],
            (1, "flat"): [0.5, 0.5, 0.5],
            (2, "flat"): [0.5, 0.5, 0.5],
        },
    )
    halves = (GT, GT)  # identical halves: split-half 1, reliability 1, ceiling 1
    table = agreement_table(
        est, GT, halves, baseline_estimator="good", resamples=300, seed=0, step_up=2
    )
    row = {(r["target"], r["aggregation"], r["estimator"]): r for r in table.iter_rows(named=True)}
    good, flat = row["credits", "per_trace", "good"], row["credits", "per_trace", "flat"]
    assert good["rho"] == pytest.approx(1.0) and good["n_traces"] == 2
    assert good["excluded_flat_ground_truth"] == 1
    assert flat["rho"] == pytest.approx(-0.5)  # (−1 + 0) / 2: the flat trace counts as 0
    assert flat["n_flat_estimate"] == 1
    assert flat["diff_vs_reference"] == pytest.approx(-1.5)
    assert flat["diff_ci95_high"] < 0 and flat["verdict"] == "worse"
    assert good["verdict"] == "reference"
    assert good["ceiling"] == pytest.approx(1.0) and good["reliability"] == pytest.approx(1.0)
    assert good["forward_tokens_per_trace"] == 100 and good["seconds_per_trace"] == 0.5
    # values: trace 1's V_gt is flat (out); trace 0 same order (1), trace 2 [0,1,0] vs
    # [0.1,0.3,0.1] same order (1); the flat estimate scores 0 on both
    assert row["values", "per_trace", "good"]["rho"] == pytest.approx(1.0)
    assert row["values", "per_trace", "flat"]["rho"] == 0.0
    assert row["values", "pooled", "flat"]["rho"] == 0.0
    pooled = row["credits", "pooled", "good"]["rho"]
    assert pooled == pytest.approx(spearman([1.0, 2.0, 0.0, 0.0, -1.0, 5.0], GT_POOLED))


GT_POOLED = [0.1, 0.5, -0.3, 0.2, -0.2, 0.4]


def test_agreement_paired_ci_is_narrower_than_the_unpaired_one() -> None:
    # Two estimators that share most of their per-trace variation: their difference is known
    # much better than either mean.
    rng = np.random.default_rng(1)
    rows, truth = [], []
    for t in range(60):
        g = rng.normal(size=6)
        truth.append(g.tolist())
        noise = rng.normal(scale=2.0, size=6)
        rows.append((t, "a", (g + noise).tolist()))
        rows.append((t, "b", (g + noise + rng.normal(scale=0.3, size=6)).tolist()))
    gt = pl.DataFrame({"trace_index": list(range(60)), "sigma": truth, "values": truth})
    est = _estimates(rows)
    table = agreement_table(
        est, gt, (gt, gt), baseline_estimator="a", resamples=500, seed=0, step_up=2
    )
    b = table.filter(
        (pl.col("estimator") == "b") & (pl.col("target") == "credits"),
        pl.col("aggregation") == "per_trace",
    ).row(0, named=True)
    assert b["diff_ci95_high"] - b["diff_ci95_low"] < 0.5 * (b["ci95_high"] - b["ci95_low"])


def test_split_half_is_stepped_up_by_the_rollout_counts_and_skips_unscorable_halves() -> None:
    # Two halves that disagree by one swap in every trace: per-trace Spearman 0.5 each
    # ([1,2,3] vs [2,1,3]: 1 − 6·2/24), so the split half is 0.5 and, stepped up from halves of
    # 16 to 33 rollouts, the reliability is (33/16·0.5) / (1 + 17/16·0.5) = 0.6735.
    gt = pl.DataFrame(
        {
            "trace_index": [0, 1, 2],
            "sigma": [[1.0, 2.0, 3.0], [3.0, 1.0, 2.0], [2.0, 3.0, 1.0]],
            "values": [[1.0, 2.0, 3.0], [3.0, 1.0, 2.0], [2.0, 3.0, 1.0]],
        }
    )
    first = gt.with_columns(
        sigma=pl.Series([[1.0, 2.0, 3.0], [3.0, 1.0, 2.0], [1.0, 2.0, float("nan")]])
    )
    second = gt.with_columns(sigma=pl.Series([[2.0, 1.0, 3.0], [3.0, 2.0, 1.0], [2.0, 3.0, 1.0]]))
    est = _estimates([(t, "a", v) for t, v in enumerate(gt["sigma"].to_list())])
    table = agreement_table(
        est, gt, (first, second), baseline_estimator="a", resamples=200, seed=0, step_up=33 / 16
    )
    r = table.filter((pl.col("target") == "credits") & (pl.col("aggregation") == "per_trace"))
    r = r.row(0, named=True)
    # trace 2's first half has an unfinished state: out of the split half (counted), not 0
    assert r["split_half_excluded"] == 1
    assert r["split_half_rho"] == pytest.approx(0.5)
    assert r["reliability"] == pytest.approx((33 / 16 * 0.5) / (1 + 17 / 16 * 0.5))
    assert r["ceiling"] == pytest.approx(math.sqrt(r["reliability"]))
    assert r["step_up"] == pytest.approx(33 / 16)
    pooled = table.filter((pl.col("target") == "credits") & (pl.col("aggregation") == "pooled"))
    pooled = pooled.row(0, named=True)
    assert pooled["split_half_excluded"] == 1  # one state of 9
    assert pooled["split_half_rho"] == pytest.approx(
        spearman([1, 2, 3, 3, 1, 2, 1, 2], [2, 1, 3, 3, 2, 1, 2, 3])
    )


def test_split_half_step_up_reads_the_rollout_count() -> None:
    rollouts = pl.DataFrame({"rollout": list(range(33))})
    assert split_half_step_up(rollouts) == pytest.approx(33 / 16)
    assert split_half_step_up(pl.DataFrame({"rollout": list(range(32))})) == 2.0


def test_percentile_ci_reports_the_share_it_left_out() -> None:
    ci = percentile_ci(np.array([0.0, 1.0, np.nan, 2.0]))
    assert ci.dropped_share == 0.25
    assert (ci.low, ci.high) == pytest.approx(tuple(np.percentile([0.0, 1.0, 2.0], [2.5, 97.5])))
    assert math.isnan(percentile_ci(np.array([np.nan])).low)


def test_kendall_tau_b_hand_cases_and_flat() -> None:
    # 4 items, one discordant pair of 6: (5 − 1) / 6
    assert kendall_flat0([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    # ties: x = [1,1,2] has 2 untied pairs, y = [1,2,3] 3; concordant 2: 2 / √6
    assert kendall_flat0([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / math.sqrt(6))
    assert kendall_flat0([1, 1, 1], [1, 2, 3]) == 0.0
    assert kendall_flat0([3, 2, 1], [1, 2, 3]) == -1.0
    assert math.isnan(kendall_flat0([1.0], [2.0]))
    # K = 2: τ-b and Spearman agree (±1); the sweep's statistic is τ-b
    assert kendall_flat0([1, 2], [2, 3]) == spearman([1, 2], [2, 3]) == 1.0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=2, max_size=10))
def test_kendall_tau_b_counts_pairs(pairs: list[tuple[int, int]]) -> None:
    x, y = [float(a) for a, _ in pairs], [float(b) for _, b in pairs]
    conc = disc = tx = ty = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
            tx += dx != 0
            ty += dy != 0
            conc += dx * dy > 0
            disc += dx * dy < 0
    want = 0.0 if tx == 0 or ty == 0 else (conc - disc) / math.sqrt(tx * ty)
    assert kendall_flat0(x, y) == pytest.approx(want)


def test_kendall_tau_b_expectation_does_not_depend_on_k() -> None:
    """A state's estimate is its true value plus noise, (X, Y) = (g + e, g) with g ~ N(0, 1) and
    e ~ N(0, 0.8²), a bivariate normal of correlation ρ = 1/√1.64. Its τ has the expectation
    (2/π)·arcsin ρ at every K (no ties), while Spearman's, 6/(π(K+1))·[arcsin ρ + (K−2)·
    arcsin(ρ/2)] (Moran 1948), rises with K: the reason the sweep compares K by τ-b. Each mean
    over 10,000 simulated traces lies within 4 standard errors of its expectation (at K = 2 the
    two statistics are the same ±1)."""
    rng = np.random.default_rng(3)
    rho = 1 / math.sqrt(1 + 0.8**2)
    tau_mean = 2 / math.pi * math.asin(rho)  # 0.570

    def spearman_mean(k: int) -> float:
        return 6 / (math.pi * (k + 1)) * (math.asin(rho) + (k - 2) * math.asin(rho / 2))

    n = 10_000
    for k in (2, 3, 6):
        g = rng.normal(size=(n, k))
        x = g + rng.normal(scale=0.8, size=(n, k))
        stats = [(kendall_flat0, tau_mean)] + [(spearman_flat0, spearman_mean(k))] * (k > 2)
        for stat, want in stats:
            values = np.array([stat(a, b) for a, b in zip(x, g, strict=True)])
            se = values.std(ddof=1) / math.sqrt(n)
            assert abs(values.mean() - want) < 4 * se, (stat.__name__, k, values.mean(), want)
    assert spearman_mean(2) == pytest.approx(tau_mean)  # K = 2: both are ±1
    assert spearman_mean(6) - spearman_mean(2) > 0.1  # 0.682 against 0.570


def test_null_estimates_know_only_the_return() -> None:
    traces = pl.DataFrame({"trace_index": [0, 1], "reward": [1.0, 0.0]})
    seg = pl.DataFrame({"trace_index": [0, 1], "num_segments": [3, 2]})
    null = null_estimates(traces, seg)
    # Φ_k = R at every state: constant within a trace, different between traces; σ all 0
    assert null["values"].to_list() == [[1.0] * 3, [0.0] * 2]
    assert null["sigma"].to_list() == [[0.0, 0.0, 0.0], [0.0, 0.0]]
    assert set(null["estimator"]) == {NULL}


def test_null_row_explains_what_r_explains_and_nothing_within_a_trace() -> None:
    # Ground-truth values that track the outcome: higher in the correct traces.
    traces = pl.DataFrame({"trace_index": [0, 1, 2, 3], "reward": [1.0, 0.0, 1.0, 0.0]})
    seg = pl.DataFrame({"trace_index": [0, 1, 2, 3], "num_segments": [3, 3, 3, 3]})
    values = [[0.6, 0.7, 0.9], [0.5, 0.3, 0.1], [0.5, 0.8, 0.95], [0.4, 0.35, 0.2]]
    sigmas = [[0.1, 0.2, 0.1], [-0.2, -0.2, -0.1], [0.3, 0.15, 0.05], [-0.05, -0.15, -0.2]]
    gt = pl.DataFrame({"trace_index": [0, 1, 2, 3], "sigma": sigmas, "values": values})
    null = null_estimates(traces, seg)
    table = agreement_table(
        null, gt, (gt, gt), baseline_estimator=NULL, resamples=100, seed=0, step_up=2
    )
    row = {(r["target"], r["aggregation"]): r["rho"] for r in table.iter_rows(named=True)}
    assert row["values", "per_trace"] == 0.0  # constant within each trace
    assert row["values", "pooled"] == pytest.approx(
        spearman([1.0] * 3 + [0.0] * 3 + [1.0] * 3 + [0.0] * 3, [v for x in values for v in x])
    )
    assert row["values", "pooled"] > 0.7
    assert row["credits", "per_trace"] == 0.0 and row["credits", "pooled"] == 0.0


def _cost_table(ref_rho: float = 0.6) -> pl.DataFrame:
    rows = [
        ("mc_n1", "mc", 1, 0.2, "worse", 10.0),
        ("mc_n2", "mc", 2, 0.4, "no difference", 20.0),
        ("mc_n4", "mc", 4, 0.8, "better", 40.0),
        ("ref", "rredcot", None, ref_rho, "reference", 5.0),
    ]
    return pl.DataFrame(
        {
            "target": ["credits"] * 4,
            "aggregation": ["per_trace"] * 4,
            "estimator": [r[0] for r in rows],
            "family": [r[1] for r in rows],
            "n_rollouts": [r[2] for r in rows],
            "rho": [r[3] for r in rows],
            "verdict": [r[4] for r in rows],
            "forward_tokens_per_trace": [r[5] for r in rows],
            "seconds_per_trace": [r[5] / 10 for r in rows],
        }
    )


def test_cost_match_crosses_in_log2_n_and_costs_linearly_in_n() -> None:
    table = _cost_table()
    m = cost_match(table, "ref").row(0, named=True)
    n_eq = 2**1.5  # ρ 0.6 halfway between N = 2 (0.4) and N = 4 (0.8) in log2 N
    assert m["n_equal"] == pytest.approx(n_eq)
    assert m["mc_better_from_n"] == 4 and m["mc_worse_up_to_n"] == 1
    # tokens are linear in N: 20 + (2.83 − 2)/2 · 20 = 28.3 tokens, over the reference's 5
    assert m["token_ratio"] == pytest.approx(np.interp(n_eq, [1, 2, 4], [10, 20, 40]) / 5)
    assert m["token_ratio"] == pytest.approx(n_eq * 10 / 5)
    above = cost_match(_cost_table(0.9), "ref").row(0, named=True)
    assert math.isinf(above["n_equal"]) and "beyond the largest N" in above["note"]
    assert math.isnan(above["token_ratio"])
    below = cost_match(_cost_table(0.1), "ref").row(0, named=True)
    assert below["n_equal"] == 1.0 and "smallest N" in below["note"]


def test_cost_match_ci_from_the_shared_resamples() -> None:
    table = _cost_table()
    n_res = 200
    ref = np.full(n_res, 0.6)
    # MC-4's agreement varies across resamples: 0.8 (crossing 2^1.5), 0.62 (just above the
    # reference: crossing near 4) and 0.5 (never reaches it) in 50 / 45 / 5 percent
    mc4 = np.array([0.8] * 100 + [0.62] * 90 + [0.5] * 10)
    samples = {
        ("credits", "per_trace"): {
            "ref": ref,
            "mc_n1": np.full(n_res, 0.2),
            "mc_n2": np.full(n_res, 0.4),
            "mc_n4": mc4,
        }
    }
    m = cost_match(table, "ref", samples).row(0, named=True)
    assert m["share_beyond_max_n"] == pytest.approx(0.05)
    assert m["share_at_min_n"] == 0.0
    assert m["n_equal_ci95_low"] == pytest.approx(2**1.5)
    assert math.isinf(m["n_equal_ci95_high"])  # 5% of resamples beyond N = 4 > the 2.5% tail
    assert m["token_ratio_ci95_low"] == pytest.approx(2**1.5 * 10 / 5)
    assert math.isinf(m["token_ratio_ci95_high"])
    # Fewer resamples beyond the largest N than the tail: a finite upper bound
    samples["credits", "per_trace"]["mc_n4"] = np.array([0.8] * 100 + [0.62] * 99 + [0.5])
    m = cost_match(table, "ref", samples).row(0, named=True)
    high = 2 ** (1 + (0.6 - 0.4) / (0.62 - 0.4))
    assert m["n_equal_ci95_high"] == pytest.approx(high)
    assert m["token_ratio_ci95_high"] == pytest.approx(high * 10 / 5)


def test_correlation_matrix_symmetric_on_the_common_set() -> None:
    est = _estimates(
        [
            (0, "a", [1.0, 2.0, 3.0]),
            (1, "a", [3.0, 1.0, 2.0]),
            (2, "a", [1.0, 2.0, 3.0]),
            (0, "b", [3.0, 2.0, 1.0]),
            (1, "b", [3.0, 1.0, 2.0]),
            (2, "b", [1.0, 1.0, 1.0]),  # flat: scored 0 against a
        ]
    )
    m = correlation_matrix(est)
    values = m.select("a", "b").to_numpy()
    assert np.allclose(values, values.T)
    assert values[0, 0] == pytest.approx(1.0)
    assert values[0, 1] == pytest.approx(0.0)  # −1, +1, 0
    assert values[1, 1] == pytest.approx(2 / 3)  # b's flat trace scores 0 even against itself
    assert m["n_traces"][0] == 3


# --- rollout tables -----------------------------------------------------------------------------


def _rollouts(rows: list[tuple[int, int, int, int, bool, str, float]]) -> pl.DataFrame:
    names = ["trace_index", "char_pos", "rollout", "num_tokens", "eos_ended", "finish_reason"]
    data = {n: [r[i] for r in rows] for i, n in enumerate(names)}
    data["reward"] = [r[6] for r in rows]
    data["prefill_tokens"] = [10] * len(rows)
    return pl.DataFrame(data, schema=ROLLOUT_SCHEMA)


ROLLOUTS = _rollouts(
    [
        (0, 0, 0, 5, False, "stop", 1.0),
        (0, 0, 1, 9, True, "stop", 0.0),  # EOS after 9 tokens: needs a budget of 10
        (0, 0, 2, 20, False, "length", 0.0),
        (0, 0, 3, 8, False, "stop", 1.0),
        (0, 4, 0, 3, False, "stop", 1.0),
        (0, 4, 1, 3, False, "stop", 1.0),
        (0, 4, 2, 3, False, "stop", 0.0),
        (0, 4, 3, 3, False, "stop", 1.0),
    ]
)


def test_state_values_drop_zero_and_budget_cut() -> None:
    drop = state_values(ROLLOUTS, truncation="drop").rows()
    assert drop[0][:3] == (0, 0, pytest.approx(2 / 3))
    assert drop[1][:3] == (0, 4, pytest.approx(0.75))
    zero = state_values(ROLLOUTS, truncation="zero")["value"].to_list()
    assert zero == pytest.approx([0.5, 0.75])
    cut = state_values(ROLLOUTS, budget=9, truncation="drop").row(0, named=True)
    assert (cut["n_finished"], cut["n_truncated"]) == (2, 2)  # 5 and 8 fit; 9+EOS does not
    assert cut["value"] == pytest.approx(1.0)
    assert state_values(ROLLOUTS, budget=10, truncation="drop")["n_finished"][0] == 3
    none = state_values(ROLLOUTS, budget=2, truncation="drop")["value"].to_list()
    assert all(math.isnan(v) for v in none)
    assert state_values(ROLLOUTS, budget=2, truncation="zero")["value"].to_list() == [0.0, 0.0]


def test_state_values_subsets_of_rollouts() -> None:
    first = state_values(ROLLOUTS, n=2)["value"].to_list()
    second = state_values(ROLLOUTS, n=2, first_rollout=2)["value"].to_list()
    assert first == pytest.approx([0.5, 1.0])
    assert second == pytest.approx([1.0, 0.5])
    with pytest.raises(ValueError, match="fewer"):
        state_values(ROLLOUTS, n=5)
    with pytest.raises(ValueError, match="truncation"):
        state_values(ROLLOUTS, truncation="keep")


def test_truncation_modes_match_the_mc_module() -> None:
    assert rollouts_module.TRUNCATION == TRUNCATION


def test_sigma_from_values_ends_with_the_reward() -> None:
    sigma = sigma_from_values([0, 4, 9], {0: 0.5, 4: 0.75}, reward=0.0)
    assert sigma.tolist() == pytest.approx([0.25, -0.75])
    assert math.isnan(sigma_from_values([0, 4, 9], {0: 0.5}, reward=1.0)[0])


def test_forward_tokens_count_prefill_and_new_tokens() -> None:
    assert forward_tokens_per_trace(ROLLOUTS) == {0: 8 * 10 + 5 + 9 + 20 + 8 + 4 * 3}
    assert forward_tokens_per_trace(ROLLOUTS, n=1) == {0: 2 * 10 + 5 + 3}


PROMPT = "a=1, b=2. c=a+b. d=c*b. Find d.\n"
RESPONSE = "c=a+b=1+2=3\nd=c*b=3*2=6\nAnswer: 6."


class ScriptedBackend:
    """Returns the scripted (text, finish_reason) rollouts of each prompt."""

    def __init__(self, script: dict[str, list[tuple[str, str]]]) -> None:
        self.script = script

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[Completion]:
        out = []
        for p, prompt in enumerate(prompts):
            for s, (text, reason) in enumerate(self.script[prompt][: params.n]):
                ids = TOKENIZER(text, add_special_tokens=False)["input_ids"]
                out.append(Completion(p, s, text, ids, reason, len(ids)))
        return out


SCRIPT = {
    PROMPT: [
        (RESPONSE, "stop"),
        ("c=a+b=1+2=3\nd=c*b=3*2=5\nAnswer: 5.", "stop"),
        ("c=a+b=1+2=3\nd=c", "length"),
    ],
    PROMPT + RESPONSE[:11]: [
        ("\nd=c*b=3*2=6\nAnswer: 6.", "stop"),
        ("\nd=c*b=3*2=6\nAnswer: 2.", "stop"),
        ("\nd=c*b=3*2=6\nAnswer: 6.", "stop"),
    ],
}
TRACES = pl.DataFrame(
    {
        "trace_index": [0],
        "prompt": [PROMPT],
        "response": [RESPONSE],
        "answer": ["6"],
        "reward": [1.0],
    }
)


@pytest.mark.parametrize("truncation", ["drop", "zero"])
def test_rollout_table_agrees_with_mc_state_values(truncation: str) -> None:
    backend = ScriptedBackend(SCRIPT)
    states = pl.DataFrame({"trace_index": [0, 0], "char_pos": [0, 11]})
    run = sample_rollouts(backend, TASK, TRACES, states, n_rollouts=3, budget=64, seed=0)
    ours = state_values(run.rollouts, truncation=truncation)["value"].to_list()
    ref = mc_state_values(
        backend,
        TASK,
        PROMPT,
        RESPONSE,
        [0, 11, len(RESPONSE)],
        "6",
        n_rollouts=3,
        budget=64,
        truncation=truncation,
        seed=0,
    )
    assert ours == pytest.approx(ref.values[:-1].tolist())
    assert run.rollouts["eos_ended"].to_list() == [False] * 6  # each ends with "." or is cut


# --- segmentations, ground truth, truncation ----------------------------------------------------


TOKENIZER = build_byte_tokenizer()


def _trace_row(index: int, response: str, reward: float, error_start: int | None) -> dict:
    ids = TOKENIZER(response, add_special_tokens=False)["input_ids"]
    n = len(ids)
    return {
        "trace_index": index,
        "prompt": PROMPT,
        "response": response,
        "response_ids": ids,
        "token_texts": token_texts(TOKENIZER, ids),
        "num_tokens": n,
        "entropies": [float((j * 7) % 5) for j in range(n)],
        "logprobs": [-float((j * 3) % 4) for j in range(n)],
        "reward": reward,
        "answer": "6",
        "error_start": error_start,
    }


WRONG = "c=a+b=1+2=3\nd=c*b=3*2=5\nAnswer: 5."  # first error: line 2 (char 12)
STUDY_TRACES = pl.DataFrame(
    [_trace_row(0, RESPONSE, 1.0, None), _trace_row(1, WRONG, 0.0, 12), _trace_row(2, "", 0.0, 0)]
)


def test_token_texts_reassemble_multibyte_text() -> None:
    ids = TOKENIZER("é=1\n", add_special_tokens=False)["input_ids"]
    texts = token_texts(TOKENIZER, ids)
    assert "".join(texts) == "é=1\n" and len(texts) == len(ids) == 5
    assert texts[:2] == ["", "é"]
    broken = ids[:1] + ids[2:]  # the first byte of "é" alone never forms a character
    assert "".join(token_texts(TOKENIZER, broken)) == TOKENIZER.decode(broken) == "\ufffd=1\n"
    lone = ids[:1]
    assert token_texts(TOKENIZER, lone) == ["\ufffd"]


def test_error_char() -> None:
    assert error_char("abc\ndef", 4) == 4
    assert error_char("abc", 3) == 2  # the response ended before the step: its last character
    assert error_char("abc", None) is None and error_char("", 0) is None


def test_segmentation_table_and_distinct_states() -> None:
    base = SegmentationConfig(strategy="keyword", num_segments=3)
    configs = {MAIN: base, **sweep_configs(base, ["fixed"], [2])}
    seg = segmentation_table(STUDY_TRACES, TOKENIZER, configs, {"fixed_k2": [0]})
    assert seg.height == 3  # the empty trace has no row; fixed_k2 covers trace 0 only
    main0 = seg.filter((pl.col("segmentation") == MAIN) & (pl.col("trace_index") == 0)).row(
        0, named=True
    )
    assert main0["char_boundaries"] == [0, 11, 23, len(RESPONSE)]  # a cut before each "\n"
    fixed = seg.filter(pl.col("segmentation") == "fixed_k2").row(0, named=True)
    assert fixed["char_boundaries"] == [0, len(RESPONSE) // 2, len(RESPONSE)]
    states = distinct_states(seg)
    assert states.filter(pl.col("trace_index") == 0)["char_pos"].to_list() == [0, 11, 17, 23]
    assert states.height == 4 + 3


def _gt_rollouts(values: dict[tuple[int, int], list[float]]) -> pl.DataFrame:
    rows = []
    for (t, c), rewards in values.items():
        for i, r in enumerate(rewards):
            rows.append((t, c, i, 4 * (i + 1), False, "stop", r))
    return _rollouts(rows)


def test_ground_truth_sigmas_and_split_half() -> None:
    seg = pl.DataFrame(
        {
            "trace_index": [1],
            "segmentation": [MAIN],
            "char_boundaries": [[0, 11, 23, len(WRONG)]],
            "num_segments": [3],
        }
    )
    rollouts = _gt_rollouts({(1, 0): [1, 1, 0, 0], (1, 11): [1, 0, 1, 1], (1, 23): [0, 0, 0, 1]})
    gt = ground_truth_sigmas(STUDY_TRACES, seg, rollouts)
    # V = (0.5, 0.75, 0.25), R = 0 -> σ = (0.25, −0.5, −0.25)
    assert gt["sigma"][0].to_list() == pytest.approx([0.25, -0.5, -0.25])
    first, second = split_half(STUDY_TRACES, seg, rollouts)
    assert first["sigma"][0].to_list() == pytest.approx([-0.5, -0.5, 0.0])  # V = (1, .5, 0)
    assert second["sigma"][0].to_list() == pytest.approx([1.0, -0.5, -0.5])  # V = (0, 1, .5)


def test_truncation_table_hand_computed() -> None:
    states = pl.DataFrame({"trace_index": [0, 0], "char_pos": [0, 4]})
    table = truncation_table(ROLLOUTS, states, [4, 100], resamples=200, seed=0)
    assert table.height == 4
    row = table.filter((pl.col("budget") == 4) & (pl.col("truncation") == "drop")).row(
        0, named=True
    )
    # budget 4: state 0 keeps nothing (no estimate); state 4 keeps all four (no shift)
    assert row["truncated_share"] == pytest.approx(4 / 8)
    assert row["no_estimate_share"] == pytest.approx(0.5)
    assert row["mean_value_shift"] == pytest.approx(0.0)
    zero = table.filter((pl.col("budget") == 4) & (pl.col("truncation") == "zero")).row(
        0, named=True
    )
    assert zero["drop_rate"] == 0.0
    assert zero["mean_value_shift"] == pytest.approx((0.0 - 2 / 3 + 0.0) / 2)
    big = table.filter(pl.col("budget") == 100)
    assert big["truncated_share"].to_list() == pytest.approx([1 / 8, 1 / 8])


# --- localization and sweep ---------------------------------------------------------------------


def _seg_rows(label: str, bounds: dict[int, list[int]], strategy: str = "keyword") -> pl.DataFrame:
    return pl.DataFrame(
        {
            "trace_index": list(bounds),
            "segmentation": [label] * len(bounds),
            "strategy": [strategy] * len(bounds),
            "requested_segments": [len(b) - 1 for b in bounds.values()],
            "num_segments": [len(b) - 1 for b in bounds.values()],
            "boundaries": list(bounds.values()),
            "char_boundaries": list(bounds.values()),
        }
    )


def test_true_segments_and_localization_table() -> None:
    seg = _seg_rows(MAIN, {0: [0, 11, 23, len(RESPONSE)], 1: [0, 11, 23, len(WRONG)]})
    truth = true_segments(STUDY_TRACES, seg)
    assert truth.rows() == [(1, 3, 1)]  # only the incorrect, non-empty trace; error in segment 1
    est = _estimates(
        [
            (1, "right", [0.0, -2.0, 1.0]),
            (1, "tied", [0.0, -2.0, -2.0]),
            (1, "far", [-3.0, 0.0, 5.0]),
        ]
    )
    table = localization_table(est, truth, baseline_estimator="right", resamples=100, seed=0)
    got = {r["estimator"]: (r["top1"], r["within_one"]) for r in table.iter_rows(named=True)}
    assert got["random"] == pytest.approx((1 / 3, 1.0))
    assert got["right"] == (1.0, 1.0)
    assert got["tied"] == (0.5, 1.0)
    assert got["far"] == (0.0, 1.0)
    assert set(table["n_traces"].to_list()) == {1}
    diff = dict(table.select("estimator", "top1_diff_vs_reference").iter_rows())
    assert diff["far"] == -1.0 and diff["tied"] == -0.5 and diff["right"] == 0.0
    # an unusable σ (NaN) takes the trace out for every estimator, not for one
    nan = pl.concat([est, _estimates([(1, "broken", [float("nan"), 0.0, 1.0])])])
    none = localization_table(nan, truth, baseline_estimator="right", resamples=100, seed=0)
    assert none.height == 0


def test_localization_is_paired_over_the_same_traces() -> None:
    truth = pl.DataFrame(
        {"trace_index": list(range(40)), "num_segments": [4] * 40, "true_segment": [1] * 40}
    )
    rng = np.random.default_rng(0)
    rows = []
    for t in range(40):
        good = [0.0, -1.0, 0.0, 0.0] if t % 4 else [0.0, 0.0, -1.0, 0.0]  # right 3 times in 4
        rows += [(t, "ref", good), (t, "same", good), (t, "noise", rng.normal(size=4).tolist())]
    table = localization_table(
        _estimates(rows), truth, baseline_estimator="ref", resamples=400, seed=0
    )
    same = table.filter(pl.col("estimator") == "same").row(0, named=True)
    assert same["top1"] == pytest.approx(0.75)
    assert (same["diff_ci95_low"], same["diff_ci95_high"]) == (0.0, 0.0)  # identical: exactly 0
    assert same["verdict"] == "no difference"
    noise = table.filter(pl.col("estimator") == "noise").row(0, named=True)
    assert noise["verdict"] == "worse"


def test_sweep_table_rows_per_cell() -> None:
    bounds = {0: [0, 11, 23, len(RESPONSE)], 1: [0, 11, 23, len(WRONG)]}
    seg = pl.concat([_seg_rows("keyword_k3", bounds), _seg_rows("fixed_k3", bounds, "fixed")])
    rollouts = _gt_rollouts(
        {
            (0, 0): [1, 1, 0, 1],
            (0, 11): [1, 1, 1, 1],
            (0, 23): [1, 1, 1, 1],
            (1, 0): [1, 1, 0, 0],
            (1, 11): [1, 0, 1, 1],
            (1, 23): [0, 0, 0, 1],
        }
    )
    gt = ground_truth_sigmas(STUDY_TRACES, seg, rollouts)
    est = gt.select(
        "trace_index",
        "segmentation",
        "sigma",
        "values",
        estimator=pl.lit("rredcot_x"),
        family=pl.lit("rredcot"),
        n_rollouts=pl.lit(None, dtype=pl.Int64),
        forward_tokens=pl.lit(7, dtype=pl.Int64),
        backward_tokens=pl.lit(0, dtype=pl.Int64),
        seconds=pl.lit(0.1),
        cost_basis=pl.lit("own pass"),
    )
    halves = split_half(STUDY_TRACES, seg, rollouts)
    table = sweep_table(
        STUDY_TRACES,
        seg,
        est,
        gt,
        halves,
        estimator="rredcot_x",
        resamples=100,
        seed=0,
        step_up=split_half_step_up(rollouts),
        mid_line={"keyword_k3": (4, 0), "fixed_k3": (4, 3)},
    )
    assert table["segmentation"].to_list() == ["keyword_k3", "fixed_k3"]
    assert table["credits_tau_b"].to_list() == pytest.approx([1.0, 1.0])  # σ = σ_gt
    assert table["values_tau_b"].to_list() == pytest.approx([1.0, 1.0])  # V = V_gt
    assert table["n_mid_line_states"].to_list() == [0, 3]
    assert table["top1_rredcot_x"].to_list() == table["top1_ground_truth"].to_list()
    assert table["top1_random"].to_list() == pytest.approx([1 / 3, 1 / 3])
    assert table["n_incorrect"].to_list() == [1, 1]


# --- traces and figures -------------------------------------------------------------------------


PROGRAM = Program(10, (("a", 1), ("b", 2)), (Step("c", "a", "+", "b"), Step("d", "c", "*", "b")))


def test_sample_traces_grades_and_step_checks() -> None:
    problems = pl.DataFrame(
        {
            "id": ["p0", "p1"],
            "problem": ["a=1, b=2. c=a+b. d=c*b. Find d.", "a=1, b=2. c=a+b. d=c*b. Find d!"],
            "answer": ["6", "6"],
            "reference": [RESPONSE, None],
            "program": [PROGRAM.to_json(), PROGRAM.to_json()],
        }
    )
    script = {PROMPT: [(RESPONSE, "stop")], "a=1, b=2. c=a+b. d=c*b. Find d!\n": [(WRONG, "stop")]}
    traces = sample_traces(
        ScriptedBackend(script),
        TASK,
        problems,
        TOKENIZER,
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=64,
        seed=0,
    )
    assert traces["reward"].to_list() == [1.0, 0.0]
    assert traces["first_error"].to_list() == [None, 2]
    assert traces["error_start"].to_list() == [None, 12]
    assert traces["reference"].to_list() == [RESPONSE, None]  # a missing reference is kept
    assert ["".join(t) for t in traces["token_texts"].to_list()] == [RESPONSE, WRONG]


def _png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_figures_are_written(tmp_path: Path) -> None:
    names = ["mc_n1", "mc_n4", "rredcot_ref_suffix_sum", "rredcot_ref_suffix_sum_joint", "loo"]
    families = ["mc", "mc", "rredcot", "rredcot", "attribution", "null"]
    rows = []
    for target in ("values", "credits"):
        for aggregation in ("per_trace", "pooled"):
            for i, (name, family) in enumerate(zip([*names, NULL], families, strict=True)):
                if target == "values" and family == "attribution":
                    continue
                rows.append(
                    {
                        "target": target,
                        "aggregation": aggregation,
                        "estimator": name,
                        "family": family,
                        "n_rollouts": [1, 4][i] if family == "mc" else None,
                        "rho": 0.1 * i,
                        "ci95_low": 0.1 * i - 0.05,
                        "ci95_high": 0.1 * i + 0.05,
                        "ceiling": 0.8,
                        "ceiling_ci95_low": 0.75,
                        "ceiling_ci95_high": 0.85,
                        "n_traces": 10,
                        "forward_tokens_per_trace": [500.0, 2000.0, 800.0, 900.0, 400.0, 0.0][i],
                    }
                )
    agreement = pl.DataFrame(rows)
    figures.estimator_agreement_figure(
        agreement, tmp_path / "a.png", baseline_estimator="rredcot_ref_suffix_sum"
    )
    matrix = pl.DataFrame({"estimator": ["mc_n1", "loo"], "mc_n1": [1.0, 0.3], "loo": [0.3, 1.0]})
    figures.correlation_heatmap(matrix, tmp_path / "c.png")
    local = pl.DataFrame(
        {
            "trace_set": ["all_incorrect", "other_path"],
            "estimator": ["random", "loo"],
            "top1": [0.25, 0.5],
            "top1_ci95_low": [0.25, 0.3],
            "top1_ci95_high": [0.25, 0.7],
            "within_one": [0.6, 0.8],
            "within_one_ci95_low": [0.6, 0.7],
            "within_one_ci95_high": [0.6, 0.9],
            "n_traces": [10, 10],
        }
    )
    figures.error_localization_figure(local, tmp_path / "l.png")
    trunc = pl.DataFrame(
        {
            "budget": [8, 8, 64, 64],
            "truncation": ["drop", "zero", "drop", "zero"],
            "truncated_share": [0.9, 0.9, 0.1, 0.1],
            "no_estimate_share": [0.5, 0.0, 0.0, 0.0],
            "mean_value_shift": [0.1, -0.5, 0.0, -0.05],
            "ci95_low": [0.0, -0.6, 0.0, -0.1],
            "ci95_high": [0.2, -0.4, 0.0, 0.0],
        }
    )
    figures.mc_truncation_figure(trunc, tmp_path / "t.png")
    sweep = pl.DataFrame(
        {
            "strategy": ["fixed", "fixed", "hybrid", "hybrid"],
            "requested_segments": [2, 4, 2, 4],
            "credits_tau_b": [0.3, 0.4, 0.5, 0.6],
            "credits_ci95_low": [0.2, 0.3, 0.4, 0.5],
            "credits_ci95_high": [0.4, 0.5, 0.6, 0.7],
            "top1_rredcot_x": [0.6, 0.4, 0.7, 0.5],
            "top1_ground_truth": [0.6, 0.5, 0.6, 0.5],
            "top1_random": [0.5, 0.25, 0.5, 0.25],
        }
    )
    figures.segmentation_sweep_figure(sweep, tmp_path / "s.png", estimator="rredcot_x")
    assert all(_png(tmp_path / f"{n}.png") for n in "actls")
    assert figures.display_name("mc_n16") == "MC N=16"
    assert figures.display_name("rredcot_ref_path_ratio") == "RREDCoT ref_path_ratio"


@pytest.mark.parametrize("columns", [[], ["target", "estimator", "rho"]], ids=["none", "header"])
def test_every_figure_of_a_table_without_rows_says_so(tmp_path, columns):
    """A study that finds nothing (the CPU rehearsal's stand-in base is never right) writes its
    table header only; every figure drawn from such a table states "no rows", not an error."""
    from rredcot.reporting.credit_attribution import plot_attribution
    from rredcot.reporting.credit_regimes import plot_credit_regimes
    from rredcot.reporting.learning_curves import plot_learning_curves
    from rredcot.reporting.training import plot_training_curves

    empty = pl.DataFrame(schema=dict.fromkeys(columns, pl.String))
    draws = {
        "agreement": figures.estimator_agreement_figure,
        "correlation": figures.correlation_heatmap,
        "localization": figures.error_localization_figure,
        "truncation": figures.mc_truncation_figure,
        "sweep": lambda t, p: figures.segmentation_sweep_figure(t, p, estimator="rredcot_x"),
        "frontier": figures.estimator_frontier_figure,
        "learning": plot_learning_curves,
        "training": plot_training_curves,
        "regimes": plot_credit_regimes,
        "attribution": plot_attribution,
    }
    for name, draw in draws.items():
        assert _png(draw(empty, tmp_path / f"{name}.png")), name


# --- the budget cut after the fact equals a run with the smaller budget --------------------------


@pytest.fixture(scope="module")
def tiny_backend(tmp_path_factory: pytest.TempPathFactory) -> HFBackend:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    config = Qwen3Config(
        vocab_size=len(TOKENIZER),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=TOKENIZER.pad_token_id,
        bos_token_id=TOKENIZER.bos_token_id,
        eos_token_id=TOKENIZER.eos_token_id,
    )
    torch.manual_seed(3)
    model = Qwen3ForCausalLM(config)  # near-uniform: "." or EOS ends ~1 in 130 steps
    path = tmp_path_factory.mktemp("studies_qwen3")
    model.save_pretrained(path)
    TOKENIZER.save_pretrained(path)
    yield HFBackend.from_pretrained(str(path), batch_size=32, show_progress=False, device="cpu")
    torch.set_num_threads(threads)


def test_budget_cut_after_the_fact_matches_a_real_run(tiny_backend: HFBackend) -> None:
    states = pl.DataFrame({"trace_index": [0, 0, 0], "char_pos": [0, 11, 23]})
    kw = {"n_rollouts": 6, "seed": 5, "tokenizer": TOKENIZER}
    long = sample_rollouts(tiny_backend, TASK, TRACES, states, budget=40, **kw).rollouts
    for budget in (3, 12):
        short = sample_rollouts(tiny_backend, TASK, TRACES, states, budget=budget, **kw).rollouts
        for mode in ("drop", "zero"):
            cut = state_values(long, budget=budget, truncation=mode)
            real = state_values(short, truncation=mode)
            assert cut["n_finished"].to_list() == real["n_finished"].to_list()
            assert cut["value"].to_list() == pytest.approx(real["value"].to_list(), nan_ok=True)
    finished = long.filter(pl.col("finish_reason") == "stop")
    assert 0 < finished.height < long.height  # both kinds occur, so the check has teeth
    assert long["prefill_tokens"].to_list()[::6] == [
        len(PROMPT),
        len(PROMPT) + 11,
        len(PROMPT) + 23,
    ]


# --- the study set: depths in the accuracy band, the agreement subset, other paths ---------------


def test_select_study_set_keeps_the_depths_in_the_band() -> None:
    # depth 3: 4/5 right (0.8, out); depth 4: 2/4 (0.5, in); depth 5: 1/4 (0.25, out)
    rewards = {3: [1, 1, 1, 1, 0], 4: [1, 0, 1, 0], 5: [0, 0, 1, 0]}
    depth, reward = [], []
    for d, rs in rewards.items():
        depth += [d] * len(rs)
        reward += [float(r) for r in rs]
    traces = pl.DataFrame(
        {"trace_index": list(range(len(depth))), "depth": depth, "reward": reward}
    ).sample(fraction=1.0, shuffle=True, seed=3)
    kept, table = select_study_set(traces, [0.3, 0.7], agreement_traces=3)
    assert kept["depth"].unique().to_list() == [4]
    assert kept["trace_index"].to_list() == [5, 6, 7, 8]  # in trace order
    assert kept["agreement"].to_list() == [True, True, True, False]
    assert table.select("depth", "n_traces", "kept").rows() == [
        (3, 5, False),
        (4, 4, True),
        (5, 4, False),
    ]
    assert table.filter(pl.col("depth") == 4)["accuracy"][0] == 0.5
    low, high = wilson_interval(2, 4)
    assert low < 0.5 < high and low > 0 and high < 1
    everything, _ = select_study_set(traces, None, agreement_traces=None)
    assert everything.height == traces.height and everything["agreement"].all()
    with pytest.raises(ValueError, match="accuracy_band"):
        select_study_set(traces, [0.9, 1.0], agreement_traces=None)


def test_reference_kinds_and_overlaps_beside_every_trace() -> None:
    # c = a+b commutes, d = c*b commutes; the configured reference is the canonical solution
    prog = PROGRAM
    canonical = prog.solution_text()
    swapped = "c=b+a=2+1=3\nd=c*b=3*2=6\nAnswer: 6."
    traces = pl.DataFrame({"response": [canonical, swapped], "reference": [canonical] * 2})
    out = with_reference_kinds(traces, [prog.to_json()] * 2, [None, canonical])
    assert out["reference_own_path"].to_list() == [canonical, prog.solution_text(commuted=("c",))]
    assert out["reference_sampled"].to_list() == [None, canonical]
    assert out["overlap"].to_list() == [1.0, 0.5]  # the swapped trace shares d's line only
    assert out["overlap_own_path"].to_list() == [1.0, 1.0]  # the oracle follows the trace
    assert out["overlap_sampled"].to_list() == [None, 0.5]
    for ref in out["reference_own_path"]:
        assert check_response(prog, ref).first_error is None
    none = with_reference_kinds(pl.DataFrame({"response": ["x"], "reference": [None]}), [None])
    assert none["reference_own_path"][0] is None and "reference_sampled" not in none.columns
    assert [overlap_bin(v) for v in (0.0, 0.49, 0.5, 0.99, 1.0, None)] == [
        "overlap<0.5",
        "overlap<0.5",
        "0.5<=overlap<1",
        "0.5<=overlap<1",
        "overlap=1",
        None,
    ]


def test_the_study_pool_is_disjoint_from_the_world_and_leaves_it_alone() -> None:
    config = WorldConfig(chain="bijective", shape="chain", avoid_misconception=None)
    world = make_world(SplitSpec(50, (2, 3)), {"synth_id": SplitSpec(20, (3,))}, 7, config)
    taken = frozenset(p for df in world.values() for p in df["problem"].to_list())
    pool = make_study_pool(SplitSpec(40, (2, 3)), 7, config, taken)
    assert pool.height == 40 and not set(pool["problem"]) & taken
    assert pool["id"][0] == "synth-study_pool-00000"
    again = make_world(SplitSpec(50, (2, 3)), {"synth_id": SplitSpec(20, (3,))}, 7, config)
    assert all(again[k].equals(world[k]) for k in world)  # the world does not know the pool


def test_localization_sets_by_reference_kind_and_overlap_bin() -> None:
    truth = pl.DataFrame({"trace_index": [0, 1], "num_segments": [3, 3], "true_segment": [0, 2]})
    est = _estimates([(0, "rredcot_a", [0.0, 1.0, 2.0]), (0, "rredcot_a_own_path", [1, 0, 2])])
    est = est.with_columns(family=pl.lit("rredcot"))
    sets = localization_sets(truth, truth.head(1), est, baseline_estimator="rredcot_a")
    assert list(sets) == ["all_incorrect", "agreement_incorrect"]
    assert sorted(sets["all_incorrect"][1]["estimator"]) == ["rredcot_a", "rredcot_a_own_path"]
    assert sets["agreement_incorrect"][1]["estimator"].to_list() == ["rredcot_a"]
    bins = {"overlap<0.5": [1], "overlap=1": [0, 5], "0.5<=overlap<1": []}
    sets = localization_sets(
        truth, truth.head(1), est, baseline_estimator="rredcot_a", overlap_subsets=bins
    )
    assert list(sets)[2:] == ["incorrect overlap<0.5", "incorrect overlap=1"]  # empty bin: none
    assert sets["incorrect overlap<0.5"][0]["trace_index"].to_list() == [1]
    assert rredcot_name("a", "joint", "own_path") == "rredcot_a_joint_own_path"
    assert [reference_kind(n) for n in ("rredcot_a", "rredcot_a_sampled", "mc_n4")] == [
        "configured",
        "sampled",
        None,
    ]


def test_agreement_per_trace_statistic_is_selectable() -> None:
    # one trace of 4 states with one adjacent swap: Spearman 0.8, Kendall τ-b 4/6
    gt = pl.DataFrame(
        {"trace_index": [0], "sigma": [[1.0, 2.0, 3.0, 4.0]], "values": [[1.0, 2.0, 3.0, 4.0]]}
    )
    est = _estimates([(0, "a", [1.0, 3.0, 2.0, 4.0])])
    common = dict(baseline_estimator="a", resamples=50, seed=0, step_up=2)
    kendall = agreement_table(est, gt, (gt, gt), statistic="kendall", **common)
    spear = agreement_table(est, gt, (gt, gt), **common)
    pick = (pl.col("target") == "credits") & (pl.col("aggregation") == "per_trace")
    assert kendall.filter(pick)["rho"][0] == pytest.approx(4 / 6)
    assert kendall.filter(pick)["statistic"][0] == "kendall"
    assert spear.filter(pick)["rho"][0] == pytest.approx(0.8)
    with pytest.raises(ValueError, match="statistic"):
        agreement_table(est, gt, (gt, gt), statistic="pearson", **common)


def _rule_table(reference: str, diff: tuple[float, float, float], traces: str = "all"):
    other = "rredcot_v_joint" if reference == "rredcot_v" else "rredcot_v"
    rows = [
        ("credits", "per_trace", reference, 0.5, "reference", None, None, None),
        ("credits", "per_trace", other, 0.5 + diff[0], "x", *diff),
        ("credits", "pooled", other, 0.9, "x", 0.4, 0.3, 0.5),  # another aggregation: ignored
    ]
    cols = ["target", "aggregation", "estimator", "rho", "verdict"]
    cols += ["diff_vs_reference", "diff_ci95_low", "diff_ci95_high"]
    table = pl.DataFrame(rows, schema=cols, orient="row").with_columns(
        n_traces=pl.lit(256), traces=pl.lit(traces)
    )
    return table


@pytest.mark.parametrize(
    ("reference", "diff", "choice"),
    [
        ("rredcot_v", (0.05, 0.01, 0.09), "joint"),  # joint − conditional CI above 0
        ("rredcot_v", (0.05, -0.01, 0.09), "conditional"),  # spans 0: keep conditional
        ("rredcot_v", (-0.05, -0.09, -0.01), "conditional"),
        ("rredcot_v_joint", (-0.05, -0.09, -0.01), "joint"),  # conditional − joint below 0
        ("rredcot_v_joint", (0.05, 0.01, 0.09), "conditional"),
    ],
)
def test_preregistered_answer_now_rule(reference, diff, choice) -> None:
    rule = preregistered_answer_now(_rule_table(reference, diff), "v")
    assert rule["choice"] == choice
    sign = 1 if reference == "rredcot_v" else -1
    assert rule["diff_joint_minus_conditional"] == pytest.approx(sign * diff[0])
    assert rule["diff_ci95_low"] <= rule["diff_joint_minus_conditional"] <= rule["diff_ci95_high"]
    with pytest.raises(ValueError, match="no per-trace credit row"):
        preregistered_answer_now(_rule_table(reference, diff, traces="overlap=1"), "v")
