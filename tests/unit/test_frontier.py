"""The cost–agreement frontier (rredcot.studies.frontier) and the forms only it compares
(rredcot.studies.variants): hand-computed cosines, Pareto fronts and paired CIs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from rredcot.credit.advantages import CreditConfig
from rredcot.credit.rredcot import RREDCoTConfig
from rredcot.reporting import figures
from rredcot.studies.estimators import ESTIMATE_SCHEMA, rredcot_name
from rredcot.studies.frontier import (
    COLUMNS,
    SPEARMAN,
    advantage_cosines,
    against_best,
    cosine_measure,
    frontier_candidates,
    frontier_table,
    is_oracle,
    pareto_front,
    token_advantage_vectors,
    transform_groups,
    transform_label,
)
from rredcot.studies.preregistered import preregistered_fast_estimator
from rredcot.studies.segmentations import MAIN
from rredcot.studies.statistics import bootstrap_indices
from rredcot.studies.variants import (
    BAYES_TOKEN_NAME,
    TOKEN_LEVEL,
    VARIANTS_SCHEMA,
    token_segmentation,
    variant_configs,
)

# Two traces in one group: estimator and ground truth on different segmentations of the same
# tokens (T = 3 and T = 2), rewards 1 and 0.
EST_SIGMA = {0: np.array([1.0, -1.0]), 1: np.array([2.0])}
EST_BOUNDS = {0: [0, 1, 3], 1: [0, 2]}
GT_SIGMA = {0: np.array([1.0, 1.0]), 1: np.array([0.5, -0.5])}
GT_BOUNDS = {0: [0, 2, 3], 1: [0, 1, 2]}
REWARDS = {0: 1.0, 1: 0.0}
LENGTHS = {0: 3, 1: 2}


def _cosines(config: CreditConfig) -> np.ndarray:
    groups = transform_groups([0, 1], 8)
    est = token_advantage_vectors(EST_SIGMA, EST_BOUNDS, REWARDS, LENGTHS, groups, config)
    gt = token_advantage_vectors(GT_SIGMA, GT_BOUNDS, REWARDS, LENGTHS, groups, config)
    return advantage_cosines(est, gt, [0, 1])


def test_token_advantage_cosine_by_hand_under_immediate():
    """`immediate`, center none: each trace's tokens get σ of their segment over one group
    std, so the per-trace cosine is that of the token-expanded σ: trace 0 [1, −1, −1]·[1, 1, 1]
    / (√3·√3) = −1/3, trace 1 [1, 1]·[1, −1] = 0."""
    got = _cosines(CreditConfig(mode="immediate", center="none"))
    assert got == pytest.approx([-1 / 3, 0.0], abs=1e-12)


def test_token_advantage_cosine_by_hand_under_mixed():
    """`mixed` (β 1, center none, ε 0): A_i + σ/std_g with TRL's outcome advantage of the group
    (rewards 1, 0: ±0.5/(0.7071 + 1e-4) = ±0.70700) and std_g the population std over the
    group's segments (estimator {1, −1, 2}: √14/3; truth {1, 1, .5, −.5}: √0.375).
    Trace 0: est [1.50879, −0.09478, −0.09478], truth 2.34000 on every token → 0.50284;
    trace 1: est 0.89656 twice, truth [0.10949, −1.52350] → −0.65460."""
    a = 0.5 / (np.sqrt(0.5) + 1e-4)
    est0 = a + np.array([1.0, -1.0, -1.0]) / (np.sqrt(14) / 3)
    truth0 = a + np.ones(3) / np.sqrt(0.375)
    hand0 = est0 @ truth0 / (np.linalg.norm(est0) * np.linalg.norm(truth0))
    assert hand0 == pytest.approx(0.50284, abs=1e-5)
    got = _cosines(CreditConfig(mode="mixed", beta=1.0, center="none", eps=0.0))
    assert got == pytest.approx([hand0, -0.65460], abs=1e-5)


def test_a_flat_credit_gets_no_signal_but_the_outcome_under_mixed():
    """σ = 0 everywhere (the null row): 0 under `immediate`; under `mixed` the outcome advantage
    alone, whose cosine with a truth that is the outcome advantage alone is 1."""
    zero = {0: np.zeros(2), 1: np.zeros(1)}
    groups = transform_groups([0, 1], 2)
    for config, want in ((CreditConfig(mode="immediate"), 0.0), (CreditConfig(mode="mixed"), 1.0)):
        adv = token_advantage_vectors(zero, EST_BOUNDS, REWARDS, LENGTHS, groups, config)
        assert advantage_cosines(adv, adv, [0, 1]) == pytest.approx([want, want])


def test_transform_groups_are_runs_of_consecutive_traces():
    assert transform_groups([3, 5, 7, 9, 11], 2) == [[3, 5], [7, 9], [11]]
    with pytest.raises(ValueError, match="group_size"):
        transform_groups([1], 0)
    assert transform_label(CreditConfig(mode="mixed", center="none")) == "mixed (β 1), center none"


def test_pareto_front_by_hand():
    """(cost, agreement): (0, 0) and (1, .1) are cheapest at their level, (2, .3) beats
    (2, .2) at equal cost and (3, .3) at lower cost, (4, .5) is the best; a point without a
    finite cost is off the front and dominates nothing; equal points are both on it."""
    cost = [1, 2, 2, 3, 4, 0, np.nan]
    agreement = [0.1, 0.3, 0.2, 0.3, 0.5, 0.0, 0.9]
    front = pareto_front(cost, agreement)
    assert front.tolist() == [True, True, False, False, True, True, False]
    assert pareto_front([1, 1], [0.2, 0.2]).tolist() == [True, True]


def test_paired_ci_against_the_best_has_the_sign_of_the_difference():
    """best (A, highest mean among the eligible); B = A − 0.2 + small noise: CI below 0,
    `worse`; C = A + zero-mean noise: CI holds 0; the oracle D = A + 0.3 is not eligible, so
    A stays the best and D's CI lies above 0."""
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 1, 200)
    c_noise = rng.normal(0, 0.3, 200)
    per_trace = {
        "a": a,
        "b": a - 0.2 + rng.normal(0, 0.01, 200),
        "c": a + c_noise - c_noise.mean(),
        "d": a + 0.3,
    }
    draw = bootstrap_indices(200, 2000, 1)
    out = against_best(per_trace, ["a", "b", "c"], draw)
    assert {r["best"] for r in out.values()} == {"a"}
    assert out["a"]["verdict_vs_best"] == "best" and out["a"]["diff_vs_best"] == 0.0
    assert out["b"]["diff_ci95_high"] < 0 and out["b"]["verdict_vs_best"] == "worse"
    assert out["b"]["diff_vs_best"] == pytest.approx(-0.2, abs=0.01)
    assert out["c"]["diff_ci95_low"] < 0 < out["c"]["diff_ci95_high"]
    assert out["c"]["verdict_vs_best"] == "no difference"
    assert out["d"]["diff_ci95_low"] > 0 and out["d"]["verdict_vs_best"] == "better"
    for row in out.values():
        assert row["ci95_low"] <= row["agreement"] <= row["ci95_high"]


