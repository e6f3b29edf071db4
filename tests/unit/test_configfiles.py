"""A target that `--configfile` took as a config file is named, with the fix."""

from __future__ import annotations

import pytest

from rredcot.workflow.configfiles import swallowed_target_error


@pytest.mark.parametrize(
    "given",
    ["results/answer_now_rule.json", "results/references/dataset/rl_summary.json", "results"],
)
def test_a_path_under_results_is_a_swallowed_target(tmp_path, given):
    error = swallowed_target_error(["configs/smoke.yaml", given], tmp_path)
    assert error is not None and f"'{given}' lies under results/" in error
    assert f"snakemake --configfile FILE -- {given}" in error


@pytest.mark.parametrize("given", ["all", "report.html", "results.csv"])
def test_a_file_that_is_no_yaml_or_json_is_a_swallowed_target(tmp_path, given):
    error = swallowed_target_error([given], tmp_path)
    assert error is not None and "is no .yaml, .yml or .json file" in error


def test_config_files_pass_wherever_they_lie(tmp_path):
    outside = tmp_path.parent / "mine.yml"
    given = ["configs/smoke.yaml", str(outside), str(tmp_path / "configs" / "x.JSON")]
    assert swallowed_target_error(given, tmp_path) is None
    assert swallowed_target_error([], tmp_path) is None
