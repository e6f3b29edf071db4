"""Paper tables built from finished runs: main table, training curves, compute cost.

- `main_table`: methods × benchmarks, pass@1 mean over seeds (± std, CI), from the per-benchmark
  tables, so every figure in it traces back to kept grades.
- `training_curves`: every run's per-step metrics stacked with method and seed columns.
- `compute_cost`: seconds and forward tokens per optimizer step per method, and their ratio to
  GRPO measured in the same workflow run (same machine, same batch shapes).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402
import seaborn as sns  # noqa: E402

from rredcot.data.schema import read_table  # noqa: E402
from rredcot.reporting.figures import save_figure, says_no_rows  # noqa: E402


def main_table(tables: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """One row per method, per benchmark: pass@1, its std over seeds and the 95% CI bounds."""
    if not tables:
        raise ValueError("main_table needs at least one benchmark table")
    wide: pl.DataFrame | None = None
    for benchmark, table in tables.items():
        part = table.select(
            "method",
            pl.col("pass_at_1").alias(benchmark),
            pl.col("pass_at_1_std_over_seeds").alias(f"{benchmark}_std"),
            pl.col("ci95_low").alias(f"{benchmark}_ci95_low"),
            pl.col("ci95_high").alias(f"{benchmark}_ci95_high"),
        )
        wide = part if wide is None else wide.join(part, on="method", how="full", coalesce=True)
    assert wide is not None
    order = list(dict.fromkeys(m for t in tables.values() for m in t["method"].to_list()))
    return (
        wide.with_columns(
            pl.col("method").replace_strict(order, list(range(len(order)))).alias("_order")
        )
        .sort("_order")
        .drop("_order")
    )


def responses_per_step(metrics: Path) -> int | None:
    """Responses each optimizer step samples (prompts_per_step × num_generations), from the
    run's `train_summary.json` beside its `metrics.csv`; None without one."""
    summary = Path(metrics).with_name("train_summary.json")
    if not summary.is_file():
        return None
    settings = json.loads(summary.read_text()).get("settings", {})
    try:
        return int(settings["prompts_per_step"]) * int(settings["num_generations"])
    except (KeyError, TypeError) as err:
        raise ValueError(f"{summary}: settings lack the batch shape ({err})") from None


def training_curves(runs: Sequence[tuple[str, int, Path]]) -> pl.DataFrame:
    """Stack `metrics.csv` of every (method, seed, path) run; columns differ per method. A run
    with its `train_summary.json` also gets `responses_per_step` (`responses_per_step`)."""
    frames = []
    for method, seed, path in runs:
        df = read_table(path, infer_schema_length=None)
        df = df.with_columns(pl.lit(method).alias("method"), pl.lit(seed).alias("seed"))
        n = responses_per_step(path)
        if n is not None:
            df = df.with_columns(pl.lit(n, dtype=pl.Int64).alias("responses_per_step"))
        frames.append(df)
    if not frames:
        raise ValueError("training_curves needs at least one run")
    curves = pl.concat(frames, how="diagonal_relaxed")
    lead = ["method", "seed", "step"]
    return curves.select([*lead, *[c for c in curves.columns if c not in lead]])


GPU_COST_MODEL: dict[str, float] = {"trained": 3.0, "generated": 10.0, "scored": 1.0}
"""A step's projected GPU cost in units of one teacher-forced forward token (stated, not
measured): every token the step trains on costs a forward and a backward pass, 3 units (the
forward is 1/3 of forward + backward); every completion token generated costs 10 (decoding is
memory-bound: on one H100, vLLM decodes a small RL batch at roughly a tenth of the tokens per
second of a batched teacher-forced forward pass, an assumption, docs/frontier.md); every token a
credit method scores costs 1 (MC's rollouts are counted as scored, which understates them)."""