def _rows(name, family, sigmas, segmentation=MAIN, bounds=None, tokens=10, seconds=1.0):
    rows = []
    for t, s in sigmas.items():
        rows.append(
            {
                "trace_index": t,
                "estimator": name,
                "family": family,
                "n_rollouts": None,
                "sigma": list(s),
                "values": None,
                "forward_tokens": tokens,
                "backward_tokens": 0,
                "seconds": seconds,
                "cost_basis": "own pass",
                "segmentation": segmentation,
                "boundaries": (bounds or {}).get(t),
            }
        )
    return pl.DataFrame(rows, schema=VARIANTS_SCHEMA)


def test_frontier_table_rows_measures_best_and_front():
    """Three traces with the truth on two segments each (trace 2's truth is flat: left out for
    everyone); MC agrees in order, the configured RREDCoT against it, the oracle perfectly; a
    K = 1 form has other states: cosines only."""
    truth = pl.DataFrame(
        {
            "trace_index": [0, 1, 2],
            "sigma": [[0.2, 0.8], [0.9, -0.1], [0.5, 0.5]],
            "boundaries": [[0, 2, 4], [0, 1, 3], [0, 2, 4]],
        }
    )
    seg = truth.select("trace_index", "boundaries")
    traces = pl.DataFrame(
        {
            "trace_index": [0, 1, 2],
            "reward": [1.0, 0.0, 1.0],
            "response_ids": [[1] * 4, [1] * 3, [1] * 4],
        }
    )
    configured = rredcot_name("ref_suffix_sum", "joint")
    bounds = dict(seg.iter_rows())
    estimates = _rows("mc_n4", "mc", {0: [0.1, 0.9], 1: [0.8, -0.2], 2: [0.3, 0.7]}, tokens=100)
    estimates = estimates.drop("segmentation", "boundaries")
    own = {0: [0.2, 0.8], 1: [0.9, -0.1], 2: [1, 0]}
    mine = {0: [0.9, 0.1], 1: [0.1, 0.9], 2: [1, 0]}
    k1 = _rows(
        configured + "_k1",
        "rredcot",
        {0: [1.0], 1: [-1.0], 2: [1.0]},
        "k1",
        {0: [0, 4], 1: [0, 3], 2: [0, 4]},
        tokens=5,
    )
    variants = pl.concat(
        [
            _rows(configured, "rredcot", mine, bounds=bounds, tokens=20),
            _rows(configured + "_own_path", "rredcot", own, bounds=bounds),
            k1,
        ]
    )
    null = _rows("null_R_only", "null", {0: [0, 0], 1: [0, 0], 2: [0, 0]}, tokens=0, seconds=0.0)
    candidates = frontier_candidates(
        estimates, variants, null.drop("segmentation", "boundaries"), seg
    )
    assert set(candidates["estimator"]) == {
        "mc_n4",
        configured,
        configured + "_own_path",
        configured + "_k1",
        "null_R_only",
    }
    transforms = {"immediate": CreditConfig(mode="immediate", center="none")}
    table = frontier_table(
        candidates, truth, traces, transforms, group_size=8, resamples=200, seed=0
    )
    assert list(table.columns[: len(COLUMNS)]) == list(COLUMNS)
    assert set(table["n_traces"]) == {2} and set(table["excluded_flat_ground_truth"]) == {1}
    spearman = table.filter(pl.col("measure") == SPEARMAN)
    assert configured + "_k1" not in spearman["estimator"].to_list()  # other states: no Spearman
    by = {r["estimator"]: r for r in spearman.iter_rows(named=True)}
    assert by["mc_n4"]["agreement"] == pytest.approx(1.0)
    assert by[configured]["agreement"] == pytest.approx(-1.0)
    assert by["null_R_only"]["agreement"] == 0.0  # flat: scored 0
    assert by[configured + "_own_path"]["oracle"] and is_oracle(configured + "_own_path")
    assert {r["best"] for r in by.values()} == {"mc_n4"}  # the oracle ties it but is not eligible
    assert not by[configured + "_own_path"]["pareto_tokens"]  # oracles are off the front
    # null (0 tokens, 0) and MC (100, 1) are on the token front; RREDCoT (20, −1) is not
    assert by["null_R_only"]["pareto_tokens"] and by["mc_n4"]["pareto_tokens"]
    assert not by[configured]["pareto_tokens"]
    assert by[configured]["verdict_vs_best"] in ("worse", "no difference")
    cos = table.filter(pl.col("measure") == cosine_measure("immediate"))
    assert configured + "_k1" in cos["estimator"].to_list()
    assert set(cos["transform"]) == {"immediate, center none"}
    got = {r["estimator"]: r["agreement"] for r in cos.iter_rows(named=True)}
    assert got["null_R_only"] == 0.0 and got["mc_n4"] > 0.9
    # K = 1 (scale-free): trace 0 [1, 1, 1, 1] against [.2, .2, .8, .8]; trace 1 [−1]·3 against
    # [.9, −.1, −.1]
    t0 = np.array([0.2, 0.2, 0.8, 0.8]).sum() / (2 * np.linalg.norm([0.2, 0.2, 0.8, 0.8]))
    t1 = -np.array([0.9, -0.1, -0.1]).sum() / (np.sqrt(3) * np.linalg.norm([0.9, -0.1, -0.1]))
    assert got[configured + "_k1"] == pytest.approx((t0 + t1) / 2)
    assert set(table["forward_tokens_per_trace"].to_list()) >= {0.0, 5.0, 20.0, 100.0}
    # the reference-conditioned family: the configured form alone (the K-form, the oracle key,
    # MC and the null row are not in it), so it is the family's own best
    family = table.filter(pl.col("reference_conditioned"))
    assert set(family["estimator"]) == {configured}
    assert set(family["family_best"]) == {configured} and all(family["within_ci_of_family_best"])
    outside = table.filter(~pl.col("reference_conditioned"))
    assert outside["family_best"].is_null().all()


