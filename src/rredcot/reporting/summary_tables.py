"""The tables a run's summary reads and the words it states them with, without polars: the
captions (`rredcot.reporting.captions`) read them while the Snakefile builds the DAG, and the
summary (`rredcot.reporting.summary`) renders from them."""

from __future__ import annotations

# The tables the summary reads: name -> (file under results/, what it holds).
TABLES = {
    "method_comparison": ("method_comparison.csv", "paired comparisons along training"),
    "benchmark_comparison": ("benchmark_comparison.csv", "paired comparisons per benchmark"),
    "main_table": ("main_table.csv", "pass@1 per method and benchmark"),
    "compute_cost": ("compute_cost.csv", "cost per training step"),
    "estimator_agreement": ("estimator_agreement.csv", "agreement with the MC ground truth"),
    "answer_now_rule": ("answer_now_rule.json", "the pre-registered answer-now rule"),
    "error_localization": ("error_localization.csv", "error localization"),
    "estimator_frontier": ("estimator_frontier.csv", "the cost-agreement frontier"),
    "estimator_pick": ("estimator_pick.json", "the pre-registered pick of rredcot_fast"),
    "regime_table": ("regime_table.csv", "greedy and T = 1 pass@1, systematic-error share"),
    "credit_attribution": ("credit_attribution.csv", "each credit method against its placebo"),
}
REGIME_FIGURES = ("greedy_pass1", "t1_pass1", "t1_luck", "greedy_systematic_share",
                  "t1_systematic_share")  # fmt: skip
MINUS = "\u2212"
# The value `summary_values` gives `no_rows/<table>` for a built table with no row to state (the
# captions say so); the summary's text for such a table contains it.
NO_ROWS = "no rows"
