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
from rredcot.data.synthetic import Program, Step
from rredcot.generation import Completion, SamplingParams
from rredcot.generation.hf import HFBackend
from rredcot.models.tokenizer import build_byte_tokenizer
from rredcot.reporting import figures
from rredcot.segmentation import SegmentationConfig
from rredcot.studies import rollouts as rollouts_module
from rredcot.studies.agreement import (
    agreement_table,
    correlation_matrix,
    matching_mc_n,
    per_trace_spearman,
    pooled_spearman,
    undefined_reason,
)
from rredcot.studies.ground_truth import ground_truth_sigmas, split_half
from rredcot.studies.localization import localization_table, true_segments
from rredcot.studies.metrics import (
    argmin_set,
    bootstrap_mean_ci,
    localization_hits,
    random_localization,
    rankdata,
    spearman,
)
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
from rredcot.studies.sweep import sweep_table
from rredcot.studies.traces import error_char, sample_traces, token_texts
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


def _estimates(rows: list[tuple[int, str, list[float]]], family: str = "mc") -> pl.DataFrame:
    return pl.DataFrame(
        {
            "trace_index": [r[0] for r in rows],
            "estimator": [r[1] for r in rows],
            "family": [family] * len(rows),
            "n_rollouts": [None] * len(rows),
            "sigma": [r[2] for r in rows],
            "forward_tokens": [100] * len(rows),
            "backward_tokens": [0] * len(rows),
            "seconds": [0.5] * len(rows),
        },
        schema_overrides={"n_rollouts": pl.Int64, "sigma": pl.List(pl.Float64)},
    )


GT = pl.DataFrame(
    {
        "trace_index": [0, 1, 2],
        "sigma": [[0.1, 0.5, -0.3], [0.0, 0.0, 0.0], [0.2, -0.2, 0.4]],
    }
)


def test_undefined_reasons() -> None:
    assert undefined_reason([1.0], [2.0]) == "single_segment"
    assert undefined_reason([1.0, float("nan")], [1.0, 2.0]) == "missing"
    assert undefined_reason([1.0, 2.0], [0.0, 0.0]) == "flat_ground_truth"
    assert undefined_reason([1.0, 1.0], [0.0, 1.0]) == "flat_estimate"
    assert undefined_reason([1.0, 2.0], [0.0, 1.0]) is None


def test_agreement_table_hand_computed() -> None:
    est = _estimates(
        [
            (0, "good", [1.0, 2.0, 0.0]),  # same order as σ_gt: ρ = 1
            (1, "good", [1.0, 2.0, 3.0]),  # flat σ_gt: undefined
            (2, "good", [0.0, -1.0, 5.0]),  # same order: ρ = 1
            (0, "bad", [2.0, 1.0, 3.0]),  # reversed order of trace 0: ρ = −1
            (1, "bad", [1.0, 1.0, 1.0]),
            (2, "bad", [1.0, 1.0, 1.0]),  # flat estimate
        ]
    )
    table = agreement_table(est, GT, resamples=200, seed=0)
    good = table.filter(pl.col("estimator") == "good").row(0, named=True)
    bad = table.filter(pl.col("estimator") == "bad").row(0, named=True)
    assert good["spearman_mean"] == pytest.approx(1.0)
    assert (good["n_defined"], good["undefined_flat_ground_truth"]) == (2, 1)
    assert bad["spearman_mean"] == pytest.approx(-1.0)
    assert (bad["n_defined"], bad["undefined_flat_estimate"]) == (1, 1)
    assert bad["spearman_mean_flat_as_zero"] == pytest.approx(-0.5)  # (−1 + 0) / 2
    assert good["spearman_mean_flat_as_zero"] == pytest.approx(1.0)
    assert good["forward_tokens_per_trace"] == 100 and good["seconds_per_trace"] == 0.5
    rho = per_trace_spearman(est, GT)
    assert rho.filter(pl.col("reason").is_null()).height == 3


def test_pooled_spearman_skips_traces_with_nan() -> None:
    pairs = [([1.0, 2.0], [1.0, 2.0]), ([float("nan"), 0.0], [5.0, 6.0]), ([3.0, 4.0], [3.0, 4.0])]
    assert pooled_spearman(pairs) == pytest.approx(1.0)