def test_frontier_without_a_common_trace_is_its_header(tmp_path: Path):
    truth = pl.DataFrame({"trace_index": [0], "sigma": [[0.5, 0.5]], "boundaries": [[0, 1, 2]]})
    traces = pl.DataFrame({"trace_index": [0], "reward": [1.0], "response_ids": [[1, 1]]})
    cand = _rows("mc_n1", "mc", {0: [0.1, 0.2]}, bounds={0: [0, 1, 2]})
    table = frontier_table(cand, truth, traces, {}, group_size=8, resamples=100, seed=0)
    assert table.height == 0 and list(table.columns) == list(COLUMNS)
    assert figures.estimator_frontier_figure(table, tmp_path / "f.png").exists()


def test_the_frontier_figure_is_drawn(tmp_path: Path):
    rows = []
    for measure in (SPEARMAN, cosine_measure("workflow")):
        for name, family, tokens, agree, verdict in (
            ("null_R_only", "null", 0.0, 0.0, "worse"),
            ("mc_n4", "mc", 100.0, 0.4, "best"),
            ("rredcot_x", "rredcot", 20.0, 0.35, "no difference"),
            ("rredcot_x_own_path", "rredcot", 20.0, 0.6, "better"),
        ):
            rows.append(
                {
                    "measure": measure,
                    "transform": "mixed (β 1), center none",
                    "estimator": name,
                    "family": family,
                    "oracle": name.endswith("own_path"),
                    "agreement": agree,
                    "ci95_low": agree - 0.05,
                    "ci95_high": agree + 0.05,
                    "diff_vs_best": agree - 0.4,
                    "diff_ci95_low": agree - 0.45,
                    "diff_ci95_high": agree - 0.35,
                    "verdict_vs_best": verdict,
                    "pareto_tokens": name in ("null_R_only", "mc_n4", "rredcot_x"),
                    "pareto_seconds": name == "mc_n4",
                    "forward_tokens_per_trace": tokens,
                    "seconds_per_trace": tokens / 100,
                    "n_traces": 10,
                }
            )
    path = figures.estimator_frontier_figure(
        pl.DataFrame(rows), tmp_path / "f.png", configured="rredcot_x"
    )
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_variant_configs_and_token_segmentation():
    base = RREDCoTConfig(answer_now="joint")
    configs = variant_configs(base, {"suffixes1": {"suffixes": 1}, "answer_now_only": {"w_v": 0.0}})
    assert list(configs) == [
        "rredcot_ref_suffix_sum_joint",
        "rredcot_ref_suffix_sum_joint_suffixes1",
        "rredcot_ref_suffix_sum_joint_answer_now_only",
    ]
    assert configs["rredcot_ref_suffix_sum_joint_suffixes1"].suffixes == 1
    assert configs["rredcot_ref_suffix_sum_joint_answer_now_only"].w_v == 0.0
    assert configs["rredcot_ref_suffix_sum_joint_answer_now_only"].answer_now == "joint"
    with pytest.raises(ValueError, match="sufixes"):
        variant_configs(base, {"typo": {"sufixes": 1}})
    traces = pl.DataFrame({"trace_index": [4, 5], "response_ids": [[7, 8, 9], []]})
    tokens = token_segmentation(traces)
    assert tokens.rows() == [(4, [0, 1, 2, 3])]


