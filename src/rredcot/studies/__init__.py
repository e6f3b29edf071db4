"""Estimator studies (METHOD.md §5): traces, MC ground truth, agreement, sweeps, localization.

The pipeline, one rule each (`rredcot.steps.study_*`):

1. `traces`: one sampled response per problem of the study split, graded, step-checked, with
   per-token log-probs and entropies; `segmentations`: the configured segmentation and every
   strategy × K of the sweep, as token and character boundaries.
2. `rollouts` + `ground_truth`: MC rollouts kept one row each, computed once per distinct state,
   read as σ_gt under any segmentation (and cut at smaller budgets for the truncation study).
3. `estimators`: σ of MC-N (own rollouts), every RREDCoT value variant, and the attributions,
   with costs (forward tokens, seconds).
4. `agreement`, `localization`, `truncation`, `sweep`: the CSV tables; `metrics`: the statistics
   they share (Spearman with average ranks, bootstrap CIs, tie-aware argmin hits).

Everything below step 1 is a pure function of tables, tested by hand in tests/unit/test_studies.py.
"""
