"""The cost–agreement frontier of the credit estimators (issue 47 item 2).

Every estimator whose cost is its own (never a pass shared with other forms) is set against
the MC ground truth on one common set of the agreement traces, by three measures, each a
per-trace statistic averaged over traces and paired over them:

- `spearman_credits`: Spearman ρ of the segment credits σ with the ground truth's σ_gt
  (flat = 0), as `rredcot.studies.agreement` computes it. Only for estimators on the studies'
  own segmentation (label `main`, a state at every line): a form at another K has other
  states, where the ground truth has no rollouts (a hybrid K above a trace's line count cuts
  mid-line), and per-trace Spearman's expectation depends on K, so such forms get no row here.
- `cosine_<transform>`, one per transform of `studies.frontier.transforms`: the cosine, over
  the trace's response tokens, between the token advantages the estimator's σ builds and those
  the ground truth's σ_gt builds (`rredcot.credit.advantages.token_advantages` under that
  `credit` block; `rredcot.studies.transform_rule.cosine`: blind to scale, not to level, 0 when
  either side carries no signal). The ground truth's advantages are on its own segmentation
  (a state at every line), whatever the estimator's K: this measure compares forms of every K
  (and OPPO's token-level form) with one reference. The study has one trace per problem, so the
  groups the transform whitens over (and `mixed` takes its outcome advantage over,
  `outcome_advantages`) are runs of `group_size` consecutive common-set traces in trace order
  (by default training's `num_generations`): problems, not samples of one problem. Estimator
  and ground truth see the same groups; under `center: none` with `immediate` the per-trace
  cosine does not depend on them.

Per measure: the best is the estimator with the highest mean among those that are not oracles
(an oracle reads what no real dataset has: the key on the trace's own path); every estimator's
difference from the best has a percentile CI from one bootstrap draw of traces shared by every
estimator and measure (paired), and a verdict (`worse` when the CI lies below 0, `no difference`
when it holds 0). The Pareto front (`pareto_front`) is taken over the non-oracle estimators, once
against forward tokens per trace and once against seconds per trace. Costs are the estimators'
own columns (`rredcot.studies.estimators`): forward tokens run per trace, and wall seconds of
their scoring (or rollouts) on the machine and under the load of the job that ran them
(`timed_in`, `machine`), shared among a call's traces by tokens.

Within the reference-conditioned family (`is_reference_conditioned`: RREDCoT's forms and OPPO's
one-pass Bayes value on the configured reference, at the studies' segmentation or OPPO's token
level) each measure also has the family's own best and every member's paired difference from it
(`family_*` columns): what the pre-registered pick of a cheaper form reads
(`rredcot.studies.preregistered.preregistered_fast_estimator`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl
import torch

from rredcot.credit.advantages import CreditConfig, outcome_advantages, token_advantages
from rredcot.evaluation.paired import interval_verdict
from rredcot.studies import families
from rredcot.studies.agreement import common_set, vectors
from rredcot.studies.estimators import reference_kind
from rredcot.studies.segmentations import MAIN
from rredcot.studies.statistics import bootstrap_indices, percentile_ci, spearman_flat0
from rredcot.studies.transform_rule import cosine
from rredcot.studies.variants import TOKEN_LEVEL

SPEARMAN = "spearman_credits"
"""The per-trace Spearman measure (studies' own segmentation only)."""


COLUMNS: tuple[str, ...] = (
    "measure",
    "transform",
    "estimator",
    "family",
    "segmentation",
    families.ORACLE,
    "agreement",
    "ci95_low",
    "ci95_high",
    "best",
    "diff_vs_best",
    "diff_ci95_low",
    "diff_ci95_high",
    "verdict_vs_best",
    "within_ci_of_best",
    "reference_conditioned",
    "family_best",
    "diff_vs_family_best",
    "family_diff_ci95_low",
    "family_diff_ci95_high",
    "within_ci_of_family_best",
    "pareto_tokens",
    "pareto_seconds",
    "forward_tokens_per_trace",
    "backward_tokens_per_trace",
    "seconds_per_trace",
    "cost_basis",
    "timed_in",
    "machine",
    "n_traces",
    "group_size",
)
"""The frontier table's columns (then `excluded_<reason>`: traces left out of the common set)."""


def cosine_measure(transform: str) -> str:
    """The measure name of the token-advantage cosine under a named transform."""
    return f"cosine_{transform}"


def transform_label(config: CreditConfig) -> str:
    """A `credit` block in words, e.g. "mixed (β 1), center none"."""
    beta = f" (β {config.beta:g})" if config.mode == "mixed" else ""
    return f"{config.mode}{beta}, center {config.center}"


def is_oracle(estimator: str) -> bool:
    """An estimator that reads the answer key on the trace's own path (no real dataset has it)."""
    return reference_kind(estimator) == "own_path"


REFERENCE_CONDITIONED: tuple[str, ...] = (families.RREDCOT, families.BAYES)
"""The families that read the configured reference (RREDCoT's forms, OPPO's one-pass Bayes
value): the family the pre-registered pick of a cheaper form chooses within
(`rredcot.studies.preregistered.preregistered_fast_estimator`)."""


def is_reference_conditioned(family: str, segmentation: str, estimator: str) -> bool:
    """A form of the reference-conditioned family on the configured reference, at the studies'
    segmentation (a state at every line) or OPPO's token level: its estimator keys differ, its
    segmentation is not one of the K-forms (K is a segmentation setting, frozen for training)."""
    return (
        family in REFERENCE_CONDITIONED
        and segmentation in (MAIN, TOKEN_LEVEL)
        and not is_oracle(estimator)
    )


def pareto_front(cost: Sequence[float], agreement: Sequence[float]) -> np.ndarray:
    """Whether each point is on the front: no other point costs at most as much and agrees at
    least as well, and is strictly better in one of the two. A point with a non-finite cost or
    agreement is neither on the front nor dominates; equal points are all on it. (n,) bool."""
    c, a = np.asarray(cost, dtype=np.float64), np.asarray(agreement, dtype=np.float64)
    ok = np.isfinite(c) & np.isfinite(a)
    front = ok.copy()
    for i in np.flatnonzero(ok):
        others = ok & (c <= c[i]) & (a >= a[i]) & ((c < c[i]) | (a > a[i]))
        front[i] = not others.any()
    return front


def transform_groups(traces: Sequence[int], size: int) -> list[list[int]]:
    """Runs of `size` consecutive traces (the last may be shorter): the groups a transform
    whitens over when the study has one trace per problem."""
    if size < 1:
        raise ValueError(f"group_size: expected an integer >= 1, got {size!r}")
    items = list(traces)
    return [items[i : i + size] for i in range(0, len(items), size)]


def token_advantage_vectors(
    sigmas: Mapping[int, np.ndarray],
    boundaries: Mapping[int, Sequence[int]],
    rewards: Mapping[int, float],
    lengths: Mapping[int, int],
    groups: Sequence[Sequence[int]],
    config: CreditConfig,
) -> dict[int, np.ndarray]:
    """trace -> its token advantages (T_t,) under `config`, each group of `groups` one
    transform group (`token_advantages`; `mixed` adds `outcome_advantages` of the group's
    rewards, TRL's GRPO advantage with the group's std)."""
    out: dict[int, np.ndarray] = {}
    for group in groups:
        width = max(lengths[t] for t in group)
        mask = torch.stack([torch.arange(width) < lengths[t] for t in group]).long()
        outcome = None
        if config.mode == "mixed":
            outcome = outcome_advantages([rewards[t] for t in group], len(group))
        adv = token_advantages(
            [torch.as_tensor(sigmas[t], dtype=torch.float64) for t in group],
            [list(boundaries[t]) for t in group],
            torch.zeros(len(group), dtype=torch.long),
            mask,
            config,
            outcome,
        )
        for i, t in enumerate(group):
            out[t] = adv[i, : lengths[t]].double().numpy()
    return out


def advantage_cosines(
    estimate: Mapping[int, np.ndarray], truth: Mapping[int, np.ndarray], traces: Sequence[int]
) -> np.ndarray:
    """Per trace, the cosine of the estimator's token advantages with the ground truth's."""
    return np.array([cosine(estimate[t], truth[t]) for t in traces], dtype=np.float64)


SOURCE_FAMILIES: tuple[str, ...] = (families.MC, families.BAYES, families.ATTRIBUTION)
"""The families the frontier takes from the estimates every study reads (`study_mc`,
`study_scored`): each estimator there is its own call. RREDCoT's rows come from the variants
(`rredcot.studies.variants`), all scored in their own passes in one job on the same traces
(the studies' other RREDCoT variants share one pass: no cost of their own)."""


def frontier_candidates(
    estimates: pl.DataFrame,
    variants: pl.DataFrame,
    null: pl.DataFrame,
    segmentation: pl.DataFrame,
) -> pl.DataFrame:
    """The frontier's estimators on the traces of `segmentation` (the studies' own, one row
    per agreement trace): `SOURCE_FAMILIES` of `estimates`, the null row `null` (R only,
    nothing run), both on that segmentation, and every row of `variants` (with their own
    `segmentation` and `boundaries`). Extra columns (`timed_in`, `machine`) are kept."""
    bounds = segmentation.select("trace_index", "boundaries")
    on_main = pl.concat(
        [estimates.filter(pl.col("family").is_in(list(SOURCE_FAMILIES))), null],
        how="diagonal_relaxed",
    )
    on_main = on_main.join(bounds, on="trace_index", how="inner").with_columns(
        segmentation=pl.lit(MAIN)
    )
    chosen = pl.col("trace_index").is_in(bounds["trace_index"].implode())
    return pl.concat([on_main, variants.filter(chosen)], how="diagonal_relaxed")


def frontier_common_set(
    candidates: pl.DataFrame, truth: pl.DataFrame
) -> tuple[list[int], dict[str, int]]:
    """The traces every candidate is scored on (ascending) and what was left out why: the
    agreement study's rule (`common_set`: a ground truth with ≥ 2 finite, non-constant credits,
    every estimator on the studies' segmentation with finite credits of its shape), and every
    estimator on another segmentation with finite credits (`missing_other_segmentation`)."""
    on_main = candidates.filter(pl.col("segmentation") == MAIN)
    gt = vectors(truth.with_columns(estimator=pl.lit("gt")), "sigma").get("gt", {})
    found = common_set(gt, vectors(on_main, "sigma"))
    others = vectors(candidates.filter(pl.col("segmentation") != MAIN), "sigma")
    kept = [
        t
        for t in found.traces
        if all(t in v and v[t].size and np.isfinite(v[t]).all() for v in others.values())
    ]
    excluded = {**found.excluded, "missing_other_segmentation": len(found.traces) - len(kept)}
    return kept, excluded


def per_trace_agreement(
    candidates: pl.DataFrame,
    truth: pl.DataFrame,
    traces: Sequence[int],
    rewards: Mapping[int, float],
    lengths: Mapping[int, int],
    transforms: Mapping[str, CreditConfig],
    group_size: int,
) -> dict[str, dict[str, np.ndarray]]:
    """measure -> estimator -> its statistic on each of `traces` (in order).

    candidates: trace_index, estimator, segmentation, sigma, boundaries; truth: trace_index,
    sigma, boundaries (the studies' segmentation)."""
    gt = {
        t: (np.asarray(s, dtype=np.float64), list(b))
        for t, s, b in truth.select("trace_index", "sigma", "boundaries").iter_rows()
    }
    est: dict[str, dict[int, tuple[np.ndarray, list[int]]]] = {}
    rows = candidates.select("estimator", "trace_index", "sigma", "boundaries")
    for name, t, s, b in rows.iter_rows():
        est.setdefault(name, {})[t] = (np.asarray(s, dtype=np.float64), list(b))
    main = set(candidates.filter(pl.col("segmentation") == MAIN)["estimator"].unique().to_list())
    names = candidates["estimator"].unique(maintain_order=True).to_list()
    out: dict[str, dict[str, np.ndarray]] = {
        SPEARMAN: {
            n: np.array([spearman_flat0(est[n][t][0], gt[t][0]) for t in traces])
            for n in names
            if n in main
        }
    }
    groups = transform_groups(traces, group_size)

    def advantages(table: Mapping[int, tuple[np.ndarray, list[int]]], cfg: CreditConfig):
        sig = {t: table[t][0] for t in traces}
        bounds = {t: table[t][1] for t in traces}
        return token_advantage_vectors(sig, bounds, rewards, lengths, groups, cfg)

    for label, cfg in transforms.items():
        truth_adv = advantages(gt, cfg)
        out[cosine_measure(label)] = {
            n: advantage_cosines(advantages(est[n], cfg), truth_adv, traces) for n in names
        }
    return out


def against_best(
    per_trace: Mapping[str, np.ndarray], eligible: Sequence[str], resamples: np.ndarray
) -> dict[str, dict[str, Any]]:
    """Per estimator: its mean and 95% CI, the best (highest mean among `eligible`), its
    difference from the best with the paired CI (`resamples`: one bootstrap draw of trace
    positions, (R, n), shared by every estimator) and the verdict (`best` for the best)."""
    samples = {n: v[resamples].mean(axis=1) for n, v in per_trace.items()}
    means = {n: float(v.mean()) for n, v in per_trace.items()}
    pool = [n for n in eligible if n in means and np.isfinite(means[n])]
    best = max(pool, key=lambda n: means[n]) if pool else None
    out = {}
    for name, v in samples.items():
        ci = percentile_ci(v)
        row: dict[str, Any] = {
            "agreement": means[name],
            "ci95_low": ci.low,
            "ci95_high": ci.high,
            "best": best,
        }
        if best is None:
            row |= dict.fromkeys(("diff_vs_best", "diff_ci95_low", "diff_ci95_high"), np.nan)
            row["verdict_vs_best"] = "n/a"
        else:
            d = percentile_ci(v - samples[best])
            row |= {
                "diff_vs_best": means[name] - means[best],
                "diff_ci95_low": d.low,
                "diff_ci95_high": d.high,
                "verdict_vs_best": "best" if name == best else interval_verdict(d.low, d.high),
            }
        out[name] = row
    return out


def _family_columns(row: Mapping[str, Any] | None) -> dict[str, Any]:
    """The columns of the comparison within the reference-conditioned family (null outside)."""
    if row is None:
        return {
            "reference_conditioned": False,
            "family_best": None,
            **dict.fromkeys(
                ("diff_vs_family_best", "family_diff_ci95_low", "family_diff_ci95_high"), None
            ),
            "within_ci_of_family_best": None,
        }
    return {
        "reference_conditioned": True,
        "family_best": row["best"],
        "diff_vs_family_best": row["diff_vs_best"],
        "family_diff_ci95_low": row["diff_ci95_low"],
        "family_diff_ci95_high": row["diff_ci95_high"],
        "within_ci_of_family_best": row["verdict_vs_best"] in ("best", "no difference"),
    }


def _costs(candidates: pl.DataFrame, traces: Sequence[int]) -> dict[str, dict[str, Any]]:
    """Per estimator, mean costs over `traces` and where they were measured."""
    mine = candidates.filter(pl.col("trace_index").is_in(list(traces)))
    info = [c for c in ("cost_basis", "timed_in", "machine") if c in mine.columns]
    table = mine.group_by("estimator", maintain_order=True).agg(
        pl.col("family").first(),
        pl.col("segmentation").first(),
        pl.col("forward_tokens").cast(pl.Float64).mean().alias("forward_tokens_per_trace"),
        pl.col("backward_tokens").cast(pl.Float64).mean().alias("backward_tokens_per_trace"),
        pl.col("seconds").cast(pl.Float64).mean().alias("seconds_per_trace"),
        *[pl.col(c).first() for c in info],
    )
    return {r["estimator"]: r for r in table.iter_rows(named=True)}


def frontier_table(
    candidates: pl.DataFrame,
    truth: pl.DataFrame,
    traces: pl.DataFrame,
    transforms: Mapping[str, CreditConfig],
    *,
    group_size: int,
    resamples: int,
    seed: int,
) -> pl.DataFrame:
    """One row per (measure, estimator) (module docstring).

    candidates: long estimate rows (`rredcot.studies.estimators` columns, plus `segmentation`
    and `boundaries`; optional `timed_in`, `machine`); truth: the ground truth's trace_index,
    sigma, boundaries on the studies' segmentation; traces: trace_index, reward, response_ids.
    Columns: `COLUMNS`, then excluded_<reason>; without a common trace, the header only.
    """
    common, excluded = frontier_common_set(candidates, truth)
    if not common:  # nothing to compare (e.g. a base that is never right): the header only
        return pl.DataFrame(schema=dict.fromkeys(COLUMNS, pl.String))
    rewards = dict(traces.select("trace_index", "reward").iter_rows())
    lengths = {t: len(ids) for t, ids in traces.select("trace_index", "response_ids").iter_rows()}
    measures = per_trace_agreement(
        candidates, truth, common, rewards, lengths, transforms, group_size
    )
    costs = _costs(candidates, common)
    draw = bootstrap_indices(len(common), resamples, seed)
    labels = {SPEARMAN: "per-trace Spearman of σ (flat = 0), same states"}
    labels |= {cosine_measure(k): transform_label(c) for k, c in transforms.items()}
    rows = []
    for measure, per_trace in measures.items():
        names = list(per_trace)
        eligible = [n for n in names if not is_oracle(n)]
        paired = against_best(per_trace, eligible, draw)
        family = [
            n
            for n in names
            if is_reference_conditioned(costs[n]["family"], costs[n]["segmentation"], n)
        ]
        within = against_best({n: per_trace[n] for n in family}, family, draw)
        on_front = {}
        for axis, column in (
            ("tokens", "forward_tokens_per_trace"),
            ("seconds", "seconds_per_trace"),
        ):
            cost = [costs[n][column] if n in eligible else np.nan for n in names]
            agree = [paired[n]["agreement"] for n in names]
            on_front[axis] = dict(zip(names, pareto_front(cost, agree).tolist(), strict=True))
        for name in names:
            c, p = costs[name], paired[name]
            rows.append(
                {
                    "measure": measure,
                    "transform": labels[measure],
                    "estimator": name,
                    "family": c["family"],
                    "segmentation": c["segmentation"],
                    "oracle": is_oracle(name),
                    **p,
                    "within_ci_of_best": p["verdict_vs_best"] in ("best", "no difference"),
                    **_family_columns(within.get(name)),
                    "pareto_tokens": on_front["tokens"][name],
                    "pareto_seconds": on_front["seconds"][name],
                    "forward_tokens_per_trace": c["forward_tokens_per_trace"],
                    "backward_tokens_per_trace": c["backward_tokens_per_trace"],
                    "seconds_per_trace": c["seconds_per_trace"],
                    "cost_basis": c.get("cost_basis"),
                    "timed_in": c.get("timed_in"),
                    "machine": c.get("machine"),
                    "n_traces": len(common),
                    "group_size": group_size,
                    **{f"excluded_{k}": v for k, v in excluded.items()},
                }
            )
    return pl.DataFrame(rows, infer_schema_length=None)


__all__ = [
    "COLUMNS",
    "SPEARMAN",
    "advantage_cosines",
    "against_best",
    "cosine_measure",
    "frontier_candidates",
    "frontier_common_set",
    "frontier_table",
    "is_oracle",
    "is_reference_conditioned",
    "pareto_front",
    "per_trace_agreement",
    "token_advantage_vectors",
    "transform_groups",
    "transform_label",
]