def test_matching_mc_n_interpolates_in_log2() -> None:
    table = pl.DataFrame(
        {
            "family": ["mc", "mc", "mc", "rredcot"],
            "n_rollouts": [1, 2, 4, None],
            "spearman_mean": [0.2, 0.4, 0.8, 0.6],
        }
    )
    assert matching_mc_n(table, 0.6) == pytest.approx(2**1.5)
    assert matching_mc_n(table, 0.1) == 1.0
    assert math.isnan(matching_mc_n(table, 0.9))


def test_correlation_matrix_symmetric_with_unit_diagonal() -> None:
    est = _estimates(
        [
            (0, "a", [1.0, 2.0, 3.0]),
            (1, "a", [3.0, 1.0, 2.0]),
            (0, "b", [3.0, 2.0, 1.0]),
            (1, "b", [3.0, 1.0, 2.0]),
        ]
    )
    m = correlation_matrix(est)
    values = m.select("a", "b").to_numpy()
    assert np.allclose(values, values.T)
    assert values[0, 0] == pytest.approx(1.0)
    assert values[0, 1] == pytest.approx(0.0)  # −1 on trace 0, +1 on trace 1


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
    table = localization_table(est, truth, resamples=100, seed=0)
    got = {r["estimator"]: (r["top1"], r["within_one"]) for r in table.iter_rows(named=True)}
    assert got["random"] == pytest.approx((1 / 3, 1.0))
    assert got["right"] == (1.0, 1.0)
    assert got["tied"] == (0.5, 1.0)
    assert got["far"] == (0.0, 1.0)
    assert set(table["n_traces"].to_list()) == {1}


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
    est = pl.concat(
        [
            gt.select(
                "trace_index",
                "segmentation",
                "sigma",
                estimator=pl.lit("rredcot_x"),
                family=pl.lit("rredcot"),
                n_rollouts=pl.lit(None, dtype=pl.Int64),
                forward_tokens=pl.lit(7, dtype=pl.Int64),
                backward_tokens=pl.lit(0, dtype=pl.Int64),
                seconds=pl.lit(0.1),
            )
        ]
    )
    table = sweep_table(STUDY_TRACES, seg, est, gt, estimator="rredcot_x", resamples=100, seed=0)
    assert table["segmentation"].to_list() == ["keyword_k3", "fixed_k3"]
    assert table["spearman_mean"].to_list() == pytest.approx([1.0, 1.0])  # σ = σ_gt
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
    agreement = pl.DataFrame(
        {
            "estimator": [
                "mc_n1",
                "mc_n4",
                "rredcot_ref_suffix_sum",
                "loo",
                "ground_truth_split_half",
            ],
            "family": ["mc", "mc", "rredcot", "attribution", "ground_truth"],
            "n_rollouts": [1, 4, None, None, 16],
            "spearman_mean": [0.1, 0.4, 0.6, 0.2, 0.7],
            "ci95_low": [0.0, 0.3, 0.5, 0.1, 0.6],
            "ci95_high": [0.2, 0.5, 0.7, 0.3, 0.8],
            "forward_tokens_per_trace": [500.0, 2000.0, 800.0, 400.0, None],
            "seconds_per_trace": [0.1, 0.4, 0.05, 0.02, None],
        }
    )
    figures.estimator_agreement_figure(agreement, tmp_path / "a.png", n_traces=3)
    matrix = pl.DataFrame({"estimator": ["mc_n1", "loo"], "mc_n1": [1.0, 0.3], "loo": [0.3, 1.0]})
    figures.correlation_heatmap(matrix, tmp_path / "c.png")
    local = pl.DataFrame(
        {
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
            "spearman_mean": [0.3, 0.4, 0.5, 0.6],
            "ci95_low": [0.2, 0.3, 0.4, 0.5],
            "ci95_high": [0.4, 0.5, 0.6, 0.7],
            "top1_rredcot_x": [0.6, 0.4, 0.7, 0.5],
            "top1_ground_truth": [0.6, 0.5, 0.6, 0.5],
            "top1_random": [0.5, 0.25, 0.5, 0.25],
        }
    )
    figures.segmentation_sweep_figure(sweep, tmp_path / "s.png", estimator="rredcot_x")
    assert all(_png(tmp_path / f"{n}.png") for n in "actls")
    assert figures.display_name("mc_n16") == "MC N=16"
    assert figures.display_name("rredcot_ref_path_ratio") == "RREDCoT ref_path_ratio"


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
