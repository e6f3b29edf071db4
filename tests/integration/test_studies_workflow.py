"""The estimator studies and reference solutions on the smoke config, run by Snakemake."""

from __future__ import annotations

import json

import polars as pl
import pytest

from rredcot.workflow.targets import STUDY_ARTIFACTS as ARTIFACTS  # what the workflow builds

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def studies_run(smoke_run):
    """The smoke DAG's working directory (its default target includes every study artifact)."""
    return smoke_run[0]


def test_every_artifact_has_its_figure(studies_run):
    for name in ARTIFACTS:
        assert (studies_run / "results" / f"{name}.csv").stat().st_size > 0
        figure = studies_run / "results" / "figures" / f"{name}.png"
        assert figure.read_bytes()[:4] == b"\x89PNG"


def test_estimator_agreement(studies_run):
    table = pl.read_csv(studies_run / "results" / "estimator_agreement.csv")
    assert {
        "target",
        "aggregation",
        "estimator",
        "family",
        "rho",
        "ci95_low",
        "ci95_high",
        "diff_vs_reference",
        "diff_ci95_low",
        "diff_ci95_high",
        "verdict",
        "disattenuated",
        "reliability",
        "ceiling",
        "n_traces",
        "n_flat_estimate",
        "forward_tokens_per_trace",
        "seconds_per_trace",
        "cost_basis",
    } <= set(table.columns)
    names = set(table["estimator"].to_list())
    assert {"mc_n1", "mc_n2", "loo", "shapley", "grad_x_input", "attention", "null_R_only"} <= names
    assert {f"rredcot_{v}" for v in ("ref_suffix_sum", "ref_path_ratio")} <= names
    assert "oppo_bayes" in names  # the one-pass Bayes value beside every other estimator
    assert "rredcot_ref_suffix_sum_joint" in names
    # every reference kind, the oracle key on the trace's own path and the sampled-first one
    assert {"rredcot_ref_suffix_sum_own_path", "rredcot_ref_suffix_sum_sampled"} <= names
    kinds = dict(table.select("estimator", "reference_kind").unique().iter_rows())
    assert kinds["rredcot_ref_suffix_sum_own_path"] == "own_path" and kinds["mc_n1"] is None
    assert "all" in set(table["traces"])  # plus the overlap bins that have traces
    for _, part in table.group_by(["traces", "target", "aggregation"]):
        # one common set per target: every estimator on the same traces
        assert part["n_traces"].n_unique() == 1
        assert (part["verdict"] == "reference").sum() == 1
    for row in table.iter_rows(named=True):
        if row["n_traces"] >= 2 and row["ci95_low"] == row["ci95_low"]:
            assert -1.0 <= row["ci95_low"] <= row["rho"] <= row["ci95_high"] <= 1.0
    attributions = table.filter(pl.col("family") == "attribution")
    assert set(attributions["target"]) == {"credits"}  # attributions have no state values
    costed = table.filter(~pl.col("family").is_in(["ground_truth", "null"]))
    assert (costed["forward_tokens_per_trace"] > 0).all()
    match = pl.read_csv(studies_run / "results" / "estimator_cost_match.csv")
    assert {"target", "aggregation", "n_equal", "token_ratio", "note"} <= set(match.columns)
    study_set = pl.read_csv(studies_run / "results" / "study_set.csv")
    assert study_set["kept"].all() and study_set["n_traces"].sum() == 16
    assert {"luck", "distinct_paths_mean", "multi_path_share", "overlap_two_valid_paths"} <= set(
        study_set.columns
    )


def test_estimator_frontier(studies_run):
    """Every estimator whose cost is its own, on one common set per run: Spearman for the forms
    on the studies' segmentation, the token-advantage cosine under both transforms for every
    form (the K forms and OPPO's token form included), one best per measure, the front."""
    table = pl.read_csv(studies_run / "results" / "estimator_frontier.csv")
    assert set(table["measure"]) == {"spearman_credits", "cosine_workflow", "cosine_immediate"}
    # the configured form (the smoke config's: the schema's conditional answer-now)
    cheap = next(n for n in table["estimator"] if n.endswith("_answer_now_only"))
    configured = cheap.removesuffix("_answer_now_only")
    assert configured.startswith("rredcot_ref_suffix_sum")
    forms = {f"{configured}_{label}" for label in ("suffixes1", "suffixes2", "answer_now_only")}
    k_forms = {f"{configured}_k{k}" for k in (2, 4, 8)}
    everyone = {configured, *forms, f"{configured}_own_path", "oppo_bayes", "mc_n1", "mc_n2"}
    everyone |= {"loo", "shapley", "grad_x_input", "attention", "null_R_only"}
    for measure, part in table.group_by("measure"):
        names = set(part["estimator"])
        assert everyone <= names, measure
        others = k_forms | {"oppo_bayes_token"}
        assert (names & others == set()) if measure[0] == "spearman_credits" else others <= names
        assert part["n_traces"].n_unique() == 1 and (part["verdict_vs_best"] == "best").sum() == 1
        assert part.filter(pl.col("oracle"))["estimator"].to_list() == [f"{configured}_own_path"]
        assert (
            part["pareto_tokens"].any() and not part.filter(pl.col("oracle"))["pareto_tokens"].any()
        )
    assert (table["forward_tokens_per_trace"] >= 0).all()
    timed = dict(table.select("estimator", "timed_in").unique().iter_rows())
    assert timed["mc_n1"] == "study_mc" and timed[configured] == "study_scored"
    assert timed["null_R_only"] == "nothing run" and table["machine"].drop_nulls().len() > 0
    cheaper = table.filter(pl.col("estimator") == f"{configured}_answer_now_only")
    default = table.filter(pl.col("estimator") == configured)
    assert cheaper["forward_tokens_per_trace"][0] < default["forward_tokens_per_trace"][0]