def compute_cost(curves: pl.DataFrame, baseline: str) -> pl.DataFrame:
    """Per method: mean seconds and forward tokens per step, and ratios to `baseline`.

    Forward tokens per step = policy tokens the step processed (prompt + completion tokens seen,
    the increase of `tokens/seen`) + the extra forward tokens spent on credit. Where the runs'
    batch shape is known (`responses_per_step`), also the GPU-projected units per step under
    `GPU_COST_MODEL` and their ratio to `baseline` (`gpu_units_ratio_to_<baseline>`).
    """
    per_run = curves.sort("method", "seed", "step").with_columns(
        pl.col("tokens/seen").diff().over("method", "seed").alias("policy_tokens"),
    )
    per_run = per_run.with_columns(
        pl.when(pl.col("policy_tokens").is_null())
        .then(pl.col("tokens/seen"))
        .otherwise(pl.col("policy_tokens"))
        .alias("policy_tokens"),
        pl.col("credit/forward_tokens").fill_null(0).alias("credit_tokens"),
        pl.col("credit/seconds").fill_null(0).alias("credit_seconds"),
        (
            pl.col("tokens/completion_mean") * pl.col("responses_per_step")
            if "responses_per_step" in curves.columns
            else pl.lit(None, dtype=pl.Float64)
        ).alias("completion_tokens"),
    )
    cost = (
        per_run.group_by("method", maintain_order=True)
        .agg(
            pl.col("seed").n_unique().alias("n_seeds"),
            pl.len().alias("n_steps"),
            pl.col("time/step_seconds").mean().alias("seconds_per_step"),
            pl.col("credit_seconds").mean().alias("credit_seconds_per_step"),
            pl.col("policy_tokens").mean().alias("policy_tokens_per_step"),
            pl.col("credit_tokens").mean().alias("credit_forward_tokens_per_step"),
            pl.col("completion_tokens").mean().alias("completion_tokens_per_step"),
        )
        .with_columns(
            (pl.col("policy_tokens_per_step") + pl.col("credit_forward_tokens_per_step")).alias(
                "forward_tokens_per_step"
            )
        )
    )
    if baseline not in cost["method"].to_list():
        raise ValueError(f"compute_cost: baseline method {baseline!r} has no runs")
    model = GPU_COST_MODEL
    cost = cost.with_columns(
        (
            model["trained"] * pl.col("policy_tokens_per_step")
            + model["generated"] * pl.col("completion_tokens_per_step")
            + model["scored"] * pl.col("credit_forward_tokens_per_step")
        ).alias("gpu_units_per_step")
    )
    base = cost.filter(pl.col("method") == baseline).row(0, named=True)
    return cost.with_columns(
        (pl.col("gpu_units_per_step") / pl.lit(base["gpu_units_per_step"], pl.Float64)).alias(
            f"gpu_units_ratio_to_{baseline}"
        ),
        (pl.col("seconds_per_step") / base["seconds_per_step"]).alias(
            f"seconds_ratio_to_{baseline}"
        ),
        (pl.col("forward_tokens_per_step") / base["forward_tokens_per_step"]).alias(
            f"tokens_ratio_to_{baseline}"
        ),
    )


@says_no_rows("Training reward")
def plot_training_curves(curves: pl.DataFrame, path: str | Path, window: int = 5) -> Path:
    """Reward (accuracy on training rollouts) against step, mean over seeds with a band."""
    df = curves.sort("method", "seed", "step").with_columns(
        pl.col("reward/mean")
        .rolling_mean(window_size=window, min_samples=1)
        .over("method", "seed")
        .alias("reward (rolling mean)")
    )
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    sns.lineplot(
        data=df.to_pandas(),
        x="step",
        y="reward (rolling mean)",
        hue="method",
        errorbar="sd",
        ax=axes[0],
    )
    axes[0].set_xlabel("optimizer step")
    axes[0].set_ylabel(f"training reward (fraction correct, {window}-step mean)")
    axes[0].set_title("Training reward")
    sns.lineplot(
        data=df.to_pandas(),
        x="step",
        y="time/step_seconds",
        hue="method",
        errorbar="sd",
        ax=axes[1],
    )
    axes[1].set_xlabel("optimizer step")
    axes[1].set_ylabel("wall time per step (s)")
    axes[1].set_yscale("log")
    axes[1].set_title("Step time")
    for ax in axes:
        ax.legend(title="method")
    fig.tight_layout()
    return save_figure(fig, path)
