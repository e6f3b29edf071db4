"""Learning curves and the paired method comparison (results/learning_curves.csv,
results/method_comparison.csv, results/figures/learning_curves.png).

Every run's held-out scores come from three places that share one evaluation protocol and
sampling seed: the base's evaluation (step 0), the run's own `curve.csv` (intermediate steps)
and the evaluation of its `final/` policy (its last step). Cumulative compute at a step is the
sum over the run's steps so far of wall seconds and forward tokens (policy tokens + credit
tokens, as in `compute_cost`).

The comparison pairs (seed, problem) units (`rredcot.evaluation.paired`): at the final step
(per-problem pass@1 over the k samples) and as the area under the learning curve (the
trapezoid mean of per-problem pass@1 over the evaluated steps, normalised by the run's
steps, so 1.0 means solved from the first step on). Every method is compared with GRPO and with
the base; a method with fewer steps (an MC run cut for cost) is compared with GRPO at its own
last step (final and area, both over the same steps) and at the GRPO step of equal cumulative
wall seconds (the evaluated GRPO step nearest to it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from rredcot.evaluation.paired import paired_bootstrap  # noqa: E402
from rredcot.reporting.figures import save_figure  # noqa: E402

BASE = "base"


@dataclass(frozen=True)
class RunScores:
    """One (method, seed) run: held-out rewards per step and its per-step metrics."""

    method: str
    seed: int
    steps: int
    curve: pl.DataFrame  # step, problem_id, sample_index, reward (intermediate steps)
    final: pl.DataFrame  # problem_id, sample_index, reward (the final policy)
    metrics: pl.DataFrame  # metrics.csv


def _per_problem(rewards: pl.DataFrame) -> pl.DataFrame:
    return rewards.group_by("step", "problem_id").agg(pl.col("reward").mean().alias("pass_at_1"))


def run_points(run: RunScores, base: pl.DataFrame) -> pl.DataFrame:
    """Per-problem pass@1 of one run at every evaluated step (0 = the base, `steps` = final)."""
    cols = ["problem_id", "sample_index", "reward"]
    frames = [
        base.select(cols).with_columns(pl.lit(0, pl.Int64).alias("step")),
        run.curve.select("step", *cols).with_columns(pl.col("step").cast(pl.Int64)),
        run.final.select(cols).with_columns(pl.lit(run.steps, pl.Int64).alias("step")),
    ]
    rewards = pl.concat([f.select("step", *cols) for f in frames], how="vertical_relaxed")
    problems = set(base["problem_id"].to_list())
    for step, part in rewards.group_by("step"):
        if set(part["problem_id"].to_list()) != problems:
            raise ValueError(
                f"run {run.method} seed {run.seed}: step {step[0]} was evaluated on other "
                "problems than the base; curves must share one held-out set"
            )
    return _per_problem(rewards).with_columns(
        pl.lit(run.method).alias("method"), pl.lit(run.seed, pl.Int64).alias("seed")
    )


def cumulative_compute(metrics: pl.DataFrame) -> pl.DataFrame:
    """step, cumulative seconds and forward tokens (policy + credit) after each step; step 0 = 0."""
    m = metrics.sort("step")
    policy = pl.col("tokens/seen").diff().fill_null(pl.col("tokens/seen"))
    credit = (
        pl.col("credit/forward_tokens").fill_null(0) if "credit/forward_tokens" in m.columns else 0
    )
    out = m.select(
        "step",
        pl.col("time/step_seconds").cum_sum().alias("seconds"),
        (policy + credit).cum_sum().alias("forward_tokens"),
    )
    zero = pl.DataFrame({"step": [0], "seconds": [0.0], "forward_tokens": [0.0]})
    return pl.concat([zero, out], how="vertical_relaxed")


# Student's t 0.975 quantiles for 1 … 30 degrees of freedom (the normal 1.960 beyond).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip


def _t_interval(values: np.ndarray) -> tuple[float, float]:
    """Mean ± t_{0.975, n−1} · s/√n over seeds (NaN with one seed: spread unknown)."""
    if values.size < 2:
        return float("nan"), float("nan")
    t = _T975[values.size - 2] if values.size - 1 <= len(_T975) else 1.960
    half = t * values.std(ddof=1) / np.sqrt(values.size)
    return float(values.mean() - half), float(values.mean() + half)


def learning_curves(
    runs: Sequence[RunScores], base: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(per-run curve rows, per-method curve rows with mean and t 95% CI over seeds)."""
    per_run = []
    for run in runs:
        points = (
            run_points(run, base)
            .group_by("method", "seed", "step")
            .agg(pl.col("pass_at_1").mean(), pl.len().alias("problems"))
        )
        per_run.append(points.join(cumulative_compute(run.metrics), on="step", how="left"))
    table = pl.concat(per_run, how="vertical_relaxed").sort("method", "seed", "step")
    rows = []
    for (method, step), part in table.group_by("method", "step"):
        values = part["pass_at_1"].to_numpy()
        low, high = _t_interval(values)
        rows.append(
            {
                "method": method,
                "step": step,
                "seeds": part.height,
                "pass_at_1": float(values.mean()),
                "ci95_low": low,
                "ci95_high": high,
                "seconds": float(part["seconds"].mean()),
                "forward_tokens": float(part["forward_tokens"].mean()),
            }
        )
    summary = pl.DataFrame(rows).sort("method", "step")
    return table, summary