def test_variant_estimates_score_each_form_in_its_own_pass():
    """On a tiny model: every form of the frontier on the agreement traces only, each with its
    own segmentation and boundaries; the answer-now-only form runs fewer tokens than the
    configured one; K forms have K segments; the oracle reads the own-path reference; OPPO's
    token form has one credit per token."""
    from rredcot.credit.segmentation import SegmentationConfig, keyword_boundaries
    from rredcot.models.tiny import build_tiny_model
    from rredcot.models.tokenizer import build_byte_tokenizer
    from rredcot.studies.traces import token_texts
    from rredcot.studies.variants import variant_estimates
    from rredcot.tasks import get_task

    torch.set_num_threads(1)
    tokenizer, task = build_byte_tokenizer(), get_task("synthetic")
    arch = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16}  # fmt: skip
    model = build_tiny_model(arch, tokenizer, seed=0).eval()
    problem = "a=3, b=7. c=a+b. d=c*a. Find d."
    response = "c=a+b=3+7=0\nd=c*a=0*3=0\nAnswer: 0."
    solution = "c=a+b=3+7=0\nd=c*a=0*3=0\nAnswer: 0."
    prompt = task.build_prompt(problem)
    ids = tokenizer(response)["input_ids"]
    n = 3
    traces = pl.DataFrame(
        {
            "trace_index": list(range(n)),
            "prompt": [prompt] * n,
            "prompt_ids": [tokenizer(prompt)["input_ids"]] * n,
            "response": [response] * n,
            "response_ids": [ids] * n,
            "num_tokens": [len(ids)] * n,
            "token_texts": [token_texts(tokenizer, ids)] * n,
            "entropies": [list(np.linspace(0.1, 2.0, len(ids)))] * n,
            "logprobs": [[-0.5] * len(ids)] * n,
            "answer": ["0"] * n,
            "reward": [1.0, 0.0, 1.0],
            "reference": [solution] * n,
            "reference_own_path": [solution] * n,
        }
    )
    lines = keyword_boundaries(token_texts(tokenizer, ids))
    assert len(lines) == 4  # a state at every line
    main = pl.DataFrame({"trace_index": list(range(n)), "boundaries": [lines] * n})
    out = variant_estimates(
        model,
        tokenizer,
        task,
        traces,
        main,
        [0, 2],
        rredcot=RREDCoTConfig(answer_now="joint"),
        segmentation=SegmentationConfig(strategy="hybrid", num_segments=4),
        overrides={"suffixes1": {"suffixes": 1}, "answer_now_only": {"w_v": 0.0}},
        num_segments=[2, 4],
    )
    assert out.schema == pl.Schema(VARIANTS_SCHEMA)
    assert set(out["trace_index"]) == {0, 2}
    configured = "rredcot_ref_suffix_sum_joint"
    names = {
        configured: MAIN,
        f"{configured}_suffixes1": MAIN,
        f"{configured}_answer_now_only": MAIN,
        "rredcot_ref_suffix_sum_joint_own_path": MAIN,
        f"{configured}_k2": "k2",
        f"{configured}_k4": "k4",
        BAYES_TOKEN_NAME: TOKEN_LEVEL,
    }
    assert dict(out.select("estimator", "segmentation").unique().iter_rows()) == names
    assert (out["cost_basis"] != "").all() and not out["cost_basis"].str.contains("shared").any()
    for row in out.iter_rows(named=True):
        k = len(row["boundaries"]) - 1
        assert len(row["sigma"]) == k and row["boundaries"][-1] == len(ids)
        if row["segmentation"] == MAIN:
            assert row["boundaries"] == lines
        elif row["segmentation"] == TOKEN_LEVEL:
            assert k == len(ids)
        else:
            assert k == int(row["segmentation"][1:])
    tokens = dict(
        out.filter(pl.col("trace_index") == 0).select("estimator", "forward_tokens").iter_rows()
    )
    assert tokens[f"{configured}_answer_now_only"] < tokens[configured]  # no suffix scored
    assert set(ESTIMATE_SCHEMA) <= set(out.columns)


