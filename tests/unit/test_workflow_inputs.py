"""rredcot.workflow.inputs, .evaluation_settings and .resources: the files a job reads, the
settings it runs with and what it asks of the machine."""

from __future__ import annotations

import json
import shlex

import pytest
from workflow_configs import workflow_config

from rredcot.config import ConfigError
from rredcot.workflow import evaluation_settings, inputs, resources, runs
from rredcot.workflow.paths import BASE_MODEL, STAND_IN_MIRROR, STAND_IN_MODEL
from rredcot.workflow.shell import arg


@pytest.fixture(scope="module")
def default() -> dict:
    return workflow_config()


def test_a_policy_is_the_base_or_a_run_s_final_checkpoint(default):
    assert inputs.policy_input(default, "base", "0") == {"model": BASE_MODEL}
    assert inputs.policy_input(default, "grpo", "6") == {"model": "results/train/grpo/seed6/final"}
    with pytest.raises(ValueError, match=r"unknown method 'nope'.*'base', 'grpo'"):
        inputs.policy_input(default, "nope", "6")


def test_the_regime_table_reads_both_passes_of_every_policy_in_table_order(default):
    found = inputs.regime_inputs(default)
    assert list(found) == [
        "t1_generations",
        "t1_grades",
        "greedy_generations",
        "greedy_grades",
        "problems",
    ]
    policies = runs.methods_and_seeds(default)
    assert len(found["t1_grades"]) == len(policies)
    split = default["training"]["curve"]["split"]
    assert found["greedy_grades"][0] == f"results/eval/base/seed0/{split}/greedy/grades.parquet"
    assert found["problems"] == f"results/data/world/{split}.parquet"


def test_the_placebo_table_reads_every_run_and_the_base():
    config = workflow_config("attribution")
    found = inputs.attribution_inputs(config)
    trained = runs.training_runs(config)
    assert len(found["summaries"]) == len(found["greedy_generations"]) == len(trained)
    assert found["base"] == inputs.curve_runs(config)["base"]
    assert found["base"].startswith(f"results/eval/base/seed{config['seed']}/")


def test_tables_and_the_comparison_read_every_policy_s_grades(default):
    grades = inputs.table_grades(default, "synth_ood")
    assert grades[0] == "results/eval/base/seed0/synth_ood/grades.parquet"
    assert len(grades) == len(runs.methods_and_seeds(default))
    assert len(inputs.comparison_grades(default)) == len(grades) * len(default["benchmarks"])


def test_no_curve_split_means_no_curve_problems():
    config = workflow_config(over={"training": {"curve": {"split": None}}})
    assert inputs.curve_input(config) == {}
    assert inputs.curve_input(workflow_config())["curve_problems"].startswith("results/data/")


def test_a_mirrored_dataset_is_an_input_only_when_the_mirror_holds_it(tmp_path, monkeypatch):
    (tmp_path / "gsm8k.jsonl").write_text("{}\n")
    monkeypatch.setenv("RREDCOT_MIRROR", str(tmp_path))
    config = workflow_config()
    assert inputs.mirror_input(config, "gsm8k") == {"mirror": str(tmp_path / "gsm8k.jsonl")}
    assert inputs.mirror_input(config, "aime24") == {}
    assert inputs.stand_in_source(config) == {"mirror": str(tmp_path / "gsm8k.jsonl")}
    (tmp_path / "gsm8k.jsonl").unlink()
    with pytest.raises(ConfigError, match=r"stand_in\.training_rows.*gsm8k\.jsonl"):
        inputs.stand_in_source(config)


def test_the_stand_ins_replace_the_hub(default):
    assert inputs.base_model_input(default) == {}
    rehearsal = workflow_config(
        over={
            "stand_in": {"model": True, "training_rows": 8},
            "model": {"name_or_path": STAND_IN_MODEL},
        }
    )
    assert inputs.base_model_input(rehearsal) == {"model": STAND_IN_MODEL}
    assert inputs.training_set_input(rehearsal, "numina_cot") == {
        "mirror": f"{STAND_IN_MIRROR}/numina_cot.jsonl"
    }


def test_evaluation_settings_merge_the_benchmark_s_own(default):
    split = default["training"]["curve"]["split"]
    settings = evaluation_settings.eval_settings(default, split)
    assert settings["temperature"] == 1.0  # the curve split's own protocol (T = 1)
    assert "per_benchmark" not in settings and "max_prompt_tokens" not in settings
    assert settings["dtype"] == default["model"]["dtype"]
    greedy = evaluation_settings.greedy_settings(default, split)
    assert (greedy["temperature"], greedy["top_p"], greedy["samples_per_problem"]) == (0.0, 1.0, 1)


def test_only_a_job_that_generates_with_vllm_reads_the_vllm_block(default):
    assert "vllm" not in evaluation_settings.eval_settings(default, "synth_id")
    assert "vllm" not in evaluation_settings.generation_backend(default)
    paper = workflow_config("paper_qwen3_4b")
    assert paper["evaluation"]["backend"] == "vllm"
    assert "vllm" in evaluation_settings.eval_settings(paper, "aime24")
    assert "vllm" not in evaluation_settings.eval_settings(paper, "aime24", generates=False)
    assert "vllm" in evaluation_settings.generation_backend(paper)


def test_curve_settings_carry_the_split_s_protocol(default):
    curve = evaluation_settings.curve_settings(default)
    assert curve["every"] == default["training"]["curve"]["every"]
    assert curve["seed"] == default["seed"]  # the evaluation seed: common random numbers
    assert json.loads(shlex.split(arg(curve))[0]) == curve  # what train_policy reads back


def test_a_resource_comes_from_the_overrides_then_the_config_then_the_defaults(default):
    rule = "train_policy"
    configured = default["resources"].get(rule, {}).get("runtime")
    want = configured if configured is not None else default["resources"]["default"]["runtime"]
    assert resources.resource(default, {}, rule, "runtime") == want
    overrides = {rule: {"runtime": 7}}
    assert resources.resource(default, overrides, rule, "runtime") == 7
    assert resources.resource({}, {}, rule, "mem_mb") == resources.DEFAULTS["mem_mb"]


def test_gpus_are_asked_as_gpus_or_as_gres():
    assert resources.gpu_request(0, {"RREDCOT_SLURM_GRES": "gpu"}) == {"gpu": 0}
    assert resources.gpu_request(2, {}) == {"gpu": 2}
    assert resources.gpu_request(2, {"RREDCOT_SLURM_GRES": "gpu:a100"}) == {
        "gpu": 0,
        "gres": "gpu:a100:2",
    }
    assert resources.gpu_request(1, {"RREDCOT_SLURM_GPU_MODEL": " h100 "}) == {
        "gpu": 1,
        "gpu_model": "h100",
    }


def test_gpu_jobs_run_through_the_slot_allocator(default):
    assert resources.gpu_job(default) == "python -m rredcot.devices"
    counted = workflow_config(over={"devices": {"count": 4}})
    assert resources.gpu_job(counted) == "python -m rredcot.devices --count 4"


def test_arg_is_one_shell_word_of_sorted_json():
    words = shlex.split(arg({"b": 1, "a": "x y"}))
    assert words == ['{"a": "x y", "b": 1}']


def test_runs_train_on_the_referenced_training_set(default):
    source, train = default["references"]["source"], default["data"]["train"]
    assert inputs.training_problems(default) == f"results/references/{source}/{train}.parquet"
    assert inputs.training_summaries(default)[0] == "results/train/grpo/seed6/train_summary.json"