def _grid(
    points: pl.DataFrame, value: str, seeds: Sequence[int], problems: Sequence[str]
) -> np.ndarray:
    """(seeds, problems) array of `value`; a missing unit is an error, never dropped."""
    wide = points.pivot(on="problem_id", index="seed", values=value)
    missing_seeds = sorted(set(seeds) - set(wide["seed"].to_list()))
    missing_problems = sorted(set(problems) - set(wide.columns))
    if missing_seeds or missing_problems:
        raise ValueError(
            f"{value}: missing seeds {missing_seeds} or problems {missing_problems[:5]}"
        )
    wide = wide.filter(pl.col("seed").is_in(list(seeds))).sort("seed")
    return wide.select(list(problems)).to_numpy().astype(np.float64)


def _auc(points: pl.DataFrame, until: int) -> pl.DataFrame:
    """Per (seed, problem): trapezoid mean of pass@1 over the steps 0 … until."""
    rows = []
    for (seed, problem), part in points.filter(pl.col("step") <= until).group_by(
        "seed", "problem_id"
    ):
        part = part.sort("step")
        x, y = part["step"].to_numpy(), part["pass_at_1"].to_numpy()
        rows.append({"seed": seed, "problem_id": problem, "auc": float(np.trapezoid(y, x) / until)})
    return pl.DataFrame(rows)


def _at_step(points: pl.DataFrame, step: int) -> pl.DataFrame:
    return points.filter(pl.col("step") == step).select(
        "seed", "problem_id", pl.col("pass_at_1").alias("score")
    )


def method_comparison(
    runs: Sequence[RunScores],
    base: pl.DataFrame,
    reference: str = "grpo",
    n_resamples: int = 10_000,
    seed: int = 0,
) -> pl.DataFrame:
    """Every method minus `reference` and minus the base, paired over (seed, problem).

    Rows have `seed` "all" (bootstrap over seeds and problems); the final-step difference from
    the base is also given per training seed (bootstrap over problems), so a claim about
    "every seed" can be read off directly."""
    points = pl.concat([run_points(r, base) for r in runs], how="vertical_relaxed")
    compute = pl.concat(
        [
            cumulative_compute(r.metrics).with_columns(
                pl.lit(r.method).alias("method"), pl.lit(r.seed, pl.Int64).alias("seed")
            )
            for r in runs
        ],
        how="vertical_relaxed",
    )
    steps = {r.method: r.steps for r in runs}
    seeds = sorted({r.seed for r in runs})
    problems = sorted(base["problem_id"].unique().to_list())
    for method in steps:
        have = sorted({r.seed for r in runs if r.method == method})
        if have != seeds:
            raise ValueError(
                f"method {method}: seeds {have}, but the comparison pairs seeds {seeds}"
            )
    base_points = _per_problem(base.with_columns(pl.lit(0).alias("step")))
    base_grid = np.tile(
        _grid(
            base_points.with_columns(pl.lit(seeds[0]).alias("seed")),
            "pass_at_1",
            seeds[:1],
            problems,
        ),
        (len(seeds), 1),
    )
    rows = []

    def add(method: str, against: str, measure: str, a: np.ndarray, b: np.ndarray, **extra) -> None:
        diff = paired_bootstrap(a, b, n_resamples=n_resamples, seed=seed)
        rows.append(
            {
                "method": method,
                "against": against,
                "measure": measure,
                "method_score": float(a.mean()),
                "against_score": float(b.mean()),
                "difference": diff.mean,
                "ci95_low": diff.ci_low,
                "ci95_high": diff.ci_high,
                "verdict": diff.verdict,
                "seed": "all",
                "seeds": diff.n_seeds,
                "problems": diff.n_problems,
                **extra,
            }
        )

    for method, n_steps in steps.items():
        own = points.filter(pl.col("method") == method)
        final = _grid(_at_step(own, n_steps), "score", seeds, problems)
        auc = _grid(_auc(own, n_steps), "auc", seeds, problems)
        add(method, BASE, "final", final, base_grid, step=n_steps)
        if len(seeds) > 1:  # each training seed on its own (over problems only)
            for i, s in enumerate(seeds):
                add(method, BASE, "final", final[i : i + 1], base_grid[i : i + 1], step=n_steps)
                rows[-1]["seed"] = str(s)
        if method == reference:
            continue
        ref = points.filter(pl.col("method") == reference)
        # At the method's own last step (equal steps; the reference's final when both ran as
        # long), and, for a run of another length, at the reference step of equal seconds.
        evaluated = set(ref["step"].unique().to_list())
        same_length = n_steps == steps[reference]
        suffix = "" if same_length else "_equal_steps"
        if n_steps in evaluated:
            ref_final = _grid(_at_step(ref, n_steps), "score", seeds, problems)
            add(method, reference, f"final{suffix}", final, ref_final, step=n_steps)
            ref_auc = _grid(_auc(ref, n_steps), "auc", seeds, problems)
            add(method, reference, f"auc{suffix}", auc, ref_auc, step=n_steps)
        if same_length:
            continue
        own_seconds = compute.filter((pl.col("method") == method) & (pl.col("step") == n_steps))[
            "seconds"
        ].mean()
        ref_compute = (
            compute.filter(pl.col("method") == reference)
            .group_by("step")
            .agg(pl.col("seconds").mean())
        )
        candidates = ref_compute.filter(pl.col("step").is_in(sorted(evaluated)))
        nearest = int(candidates.sort((pl.col("seconds") - own_seconds).abs())["step"][0])
        add(
            method,
            reference,
            "final_equal_seconds",
            final,
            _grid(_at_step(ref, nearest), "score", seeds, problems),
            step=n_steps,
            reference_step=nearest,
        )
    return pl.DataFrame(rows, strict=False)


