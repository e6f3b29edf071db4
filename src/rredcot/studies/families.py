"""The estimator families of the studies' tables (the `family` column): what kind of value
estimate a row is, so that reports and figures group rows without naming estimators."""

from __future__ import annotations

GROUND_TRUTH = "ground_truth"
"""σ_gt: many-rollout Monte Carlo, the studies' reference."""
MC = "mc"
"""Monte Carlo with N rollouts per state."""
RREDCOT = "rredcot"
"""RREDCoT's value variants (reference-conditioned)."""
BAYES = "bayes"
"""OPPO's one-pass Bayes value (reference-conditioned)."""
ATTRIBUTION = "attribution"
"""Attribution baselines (gradients, attention, ...)."""
ORACLE = "oracle"
"""Values from the synthetic world's checker (the positive controls)."""
PLACEBO = "placebo"
"""Another estimator's σ permuted within each trace (placement destroyed)."""
NULL = "null"
"""Knows only the outcome R (the floor)."""
BASELINE = "baseline"
"""A row of the localization table that is no estimator: a uniformly random segment."""

FAMILIES: tuple[str, ...] = (
    GROUND_TRUTH,
    MC,
    RREDCOT,
    BAYES,
    ATTRIBUTION,
    ORACLE,
    PLACEBO,
    NULL,
)
"""Every family, in the tables' order."""
