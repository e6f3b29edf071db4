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
last step (final and area, both over the same steps), and every method at equal cumulative
wall seconds and at equal forward tokens: the run that spent less is taken at its end and the
other at its evaluated step nearest that total ("reference exhausted" when GRPO is the one
that ran out), never a whole run against a fraction of the other's budget. Verdicts take the
more conservative of the two-level bootstrap and a t interval over seeds (`paired`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from rredcot.data.schema import read_json, read_table  # noqa: E402
from rredcot.evaluation.paired import paired_comparison, t_interval  # noqa: E402
from rredcot.reporting.figures import save_figure, says_no_rows  # noqa: E402

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


def mean_cumulative_compute(
    runs: Sequence[RunScores],
) -> dict[tuple[str, int], tuple[float, float]]:
    """(method, step) -> cumulative (seconds, forward tokens) after that step, the mean over the
    method's seeds: where `method_comparison` and the seconds area place each evaluated step."""
    compute = pl.concat(
        [
            cumulative_compute(r.metrics).with_columns(pl.lit(r.method).alias("method"))
            for r in runs
        ],
        how="vertical_relaxed",
    )
    return {
        (m, int(st)): (float(sec), float(tok))
        for m, st, sec, tok in compute.group_by("method", "step")
        .agg(pl.col("seconds").mean(), pl.col("forward_tokens").mean())
        .iter_rows()
    }


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
        low, high = t_interval(values)
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


def problem_grid(
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
    holes = [
        (seed, p)
        for seed, row in zip(wide["seed"], wide.select(list(problems)).iter_rows(), strict=True)
        for p, v in zip(problems, row, strict=True)
        if v is None
    ]
    if holes:
        raise ValueError(f"{value}: missing (seed, problem) units {holes[:5]}")
    return wide.select(list(problems)).to_numpy().astype(np.float64)


def step_area(points: pl.DataFrame, until: int) -> pl.DataFrame:
    """Per (seed, problem): trapezoid mean of pass@1 over the steps 0 … until."""
    rows = []
    for (seed, problem), part in points.filter(pl.col("step") <= until).group_by(
        "seed", "problem_id"
    ):
        part = part.sort("step")
        x, y = part["step"].to_numpy(), part["pass_at_1"].to_numpy()
        rows.append({"seed": seed, "problem_id": problem, "auc": float(np.trapezoid(y, x) / until)})
    return pl.DataFrame(rows)


def seconds_area(points: pl.DataFrame, seconds: Mapping[int, float], budget: float) -> pl.DataFrame:
    """Per (seed, problem): the mean of pass@1 over cumulative wall seconds 0 … `budget`
    (trapezoid, divided by `budget`), each evaluated step placed at `seconds[step]` (the run's
    mean over seeds, as `method_comparison` places its steps) and the curve interpolated
    linearly at the budget, which no run may lack (never extrapolated)."""
    if budget <= 0:
        raise ValueError(f"seconds_area: budget {budget} must be above 0")
    rows = []
    for (seed, problem), part in points.group_by("seed", "problem_id"):
        part = part.sort("step")
        x = np.array([seconds[int(st)] for st in part["step"]], dtype=np.float64)
        y = part["pass_at_1"].to_numpy().astype(np.float64)
        if x[-1] < budget:
            raise ValueError(
                f"seconds_area: seed {seed} ends at {x[-1]:.4g} s, before the budget {budget:.4g} s"
            )
        keep = x < budget
        xs = np.append(x[keep], budget)
        ys = np.append(y[keep], np.interp(budget, x, y))
        rows.append(
            {"seed": seed, "problem_id": problem, "auc": float(np.trapezoid(ys, xs) / budget)}
        )
    return pl.DataFrame(rows)


def _at_step(points: pl.DataFrame, step: int) -> pl.DataFrame:
    return points.filter(pl.col("step") == step).select(
        "seed", "problem_id", pl.col("pass_at_1").alias("score")
    )


COMPUTE: dict[str, str] = {"seconds": "cumulative wall seconds", "tokens": "forward tokens"}
"""Equal-compute measures: the key of `cumulative_compute`'s column (`forward_tokens` for
tokens) and what it counts."""


@dataclass(frozen=True)
class ComputeMatch:
    """Where two runs are compared at equal compute: each one's step, and why those steps."""

    method_step: int
    against_step: int
    note: str


def equal_compute_steps(
    method_compute: Mapping[int, float],
    against_compute: Mapping[int, float],
    method_steps: Sequence[int],
    against_steps: Sequence[int],
    unit: str,
) -> ComputeMatch:
    """The steps at which a method and its reference have spent the same compute.

    *_compute: evaluated step -> cumulative compute (mean over seeds); *_steps: the evaluated
    steps, the last one each run's final. The run with the smaller total is taken at its final
    step and the other at its evaluated step nearest that total (ties: the earlier step), so
    neither is credited with compute it did not spend; when the reference is the one that ran
    out, `note` says "reference exhausted" (the method is compared before its end)."""
    m_final, a_final = max(method_steps), max(against_steps)
    m_total, a_total = method_compute[m_final], against_compute[a_final]

    def nearest(steps: Sequence[int], compute: Mapping[int, float], total: float) -> int:
        return min(sorted(steps), key=lambda st: abs(compute[st] - total))

    if a_total >= m_total:
        a_step = nearest(against_steps, against_compute, m_total)
        note = "" if a_step == a_final else f"reference at its step nearest the method's {unit}"
        return ComputeMatch(m_final, a_step, note)
    m_step = nearest(method_steps, method_compute, a_total)
    return ComputeMatch(
        m_step,
        a_final,
        f"reference exhausted: its whole run ({a_total:.4g} {unit}) is below the method's "
        f"({m_total:.4g}); method at its step nearest that total",
    )


def method_comparison(
    runs: Sequence[RunScores],
    base: pl.DataFrame,
    baseline_method: str,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> pl.DataFrame:
    """Every method minus `baseline_method` (the reference) and minus the base, paired over
    (seed, problem).

    Rows with `seed` "all" pool the seeds: the two-level bootstrap CI (`ci95_*`) and the t
    interval over the seeds' mean differences (`seed_t_ci95_*`, df = seeds − 1), each with its
    verdict; `verdict` is the more conservative of the two (`conservative_verdict`). Rows with
    one seed (bootstrap over problems) give each training seed's final difference from the
    base and from `baseline_method`, so "every seed" claims can be read off. Measures: `final`
    (and `auc`) at the method's last step when both runs are as long (`_equal_steps` when not:
    at the method's last step, which the reference also evaluated); `final_equal_seconds` and
    `final_equal_tokens` at equal cumulative compute (`equal_compute_steps`). Every row names
    both runs' steps and their cumulative seconds and forward tokens there (means over seeds),
    the comparison's minimum detectable effect at 80% power (`mde80`, from its seed SD) and
    its `endpoint`: `primary` for the pre-registered one, the area under the held-out curve
    against `baseline_method` over all seeds (far less noisy between seeds than the final score),
    `secondary` for every other row. Each method is paired with `baseline_method` on the method's
    own seeds, each against the reference's run of the same seed; the reference may have more
    seeds (e.g. five for the main claim, three for the rest), never fewer.
    """
    points = pl.concat([run_points(r, base) for r in runs], how="vertical_relaxed")
    steps = {r.method: r.steps for r in runs}
    run_seeds = {m: sorted({r.seed for r in runs if r.method == m}) for m in steps}
    problems = sorted(base["problem_id"].unique().to_list())
    if baseline_method in run_seeds:
        for method, have in run_seeds.items():
            extra = sorted(set(have) - set(run_seeds[baseline_method]))
            if extra:
                raise ValueError(
                    f"method {method}: seeds {extra} have no {baseline_method} run to pair with "
                    f"({baseline_method} has seeds {run_seeds[baseline_method]})"
                )
    mean_compute = mean_cumulative_compute(runs)
    evaluated = {
        m: sorted(points.filter(pl.col("method") == m)["step"].unique().to_list()) for m in steps
    }
    base_points = _per_problem(base.with_columns(pl.lit(0).alias("step")))
    first = min(min(v) for v in run_seeds.values()) if run_seeds else 0
    base_row = problem_grid(
        base_points.with_columns(pl.lit(first).alias("seed")), "pass_at_1", [first], problems
    )
    rows = []

    def where(method: str, step: int) -> dict[str, float]:
        sec, tok = (0.0, 0.0) if method == BASE else mean_compute[(method, step)]
        return {"seconds": float(sec), "forward_tokens": float(tok)}

    def add(
        method: str,
        against: str,
        measure: str,
        a: np.ndarray,
        b: np.ndarray,
        steps_: tuple[int, int],
        note: str = "",
    ) -> None:
        stats = paired_comparison(a, b, n_resamples=n_resamples, seed=seed)
        mine, theirs = where(method, steps_[0]), where(against, steps_[1])
        rows.append(
            {
                "method": method,
                "against": against,
                "measure": measure,
                "endpoint": "primary"
                if (measure, against) == ("auc", baseline_method)
                else "secondary",
                "seed": "all",
                "method_score": float(a.mean()),
                "against_score": float(b.mean()),
                **stats,
                "method_step": steps_[0],
                "against_step": steps_[1],
                "method_seconds": mine["seconds"],
                "against_seconds": theirs["seconds"],
                "method_forward_tokens": mine["forward_tokens"],
                "against_forward_tokens": theirs["forward_tokens"],
                "note": note,
            }
        )

    def add_per_seed(method: str, against: str, a: np.ndarray, b: np.ndarray, st: tuple) -> None:
        if len(run_seeds[method]) > 1:  # each training seed on its own (over problems only)
            for i, s in enumerate(run_seeds[method]):
                add(method, against, "final", a[i : i + 1], b[i : i + 1], st)
                rows[-1]["seed"] = str(s)

    for method, n_steps in steps.items():
        # every seed of the method, each paired with the reference's run of the same seed
        seeds = run_seeds[method]
        base_grid = np.tile(base_row, (len(seeds), 1))
        own = points.filter(pl.col("method") == method)
        final = problem_grid(_at_step(own, n_steps), "score", seeds, problems)
        auc = problem_grid(step_area(own, n_steps), "auc", seeds, problems)
        add(method, BASE, "final", final, base_grid, (n_steps, 0))
        add_per_seed(method, BASE, final, base_grid, (n_steps, 0))
        if method == baseline_method:
            continue
        ref = points.filter(pl.col("method") == baseline_method)
        same_length = n_steps == steps[baseline_method]
        suffix = "" if same_length else "_equal_steps"
        if n_steps in evaluated[baseline_method]:
            ref_final = problem_grid(_at_step(ref, n_steps), "score", seeds, problems)
            add(method, baseline_method, f"final{suffix}", final, ref_final, (n_steps, n_steps))
            add_per_seed(method, baseline_method, final, ref_final, (n_steps, n_steps))
            ref_auc = problem_grid(step_area(ref, n_steps), "auc", seeds, problems)
            add(method, baseline_method, f"auc{suffix}", auc, ref_auc, (n_steps, n_steps))
        for unit, column in (("seconds", 0), ("tokens", 1)):
            match = equal_compute_steps(
                {st: mean_compute[(method, st)][column] for st in evaluated[method]},
                {
                    st: mean_compute[(baseline_method, st)][column]
                    for st in evaluated[baseline_method]
                },
                evaluated[method],
                evaluated[baseline_method],
                COMPUTE[unit],
            )
            add(
                method,
                baseline_method,
                f"final_equal_{unit}",
                problem_grid(_at_step(own, match.method_step), "score", seeds, problems),
                problem_grid(_at_step(ref, match.against_step), "score", seeds, problems),
                (match.method_step, match.against_step),
                match.note,
            )
    return pl.DataFrame(rows, strict=False)


@says_no_rows("Held-out learning curves")
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
    summary = read_json(run_dir / "train_summary.json")
    curve_path = run_dir / "curve.csv"
    curve = (
        read_table(curve_path, schema_overrides={"problem_id": pl.String})
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
        final=read_table(final_grades),
        metrics=read_table(run_dir / "metrics.csv", infer_schema_length=None),
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