def test_estimate_files_name_the_step_and_machine_that_timed_them(tmp_path: Path):
    from rredcot.steps.study_common import estimate_sources, write_estimates

    table = pl.DataFrame(schema=ESTIMATE_SCHEMA)
    write_estimates(table, tmp_path / "e.parquet", "test", "study_scored")
    got = estimate_sources(tmp_path / "e.parquet")
    assert got["timed_in"] == "study_scored" and "threads" in got["machine"]
    table.write_parquet(tmp_path / "old.parquet")  # written before the metadata existed
    assert estimate_sources(tmp_path / "old.parquet") == {
        "timed_in": "not recorded",
        "machine": "not recorded",
    }


def _pick_rows(rows: list[tuple[str, float, float, bool]], measure: str = "cosine_workflow"):
    """Frontier rows (estimator, agreement, tokens, within the CI of the family's best)."""
    best = max(rows, key=lambda r: r[1])[0]
    return pl.DataFrame(
        [
            {
                "measure": measure,
                "estimator": name,
                "reference_conditioned": True,
                "family_best": best,
                "agreement": agree,
                "diff_vs_family_best": agree - max(r[1] for r in rows),
                "family_diff_ci95_low": -0.1,
                "family_diff_ci95_high": 0.1,
                "within_ci_of_family_best": within,
                "forward_tokens_per_trace": tokens,
                "seconds_per_trace": tokens / 100,
                "n_traces": 10,
            }
            for name, agree, tokens, within in rows
        ]
    )