def test_attribution_correlation_matrix(studies_run):
    m = pl.read_csv(studies_run / "results" / "attribution_correlation.csv")
    names = m["estimator"].to_list()
    assert names[0] == "ground_truth" and m.columns == ["estimator", *names, "n_traces"]
    values = m.select(names).to_numpy()
    finite = values[~pl.Series(values.ravel()).is_nan().to_numpy().reshape(values.shape)]
    assert ((finite >= -1 - 1e-9) & (finite <= 1 + 1e-9)).all()


def test_error_localization(studies_run):
    table = pl.read_csv(studies_run / "results" / "error_localization.csv")
    assert {"all_incorrect", "agreement_incorrect"} <= set(table["trace_set"])
    everyone = set(table.filter(pl.col("trace_set") == "all_incorrect")["estimator"])
    assert {"rredcot_ref_suffix_sum", "rredcot_ref_suffix_sum_own_path"} <= everyone
    for _, part in table.group_by("trace_set"):
        assert part["n_traces"].n_unique() == 1  # one common set per trace set
        random = part.filter(pl.col("estimator") == "random").row(0, named=True)
        assert random["top1"] == pytest.approx(1 / random["mean_num_segments"], rel=0.5)
    for col in ("top1", "within_one"):
        values = table[col].drop_nans().drop_nulls()
        assert ((values >= 0) & (values <= 1)).all()
    assert (table["within_one"].fill_nan(1) >= table["top1"].fill_nan(0)).all()
    agreement = table.filter(pl.col("trace_set") == "agreement_incorrect")
    # the reference estimator: the configured form (answer-now joint, config.yaml's default)
    reference = "rredcot_ref_suffix_sum_joint"
    assert {"ground_truth", "mc_n1", reference} <= set(agreement["estimator"])


def test_mc_truncation(studies_run):
    table = pl.read_csv(studies_run / "results" / "mc_truncation.csv")
    assert sorted(set(table["budget"].to_list())) == [8, 32]
    assert set(table["truncation"].to_list()) == {"drop", "zero"}
    for col in ("truncated_share", "drop_rate", "no_estimate_share"):
        assert ((table[col] >= 0) & (table[col] <= 1)).all()
    drop = table.filter(pl.col("truncation") == "drop").sort("budget")
    assert drop["truncated_share"][0] >= drop["truncated_share"][1]  # a larger L cuts less
    zero = table.filter(pl.col("truncation") == "zero")
    assert (zero["drop_rate"] == 0).all()
    assert (zero["mean_value_shift"].fill_nan(0) <= 1e-12).all()  # scoring cuts as 0 only lowers V


def test_segmentation_sweep(studies_run):
    table = pl.read_csv(studies_run / "results" / "segmentation_sweep.csv")
    assert sorted(table["segmentation"].to_list()) == [
        "fixed_k2",
        "fixed_k4",
        "hybrid_k2",
        "hybrid_k4",
    ]
    assert (table["mean_num_segments"] <= table["requested_segments"]).all()
    for col in ("credits_tau_b", "values_tau_b"):
        rho = table[col].drop_nans().drop_nulls()
        assert ((rho >= -1) & (rho <= 1)).all()
    assert (table["n_mid_line_states"] <= table["n_states"]).all()


def test_references_cover_every_training_problem(studies_run):
    """RL's problems (the smoke config's data.train: the world's rl split) all get references."""
    refs = pl.read_parquet(studies_run / "results" / "references" / "dataset" / "rl.parquet")
    world = pl.read_parquet(studies_run / "results" / "data" / "world" / "rl.parquet")
    assert refs["id"].to_list() == world["id"].to_list()  # nothing dropped
    summary = json.loads((studies_run / "results/references/dataset/rl_summary.json").read_text())
    assert summary["coverage"] == pytest.approx(1.0)  # every synthetic solution verifies
    assert summary["counts"]["dataset"] == refs.height
    missing = pl.read_csv(studies_run / "results" / "references" / "dataset" / "rl_missing.csv")
    assert missing.columns == ["id", "reason"] and missing.height == 0
