"""rredcot.workflow.problem_sets and .targets: where each problem set lies, and what a config
builds and its summary reads."""

from __future__ import annotations

import pytest
from workflow_configs import workflow_config

from rredcot.workflow import problem_sets, targets
from rredcot.workflow.paths import ATTRIBUTION_TABLE, REGIME_TABLE, SUMMARY

ANSWER_NOW = "results/answer_now_rule.json"
PICK = "results/estimator_pick.json"


@pytest.fixture(scope="module")
def default() -> dict:
    return workflow_config()


def test_problem_sets_lie_by_kind(default):
    assert problem_sets.problem_table(default, "train") == "results/data/world/train.parquet"
    assert problem_sets.problem_table(default, "study_pool") == (
        "results/data/world/study_pool.parquet"
    )
    assert problem_sets.problem_table(default, "aime24") == (
        "results/data/benchmarks/aime24.parquet"
    )
    assert problem_sets.problem_table(default, "numina_cot") == (
        "results/data/train/numina_cot.parquet"
    )
    assert problem_sets.task_of(default, "synth_id") == "synthetic"
    assert problem_sets.task_of(default, "aime24") == "math"


def test_an_unknown_problem_set_lists_every_kind(default):
    with pytest.raises(ValueError) as err:
        problem_sets.problem_table(default, "synth_typo")
    assert "synth_typo" in str(err.value)
    for known in ("synth_id", "aime24", "numina_cot"):
        assert known in str(err.value)


def test_the_split_wildcard_takes_every_problem_set(default):
    names = problem_sets.split_names(default)
    world = ["train", *default["world"]["splits"]]
    assert problem_sets.world_tables(default) == world
    assert names[: len(world)] == world
    assert {"study_pool", "aime24", "numina_cot"} <= set(names)


def test_only_registry_sets_need_the_mirror(default):
    assert problem_sets.registry_used(default) == []
    paper = workflow_config("paper_qwen3_4b")
    used = problem_sets.registry_used(paper)
    assert "aime24" in used and paper["data"]["train"] in used


def test_the_default_builds_its_tables_and_no_study(default):
    built = targets.run_targets(default)
    assert built[:3] == [f"results/{b}_table.csv" for b in default["benchmarks"]]
    assert REGIME_TABLE in built
    assert ATTRIBUTION_TABLE not in built  # no placebo variant
    assert not any("estimator" in path for path in built)
    assert targets.all_targets(default) == [*built, SUMMARY]


def test_without_a_curve_split_there_is_no_learning_curve_nor_regime_table():
    config = workflow_config(over={"training": {"curve": {"split": None}}})
    built = targets.run_targets(config)
    assert "results/learning_curves.csv" not in built
    assert REGIME_TABLE not in built


def test_placebo_variants_add_the_attribution_table():
    built = targets.run_targets(workflow_config("attribution"))
    assert ATTRIBUTION_TABLE in built
    assert "results/figures/credit_attribution.png" in built


def test_the_studies_build_every_artifact_on_a_world_split():
    built = targets.run_targets(workflow_config("smoke"))
    for artifact in targets.STUDY_ARTIFACTS:
        assert f"results/{artifact}.csv" in built
        assert f"results/figures/{artifact}.png" in built


def test_error_localization_needs_a_world_split():
    config = workflow_config("smoke", over={"studies": {"pool": None, "split": "gsm8k"}})
    assert "error_localization" not in targets.study_artifacts(config)
    assert len(targets.study_artifacts(config)) == len(targets.STUDY_ARTIFACTS) - 1


def test_the_summary_reads_the_built_tables_and_their_companions():
    asked = []

    def answer_now() -> str:
        asked.append("answer_now")
        return ANSWER_NOW

    tables = targets.summary_tables(workflow_config("smoke"), answer_now, lambda: PICK)
    assert tables["estimator_agreement"] == "results/estimator_agreement.csv"
    assert tables["answer_now_rule"] == ANSWER_NOW
    assert tables["estimator_pick"] == PICK
    assert set(tables.values()) - {ANSWER_NOW, PICK} <= set(
        targets.run_targets(workflow_config("smoke"))
    )
    asked.clear()
    quick = targets.summary_tables(workflow_config(), answer_now, lambda: PICK)
    assert "answer_now_rule" not in quick and "estimator_pick" not in quick
    assert not asked  # the study rules are not looked up when the studies do not run


def test_summary_args_quote_each_path():
    args = targets.summary_args(
        ["main_table", "answer_now_rule"],
        {"main_table": "results/main_table.csv", "answer_now_rule": "a dir/rule.json"},
    )
    assert args == "--main-table results/main_table.csv --answer-now-rule 'a dir/rule.json'"
