"""The settings of the jobs that generate and grade: each benchmark's evaluation protocol, its
greedy pass, the generation backend, and the learning curve's protocol during RL."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rredcot.workflow import Config


def uses_vllm_block(config: Config, generates: bool) -> bool:
    """Whether a job reads `evaluation.vllm`. Only one that generates, under backend vllm, does;
    the block stays out of every other job's params, so editing it reruns nothing else."""
    return generates and config["evaluation"]["backend"] == "vllm"


def generation_backend(config: Config) -> dict[str, Any]:
    """The settings a generating step needs to build its backend (`evaluation` block; its
    `vllm` block under backend vllm only, max_model_len from the config's lengths when null:
    rredcot.planning.vllm_memory)."""
    from rredcot.planning.vllm_memory import generation_engine

    ev = config["evaluation"]
    return {
        "backend": ev["backend"],
        **({"vllm": generation_engine(config)} if uses_vllm_block(config, True) else {}),
        "device": ev["device"],
        "dtype": ev["dtype"] or config["model"]["dtype"],
    }


def eval_settings(config: Config, benchmark: str, generates: bool = True) -> dict[str, Any]:
    """Evaluation settings of one benchmark: the defaults with its per-benchmark overrides
    (`evaluation.vllm` only for a rule that generates with vLLM)."""
    # max_prompt_tokens only sizes the vLLM context (generation_backend), at load time
    skip = ("per_benchmark", "max_prompt_tokens")
    ev = {k: v for k, v in config["evaluation"].items() if k not in skip}
    ev.update(config["evaluation"]["per_benchmark"].get(benchmark, {}))
    ev["dtype"] = ev.get("dtype") or config["model"]["dtype"]
    if uses_vllm_block(config, generates):
        ev["vllm"] = generation_backend(config)["vllm"]
    else:
        ev.pop("vllm", None)
    return ev


def greedy_settings(config: Config, benchmark: str, generates: bool = True) -> dict[str, Any]:
    """A benchmark's evaluation settings decoded greedily: one sample at temperature 0 (the
    regime table's greedy pass@1; the hf backend then takes the argmax, vLLM too)."""
    return {
        **eval_settings(config, benchmark, generates),
        "temperature": 0.0,
        "top_p": 1.0,
        "samples_per_problem": 1,
    }


def curve_split(config: Config) -> str | None:
    """The world split RL scores its policy on as it trains (`training.curve.split`)."""
    return config["training"]["curve"]["split"]


def curve_settings(config: Config) -> dict[str, Any]:
    """`CurveSettings` of the runs: `training.curve.every` + the split's evaluation protocol,
    sampled with the evaluation seed (`seed`, common random numbers with every policy)."""
    from rredcot.training.curve_settings import CurveSettings

    curve = CurveSettings.from_evaluation(
        config["evaluation"],
        curve_split(config),
        config["training"]["curve"]["every"],
        config["seed"],
    )
    return asdict(curve)