def plot_learning_curves(summary: pl.DataFrame, path: str | Path) -> Path:
    """pass@1 against step, seconds and forward tokens; mean over seeds, 95% CI band, base line."""
    base = summary.filter(pl.col("step") == 0)["pass_at_1"].mean()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharey=True)
    xs = [
        ("step", "optimizer step", 1.0),
        ("seconds", "cumulative wall seconds (credit included)", 1.0),
        ("forward_tokens", "cumulative forward tokens, millions (credit included)", 1e-6),
    ]
    for ax, (x, label, scale) in zip(axes, xs, strict=True):
        for method, part in summary.sort("step").group_by("method", maintain_order=True):
            part = part.sort("step")
            line = ax.plot(part[x] * scale, part["pass_at_1"], marker="o", label=method[0])[0]
            ax.fill_between(
                part[x] * scale,
                part["ci95_low"],
                part["ci95_high"],
                alpha=0.2,
                color=line.get_color(),
            )
        ax.axhline(base, color="black", linestyle="--", linewidth=1, label="base")
        ax.set_xlabel(label)
    axes[0].set_ylabel("held-out pass@1 (mean over seeds, 95% CI)")
    axes[0].legend(title="method")
    fig.tight_layout()
    return save_figure(fig, path)


def read_run(method: str, seed: int, run_dir: Path, final_grades: Path) -> RunScores:
    """A run's scores from its directory (curve.csv, metrics.csv, train_summary.json)."""
    summary = json.loads((run_dir / "train_summary.json").read_text())
    curve_path = run_dir / "curve.csv"
    curve = (
        pl.read_csv(curve_path, schema_overrides={"problem_id": pl.String})
        if curve_path.is_file()
        else pl.DataFrame(
            schema={
                "step": pl.Int64,
                "problem_id": pl.String,
                "sample_index": pl.Int64,
                "reward": pl.Float64,
            }
        )
    )
    return RunScores(
        method=method,
        seed=seed,
        steps=int(summary["steps"]),
        curve=curve,
        final=pl.read_parquet(final_grades),
        metrics=pl.read_csv(run_dir / "metrics.csv", infer_schema_length=None),
    )


def comparison_mapping(rows: pl.DataFrame) -> Mapping[str, str]:
    """One line per comparison row, for the log."""
    out = {}
    for r in rows.iter_rows(named=True):
        key = f"{r['method']} - {r['against']} ({r['measure']})"
        out[key] = (
            f"{r['difference']:+.3f} [{r['ci95_low']:+.3f}, {r['ci95_high']:+.3f}] {r['verdict']}"
        )
    return out
