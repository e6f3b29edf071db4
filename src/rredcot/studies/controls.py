"""The controls of the localization study (METHOD.md §5, §9): the checker oracles and a placebo.

A localization figure means something only beside rows that bound it: the oracles know where
each trace went wrong, a placebo knows nothing about *where*. Neither runs the model:

- `oracle_step` / `oracle_rule`: the training methods' checker values (`rredcot.credit.oracle`)
  at the study's states, with the line accuracy p̂ (one for all lines; one per line kind: the
  misconception's steps, the other steps, the answer) measured on the study's own traces, i.e.
  on the base before any RL run. σ_k = V(s_k) − V(s_{k−1}) with V(s_K) = R, like every row.
- `<estimator>_perm`: an estimator's σ permuted uniformly at random within each trace (the
  training placebo `credit.placebo: perm`, `permute_within_traces`): each trace keeps its values
  and only *where* is destroyed, so its top-1 must sit at chance (1/K per trace, the `random`
  row): a check on the study itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl
import torch

from rredcot.credit.oracle import lines_written
from rredcot.credit.placebo import permute_within_traces
from rredcot.data.error_kinds import first_error_kind
from rredcot.data.misconceptions import Misconception
from rredcot.data.synthetic import check_response
from rredcot.studies import families
from rredcot.studies.estimators import ESTIMATE_SCHEMA
from rredcot.studies.rollouts import sigma_from_values
from rredcot.training.methods.oracle_rule import OracleRuleMethod
from rredcot.training.methods.oracle_step import OracleStepMethod

ORACLES: tuple[str, ...] = (OracleStepMethod.name, OracleRuleMethod.name)
"""Estimator names of the checker oracles (the training methods of the same names)."""


def placebo_name(estimator: str) -> str:
    """The name of `estimator`'s within-trace permutation."""
    return f"{estimator}_perm"


def _checked(traces: pl.DataFrame, programs: Mapping[str, Any]) -> pl.DataFrame:
    """The traces the checker read (first_error / n_steps known) whose problem has a program."""
    missing = [c for c in ("problem_id", "first_error", "n_steps") if c not in traces.columns]
    if missing:
        raise ValueError(f"traces: lack column(s) {missing}; the oracles need the step checker")
    unknown = sorted(set(traces["problem_id"].to_list()) - set(programs))
    if unknown:
        raise ValueError(f"problems: no program for problem(s) {unknown[:5]} of the traces")
    return traces.filter(pl.col("n_steps").is_not_null())


def oracle_estimates(
    traces: pl.DataFrame,
    segmentation: pl.DataFrame,
    programs: Mapping[str, Any],
    misconception: Misconception | None,
) -> pl.DataFrame:
    """`oracle_step` (and `oracle_rule` when the world has a misconception) for every checked,
    segmented trace, in `ESTIMATE_SCHEMA` (family `oracle`, no forward tokens).

    programs: problem_id -> the world's program (JSON or `Program`); segmentation: the study's
    configured segmentation (trace_index, char_boundaries, num_segments)."""
    checked = _checked(traces, programs)
    bounds = {  # c_0 … c_K: the K states, then the end
        t: list(c[: k + 1])
        for t, c, k in segmentation.select(
            "trace_index", "char_boundaries", "num_segments"
        ).iter_rows()
    }
    rows = [r for r in checked.iter_rows(named=True) if r["trace_index"] in bounds]
    if not rows:
        return pl.DataFrame(schema=ESTIMATE_SCHEMA)
    texts = [r["response"] for r in rows]
    # the training methods' own values, with the study's base samples as the batch
    batch = [{"program": programs[r["problem_id"]]} for r in rows]
    checks = [check_response(b["program"], t) for b, t in zip(batch, texts, strict=True)]
    written = [
        lines_written(t, bounds[r["trace_index"]][:-1]) for r, t in zip(rows, texts, strict=True)
    ]
    oracles = [OracleStepMethod(None, None, [0])]
    if misconception is not None:
        oracles.append(OracleRuleMethod(None, None, [0], misconception=misconception))
    values = {o.name: o.state_values(batch, texts, checks, written)[0] for o in oracles}
    out = []
    for name, per_trace in values.items():
        for r, v in zip(rows, per_trace, strict=True):
            c = bounds[r["trace_index"]]
            sigma = sigma_from_values(c, dict(zip(c, v, strict=False)), float(r["reward"]))
            out.append(
                {
                    "trace_index": r["trace_index"],
                    "estimator": name,
                    "family": families.ORACLE,
                    "n_rollouts": None,
                    "sigma": sigma.tolist(),
                    "values": list(v),
                    "forward_tokens": 0,
                    "backward_tokens": 0,
                    "seconds": 0.0,
                    "cost_basis": "the world's step checker (no model)",
                }
            )
    return pl.DataFrame(out, schema=ESTIMATE_SCHEMA)


def placebo_estimates(estimates: pl.DataFrame, names: Sequence[str], seed: int) -> pl.DataFrame:
    """`<name>_perm` for each estimator of `names`: its σ permuted within each trace by trace
    i's own stream (`permute_within_traces(seed, step=trace_index)`), family `placebo`; values
    and costs are the estimator's (the permutation costs nothing)."""
    have = set(estimates["estimator"].unique().to_list())
    unknown = [n for n in names if n not in have]
    if unknown:
        raise ValueError(f"placebo: no estimates of {unknown}; have {sorted(have)}")
    rows = estimates.filter(pl.col("estimator").is_in(list(names))).to_dicts()
    for r in rows:
        sigma = r["sigma"]
        if sigma is not None:
            s = torch.tensor(sigma, dtype=torch.float64)
            (r["sigma"],) = [x.tolist() for x in permute_within_traces([s], seed, r["trace_index"])]
        r["estimator"] = placebo_name(r["estimator"])
        r["family"] = families.PLACEBO
    return pl.DataFrame(rows, schema=ESTIMATE_SCHEMA)


def first_error_kinds(
    traces: pl.DataFrame, programs: Mapping[str, Any], misconception: Misconception
) -> dict[int, str]:
    """trace_index -> `systematic` / `other` of every checked incorrect trace
    (`rredcot.data.error_kinds.first_error_kind`)."""
    out = {}
    for r in _checked(traces, programs).filter(pl.col("reward") == 0).iter_rows(named=True):
        kind = first_error_kind(programs[r["problem_id"]], r["response"], misconception)
        if kind != "correct":  # graded wrong though every line checks (a format miss): no kind
            out[r["trace_index"]] = kind
    return out


__all__ = [
    "ORACLES",
    "first_error_kinds",
    "oracle_estimates",
    "placebo_estimates",
    "placebo_name",
]