def test_the_fast_pick_is_the_cheapest_form_within_the_ci_of_the_familys_best():
    exact, one, now, bayes = (
        "rredcot_x",
        "rredcot_x_suffixes1",
        "rredcot_x_answer_now_only",
        "oppo_bayes",
    )
    table = _pick_rows(
        [
            (exact, 0.50, 1300, True),
            (one, 0.47, 400, True),
            (now, 0.30, 100, False),
            (bayes, 0.2, 300, False),
        ]
    )
    pick = preregistered_fast_estimator(table, exact)
    # the answer-now form is cheaper but its CI lies below the best: suffixes 1 qualifies
    assert pick["choice"] == one and not pick["is_configured"]
    assert pick["qualified"] == [one, exact]
    assert pick["configured_forward_tokens_per_trace"] == 1300
    # a tie in tokens keeps the configured form
    tie = _pick_rows([(exact, 0.50, 400, True), (one, 0.52, 400, True)])
    assert preregistered_fast_estimator(tie, exact)["choice"] == exact
    # only the configured form qualifies: rredcot_fast is the default itself
    alone = _pick_rows([(exact, 0.50, 1300, True), (one, 0.2, 400, False)])
    assert preregistered_fast_estimator(alone, exact)["is_configured"]
    with pytest.raises(ValueError, match="configured form"):
        preregistered_fast_estimator(table, "rredcot_y")
    with pytest.raises(ValueError, match="no reference-conditioned row"):
        preregistered_fast_estimator(table, exact, measure="spearman_credits")
