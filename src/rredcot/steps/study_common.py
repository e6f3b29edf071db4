"""What the study steps share (not a rule): loading the policy, its backend, and the inputs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import polars as pl

from rredcot.steps.cli import log


def load_policy(policy: str, dtype: str = "float32") -> tuple[Any, Any]:
    """(model in eval mode with sdpa attention, tokenizer) of a checkpoint dir or Hub id."""
    from rredcot.models.loading import load_model, load_tokenizer

    model = load_model(policy, dtype=dtype)
    if model.config._attn_implementation not in ("eager", "sdpa"):
        model.set_attn_implementation("sdpa")  # packed scoring needs a 4D mask
    return model, load_tokenizer(policy)


def load_backend(name: str, policy: str, batch_size: int, tensor_parallel_size: int = 1) -> Any:
    """The generation backend of the config (`evaluation.backend`) on `policy`."""
    from rredcot.generation import get_backend

    if name == "vllm":
        return get_backend(name, policy, tensor_parallel_size=tensor_parallel_size)
    return get_backend(name, policy, batch_size=batch_size, show_progress=False)


def read_study_inputs(traces: Path, segmentations: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The traces table and the segmentations table of the `study_traces` rule."""
    return pl.read_parquet(traces), pl.read_parquet(segmentations)


def main_segmentation(segmentations: pl.DataFrame) -> pl.DataFrame:
    """The rows of the configured segmentation (label `main`)."""
    from rredcot.studies.segmentations import MAIN

    return segmentations.filter(pl.col("segmentation") == MAIN)


class Timer:
    """Logs the wall time of a step when it ends (`with Timer("study_traces"):`)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        log.info("time/%s_seconds: %.1f", self.name, time.perf_counter() - self.start)


def read_estimates(paths: list[Path]) -> pl.DataFrame:
    """The long estimate tables of `study_mc` and `study_scored`, concatenated."""
    return pl.concat([pl.read_parquet(p) for p in paths], how="vertical_relaxed")


def ground_truth_estimates(
    traces: pl.DataFrame, segmentation: pl.DataFrame, rollouts: pl.DataFrame
) -> pl.DataFrame:
    """σ_gt of one segmentation as rows of the estimate table (estimator `ground_truth`), with
    the forward tokens of its rollouts per trace."""
    from rredcot.studies.ground_truth import GROUND_TRUTH, ground_truth_sigmas
    from rredcot.studies.rollouts import forward_tokens_per_trace

    gt = ground_truth_sigmas(traces, segmentation, rollouts)
    states = segmentation.select(
        "trace_index", pl.col("char_boundaries").list.slice(0, pl.col("num_segments"))
    ).explode("char_boundaries")
    own = rollouts.join(
        states.rename({"char_boundaries": "char_pos"}), on=["trace_index", "char_pos"]
    )
    tokens = forward_tokens_per_trace(own)
    n = int(rollouts["rollout"].max()) + 1 if rollouts.height else 0
    return gt.select(
        "trace_index",
        estimator=pl.lit(GROUND_TRUTH),
        family=pl.lit("ground_truth"),
        n_rollouts=pl.lit(n, dtype=pl.Int64),
        sigma=pl.col("sigma"),
        forward_tokens=pl.col("trace_index").replace_strict(
            tokens, default=0, return_dtype=pl.Int64
        ),
        backward_tokens=pl.lit(0, dtype=pl.Int64),
        seconds=pl.lit(None, dtype=pl.Float64),
    )
