"""What the study steps share (not a rule): their command lines, loading the policy, its backend,
and the inputs, so each step script stays a thin adapter of its rule."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from rredcot.data.schema import read_table
from rredcot.steps.cli import log, parser, require, seed_everything, setup
from rredcot.tasks import Task, get_task


def load_policy(policy: str, dtype: str = "float32") -> tuple[Any, Any]:
    """(model in eval mode with sdpa attention, tokenizer) of a checkpoint dir or Hub id."""
    from rredcot.models.loading import load_model, load_tokenizer

    model = load_model(policy, dtype=dtype)
    if model.config._attn_implementation not in ("eager", "sdpa"):
        model.set_attn_implementation("sdpa")  # packed scoring needs a 4D mask
    return model, load_tokenizer(policy)


def load_backend(settings: dict[str, Any], policy: str, batch_size: int) -> Any:
    """The generation backend a step's settings select (`backend`, `seed`, `dtype`, `device`,
    `vllm`; see `rredcot.generation.backend_from_settings`) on `policy`; its progress bar (one
    tick per generate batch) goes to the rule's log."""
    from rredcot.generation import backend_from_settings

    return backend_from_settings(settings, policy, batch_size=batch_size, show_progress=True)


def read_study_inputs(traces: Path, segmentations: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The traces table and the segmentations table of the `study_traces` rule."""
    return read_table(traces), read_table(segmentations)


def agreement_rows(traces: pl.DataFrame, table: pl.DataFrame) -> pl.DataFrame:
    """The rows of `table` (by trace_index) that belong to the agreement set, which the MC
    ground truth and the MC-N estimators cover (all rows when `traces` has no flag)."""
    if "agreement" not in traces.columns:
        return table
    chosen = traces.filter(pl.col("agreement"))["trace_index"]
    return table.filter(pl.col("trace_index").is_in(chosen.implode()))


def configured_reference_rows(estimates: pl.DataFrame) -> pl.DataFrame:
    """The estimates whose reference (if any) is the configured kind: every family but the
    RREDCoT rows on the oracle or sampled reference."""
    kind = with_reference_kind(estimates)["reference_kind"]
    return estimates.filter(kind.is_null() | (kind == "configured"))


def figure_rows(table: pl.DataFrame, baseline_estimator: str) -> pl.DataFrame:
    """The rows a figure shows: every estimator on the configured reference, and the default
    (`baseline_estimator`) on each other reference kind (the tables hold every variant on
    every kind)."""
    from rredcot.studies.estimators import REFERENCE_COLUMNS

    others = [f"{baseline_estimator}_{kind}" for kind in REFERENCE_COLUMNS if kind != "configured"]
    configured = configured_reference_rows(table)["estimator"].unique()
    return table.filter(pl.col("estimator").is_in(configured) | pl.col("estimator").is_in(others))


def with_reference_kind(table: pl.DataFrame) -> pl.DataFrame:
    """`table` with a `reference_kind` column read from its `estimator` names (null for the
    estimators that use no reference)."""
    from rredcot.studies.estimators import reference_kind

    return table.with_columns(
        reference_kind=pl.col("estimator").map_elements(reference_kind, return_dtype=pl.String)
    )


def overlap_subsets(traces: pl.DataFrame) -> dict[str, list[int]]:
    """Trace indices per overlap bin of the configured reference (`studies.traces.OVERLAP_BINS`;
    empty without an `overlap` column)."""
    from rredcot.studies.traces import OVERLAP_BINS, overlap_bin

    if "overlap" not in traces.columns:
        return {}
    bins = [overlap_bin(v) for v in traces["overlap"].to_list()]
    return {
        label: [t for t, b in zip(traces["trace_index"], bins, strict=True) if b == label]
        for label, _, _ in OVERLAP_BINS
    }


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


def estimate_sources(path: Path) -> dict[str, str]:
    """`timed_in` (the step that wrote an estimate table and timed its estimators) and `machine`
    (the machine it ran on), from the file's metadata (`write_estimates`; `not recorded` in a
    file written before it was)."""
    meta = pl.read_parquet_metadata(path)
    return {
        "timed_in": meta.get("step", "not recorded"),
        "machine": meta.get("machine", "not recorded"),
    }


def read_estimates(paths: list[Path]) -> pl.DataFrame:
    """The long estimate tables of `study_mc` and `study_scored`, concatenated."""
    return pl.concat([read_table(p) for p in paths], how="vertical_relaxed")


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
        values=pl.col("values"),
        forward_tokens=pl.col("trace_index").replace_strict(
            tokens, default=0, return_dtype=pl.Int64
        ),
        backward_tokens=pl.lit(0, dtype=pl.Int64),
        seconds=pl.lit(None, dtype=pl.Float64),
        cost_basis=pl.lit(f"{n} ground-truth rollouts per state"),
    )


# --- steps that run the policy on the study traces (ground truth, MC, scored, sweep) -------------


def policy_parser(doc: str) -> argparse.ArgumentParser:
    """The command line of a step that runs the policy on the study traces: `--policy`, `--traces`,
    `--segmentations`, `--out` and `--threads` (besides `--params`)."""
    p = parser(doc)
    p.add_argument("--policy", required=True)
    p.add_argument("--traces", required=True, type=Path)
    p.add_argument("--segmentations", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--threads", type=int, default=1)
    return p


@dataclass(frozen=True)
class PolicyStep:
    """A policy step after its start: arguments, task, seed, the values of the settings it asked
    for (in order) and the study inputs."""

    args: argparse.Namespace
    task: Task
    seed: int
    settings: list[Any]
    traces: pl.DataFrame
    segmentations: pl.DataFrame


def start_policy_step(p: argparse.ArgumentParser, *keys: str) -> PolicyStep:
    """Parse the command line of `p`, log and cap threads, require `task`, `seed` and `keys` in
    `--params` (all at once, so one error names every missing key), seed everything and read the
    traces and segmentations."""
    args = p.parse_args()
    setup(args.threads)
    task_name, seed, *settings = require(args.params, "task", "seed", *keys)
    seed_everything(seed)
    traces, segmentations = read_study_inputs(args.traces, args.segmentations)
    return PolicyStep(args, get_task(task_name), seed, settings, traces, segmentations)


def write_estimates(estimates: pl.DataFrame, out: Path, what: str, step: str) -> None:
    """Write a long estimate table and log its mean forward tokens and total seconds per
    estimator. The file's metadata names the step that measured its seconds and the machine
    it ran on (`estimate_sources`)."""
    from rredcot.planning.machine import machine_info, machine_label

    out.parent.mkdir(parents=True, exist_ok=True)
    estimates.write_parquet(out, metadata={"step": step, "machine": machine_label(machine_info())})
    summary = estimates.group_by("estimator", maintain_order=True).agg(
        pl.col("forward_tokens").mean(), pl.col("seconds").sum()
    )
    log.info("%s estimates (mean forward tokens, total seconds):\n%s", what, summary)


# --- analysis steps on the estimates (agreement, correlation, localization) ----------------------


def analysis_parser(doc: str) -> argparse.ArgumentParser:
    """The command line of an analysis step: `--traces`, `--segmentations`, `--ground-truth`,
    `--estimates` (one or more), `--out` and `--figure` (besides `--params`)."""
    p = parser(doc)
    p.add_argument("--traces", required=True, type=Path)
    p.add_argument("--segmentations", required=True, type=Path)
    p.add_argument("--ground-truth", required=True, type=Path)
    p.add_argument("--estimates", required=True, nargs="+", type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--figure", required=True, type=Path)
    return p


@dataclass(frozen=True)
class AnalysisInputs:
    """What an analysis step reads: traces, the configured segmentation, the ground-truth
    rollouts and the estimators' estimates (without the ground truth's)."""

    traces: pl.DataFrame
    segmentation: pl.DataFrame
    rollouts: pl.DataFrame
    estimates: pl.DataFrame


def read_analysis_inputs(args: argparse.Namespace) -> AnalysisInputs:
    """The inputs named on the command line of `analysis_parser`."""
    traces, segmentations = read_study_inputs(args.traces, args.segmentations)
    return AnalysisInputs(
        traces,
        main_segmentation(segmentations),
        read_table(args.ground_truth),
        read_estimates(args.estimates),
    )


def load_estimates_with_ground_truth(
    args: argparse.Namespace,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(traces, configured segmentation, estimates) with σ_gt as the rows of estimator
    `ground_truth` ahead of the estimators' own."""
    inputs = read_analysis_inputs(args)
    gt = ground_truth_estimates(inputs.traces, inputs.segmentation, inputs.rollouts)
    estimates = pl.concat([gt, inputs.estimates], how="vertical_relaxed")
    return inputs.traces, inputs.segmentation, estimates


def write_table(table: pl.DataFrame, out: Path) -> None:
    """Write a result table as CSV, making its folder."""
    out.parent.mkdir(parents=True, exist_ok=True)
    table.write_csv(out)
